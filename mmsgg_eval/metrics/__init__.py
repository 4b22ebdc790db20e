"""MMEngine metrics registered in mmdet's ``METRICS`` registry."""
from .accumulator import RowAccumulator
from .scene_graph import SceneGraphMetric, SGMeanRecall, SGRecall

__all__ = ['RowAccumulator', 'SceneGraphMetric', 'SGRecall', 'SGMeanRecall']
