"""Relation heads for :class:`~mmsgg_eval.models.SceneGraphDetector` (interface: :mod:`.base`)."""
from .base import BaseRelationHead, all_ordered_pairs, rank_pairs
from .frequency import FrequencyRelationHead, FrequencyStatistics

__all__ = ['BaseRelationHead', 'FrequencyRelationHead', 'FrequencyStatistics', 'all_ordered_pairs', 'rank_pairs']
