"""Running evaluations: process-group set-up and teardown, the evaluation-only model wrapper, result files.

* :mod:`.launch`: :func:`distributed_evaluation` (initialise the process group with the configured backend
  and timeout, explain failed collectives, tear down cleanly), :func:`setup_cpu_distributed`.
* :mod:`.wrapper`: :class:`EvalOnlyModelWrapper` (registered in mmdet's ``MODEL_WRAPPERS``).
* :mod:`.results`: :func:`check_writable`, :func:`write_metrics_json`, :func:`write_run_metrics` (the
  ``metrics.json`` of ``tools/test.py`` and of the offline CLI: keys, tables, ``provenance``).
* :mod:`.cli`: ``tools/test.py`` (mmdet's command line: config, checkpoint, ``--work-dir``, ``--out``,
  ``--cfg-options``, ``--launcher``).

``tools/test.py`` and ``tools/dist_test.sh`` are thin command lines over :mod:`.cli`.
"""
from .launch import (DEFAULT_TIMEOUT_S, DistributedEvaluationError, distributed_evaluation,
                     explain_collective_failures, process_group_timeout, setup_cpu_distributed,
                     teardown_distributed)
from .results import OutputNotWritableError, check_writable, write_metrics_json
from .wrapper import EvalOnlyModelWrapper

__all__ = ['DEFAULT_TIMEOUT_S', 'DistributedEvaluationError', 'EvalOnlyModelWrapper', 'OutputNotWritableError',
           'check_writable',
           'distributed_evaluation', 'explain_collective_failures', 'process_group_timeout',
           'setup_cpu_distributed', 'teardown_distributed', 'write_metrics_json']
