"""mmsgg_eval: exact, distributed scene-graph generation and visual grounding evaluation for MMEngine/MMDet.

Importing this package registers its metrics, datasets, transforms and models in mmdet's registries.
It never imports compiled mmcv ops; mmdet's heavy modules are imported lazily where needed.
"""
from .version import __version__
from . import metrics  # noqa: F401  (registers metrics)

__all__ = ['__version__', 'metrics']
