"""Models: the training-free frequency baseline, the scene-graph template on mmdet detectors with its
relation heads, and an evaluation-only distributed wrapper."""
from .frequency_baseline import (EvalOnlyModelWrapper, FrequencyBaseline, boxes_overlap,
                                 count_frequency_statistics)
from .relation_heads import BaseRelationHead, FrequencyRelationHead
from .scene_graph_detector import SceneGraphDetector

__all__ = ['FrequencyBaseline', 'EvalOnlyModelWrapper', 'count_frequency_statistics', 'boxes_overlap',
           'SceneGraphDetector', 'BaseRelationHead', 'FrequencyRelationHead']
