"""``DetectionAP``: COCO-style mAP and AP@50 of the detections of an SGDet model, as the legacy SGG evaluator
reports them next to the scene-graph recalls ("Detection evaluation mAp" there is COCO AP at IoU 0.5).

GT boxes come from the samples (``gt_instances``), detections from ``pred_instances`` (boxes xyxy in the
original image frame, 0-based labels, scores); no annotation file is needed. Each rank matches its images
(:func:`~mmsgg_eval.functional.detection.coco_match_detections`) and keeps compact rows only: per kept
detection its score, class and one matched / ignored flag per IoU threshold (at most ``max_dets`` per image
and class), per image and class the number of GT boxes. Those rows (44 bytes per detection with their sample id) are
reduced across ranks once, de-duplicated by ``sample_idx``, and integrated COCO-style
(:func:`~mmsgg_eval.functional.detection.coco_precision`). Values are percentages. The epoch-end sequence
(pooling, reduce, log, report files on the main rank) is :class:`~mmsgg_eval.metrics.base.RowMetric`'s.
"""
import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from mmengine.logging import print_log
from torch import Tensor

from ..functional import compiled
from ..functional.detection import (COCO_IOU_THRESHOLDS, coco_match_detections, coco_precision, coco_summary)
from ..functional.diagnostics import label_offsets, label_shift_warnings
from ..registry import METRICS
from ..structures import get_field, sample_index, sample_name, to_tensor
from ..structures.batch import pad_with_lengths
from ..structures.fields import only_tensors, shared_tensors
from ..user_messages import warn_user
from .base import RowMetric, Schema, Tables
from .options import positive_int

_COUNTS = ('num_images', 'num_detections', 'num_gt_boxes')


def _field(sample: Any, group: str, key: str, device: Optional[torch.device] = None) -> torch.Tensor:
    container = get_field(sample, group)
    value = get_field(container, key)
    if value is None:
        raise ValueError(f'{sample_name(sample)}: DetectionAP needs `{group}.{key}` (SGDet detections: '
                         f'pred_instances.bboxes / labels / scores; GT: gt_instances.bboxes / labels)')
    return to_tensor(value, sample, f'{group}.{key}', device)


def read_detections(sample: Any, num_classes: int) -> Dict[str, Any]:
    """Detections and GT of one sample, validated: ``det_boxes`` [D, 4] / ``gt_boxes`` [G, 4] xyxy (original
    image frame), ``det_labels`` / ``gt_labels`` int64 0-based in [0, num_classes), ``det_scores`` [D] finite,
    ``sample_idx``. Errors name the sample and the field."""
    det_boxes = _field(sample, 'pred_instances', 'bboxes')
    device = det_boxes.device
    item = dict(det_boxes=det_boxes.reshape(-1, 4),
                det_labels=_field(sample, 'pred_instances', 'labels', device).reshape(-1).long(),
                det_scores=_field(sample, 'pred_instances', 'scores', device).reshape(-1),
                gt_boxes=_field(sample, 'gt_instances', 'bboxes', device).reshape(-1, 4),
                gt_labels=_field(sample, 'gt_instances', 'labels', device).reshape(-1).long())
    for what in ('det', 'gt'):
        boxes, labels = item[f'{what}_boxes'], item[f'{what}_labels']
        group = 'pred_instances' if what == 'det' else 'gt_instances'
        if labels.numel() != boxes.shape[0]:
            raise ValueError(f'{sample_name(sample)}: `{group}.labels` has {labels.numel()} entries for '
                             f'{boxes.shape[0]} boxes')
        if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
            raise ValueError(f'{sample_name(sample)}: `{group}.labels` must be 0-based classes in '
                             f'[0, {num_classes}), got values in [{int(labels.min())}, {int(labels.max())}]')
        if not torch.isfinite(boxes).all():
            raise ValueError(f'{sample_name(sample)}: `{group}.bboxes` has non-finite values')
    if item['det_scores'].numel() != item['det_boxes'].shape[0]:
        raise ValueError(f'{sample_name(sample)}: `pred_instances.scores` has {item["det_scores"].numel()} '
                         f'entries for {item["det_boxes"].shape[0]} boxes')
    if not torch.isfinite(item['det_scores']).all():
        raise ValueError(f'{sample_name(sample)}: `pred_instances.scores` has non-finite values')
    item['sample_idx'] = sample_index(sample)
    return item


