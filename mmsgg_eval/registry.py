"""Registries used by mmsgg_eval.

Components register into MMDetection's registries so that an MMDet 3.x config with
``custom_imports=dict(imports=['mmsgg_eval'])`` finds them under ``default_scope='mmdet'``.
``mmdet.registry`` needs neither compiled mmcv ops nor mmdet's model code; when mmdet is not
installed at all, MMEngine's root registries are used instead (the metrics still work).
"""
try:
    from mmdet.registry import DATASETS, METRICS, MODEL_WRAPPERS, MODELS, TRANSFORMS
except ImportError:  # pragma: no cover - exercised only without mmdet
    from mmengine.registry import DATASETS, METRICS, MODEL_WRAPPERS, MODELS, TRANSFORMS

__all__ = ['DATASETS', 'METRICS', 'MODELS', 'MODEL_WRAPPERS', 'TRANSFORMS']
