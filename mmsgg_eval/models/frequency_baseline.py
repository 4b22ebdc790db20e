"""The frequency baseline of Zellers et al. (MOTIFS): FREQ and FREQ+OVERLAP, as an MMEngine model.

Statistics, counted on a training split (:func:`count_frequency_statistics`): for every (subject class,
object class) the number of GT relations of each predicate, and a background channel counted as MOTIFS
counts it (every candidate ordered pair, FREQ+OVERLAP: the overlapping ones, plus one; option
``background='unlabelled'``: the pairs without a GT relation). At test time, FREQ+OVERLAP gives pairs whose
boxes do not overlap the background only. At test time every ordered pair of objects gets the normalised
distribution ``counts[c_s, c_o] / counts[c_s, c_o].sum()`` as ``pred_relations.scores`` [R, P+1] (column 0 =
no relation); pairs are sorted by max predicate probability x subject score x object score (the metric ranks
again, stably). It needs no image: it is an honest, training-free baseline to exercise the whole stack.
"""
from typing import Any, List, Optional, Sequence

import numpy as np
import torch
from mmengine.model import BaseModel
from torch import Tensor

from ..registry import MODELS
from ..structures import get_field, sample_name
from .relation_heads import FrequencyStatistics, all_ordered_pairs, rank_pairs


def boxes_overlap(boxes_a: np.ndarray, boxes_b: np.ndarray) -> np.ndarray:
    """True where xyxy boxes share a region of positive area (element-wise)."""
    w = np.minimum(boxes_a[..., 2], boxes_b[..., 2]) - np.maximum(boxes_a[..., 0], boxes_b[..., 0])
    h = np.minimum(boxes_a[..., 3], boxes_b[..., 3]) - np.maximum(boxes_a[..., 1], boxes_b[..., 1])
    return (w > 0) & (h > 0)


BACKGROUND_MODES = ('motifs', 'unlabelled')


def describe_dataset(dataset: Any) -> str:
    """``'VG150Dataset(data_root=..., ann_file=..., split=...)'``: a dataset as error messages name it."""
    parts = [f'{key}={getattr(dataset, key)!r}' for key in ('data_root', 'ann_file', 'split')
             if getattr(dataset, key, None) not in (None, '')]
    return f'{type(dataset).__name__}({", ".join(parts)})'


def count_frequency_statistics(dataset: Any, num_classes: int, num_predicates: int,
                               must_overlap: bool = False, progress: bool = True,
                               background: str = 'motifs', source: Optional[str] = None) -> np.ndarray:
    """Count ``[C, C, P+1]`` int64 statistics over a dataset's ``get_data_info`` records.

    Statistics of nothing are refused: a dataset with 0 images, or whose images carry 0 relations (a wrong
    ``data_root`` / ``ann_file`` / split), raises ``ValueError`` naming ``source`` (default: the dataset's
    class, ``data_root``, ``ann_file`` and ``split``) instead of giving a model that predicts only background.

    Channel ``1 + p`` of ``[c_s, c_o]``: GT relations with predicate p (0-based) between a subject of class
    c_s and an object of class c_o, every relation of the records counted (duplicates too). Channel 0 (no
    relation), by ``background``:

    * ``'motifs'`` (default): what MOTIFS' FREQ / FREQ+OVERLAP and Scene-Graph-Benchmark's
      ``get_VG_statistics`` + ``FrequencyBias`` learn: every ordered pair of distinct objects of an image
      counts, pairs carrying a GT relation included; with ``must_overlap`` only pairs whose boxes share a
      region of positive area (continuous convention, no +1), and ALL pairs of an image where no pair
      overlaps; then 1 is added for every class pair (their ``bg_matrix += 1``).
    * ``'unlabelled'``: only the ordered pairs without a GT relation (with ``must_overlap``: only the
      overlapping ones, no fallback), no +1.

    The legacy statistics are counted on the training split as the legacy code builds it for them (for VG150:
    overlap-filtered, duplicates kept, boxes unclipped); the datasets list those arguments in
    ``FREQUENCY_STATISTICS_ARGS`` and ``tools/build_freq_baseline.py`` applies them. This follows
    Scene-Graph-Benchmark's ``get_VG_statistics(must_overlap=...)``; the first MOTIFS release
    (rowanz/neural-motifs ``eval_rel_count.py``) differs in two details: its background overlap test uses the
    +1-pixel convention (touching boxes overlap) and its FREQ (no overlap) counts on the unfiltered split.
    """
    if background not in BACKGROUND_MODES:
        raise ValueError(f'background must be one of {BACKGROUND_MODES}, got {background!r}')
    counts = np.zeros((num_classes, num_classes, num_predicates + 1), dtype=np.int64)
    n = len(dataset)
    what = source or f'training dataset {describe_dataset(dataset)}'
    if n == 0:
        raise ValueError(f'{what}: 0 images (and so 0 relations) to count the frequency statistics on; check its '
                         f'data_root, ann_file and split')
    bar = None
    if progress:
        from mmengine.utils import ProgressBar
        bar = ProgressBar(n)
    for i in range(n):
        info = dataset.get_data_info(i)
        instances = info.get('instances', [])
        labels = np.array([inst['bbox_label'] for inst in instances], dtype=np.int64)
        boxes = np.array([inst['bbox'] for inst in instances], dtype=np.float64).reshape(-1, 4)
        rels = np.asarray(info.get('relations', np.zeros((0, 3))), dtype=np.int64).reshape(-1, 3)
        m = len(labels)
        if rels.size:
            np.add.at(counts, (labels[rels[:, 0]], labels[rels[:, 1]], rels[:, 2] + 1), 1)
        if m >= 2:
            sub, obj = np.nonzero(~np.eye(m, dtype=bool))
            if background == 'motifs':
                bg = np.ones(len(sub), dtype=bool)
                if must_overlap:
                    overlap = boxes_overlap(boxes[sub], boxes[obj])
                    bg = overlap if overlap.any() else bg  # no overlapping pair: all pairs (legacy box_filter)
            else:
                has_rel = np.zeros((m, m), dtype=bool)
                if rels.size:
                    has_rel[rels[:, 0], rels[:, 1]] = True
                bg = ~has_rel[sub, obj]
                if must_overlap:
                    bg &= boxes_overlap(boxes[sub], boxes[obj])
            np.add.at(counts, (labels[sub[bg]], labels[obj[bg]], 0), 1)
        if bar is not None:
            bar.update()
    if not counts[..., 1:].any():
        raise ValueError(f'{what}: 0 relations counted on its {n} images; frequency statistics need annotated '
                         f'relations (check its data_root, ann_file and split, and that the split keeps its '
                         f'relations)')
    if background == 'motifs':
        counts[..., 0] += 1
    return counts


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