_POOL_FIELDS = (('det_boxes', 'pred_instances', 'bboxes'), ('det_labels', 'pred_instances', 'labels'),
                ('det_scores', 'pred_instances', 'scores'), ('gt_boxes', 'gt_instances', 'bboxes'),
                ('gt_labels', 'gt_instances', 'labels'))


def read_pool(samples: Sequence[Any], num_classes: int) -> Dict[str, Any]:
    """:func:`read_detections` of a pool at once: ``det_boxes`` [B, D, 4] / ``gt_boxes`` [B, G, 4] (0 on padding),
    ``det_labels`` / ``gt_labels`` int64 [B, D] / [B, G] (-1 on padding), ``det_scores`` [B, D], ``det_valid`` /
    ``gt_valid`` bool masks, ``sample_idx`` (list), on the device of the first sample's detections. The value rules
    are read on the padded batch (where the compiled padding read them while copying, only when it found an entry
    that may break one); the first sample that breaks one (in pool order, as reading them one by one would find
    it) is read again by :func:`read_detections`, whose error names it and the field."""
    read = _compiled_pool(samples)
    if read is None:
        (pool, counts), label_ranges, suspect = _padded_pool(samples, num_classes), None, True
    else:
        pool, counts, label_ranges, suspect = read
    device = pool['det_boxes'].device
    for what in ('det', 'gt'):
        width = pool[f'{what}_boxes'].shape[1]
        pool[f'{what}_valid'] = torch.arange(width, device=device)[None, :] < counts[what].to(device)[:, None]
    bad = torch.zeros(len(samples), dtype=torch.bool, device=device)
    for what in ('det', 'gt'):
        if label_ranges is not None:  # each image's (min, max) label, read while padding (0, -1 when empty)
            low, high = label_ranges[what]
            bad |= (low < 0) | (high >= num_classes)
        else:
            labels, valid = pool[f'{what}_labels'], pool[f'{what}_valid']
            bad |= (((labels < 0) | (labels >= num_classes)) & valid).any(1)
        if suspect:
            bad |= ~torch.isfinite(pool[f'{what}_boxes']).flatten(1).all(1)
    if suspect:
        bad |= ~torch.isfinite(pool['det_scores']).all(1)
    if bool(bad.any()):
        _raise_first_error(samples[:int(bad.nonzero()[0, 0]) + 1], num_classes)
    pool['sample_idx'] = [sample_index(sample) for sample in samples]
    return pool


def _padded_pool(samples: Sequence[Any], num_classes: int) -> Tuple[Dict[str, Tensor], Dict[str, Tensor]]:
    """``(pool, counts)``: the five fields of a pool (``_POOL_FIELDS`` names) padded (labels int64, -1 on padding;
    boxes and scores 0), read as :func:`_plain_fields` or else :func:`_fields_one_by_one` reads them, and the
    detections' and GT boxes' counts ``{'det': [B], 'gt': [B]}`` (CPU int64)."""
    fields = _plain_fields(samples)
    if fields is None:
        fields = _fields_one_by_one(samples, num_classes)
    pool: Dict[str, Tensor] = {}
    counts: Dict[str, Tensor] = {}
    for name, values in fields.items():
        padded, lengths = pad_with_lengths(values, -1 if name.endswith('labels') else 0.0)
        pool[name] = padded.long() if name.endswith('labels') else padded
        if name.endswith('boxes'):
            counts[name.split('_')[0]] = torch.tensor(lengths if lengths is not None else
                                                      [padded.shape[1]] * len(values), dtype=torch.long)
    return pool, counts


