"""mmsgg_eval: exact, distributed scene-graph generation and visual grounding evaluation for MMEngine/MMDet.

Importing this package registers its metrics, datasets, transforms, models and the evaluation-only model
wrapper in mmdet's registries (``custom_imports=dict(imports=['mmsgg_eval'])``). It stays light: it never
imports compiled mmcv ops, mmdet's model code, ``transformers`` or ``open_clip``; modules that need them
(the frequency baseline's ``mmengine.model`` base class, the CLIP encoders' libraries) are imported when
first used (see :func:`mmsgg_eval.registry.register_lazily`).
"""
from .version import __version__
from . import datasets, metrics, models, runner, visualization  # noqa: F401,E402  (registration)

__all__ = ['__version__', 'datasets', 'metrics', 'models', 'runner']
