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
from typing import Any, Dict, List, Optional, Sequence

import torch
from mmengine.logging import print_log
from torch import Tensor

from ..functional.detection import (COCO_IOU_THRESHOLDS, coco_match_detections, coco_precision, coco_summary)
from ..functional.diagnostics import label_offsets, label_shift_warnings
from ..registry import METRICS
from ..structures import get_field, sample_index, sample_name, to_tensor
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


def _pad(tensors: List[torch.Tensor], width: int, fill: float, tail: Sequence[int] = ()) -> torch.Tensor:
    out = tensors[0].new_full((len(tensors), width, *tail), fill)
    for i, t in enumerate(tensors):
        out[i, :t.shape[0]] = t
    return out


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
        items = [read_detections(sample, num_classes) for sample in samples]
        device = items[0]['det_boxes'].device
        items = [{k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in it.items()} for it in items]
        idx = self.accumulator.number_missing(
            torch.tensor([-1 if it['sample_idx'] is None else it['sample_idx'] for it in items], dtype=torch.long,
                         device=device), self.name)
        lengths_d = torch.tensor([it['det_labels'].numel() for it in items], device=device)
        lengths_g = torch.tensor([it['gt_labels'].numel() for it in items], device=device)
        width_d, width_g = max(int(lengths_d.max()), 1), max(int(lengths_g.max()), 1)
        ar_d, ar_g = torch.arange(width_d, device=device), torch.arange(width_g, device=device)
        gt_unmatchable = (idx[:, None] == 0) & (ar_g[None, :] == 0) if self.legacy_quirks else None
        out = coco_match_detections(
            _pad([it['det_boxes'].double() for it in items], width_d, 0.0, (4,)),
            _pad([it['det_scores'].double() for it in items], width_d, 0.0),
            _pad([it['det_labels'] for it in items], width_d, 0),
            ar_d[None, :] < lengths_d[:, None],
            _pad([it['gt_boxes'].double() for it in items], width_g, 0.0, (4,)),
            _pad([it['gt_labels'] for it in items], width_g, 0),
            ar_g[None, :] < lengths_g[:, None],
            num_classes, plus_one=self.plus_one, max_dets=self.max_dets,
            float32_det_sizes=self.legacy_quirks, gt_unmatchable=gt_unmatchable)
        det_boxes, gt_boxes = (_pad([it[f'{n}_boxes'].float() for it in items], w, 0.0, (4,))
                               for n, w in (('det', width_d), ('gt', width_g)))
        offsets = label_offsets(det_boxes, _pad([it['det_labels'] for it in items], width_d, -1),  # label shifts
                                gt_boxes, _pad([it['gt_labels'] for it in items], width_g, -1), self.plus_one)
        kept = out['kept']
        image_of_det = torch.arange(len(items), device=device)[:, None].expand_as(kept)[kept]
        counts = out['gt_counts']
        image_of_gt, gt_label = torch.nonzero(counts > 0, as_tuple=True)
        return {'images': {'sample_idx': idx, 'num_det': lengths_d, 'num_gt': lengths_g, 'label_offsets': offsets},
                'detections': {'sample_idx': idx[image_of_det], 'score': out['scores'][kept],
                               'label': out['labels'][kept], 'matched': out['matched'][kept],
                               'ignored': out['ignored'][kept]},
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


__all__ = ['DetectionAP', 'read_detections']
