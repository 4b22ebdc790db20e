"""MMEngine metrics registered in mmdet's ``METRICS`` registry."""
from .accumulator import RowAccumulator
from .grounding import GroundingPr
from .relclip import RelBLIPScore, RelCLIPScore, RelSIGLIPScore
from .scene_graph import SceneGraphMetric, SGMeanRecall, SGRecall
from .vlm import VLMSceneGraphMetric

__all__ = ['RowAccumulator', 'SceneGraphMetric', 'SGRecall', 'SGMeanRecall', 'GroundingPr', 'RelCLIPScore',
           'RelBLIPScore', 'RelSIGLIPScore', 'VLMSceneGraphMetric']
