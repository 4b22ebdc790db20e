"""Former home of the runner helpers, kept for existing imports: use :mod:`mmsgg_eval.runner`."""
from .runner.launch import setup_cpu_distributed  # noqa: F401
from .runner.results import write_metrics_json  # noqa: F401

__all__ = ['setup_cpu_distributed', 'write_metrics_json']
