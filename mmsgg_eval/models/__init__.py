"""Models: the training-free frequency baseline (FREQ / FREQ+OVERLAP), the scene-graph template on mmdet
detectors (:class:`SceneGraphDetector`) and its relation heads.

Every model is registered in mmdet's ``MODELS`` by ``import mmsgg_eval``, but its module (which imports
``mmengine.model``, and through MMEngine's optimizers ``transformers``) is imported only when the model is
built or one of the names below is accessed. The evaluation-only distributed wrapper lives in
:mod:`mmsgg_eval.runner`.
"""
import importlib
from typing import Any

from ..registry import MODELS, register_lazily

_LAZY = {'FrequencyBaseline': 'frequency_baseline', 'count_frequency_statistics': 'frequency_statistics',
         'FrequencyStatistics': 'frequency_statistics', 'SceneGraphDetector': 'scene_graph_detector',
         'BaseRelationHead': 'relation_heads', 'FrequencyRelationHead': 'relation_heads'}

register_lazily(MODELS, 'FrequencyBaseline', f'{__name__}.frequency_baseline')
register_lazily(MODELS, 'SceneGraphDetector', f'{__name__}.scene_graph_detector')
register_lazily(MODELS, 'FrequencyRelationHead', f'{__name__}.relation_heads.frequency')

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f'{__name__}.{_LAZY[name]}'), name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
