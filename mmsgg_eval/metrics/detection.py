"""``DetectionAP``: COCO-style mAP and AP@50 of the detections of an SGDet model, as the legacy SGG evaluator
reports them next to the scene-graph recalls ("Detection evaluation mAp" there is COCO AP at IoU 0.5).

GT boxes come from the samples (``gt_instances``), detections from ``pred_instances`` (boxes xyxy in the
original image frame, 0-based labels, scores); no annotation file is needed. Each rank matches its images
(:func:`~mmsgg_eval.functional.detection.coco_match_detections`) and keeps compact rows only: per kept
detection its score, class and one matched / ignored flag per IoU threshold (at most ``max_dets`` per image
and class), per image and class the number of GT boxes. Those rows (44 bytes per detection with their sample id) are
reduced across ranks once, de-duplicated by ``sample_idx``, and integrated COCO-style
(:func:`~mmsgg_eval.functional.detection.coco_precision`). Values are percentages.
"""
from typing import Any, Dict, List, Optional, Sequence

import torch
from mmengine.evaluator import BaseMetric
from mmengine.logging import print_log

from ..functional.detection import (COCO_IOU_THRESHOLDS, coco_match_detections, coco_precision, coco_summary)
from ..registry import METRICS
from ..structures import get_field, sample_index, sample_name, to_tensor
from .accumulator import RowAccumulator
from .base import first_occurrences
from .options import positive_int


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


