"""The frequency baseline of Zellers et al. (MOTIFS): FREQ and FREQ+OVERLAP, as an MMEngine model.

The statistics and the scores are those of :mod:`mmsgg_eval.models.frequency_statistics` (counted on a
training split by :func:`count_frequency_statistics`). At test time every ordered pair of objects gets the
normalised distribution ``counts[c_s, c_o] / counts[c_s, c_o].sum()`` as ``pred_relations.scores`` [R, P+1]
(column 0 = no relation); FREQ+OVERLAP gives pairs whose boxes do not overlap the background only, unless no
pair of the image overlaps (then all pairs keep their distribution, as MOTIFS). Pairs are sorted by max
predicate probability x subject score x object score (the metric ranks again, stably). It needs no image: it
is an honest, training-free baseline to exercise the whole stack.
"""
from typing import Any, List, Optional, Sequence

import torch
from mmengine.model import BaseModel
from torch import Tensor

from ..registry import MODELS
from ..structures import get_field, sample_name
# count_frequency_statistics / describe_dataset are re-exported here (their home: .frequency_statistics)
from .frequency_statistics import FrequencyStatistics, count_frequency_statistics, describe_dataset
from .relation_heads.base import all_ordered_pairs, rank_pairs

__all__ = ['FrequencyBaseline', 'count_frequency_statistics', 'describe_dataset']


@MODELS.register_module(force=True)  # replaces the placeholder of mmsgg_eval.models (lazy import)
class FrequencyBaseline(FrequencyStatistics, BaseModel):
    """FREQ / FREQ+OVERLAP relation predictor (PredCls; SGCls when samples carry predicted labels/scores).

    A stand-alone model for evaluation without a detector; on a detector (every mode, SGDet included) use
    :class:`~mmsgg_eval.models.SceneGraphDetector` with a
    :class:`~mmsgg_eval.models.relation_heads.FrequencyRelationHead` (same statistics, same scores).

    Args:
        num_classes: number of object classes C.
        num_predicates: number of predicates P (without background).
        must_overlap: FREQ+OVERLAP.
        mode: 'predcls' (objects = GT boxes and labels, scores 1) or 'sgcls' (GT boxes with the labels and
            scores found in the input samples' ``pred_instances``, e.g. from an upstream object classifier).
        max_pairs: keep at most this many ranked pairs per image (None = all ordered pairs).
    """

    def __init__(self, num_classes: int, num_predicates: int, must_overlap: bool = False, mode: str = 'predcls',
                 max_pairs: Optional[int] = None, data_preprocessor: Optional[dict] = None,
                 init_cfg: Optional[dict] = None) -> None:
        if mode not in ('predcls', 'sgcls'):
            raise ValueError(f'FrequencyBaseline predicts relations between given objects: mode must be predcls '
                             f'or sgcls, got {mode!r} (for SGDet put a FrequencyRelationHead on a detector with '
                             f'SceneGraphDetector)')
        super().__init__(data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        self.num_classes = num_classes
        self.num_predicates = num_predicates
        self.mode = mode
        self.max_pairs = max_pairs
        self._init_statistics(num_classes, num_predicates, must_overlap)

    def forward(self, inputs: Any = None, data_samples: Optional[List[Any]] = None, mode: str = 'predict') -> Any:
        if mode != 'predict':
            raise RuntimeError('FrequencyBaseline is not trained by gradient descent: build its statistics with '
                               'tools/build_freq_baseline.py CONFIG --out freq.pth')
        return self.predict(data_samples or [])

    def predict(self, data_samples: Sequence[Any]) -> Sequence[Any]:
        """Add ``pred_instances`` and ``pred_relations`` to each data sample (original image frame)."""
        if not bool(self.is_fitted):
            raise RuntimeError('FrequencyBaseline has no statistics: load a checkpoint made by '
                               'tools/build_freq_baseline.py (test.py CONFIG CHECKPOINT)')
        dist = self.distribution()
        for sample in data_samples:
            gt = get_field(sample, 'gt_instances')
            if gt is None or get_field(gt, 'bboxes') is None:
                raise ValueError(f'{sample_name(sample)}: FrequencyBaseline ({self.mode}) needs the GT boxes in '
                                 f'`gt_instances` (pack them with PackSceneGraphInputs)')
            boxes = get_field(gt, 'bboxes')
            boxes = boxes.tensor if hasattr(boxes, 'tensor') else torch.as_tensor(boxes)
            device = boxes.device
            if self.mode == 'predcls':
                labels = torch.as_tensor(get_field(gt, 'labels')).long().to(device)
                scores = torch.ones(labels.shape[0], device=device)
            else:
                pred = get_field(sample, 'pred_instances')
                if pred is None or get_field(pred, 'labels') is None or get_field(pred, 'scores') is None:
                    raise ValueError(f'{sample_name(sample)}: FrequencyBaseline in sgcls mode needs predicted '
                                     f'object labels and scores in the input `pred_instances`; this pipeline '
                                     f'provides none (use mode=predcls, or add an object classifier)')
                labels = torch.as_tensor(get_field(pred, 'labels')).long().to(device)
                scores = torch.as_tensor(get_field(pred, 'scores')).float().to(device)
            pairs = all_ordered_pairs(labels.shape[0], device)
            rel_scores = self.pair_distribution(boxes, labels, pairs, dist.to(device))
            pairs, rel_scores = rank_pairs(pairs, rel_scores, scores, self.max_pairs)
            self._attach(sample, boxes, labels, scores, pairs, rel_scores, self.mode)
        return data_samples

    @staticmethod
    def _attach(sample: Any, boxes: Tensor, labels: Tensor, scores: Tensor, pairs: Tensor, rel_scores: Tensor,
                mode: str) -> None:
        from mmengine.structures import InstanceData
        pred_instances = InstanceData(bboxes=boxes.float(), labels=labels, scores=scores)
        pred_relations = InstanceData(pair_idxs=pairs, scores=rel_scores)
        if isinstance(sample, dict):
            sample['pred_instances'], sample['pred_relations'] = pred_instances, pred_relations
            sample['pred_mode'] = mode
        else:
            sample.pred_instances = pred_instances
            sample.pred_relations = pred_relations
            sample.set_metainfo({'pred_mode': mode})  # lets a metric refuse a mode the model does not produce

