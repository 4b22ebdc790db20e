"""MMEngine metrics registered in mmdet's ``METRICS`` registry."""
from .accumulator import RowAccumulator
from .detection import DetectionAP
from .grounding import GroundingPr
from .relclip import RelCLIPScore
from .scene_graph import SceneGraphMetric, SGMeanRecall, SGRecall
from .vlm import VLMSceneGraphMetric

__all__ = ['RowAccumulator', 'DetectionAP', 'SceneGraphMetric', 'SGRecall', 'SGMeanRecall', 'GroundingPr', 'RelCLIPScore',
           'VLMSceneGraphMetric']