def _compiled_pool(samples: Sequence[Any]) -> Optional[Tuple[Dict[str, Tensor], Dict[str, Tensor],
                                                             Dict[str, Tuple[Tensor, Tensor]], bool]]:
    """``(pool, counts, label ranges, suspect)`` of a pool by the compiled padding, one call per field: the five
    padded fields of :func:`_padded_pool`, the detections' and GT boxes' counts ``{'det': [B], 'gt': [B]}``, each
    image's (min, max) label per group (0, -1 without boxes), and whether an entry may break a box or score rule
    (the padding reads a stricter one: finite xyxy boxes with x2 >= x1 and y2 >= y1, finite scores >= 0; False: no
    entry breaks DetectionAP's, which the pool then does not read again). Only for dict samples whose groups are
    dicts of contiguous CPU tensors of the read types (float32 boxes [n, 4] and scores [n], int64 labels [n]) and
    matching lengths; None for anything else (and without the kernels): :func:`_padded_pool` reads those."""
    kernels = compiled.kernels()
    if kernels is None or not samples or any(type(s) is not dict for s in samples):
        return None
    groups = {group: [s.get(group) for s in samples] for group in ('pred_instances', 'gt_instances')}
    if any(type(c) is not dict for containers in groups.values() for c in containers):
        return None
    values = {name: shared_tensors([c.get(key) for c in groups[group]]) for name, group, key in _POOL_FIELDS}
    if not all(map(only_tensors, values.values())):  # an entry that is not a tensor (None, a list, ...)
        return None
    boxes = {name: kernels.pad_float_rows_checked(values[name], 1) for name in ('det_boxes', 'gt_boxes')}
    scores = kernels.pad_float_rows_checked(values['det_scores'], 0)
    labels = {name: kernels.pad_int64_rows(values[name], -1) for name in ('det_labels', 'gt_labels')}
    if scores is None or None in boxes.values() or None in labels.values() or scores[0].dim() != 2 or \
            any(read[0].dim() != 2 for read in labels.values()):
        return None
    det_count, gt_count = boxes['det_boxes'][2], boxes['gt_boxes'][2]
    if not (torch.equal(labels['det_labels'][3], det_count) and torch.equal(scores[2], det_count)
            and torch.equal(labels['gt_labels'][3], gt_count)):
        return None  # counts that do not match: the general reading names the sample
    pool = {'det_boxes': boxes['det_boxes'][0], 'det_labels': labels['det_labels'][0], 'det_scores': scores[0],
            'gt_boxes': boxes['gt_boxes'][0], 'gt_labels': labels['gt_labels'][0]}
    ranges = {what: labels[f'{what}_labels'][1:3] for what in ('det', 'gt')}
    suspect = bool((boxes['det_boxes'][1] | boxes['gt_boxes'][1] | scores[1]).any())
    return pool, {'det': det_count, 'gt': gt_count}, ranges, suspect


def _fields_one_by_one(samples: Sequence[Any], num_classes: int) -> Dict[str, List[Tensor]]:
    """The five fields of a pool (``_POOL_FIELDS`` names), each sample's read by :func:`_field` (any container
    and array-like value, moved to the device of the first sample's detections); a sample that cannot be read is
    read again by :func:`read_detections`, whose error names it and the field."""
    device = None
    fields: Dict[str, List[Tensor]] = {name: [] for name, _, _ in _POOL_FIELDS}
    for position, sample in enumerate(samples):
        try:
            for name, group, key in _POOL_FIELDS:
                value = _field(sample, group, key, device)
                device = value.device if device is None else device
                fields[name].append(value.reshape(-1, 4) if name.endswith('boxes') else value.reshape(-1))
        except ValueError:
            _raise_first_error(samples[:position + 1], num_classes)
        det_rows = fields['det_boxes'][-1].shape[0]
        if (fields['det_labels'][-1].numel() != det_rows or fields['det_scores'][-1].numel() != det_rows
                or fields['gt_labels'][-1].numel() != fields['gt_boxes'][-1].shape[0]):
            _raise_first_error(samples[:position + 1], num_classes)
    return fields


