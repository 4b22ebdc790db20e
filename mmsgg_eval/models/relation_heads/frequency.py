"""The frequency prior of Zellers et al. (MOTIFS FREQ / FREQ+OVERLAP) as a relation head.

Statistics (``[C, C, P+1]`` counts, see :func:`mmsgg_eval.models.count_frequency_statistics`): per (subject
class, object class) the GT relations of each predicate, and in column 0 the candidate pairs without one.
A pair of classes (c_s, c_o) gets ``counts[c_s, c_o] / counts[c_s, c_o].sum()``; class pairs never seen are
pure background. FREQ+OVERLAP (``must_overlap``): pairs whose boxes do not overlap get the background only.
The head uses neither image nor features, so it works on any detector, in every mode.
"""
from typing import Any, List, Optional, Sequence

import numpy as np
import torch
from torch import Tensor

from ...registry import DATASETS, MODELS
from .base import BaseRelationHead


def boxes_overlap_tensor(boxes_a: Tensor, boxes_b: Tensor) -> Tensor:
    """True where xyxy boxes share a region of positive area (element-wise, any device)."""
    w = torch.minimum(boxes_a[..., 2], boxes_b[..., 2]) - torch.maximum(boxes_a[..., 0], boxes_b[..., 0])
    h = torch.minimum(boxes_a[..., 3], boxes_b[..., 3]) - torch.maximum(boxes_a[..., 1], boxes_b[..., 1])
    return (w > 0) & (h > 0)


class FrequencyStatistics:
    """Mixin holding the frequency statistics as buffers (``counts``, ``is_fitted``) of an ``nn.Module``."""

    def _init_statistics(self, num_classes: int, num_predicates: int, must_overlap: bool) -> None:
        self.must_overlap = bool(must_overlap)
        self.register_buffer('counts', torch.zeros(num_classes, num_classes, num_predicates + 1, dtype=torch.long))
        self.register_buffer('is_fitted', torch.zeros((), dtype=torch.bool))

    def fit(self, counts: np.ndarray) -> None:
        """Set the statistics (``[C, C, P+1]`` counts from :func:`count_frequency_statistics`)."""
        counts = torch.as_tensor(np.asarray(counts), dtype=torch.long)
        if tuple(counts.shape) != tuple(self.counts.shape):
            raise ValueError(f'statistics have shape {list(counts.shape)}, model expects {list(self.counts.shape)}')
        self.counts.copy_(counts)
        self.is_fitted.fill_(True)

    def distribution(self) -> Tensor:
        """Normalised predicate distribution [C, C, P+1]; class pairs never seen are pure background."""
        counts = self.counts.double()
        total = counts.sum(-1, keepdim=True)
        dist = counts / total.clamp(min=1)
        dist[..., 0] = torch.where(total[..., 0] > 0, dist[..., 0], torch.ones_like(dist[..., 0]))
        return dist.float()

    def pair_distribution(self, boxes: Tensor, labels: Tensor, pair_idxs: Tensor,
                          dist: Optional[Tensor] = None) -> Tensor:
        """Scores [R, P+1] of the given pairs (FREQ+OVERLAP: non-overlapping pairs -> background only)."""
        dist = self.distribution().to(labels.device) if dist is None else dist
        sub, obj = pair_idxs[:, 0], pair_idxs[:, 1]
        rel_scores = dist[labels[sub], labels[obj]].clone()
        if self.must_overlap and sub.numel():
            boxes = boxes.float()
            apart = ~boxes_overlap_tensor(boxes[sub], boxes[obj])
            rel_scores[apart] = 0
            rel_scores[apart, 0] = 1
        return rel_scores


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
        from ..frequency_baseline import count_frequency_statistics, describe_dataset
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
