"""mmsgg_eval: exact, distributed scene-graph generation and visual grounding evaluation for MMEngine/MMDet.

Importing this package registers its metrics, datasets, transforms and models in mmdet's registries
(``custom_imports=dict(imports=['mmsgg_eval'])``). It never imports compiled mmcv ops; mmdet's heavy modules
are imported lazily where needed.
"""
from .version import __version__
from . import datasets, metrics, models  # noqa: F401,E402  (registration)

__all__ = ['__version__', 'datasets', 'metrics', 'models']