def _plain_fields(samples: Sequence[Any]) -> Optional[Dict[str, List[Tensor]]]:
    """The five fields of a pool (``_POOL_FIELDS`` names) when every sample is a dict (what MMEngine's evaluator
    passes) holding them as tensors of the read shapes ([n, 4] boxes, [n] labels and scores of matching lengths)
    on one device, none requiring a gradient: the tensors themselves, which the general reading would give.
    None for anything else (then each sample is read field by field, with its errors)."""
    fields: Dict[str, List[Tensor]] = {name: [] for name, _, _ in _POOL_FIELDS}
    appends = [fields[name].append for name, _, _ in _POOL_FIELDS]
    device = None
    for sample in samples:
        if type(sample) is not dict:
            return None
        pred, gt = sample.get('pred_instances'), sample.get('gt_instances')
        if type(pred) is not dict or type(gt) is not dict:
            return None
        values = (pred.get('bboxes'), pred.get('labels'), pred.get('scores'), gt.get('bboxes'), gt.get('labels'))
        for value in values:
            if type(value) is not Tensor or value.requires_grad or (device is not None and value.device != device):
                return None
            device = value.device
        det_boxes, det_labels, det_scores, gt_boxes, gt_labels = values
        if (det_boxes.dim() != 2 or det_boxes.shape[1] != 4 or gt_boxes.dim() != 2 or gt_boxes.shape[1] != 4
                or det_labels.dim() != 1 or det_scores.dim() != 1 or gt_labels.dim() != 1
                or det_labels.shape[0] != det_boxes.shape[0] or det_scores.shape[0] != det_boxes.shape[0]
                or gt_labels.shape[0] != gt_boxes.shape[0]):
            return None
        for append, value in zip(appends, values):
            append(value)
    return fields


def _raise_first_error(samples: Sequence[Any], num_classes: int) -> None:
    """Read ``samples`` one by one (:func:`read_detections`): the first bad one raises its error."""
    for sample in samples:
        read_detections(sample, num_classes)
    raise ValueError(f'{sample_name(samples[-1])}: DetectionAP could not read this sample\'s detections or GT boxes')