@METRICS.register_module()
class DetectionAP(BaseMetric):
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
    """

    default_prefix: Optional[str] = 'sgdet'
    #: folder of the report files (``tools/test.py`` sets it to the work dir; None = none): see :meth:`write_reports`
    report_dir: Optional[str] = None

    def __init__(self, iou_plus_one: Optional[bool] = None, max_dets: int = 100, legacy_quirks: bool = True,
                 pool_samples: int = 256, collect_device: str = 'cpu', prefix: Optional[str] = None) -> None:
        max_dets = positive_int(max_dets, 'max_dets', 'DetectionAP')
        pool_samples = positive_int(pool_samples, 'pool_samples', 'DetectionAP')
        super().__init__(collect_device=collect_device, prefix=prefix)
        self.iou_plus_one = iou_plus_one
        self.max_dets = max_dets
        self.legacy_quirks = bool(legacy_quirks)
        self.pool_samples = pool_samples
        self._pending: List[Dict[str, Any]] = []
        num_thr = len(COCO_IOU_THRESHOLDS)
        self.accumulator = RowAccumulator({
            'images': {'num_det': (torch.int32, ()), 'num_gt': (torch.int32, ())},
            'detections': {'score': (torch.float64, ()), 'label': (torch.int32, ()),
                           'matched': (torch.bool, (num_thr,)), 'ignored': (torch.bool, (num_thr,))},
            'gt': {'label': (torch.int32, ()), 'count': (torch.int32, ())},
        })

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

    def process(self, data_batch: Any, data_samples: Sequence[Any]) -> None:
        """Read detections and GT of each sample (validated); every ``pool_samples`` samples, match them."""
        num_classes = self.num_classes
        for sample in data_samples:
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
            self._pending.append(item)
        if len(self._pending) >= self.pool_samples:
            self.flush()

    def flush(self) -> None:
        """Match the pooled samples now and store their rows. A ``sample_idx`` repeated within the pool counts
        once, its first occurrence (as across pools and ranks)."""
        if not self._pending:
            return
        items, self._pending = first_occurrences(self._pending, lambda item: item['sample_idx']), []
        device = items[0]['det_boxes'].device
        items = [{k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in it.items()} for it in items]
        idx = self.accumulator.number_missing(
            torch.tensor([-1 if it['sample_idx'] is None else it['sample_idx'] for it in items], dtype=torch.long,
                         device=device), type(self).__name__)
        num_det = [it['det_labels'].numel() for it in items]
        num_gt = [it['gt_labels'].numel() for it in items]
        width_d, width_g = max(max(num_det), 1), max(max(num_gt), 1)
        lengths_d = torch.tensor(num_det, device=device)
        lengths_g = torch.tensor(num_gt, device=device)
        ar_d, ar_g = torch.arange(width_d, device=device), torch.arange(width_g, device=device)
        gt_unmatchable = None
        if self.legacy_quirks:
            gt_unmatchable = (idx[:, None] == 0) & (ar_g[None, :] == 0)
        out = coco_match_detections(
            _pad([it['det_boxes'].double() for it in items], width_d, 0.0, (4,)),
            _pad([it['det_scores'].double() for it in items], width_d, 0.0),
            _pad([it['det_labels'] for it in items], width_d, 0),
            ar_d[None, :] < lengths_d[:, None],
            _pad([it['gt_boxes'].double() for it in items], width_g, 0.0, (4,)),
            _pad([it['gt_labels'] for it in items], width_g, 0),
            ar_g[None, :] < lengths_g[:, None],
            self.num_classes, plus_one=self.plus_one, max_dets=self.max_dets,
            float32_det_sizes=self.legacy_quirks, gt_unmatchable=gt_unmatchable)
        kept = out['kept']
        image_of_det = torch.arange(len(items), device=device)[:, None].expand_as(kept)[kept]
        counts = out['gt_counts']
        image_of_gt, gt_label = torch.nonzero(counts > 0, as_tuple=True)
        self.accumulator.add({
            'images': {'sample_idx': idx, 'num_det': lengths_d, 'num_gt': lengths_g},
            'detections': {'sample_idx': idx[image_of_det], 'score': out['scores'][kept],
                           'label': out['labels'][kept], 'matched': out['matched'][kept],
                           'ignored': out['ignored'][kept]},
            'gt': {'sample_idx': idx[image_of_gt], 'label': gt_label, 'count': counts[image_of_gt, gt_label]},
        })

    def evaluate(self, size: int) -> Dict[str, Any]:
        """Reduce the rows across ranks once (same result on every rank) and integrate precision."""
        self.flush()
        tables = self.accumulator.reduce_to_cpu(size, type(self).__name__)
        dets, gts = tables['detections'], tables['gt']
        gt_counts = torch.zeros(self.num_classes, dtype=torch.long)
        gt_counts.scatter_add_(0, gts['label'].long(), gts['count'].long())
        precision = coco_precision(dets['score'], dets['label'], dets['matched'], dets['ignored'], gt_counts)
        summary = coco_summary(precision)
        metrics = {k: (100.0 * v if v >= 0 else float('nan')) for k, v in summary.items()}
        num_images = int(tables['images']['sample_idx'].numel())
        if int(gt_counts.sum()) == 0:
            print_log('DetectionAP: no GT box in the evaluated samples; mAP / AP@50 are NaN', logger='current',
                      level=30)
        dataset = (self.dataset_meta or {}).get('dataset_name', 'unknown dataset')
        print_log(f'Detection AP ({dataset}, {num_images} images, {int(dets["score"].numel())} detections, '
                  f'{int(gt_counts.sum())} GT boxes, {"+1" if self.plus_one else "continuous"} box widths): '
                  f'mAP {metrics["mAP"]:.2f}  AP@50 {metrics["AP@50"]:.2f}', logger='current')
        self.write_reports(metrics, {'num_images': num_images, 'num_detections': int(dets['score'].numel()),
                                     'num_gt_boxes': int(gt_counts.sum())})
        return {f'{self.prefix}/{k}': v for k, v in metrics.items()}

    def write_reports(self, keys: Dict[str, float], counts: Dict[str, Any]) -> Optional[Dict[str, str]]:
        """With ``report_dir`` (main rank): ``{prefix}.detection.metrics.json``, the tables
        ``{prefix}.detection.tables.*`` and mAP / AP@50 added to the main table of the scene-graph report of the
        same prefix written just before (a DetectionAP after SGRecall / SGMeanRecall in one evaluator, as in
        ``configs/_base_/evaluators/sgg_sgdet.py``). A file that cannot be written is logged as an error."""
        from mmengine.dist import is_main_process
        if not self.report_dir or not is_main_process():
            return None
        from ..reports import write_detection_reports
        dataset = str((self.dataset_meta or {}).get('dataset_name', 'unknown dataset'))
        try:
            return write_detection_reports(keys, counts, str(self.report_dir), str(self.prefix), dataset,
                                           'detection')
        except OSError as err:
            print_log(f'DetectionAP: could not write the report_dir files ({type(err).__name__}: {err}); the '
                      f'results above are complete and are returned to the runner', logger='current', level=40)
            return None

    def compute_metrics(self, results: list) -> dict:  # pragma: no cover - evaluate() is overridden
        return {}


__all__ = ['DetectionAP']
