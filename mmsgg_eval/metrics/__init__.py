"""MMEngine metrics registered in mmdet's ``METRICS`` registry."""
from .accumulator import RowAccumulator
from .grounding import GroundingPr
from .relclip import RelCLIPScore  # noqa: F401
from .scene_graph import SceneGraphMetric, SGMeanRecall, SGRecall

__all__ = ['RowAccumulator', 'SceneGraphMetric', 'SGRecall', 'SGMeanRecall', 'GroundingPr']
