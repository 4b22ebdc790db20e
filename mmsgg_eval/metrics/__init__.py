"""MMEngine metrics registered in mmdet's ``METRICS`` registry; the evaluation metrics are built on
:class:`RowMetric` (``DumpSceneGraphPredictions`` only writes the prediction stream)."""
from .accumulator import RowAccumulator
from .base import RowMetric, extra_results_of
from .compute_group import ComputeGroup
from .detection import DetectionAP
from .dump import DumpSceneGraphPredictions
from .grounding import GroundingPr
from .oi import OIRelationMetric
from .relclip import RelBLIPScore, RelCLIPScore, RelSIGLIPScore
from .scene_graph import SceneGraphMetric, SGMeanRecall, SGRecall
from .sgbench import SGBenchMetric
from .vlm import VLMSceneGraphMetric

__all__ = ['RowAccumulator', 'RowMetric', 'ComputeGroup', 'extra_results_of', 'SceneGraphMetric', 'SGRecall',
           'SGMeanRecall', 'GroundingPr', 'RelCLIPScore', 'RelBLIPScore', 'RelSIGLIPScore', 'VLMSceneGraphMetric',
           'DetectionAP', 'DumpSceneGraphPredictions', 'SGBenchMetric', 'OIRelationMetric']
