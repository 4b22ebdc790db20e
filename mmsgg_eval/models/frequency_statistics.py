"""The frequency statistics of Zellers et al. (MOTIFS FREQ / FREQ+OVERLAP), shared by the stand-alone
:class:`~mmsgg_eval.models.FrequencyBaseline` and the
:class:`~mmsgg_eval.models.relation_heads.FrequencyRelationHead`.

Counting (:func:`count_frequency_statistics`, on a training split): ``[C, C, P+1]`` int64, per (subject
class, object class) the GT relations of each predicate (channel ``1 + p``) and, in channel 0, the candidate
pairs as MOTIFS counts them. Predicting (:class:`FrequencyStatistics`): a pair of classes (c_s, c_o) gets
``counts[c_s, c_o] / counts[c_s, c_o].sum()`` ([P+1], column 0 = no relation); class pairs never seen are
pure background. FREQ+OVERLAP (``must_overlap``) gives the pairs of an image whose boxes do not overlap the
background only, unless no pair of the image overlaps: then every pair keeps its distribution, as MOTIFS'
``box_filter`` falls back to all pairs. Overlap = a region of positive area, continuous convention
(:func:`mmsgg_eval.functional.boxes.boxes_overlap`).
"""
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor

from ..functional.boxes import boxes_overlap

BACKGROUND_MODES = ('motifs', 'unlabelled')

__all__ = ['BACKGROUND_MODES', 'FrequencyStatistics', 'count_frequency_statistics', 'describe_dataset']


def describe_dataset(dataset: Any) -> str:
    """``'VG150Dataset(data_root=..., ann_file=..., split=...)'``: a dataset as error messages name it."""
    parts = [f'{key}={getattr(dataset, key)!r}' for key in ('data_root', 'ann_file', 'split')
             if getattr(dataset, key, None) not in (None, '')]
    return f'{type(dataset).__name__}({", ".join(parts)})'


def _overlapping(boxes: np.ndarray, sub: np.ndarray, obj: np.ndarray) -> np.ndarray:
    """[R] bool: the boxes of each (sub, obj) pair overlap (float64 xyxy boxes)."""
    tensor = torch.from_numpy(boxes)
    return boxes_overlap(tensor[sub], tensor[obj]).numpy()


def _background_pairs(boxes: np.ndarray, rels: np.ndarray, sub: np.ndarray, obj: np.ndarray, background: str,
                      must_overlap: bool) -> np.ndarray:
    """[R] bool: which ordered pairs (sub, obj) of one image count in the background channel."""
    if background == 'motifs':
        bg = np.ones(len(sub), dtype=bool)
        if must_overlap:
            overlap = _overlapping(boxes, sub, obj)
            bg = overlap if overlap.any() else bg  # no overlapping pair: all pairs (legacy box_filter)
        return bg
    has_rel = np.zeros((len(boxes), len(boxes)), dtype=bool)
    if rels.size:
        has_rel[rels[:, 0], rels[:, 1]] = True
    bg = ~has_rel[sub, obj]
    if must_overlap:
        bg &= _overlapping(boxes, sub, obj)
    return bg


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
        if rels.size:
            np.add.at(counts, (labels[rels[:, 0]], labels[rels[:, 1]], rels[:, 2] + 1), 1)
        if len(labels) >= 2:
            sub, obj = np.nonzero(~np.eye(len(labels), dtype=bool))
            bg = _background_pairs(boxes, rels, sub, obj, background, must_overlap)
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
        """Scores [R, P+1] of the given pairs of ONE image (``boxes`` xyxy [N, 4], ``labels`` [N], ``pair_idxs``
        [R, 2]). FREQ+OVERLAP: pairs whose boxes do not overlap get the background only, unless none of the
        given pairs overlaps (then all keep their distribution, MOTIFS' fallback to all pairs)."""
        dist = self.distribution().to(labels.device) if dist is None else dist
        sub, obj = pair_idxs[:, 0], pair_idxs[:, 1]
        rel_scores = dist[labels[sub], labels[obj]].clone()
        if self.must_overlap and sub.numel():
            boxes = boxes.float()
            apart = ~boxes_overlap(boxes[sub], boxes[obj])
            apart &= ~apart.all()  # no overlapping pair: every pair is a candidate
            rel_scores[apart] = 0
            rel_scores[apart, 0] = 1
        return rel_scores
