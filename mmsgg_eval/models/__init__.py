"""Models: the training-free frequency baseline and an evaluation-only distributed wrapper."""
from .frequency_baseline import (EvalOnlyModelWrapper, FrequencyBaseline, boxes_overlap,
                                 count_frequency_statistics)

__all__ = ['FrequencyBaseline', 'EvalOnlyModelWrapper', 'count_frequency_statistics', 'boxes_overlap']