@METRICS.register_module()
class DetectionAP(RowMetric):
    """COCO mAP (IoU 0.50:0.95) and AP@50 of ``pred_instances`` against ``gt_instances``, area 'all'.

    Args:
        iou_plus_one: legacy +1 box widths (``x2 - x1 + 1``, VG150 / GQA200); None =
            ``dataset_meta['iou_plus_one']``, else False.
        max_dets: detections kept per image and class (pycocotools ``maxDets``, 100).
        legacy_quirks: reproduce two details of the legacy Scene-Graph-Benchmark evaluation: detection
            widths / heights are computed in float32 (its ``BoxList.convert('xywh')``), and its GT annotations
            are numbered from 0, so a detection matching the first GT box of the first image of the split
            (``sample_idx`` 0, GT box 0) counts as a false positive in pycocotools. False = plain
            pycocotools on float64 boxes with annotation ids from 1.
        pool_samples: samples matched together (results do not depend on it).
        prefix: key prefix (default 'sgdet': keys ``sgdet/mAP`` and ``sgdet/AP@50``).
        report_dir / outfile_prefix: see :class:`~mmsgg_eval.metrics.base.RowMetric` (report files:
            :meth:`write_reports`).
    """

    default_prefix: Optional[str] = 'sgdet'
    file_tag = 'detection'

    def __init__(self, iou_plus_one: Optional[bool] = None, max_dets: int = 100, legacy_quirks: bool = True,
                 pool_samples: int = 256, collect_device: str = 'cpu', prefix: Optional[str] = None,
                 report_dir: Optional[str] = None, outfile_prefix: Optional[str] = None) -> None:
        max_dets = positive_int(max_dets, 'max_dets', 'DetectionAP')
        super().__init__(outfile_prefix=outfile_prefix, report_dir=report_dir, pool_samples=pool_samples,
                         collect_device=collect_device, prefix=prefix)
        self.iou_plus_one = iou_plus_one
        self.max_dets = max_dets
        self.legacy_quirks = bool(legacy_quirks)

    @property
    def num_classes(self) -> int:
        classes = (self.dataset_meta or {}).get('classes')
        if classes is None:
            raise ValueError('DetectionAP: dataset_meta has no `classes`; use a dataset wrapper of mmsgg_eval or '
                             'set metric.dataset_meta = dict(classes=...)')
        return len(classes)

    @property
    def plus_one(self) -> bool:
        if self.iou_plus_one is not None:
            return bool(self.iou_plus_one)
        return bool((self.dataset_meta or {}).get('iou_plus_one', False))

    def before_epoch(self) -> None:
        """The base checks, and ``dataset_meta['classes']`` is there (before the model runs)."""
        super().before_epoch()
        _ = self.num_classes  # raises ValueError without dataset_meta["classes"]

    def row_schema(self) -> Schema:
        """``images`` (detection / GT counts), ``detections`` (per kept detection: score, class, matched /
        ignored per IoU threshold), ``gt`` (per image and class: non-ignored GT boxes)."""
        num_thr = len(COCO_IOU_THRESHOLDS)
        return {'images': {'num_det': (torch.int32, ()), 'num_gt': (torch.int32, ()),
                           'label_offsets': (torch.int32, (4,))},
                'detections': {'score': (torch.float64, ()), 'label': (torch.int32, ()),
                               'matched': (torch.bool, (num_thr,)), 'ignored': (torch.bool, (num_thr,))},
                'gt': {'label': (torch.int32, ()), 'count': (torch.int32, ())}}

    def compute_rows(self, samples: List[Any]) -> Dict[str, Dict[str, Tensor]]:
        """Read (validated) and match a pool of samples on the device of the first one's detections."""
        num_classes = self.num_classes
        pool = read_pool(samples, num_classes)
        device = pool['det_boxes'].device
        idx = self.accumulator.number_missing(
            torch.tensor([-1 if i is None else i for i in pool['sample_idx']], dtype=torch.long, device=device),
            self.name)
        det_valid, gt_valid = pool['det_valid'], pool['gt_valid']
        gt_unmatchable = (idx[:, None] == 0) & (torch.arange(gt_valid.shape[1], device=device)[None, :] == 0) \
            if self.legacy_quirks else None
        det_labels = torch.where(det_valid, pool['det_labels'], 0)
        gt_labels = torch.where(gt_valid, pool['gt_labels'], 0)
        out = coco_match_detections(
            pool['det_boxes'].double(), pool['det_scores'].double(), det_labels, det_valid,
            pool['gt_boxes'].double(), gt_labels, gt_valid,
            num_classes, plus_one=self.plus_one, max_dets=self.max_dets,
            float32_det_sizes=self.legacy_quirks, gt_unmatchable=gt_unmatchable)
        offsets = label_offsets(pool['det_boxes'].float(), pool['det_labels'],  # label shifts (labels -1 padded)
                                pool['gt_boxes'].float(), pool['gt_labels'], self.plus_one)
        width = out['kept'].shape[1]
        kept = out['kept'].reshape(-1).nonzero().squeeze(1)  # the kept entries, row-major (as masking gives them)
        image_of_det = kept.div(max(width, 1), rounding_mode='floor')
        counts = out['gt_counts']
        image_of_gt, gt_label = torch.nonzero(counts > 0, as_tuple=True)
        return {'images': {'sample_idx': idx, 'num_det': det_valid.sum(1), 'num_gt': gt_valid.sum(1),
                           'label_offsets': offsets},
                'detections': {'sample_idx': idx.index_select(0, image_of_det),
                               'score': out['scores'].reshape(-1).index_select(0, kept),
                               'label': out['labels'].reshape(-1).index_select(0, kept),
                               'matched': out['matched'].flatten(0, 1).index_select(0, kept),
                               'ignored': out['ignored'].flatten(0, 1).index_select(0, kept)},
                'gt': {'sample_idx': idx[image_of_gt], 'label': gt_label, 'count': counts[image_of_gt, gt_label]}}

    def summarize(self, tables: Tables) -> Dict[str, Any]:
        """Integrate precision over the reduced rows: ``metrics`` ``mAP`` / ``AP@50`` (percent, NaN without
        any GT box) and the counts ``num_images``, ``num_detections``, ``num_gt_boxes``."""
        dets, gts = tables['detections'], tables['gt']
        gt_counts = torch.zeros(self.num_classes, dtype=torch.long)
        gt_counts.scatter_add_(0, gts['label'].long(), gts['count'].long())
        precision = coco_precision(dets['score'], dets['label'], dets['matched'], dets['ignored'], gt_counts)
        metrics = {k: (100.0 * v if v >= 0 else float('nan')) for k, v in coco_summary(precision).items()}
        if int(gt_counts.sum()) == 0:
            print_log('DetectionAP: no GT box in the evaluated samples; mAP / AP@50 are NaN', logger='current',
                      level=logging.WARNING)
        found = label_shift_warnings(tables['images']['label_offsets'], self.num_classes) \
            if 'label_offsets' in tables['images'] else []
        for text in found:
            warn_user(f'{self.name} ({self.prefix}): {text}')
        return {'metrics': metrics, 'num_images': int(tables['images']['sample_idx'].numel()),
                'num_detections': int(dets['score'].numel()), 'num_gt_boxes': int(gt_counts.sum()),
                'input_warnings': found}

    def format_report(self, summary: Dict[str, Any], keys: Dict[str, float]) -> str:
        """One line: dataset, counts, box-width convention, mAP and AP@50, and whether the legacy quirks are on
        (with how to turn them off)."""
        dataset = self._meta('dataset_name', 'unknown dataset')
        quirks = ('legacy quirks on: GT box 0 of sample 0 never matches, as in the legacy evaluator; '
                  'legacy_quirks=False for plain COCO / pycocotools numbers') if self.legacy_quirks else \
            'plain COCO (legacy_quirks=False)'
        return (f'Detection AP ({dataset}, {summary["num_images"]} images, {summary["num_detections"]} detections, '
                f'{summary["num_gt_boxes"]} GT boxes, {"+1" if self.plus_one else "continuous"} box widths): '
                f'mAP {keys["mAP"]:.2f}  AP@50 {keys["AP@50"]:.2f} ({quirks})')

    def report_stem(self) -> str:
        """``{prefix}.detection``: the scene-graph metrics of the same prefix write ``{prefix}.*``."""
        return self.tagged_stem()

    def write_reports(self, summary: Dict[str, Any], keys: Dict[str, float], stem: str) -> Dict[str, str]:
        """``{prefix}.detection.metrics.json``, the tables ``{prefix}.detection.tables.*`` and mAP / AP@50
        added to the main table of the scene-graph report of the same prefix written just before (a
        DetectionAP after SGRecall / SGMeanRecall in one evaluator, as in
        ``configs/_base_/evaluators/sgg_sgdet.py``)."""
        from ..reports import write_detection_reports
        return write_detection_reports(keys, {k: summary[k] for k in _COUNTS}, str(self.report_dir),
                                       str(self.prefix), str(self._meta('dataset_name', 'unknown dataset')),
                                       'detection', stem=stem)


__all__ = ['DetectionAP', 'read_detections', 'read_pool']
