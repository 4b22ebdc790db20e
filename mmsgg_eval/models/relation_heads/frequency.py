"""The frequency prior of Zellers et al. (MOTIFS FREQ / FREQ+OVERLAP) as a relation head.

Statistics and scores: :mod:`mmsgg_eval.models.frequency_statistics` (``[C, C, P+1]`` counts; a pair of
classes (c_s, c_o) gets ``counts[c_s, c_o] / counts[c_s, c_o].sum()``; FREQ+OVERLAP: pairs whose boxes do not
overlap get the background only, unless no pair of the image overlaps). The head uses neither image nor
features, so it works on any detector, in every mode.
"""
from typing import Any, List, Optional, Sequence

import numpy as np
from torch import Tensor

from ...registry import DATASETS, MODELS
from ..frequency_statistics import FrequencyStatistics, count_frequency_statistics, describe_dataset
from .base import BaseRelationHead

__all__ = ['FrequencyRelationHead', 'FrequencyStatistics']


@MODELS.register_module(force=True)  # replaces the lazy placeholder of mmsgg_eval.models
class FrequencyRelationHead(FrequencyStatistics, BaseRelationHead):
    """FREQ / FREQ+OVERLAP relation head (no features needed).

    Args:
        num_classes: object classes C; num_predicates: predicates P.
        must_overlap: FREQ+OVERLAP.
        statistics_dataset: optional dataset config (e.g. the training split, any pipeline is ignored): its
            statistics are counted when the head is built (annotations only, no image). Without it the
            statistics must come from a checkpoint holding ``relation_head.counts``.
    """

    needs_features = False

    def __init__(self, num_classes: int, num_predicates: int, must_overlap: bool = False,
                 statistics_dataset: Optional[dict] = None, init_cfg: Optional[dict] = None) -> None:
        super().__init__(num_classes, num_predicates, init_cfg=init_cfg)
        self._init_statistics(num_classes, num_predicates, must_overlap)
        if statistics_dataset is not None:
            self.fit(self.count_statistics(statistics_dataset))

    def count_statistics(self, dataset_cfg: dict) -> np.ndarray:
        """Count ``[C, C, P+1]`` statistics on a dataset config (no images read); a dataset with 0 images or
        0 relations is refused (``ValueError``, see :func:`count_frequency_statistics`)."""
        dataset = DATASETS.build(dict(dataset_cfg, pipeline=[], test_mode=False))
        meta = dataset.metainfo
        sizes = (len(meta.get('classes', ())), len(meta.get('predicates', ())))
        if sizes != (self.num_classes, self.num_predicates):
            raise ValueError(f'FrequencyRelationHead(num_classes={self.num_classes}, num_predicates='
                             f'{self.num_predicates}): statistics_dataset {dataset_cfg.get("type")} has {sizes[0]} '
                             f'classes and {sizes[1]} predicates')
        from mmengine.logging import print_log
        print_log(f'FrequencyRelationHead: counting {"FREQ+OVERLAP" if self.must_overlap else "FREQ"} statistics '
                  f'on {len(dataset)} images of {meta.get("dataset_name", type(dataset).__name__)}',
                  logger='current')
        return count_frequency_statistics(dataset, self.num_classes, self.num_predicates,
                                          must_overlap=self.must_overlap, progress=False,
                                          source=f'{type(self).__name__}.statistics_dataset '
                                                 f'{describe_dataset(dataset)}')

    def predict(self, feats: Optional[Sequence[Tensor]], objects: List[Any], pair_idxs: List[Tensor],
                data_samples: Sequence[Any]) -> List[Tensor]:
        if not bool(self.is_fitted):
            raise RuntimeError('FrequencyRelationHead has no statistics: give statistics_dataset=dict(...) (e.g. '
                               'the training split) or load a checkpoint holding relation_head.counts')
        dist = None
        out = []
        for obj, pairs in zip(objects, pair_idxs):
            labels = obj.labels.long()
            if dist is None:
                dist = self.distribution().to(labels.device)
            if labels.numel() and int(labels.max()) >= self.num_classes:
                raise ValueError(f'FrequencyRelationHead: object label {int(labels.max())} outside the '
                                 f'{self.num_classes} classes (does the detector have num_classes='
                                 f'{self.num_classes}?)')
            out.append(self.pair_distribution(obj.bboxes, labels, pairs, dist))
        return out
