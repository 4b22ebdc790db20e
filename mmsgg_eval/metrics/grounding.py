"""``GroundingPr``: visual grounding accuracy for RSVGD / DIOR-RSVG and similar benchmarks (``docs/metrics.md``).

One sample = one (image, query) pair with exactly one GT box. The scored prediction is the highest-scoring
box of ``pred_instances`` (the first box on ties or when there are no scores). Boxes are xyxy in ORIGINAL
image pixels; IoU is continuous (area = (x2 - x1) * (y2 - y1), no +1).

Keys (with the metric prefix, default ``grounding``):

* ``Pr@τ`` for each threshold: percentage (0-100) of samples with IoU >= τ (``strict=True``: IoU > τ, the
  operator of the original MGVLF/RSVG code);
* ``meanIoU``: mean of the per-sample IoUs, in [0, 1];
* ``cumIoU``: sum of intersections / sum of unions over all samples, in [0, 1].

Exactness. The threshold test is decided in exact arithmetic: τ is read as the decimal it is written as
(0.7 means 7/10) and ``IoU >= p/q`` is evaluated as ``q * I >= p * U`` on float64 intersection and union.
For integer pixel boxes (below 2**24) those are exact integers, so an IoU exactly equal to τ (e.g. GT
[0, 0, 10, 10] vs prediction [0, 0, 5, 10] at 0.5) is always counted. For other boxes, rows whose float64
comparison lies within rounding distance of the threshold are re-decided with :class:`fractions.Fraction`
on the exact coordinate values, so the answer never depends on rounding or on the device.

Distributed. ``process()`` stores one row per sample (``sample_idx``, intersection, union, IoU, threshold
hits); ``evaluate()`` (:class:`~mmsgg_eval.metrics.base.RowMetric`) reduces once across ranks and
de-duplicates the samples repeated by ``DefaultSampler`` padding, so every world size gives identical
numbers. Sums are taken in ``sample_idx`` order with :func:`math.fsum` (correctly rounded, order
independent).

Protocols (``docs/protocols.md``): ``protocol='exact'`` (default) scores against the GT box as given (the
XML box); ``protocol='mgvlf'`` reproduces the original RSVG (MGVLF) test loop: the GT box goes through its
letterbox quantisation (:func:`mmsgg_eval.functional.grounding.mgvlf_gt_boxes`), predictions are clamped as
that loop clamps them, and a hit is IoU > τ. It needs each sample's image size (``ori_shape`` or
``width``/``height``).

Edge cases: a sample without a prediction counts as IoU 0 (intersection 0, union = GT area); a sample
without a GT box raises ``ValueError`` naming it; several GT boxes raise unless ``multiple_gt='first'``;
a pair whose union is 0 (degenerate boxes) has IoU 0. Boxes must be finite with x2 >= x1 and y2 >= y1. A
sample marked ``prediction_missing`` (no prediction given for it) counts as IoU 0 and is counted in
``num_missing_predictions``.
"""
import warnings
from fractions import Fraction
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..functional.grounding import MGVLF_IMAGE_SIZE, mgvlf_clamp_predictions, mgvlf_gt_boxes
from ..registry import METRICS
from ..reports import dump_metric_json, write_grounding_reports
from ..structures import check_boxes, check_finite, get_field, optional, sample_index, sample_name
from ..user_messages import warn_user
from .base import RowMetric, Schema, Tables
from .samples import missing_flags
from .options import number_sequence
from ..keys import RowKey
from .bootstrap import Contributions
from .row_keys import Columns, row_key_contributions, row_key_values

DEFAULT_THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9)
PROTOCOLS = ('exact', 'mgvlf')
# float64 comparisons closer than this (relative) to the threshold are re-decided exactly; the float64
# rounding error of q*I - p*U is below 2e-15 * (q*I + p*U).
_NEAR_TIE = 1e-10


def as_fraction(value: Any) -> Fraction:
    """Exact value of a threshold written as a decimal: ``0.7`` -> 7/10 (not the binary float 0.69999...)."""
    if isinstance(value, Fraction):
        return value
    if isinstance(value, (int, str)):
        return Fraction(value)
    return Fraction(repr(float(value)))


def threshold_key(value: Any) -> str:
    """Key of a threshold: ``Pr@0.5`` (the shortest float repr of its exact value)."""
    return f'Pr@{float(as_fraction(value))!r}'


def _to_box_tensor(value: Tensor, sample: Any, field: str) -> Tensor:
    """[N, 4] float64 view (a single box given as [4] becomes [1, 4]); validated by ``check_boxes``."""
    if value.dim() == 1 and value.numel() == 4:
        value = value.reshape(1, 4)
    if value.dtype == torch.bool or value.is_complex():
        raise ValueError(f'{sample_name(sample)}: `{field}` must hold numbers, got {value.dtype}')
    check_boxes(value, sample, field)  # shape, NaN/inf, x2 >= x1, y2 >= y1 (errors name the sample)
    return value.reshape(-1, 4).to(torch.float64)


def _image_size(sample: Any) -> Tuple[Any, Any]:
    """(width, height) of the original image in pixels from ``ori_shape`` (h, w) or ``width``/``height``;
    entries are None when the sample carries neither."""
    shape = get_field(sample, 'ori_shape')
    if shape is not None and len(shape) >= 2:
        return shape[1], shape[0]
    return get_field(sample, 'width'), get_field(sample, 'height')


def _image_extent(sample: Any) -> Optional[float]:
    """max(height, width) of the original image in pixels, or None when unknown."""
    width, height = _image_size(sample)
    if width is not None and height is not None:
        return float(max(width, height))
    return None


def grounding_statistics(pred_boxes: Tensor, gt_boxes: Tensor, has_pred: Tensor,
                         thresholds: Sequence[Fraction], strict: bool = False) -> Dict[str, Tensor]:
    """Per-sample intersection, union, IoU and exact threshold hits (continuous IoU, float64).

    Args:
        pred_boxes: [B, 4] xyxy scored prediction per sample (ignored where ``has_pred`` is False).
        gt_boxes: [B, 4] xyxy GT box per sample, same pixel frame.
        has_pred: [B] bool.
        thresholds: exact thresholds τ (``Fraction``).
        strict: count IoU > τ instead of IoU >= τ.

    Returns:
        ``inter``, ``union``, ``iou`` [B] float64 and ``hits`` [B, T] bool on the input device.
    """
    p = pred_boxes.to(torch.float64)
    g = gt_boxes.to(torch.float64)
    iw = (torch.minimum(p[:, 2], g[:, 2]) - torch.maximum(p[:, 0], g[:, 0])).clamp(min=0)
    ih = (torch.minimum(p[:, 3], g[:, 3]) - torch.maximum(p[:, 1], g[:, 1])).clamp(min=0)
    area_p = (p[:, 2] - p[:, 0]).clamp(min=0) * (p[:, 3] - p[:, 1]).clamp(min=0)
    area_g = (g[:, 2] - g[:, 0]).clamp(min=0) * (g[:, 3] - g[:, 1]).clamp(min=0)
    inter = torch.where(has_pred, iw * ih, torch.zeros_like(area_g))
    union = torch.where(has_pred, (area_p + area_g) - inter, area_g)
    positive = union > 0
    iou = torch.where(positive, inter / torch.where(positive, union, torch.ones_like(union)),
                      torch.zeros_like(union))
    num_t = len(thresholds)
    if num_t == 0:
        return dict(inter=inter, union=union, iou=iou,
                    hits=torch.zeros((p.shape[0], 0), dtype=torch.bool, device=p.device))
    num = torch.tensor([t.numerator for t in thresholds], dtype=torch.float64, device=p.device)
    den = torch.tensor([t.denominator for t in thresholds], dtype=torch.float64, device=p.device)
    lhs = den[None, :] * inter[:, None]
    rhs = num[None, :] * union[:, None]
    diff = lhs - rhs
    hits = diff > 0 if strict else diff >= 0
    # union 0 -> IoU 0: a hit only for a threshold 0 with ">=".
    zero_iou_hits = torch.tensor([(t < 0) if strict else (t <= 0) for t in thresholds], device=p.device)
    hits = torch.where(positive[:, None], hits, zero_iou_hits[None, :].expand_as(hits))
    near = positive[:, None] & (diff.abs() <= _NEAR_TIE * (lhs.abs() + rhs.abs()))
    if bool(near.any()):
        rows = near.any(1).nonzero().flatten()
        exact = _exact_hits(p[rows].cpu().tolist(), g[rows].cpu().tolist(), has_pred[rows].cpu().tolist(),
                            thresholds, strict)
        hits = hits.clone()
        hits[rows] = torch.tensor(exact, dtype=torch.bool, device=p.device).reshape(-1, num_t)
    return dict(inter=inter, union=union, iou=iou, hits=hits)


def _exact_hits(pred: List[List[float]], gt: List[List[float]], has_pred: List[bool],
                thresholds: Sequence[Fraction], strict: bool) -> List[List[bool]]:
    """Threshold hits in rational arithmetic on the exact float64 coordinate values."""
    out = []
    for pb, gb, hp in zip(pred, gt, has_pred):
        pb = [Fraction(v) for v in pb]
        gb = [Fraction(v) for v in gb]
        area_g = max(gb[2] - gb[0], 0) * max(gb[3] - gb[1], 0)
        if hp:
            iw = max(min(pb[2], gb[2]) - max(pb[0], gb[0]), 0)
            ih = max(min(pb[3], gb[3]) - max(pb[1], gb[1]), 0)
            inter = iw * ih
            union = max(pb[2] - pb[0], 0) * max(pb[3] - pb[1], 0) + area_g - inter
        else:
            inter, union = Fraction(0), area_g
        iou = inter / union if union > 0 else Fraction(0)
        out.append([(iou > t) if strict else (iou >= t) for t in thresholds])
    return out


def format_grounding_report(summary: Dict[str, Any], keys: Dict[str, float], metric_name: str,
                            dataset: str, strict: bool) -> str:
    """Per-threshold table (hits and Pr in percent) followed by the other keys (meanIoU / cumIoU)."""
    op = '>' if strict else '>='
    missing = summary.get('num_missing_predictions') or 0
    lines = [f'====== {metric_name} | dataset={dataset} | samples={summary["num_samples"]} | '
             f'without prediction={summary["num_without_prediction"]}'
             + (f' (of which {missing} not predicted at all)' if missing else '')
             + f' | protocol={summary.get("protocol", "exact")} | hit: IoU {op} threshold ======']
    header = f'{"key":<10}  {"IoU " + op + " τ":>10}  {"hits":>8}  {"Pr (%)":>8}'
    lines += [header, '-' * len(header)]
    for name, hits in summary['hits'].items():
        if name in keys:
            lines.append(f'{name:<10}  {name[3:]:>10}  {hits:>8d}  {keys[name]:>8.2f}')
    tail = [f'{k}: {keys[k]:.4f}' for k in keys if not k.startswith('Pr@')]  # meanIoU, cumIoU (every other key)
    if tail:
        lines.append('  '.join(tail))
    return '\n'.join(lines)


@METRICS.register_module()
class GroundingPr(RowMetric):
    """Pr@τ (percent), meanIoU and cumIoU ([0, 1]) of single-box visual grounding (see the module docstring).

    Args:
        thresholds: IoU thresholds τ, read as exact decimals (0.7 = 7/10).
        strict: False: a hit is IoU >= τ (the benchmark definition); True: IoU > τ (MGVLF code). None
            (default): False for ``protocol='exact'``, True for ``protocol='mgvlf'``.
        protocol: 'exact' (default): the GT box as given; 'mgvlf': the GT box quantised by the original
            RSVG test loop's letterbox and predictions clamped like it (see ``docs/protocols.md``).
        mgvlf_size: letterbox side of the original run (its ``--size``, default 640); 'mgvlf' only.
        multiple_gt: 'error' (default): a sample with more than one GT box raises ValueError;
            'first': score against the first GT box.
        outfile_prefix: when set, ``{outfile_prefix}.{prefix}.json`` receives the keys and the per-sample
            IoUs (sorted by ``sample_idx``); main rank only.
        report_dir: when set, ``{prefix}.metrics.json`` (the summary) and the tables ``{prefix}.tables.md`` /
            ``.tables.tex`` / ``.tables.{name}.csv`` are written there; main rank only.
        collect_device: unused (rows are reduced by :class:`RowAccumulator`); kept for config compatibility.
        prefix: key prefix, default ``grounding``.

    Inputs per data sample (original image pixels, xyxy): ``gt_instances.bboxes`` [1, 4];
    ``pred_instances.bboxes`` [N, 4] (N may be 0 or the field absent: IoU 0) and optionally
    ``pred_instances.scores`` [N]; metainfo ``sample_idx`` and ``ori_shape`` (or ``width``/``height``).
    """

    default_prefix: Optional[str] = 'grounding'

    def __init__(self, thresholds: Sequence[Any] = DEFAULT_THRESHOLDS, strict: Optional[bool] = None,
                 multiple_gt: str = 'error', outfile_prefix: Optional[str] = None, collect_device: str = 'cpu',
                 prefix: Optional[str] = None, protocol: str = 'exact', mgvlf_size: int = MGVLF_IMAGE_SIZE,
                 report_dir: Optional[str] = None, per_image_out: Optional[str] = None) -> None:
        if multiple_gt not in ('error', 'first'):
            raise ValueError(f"multiple_gt must be 'error' or 'first', got {multiple_gt!r}")
        if protocol not in PROTOCOLS:
            raise ValueError(f'protocol must be one of {PROTOCOLS}, got {protocol!r}')
        if isinstance(mgvlf_size, bool) or not isinstance(mgvlf_size, int) or mgvlf_size < 2:
            raise ValueError(f'mgvlf_size must be an integer >= 2 (the letterbox side in pixels), got {mgvlf_size!r}')
        self.protocol = protocol
        self.mgvlf_size = mgvlf_size
        if strict is None:
            strict = protocol == 'mgvlf'
        super().__init__(outfile_prefix=outfile_prefix, report_dir=report_dir, collect_device=collect_device,
                         prefix=prefix)
        self.thresholds: Tuple[Any, ...] = number_sequence(thresholds, 'thresholds', 'GroundingPr')
        try:
            if any(isinstance(t, bool) for t in self.thresholds):
                raise TypeError
            self.exact_thresholds = tuple(as_fraction(t) for t in self.thresholds)
        except (TypeError, ValueError, ZeroDivisionError, OverflowError):
            raise ValueError(f'GroundingPr: thresholds must be numbers in [0, 1] (one or a sequence), got '
                             f'{thresholds!r}') from None
        for raw, t in zip(self.thresholds, self.exact_thresholds):
            if not 0 <= t <= 1:
                raise ValueError(f'thresholds must lie in [0, 1], got {raw!r}')
        self.threshold_keys = tuple(threshold_key(t) for t in self.thresholds)
        if len(set(self.threshold_keys)) != len(self.threshold_keys):
            raise ValueError(f'duplicate thresholds: {self.thresholds}')
        self.strict = bool(strict)
        self.multiple_gt = multiple_gt
        from .per_image import ImageNames
        self.per_image_out = per_image_out  # JSON lines: per sample its IoU and hits (metrics/per_image.py)
        self._image_names = ImageNames()

    def _write_files(self, summary: Dict[str, Any], keys: Dict[str, float], tables: Tables) -> None:
        super()._write_files(summary, keys, tables)
        if self.per_image_out:
            from .per_image import named, write_metric_per_image
            rows = {n: c.tolist() for n, c in tables['samples'].items()}
            names = self._image_names.names

            def records() -> List[Dict[str, Any]]:
                order = sorted(range(len(rows['sample_idx'])), key=lambda i: rows['sample_idx'][i])
                return [named({'iou': rows['iou'][i], 'has_prediction': bool(rows['has_pred'][i]),
                               'prediction_missing': bool(rows['missing'][i]),
                               'hits': {k: bool(h) for k, h in zip(self.threshold_keys, rows['hits'][i])}},
                              rows['sample_idx'][i], names) for i in order]
            write_metric_per_image(self, summary, records)

    def row_schema(self) -> Schema:
        return {'samples': {'inter': (torch.float64, ()), 'union': (torch.float64, ()), 'iou': (torch.float64, ()),
                            'hits': (torch.bool, (len(self.thresholds),)), 'has_pred': (torch.bool, ()),
                            'unit_pred': (torch.bool, ()), 'large_image': (torch.bool, ()),
                            'missing': (torch.bool, ())}}

    # ------------------------------------------------------------------ a pool becomes rows
    def _read(self, sample: Any) -> Tuple[Optional[int], Tensor, Optional[Tensor], Optional[Tensor]]:
        """(sample_idx, GT box [4], predicted boxes [N, 4] or None, scores [N] or None), float64."""
        gt = optional(sample, 'gt_instances.bboxes')
        if gt is None:
            raise ValueError(f'{sample_name(sample)}: missing field `gt_instances.bboxes` (grounding needs '
                             f'exactly one GT box per sample)')
        device = gt.device
        gt = _to_box_tensor(gt, sample, 'gt_instances.bboxes')
        if gt.shape[0] == 0:
            raise ValueError(f'{sample_name(sample)}: `gt_instances.bboxes` is empty (grounding needs exactly '
                             f'one GT box per sample)')
        if gt.shape[0] > 1 and self.multiple_gt == 'error':
            raise ValueError(f'{sample_name(sample)}: `gt_instances.bboxes` has {gt.shape[0]} boxes; grounding '
                             f"expects one per sample (GroundingPr(multiple_gt='first') scores the first)")
        boxes = optional(sample, 'pred_instances.bboxes', device)
        scores = None
        if boxes is not None:
            boxes = _to_box_tensor(boxes, sample, 'pred_instances.bboxes')
            scores = optional(sample, 'pred_instances.scores', device)
            if scores is not None:
                scores = check_finite(scores.reshape(-1).to(torch.float64), sample, 'pred_instances.scores')
                if scores.numel() != boxes.shape[0]:
                    raise ValueError(f'{sample_name(sample)}: `pred_instances.scores` has {scores.numel()} '
                                     f'entries for {boxes.shape[0]} boxes')
        if self.protocol == 'mgvlf':
            gt, boxes = self._mgvlf_boxes(sample, gt, boxes)
        return sample_index(sample), gt[0], boxes, scores

    def _mgvlf_boxes(self, sample: Any, gt: Tensor, boxes: Optional[Tensor]) -> Tuple[Tensor, Optional[Tensor]]:
        """GT quantised and predictions clamped as the original MGVLF test loop does (image size needed)."""
        width, height = _image_size(sample)
        if width is None or height is None or not float(width) > 0 or not float(height) > 0:
            raise ValueError(f"{sample_name(sample)}: GroundingPr(protocol='mgvlf') needs the original image size "
                             f'(metainfo `ori_shape` (h, w) or `width`/`height`), got width={width!r}, '
                             f'height={height!r}')
        w = torch.full((gt.shape[0],), float(width), dtype=torch.float64)
        h = torch.full((gt.shape[0],), float(height), dtype=torch.float64)
        gt = mgvlf_gt_boxes(gt.cpu(), w, h, self.mgvlf_size).to(gt.device)
        if boxes is not None and boxes.shape[0]:
            n = boxes.shape[0]
            boxes = mgvlf_clamp_predictions(boxes.cpu(), w[:1].expand(n), h[:1].expand(n),
                                            self.mgvlf_size).to(boxes.device)
        return gt, boxes

    def compute_rows(self, samples: List[Any]) -> Dict[str, Dict[str, Tensor]]:
        """Select each sample's top-scoring box and store its intersection, union, IoU and hits."""
        items = [self._read(s) for s in samples]
        device = items[0][1].device
        bsz = len(items)
        gt = torch.stack([it[1].to(device) for it in items])
        counts = torch.tensor([0 if it[2] is None else it[2].shape[0] for it in items], device=device)
        max_n = int(counts.max())
        pred = torch.zeros((bsz, 4), dtype=torch.float64, device=device)
        has_pred = counts > 0
        if max_n > 0:
            boxes = torch.zeros((bsz, max_n, 4), dtype=torch.float64, device=device)
            scores = torch.full((bsz, max_n), float('-inf'), dtype=torch.float64, device=device)
            for i, (_, _, b, s) in enumerate(items):
                if b is not None and b.shape[0]:
                    n = b.shape[0]
                    boxes[i, :n] = b.to(device)
                    # no scores: the first box wins (every score equal, argmax takes the first maximum)
                    scores[i, :n] = s.to(device) if s is not None else 0.0
            # a real box beats padding even at score -inf: real entries come first, argmax returns the first
            best = scores.argmax(1)
            pred = boxes[torch.arange(bsz, device=device), best]
        stats = grounding_statistics(pred, gt, has_pred, self.exact_thresholds, self.strict)
        idx = torch.tensor([-1 if it[0] is None else it[0] for it in items], dtype=torch.long, device=device)
        if (idx < 0).any():
            self.accumulator.number_missing(idx, type(self).__name__)
        extent = torch.tensor([_image_extent(s) or -1.0 for s in samples], dtype=torch.float64,
                              device=device)
        # unknown image size: the GT box itself tells whether the image frame is larger than 1 pixel
        large = torch.where(extent > 0, extent > 1, (gt > 1).any(1))
        unit = has_pred & ((pred >= 0) & (pred <= 1)).all(1)
        return {'samples': {'sample_idx': idx, 'inter': stats['inter'], 'union': stats['union'],
                            'iou': stats['iou'], 'hits': stats['hits'], 'has_pred': has_pred,
                            'unit_pred': unit, 'large_image': large, 'missing': missing_flags(samples, device)}}

    # ------------------------------------------------------------------ reduced tables become keys
    def row_keys(self) -> Tuple[RowKey, ...]:
        """Every key, declared once (:class:`~mmsgg_eval.keys.RowKey`: the summary and the bootstrap
        contributions both come from it): ``Pr@τ`` the percentage of samples hitting τ, ``meanIoU`` the mean IoU,
        ``cumIoU`` the summed intersections over the summed unions (0 when every union is 0), all summed with
        :func:`math.fsum` over the samples; NaN without samples."""
        return (*(RowKey(key, 'samples', f'hit:{key}') for key in self.threshold_keys),
                RowKey('meanIoU', 'samples', 'iou', scale=1.0),
                RowKey('cumIoU', 'samples', 'inter', over='union', scale=1.0, empty=0.0, no_rows=float('nan')))

    def key_columns(self, tables: Tables) -> Columns:
        """The columns :meth:`row_keys` read: the sample rows and one hit column ``hit:{key}`` per threshold."""
        rows = tables['samples']
        return {'samples': {**rows, **{f'hit:{key}': rows['hits'][:, j] for j, key in enumerate(self.threshold_keys)}}}

    def contributions(self, tables: Tables) -> Contributions:
        """Every key per sample (the bootstrap intervals and ``compare``), from :meth:`row_keys`."""
        c = Contributions(tables['samples']['sample_idx'])
        row_key_contributions(c, self.row_keys(), self.key_columns(tables))
        return c

    def summarize(self, tables: Tables) -> Dict[str, Any]:
        """Keys (:meth:`row_keys`) from de-duplicated rows sorted by ``sample_idx``: Pr in percent, IoUs in
        [0, 1]."""
        rows = tables['samples']
        num = int(rows['sample_idx'].numel())
        hits = [int(h) for h in rows['hits'].sum(0).tolist()] if num else [0] * len(self.threshold_keys)
        if num == 0:
            warnings.warn(f'{type(self).__name__}: no sample was evaluated; every key is NaN')
        m = row_key_values(self.row_keys(), self.key_columns(tables))
        self._check_normalised(rows)
        return {'metrics': m, 'hits': dict(zip(self.threshold_keys, hits)), 'num_samples': num,
                'num_without_prediction': int((~rows['has_pred']).sum()),
                'num_missing_predictions': int(rows['missing'].sum()), 'strict': self.strict,
                'protocol': self.protocol,
                'per_sample': {'sample_idx': rows['sample_idx'].tolist(), 'iou': rows['iou'].tolist(),
                               'has_prediction': rows['has_pred'].tolist()}}

    def _check_normalised(self, rows: Dict[str, Tensor]) -> None:
        """Warn once when every scored prediction lies in [0, 1] while the images are larger."""
        has_pred = rows['has_pred']
        if not bool(has_pred.any()):
            return
        if bool((rows['unit_pred'] & rows['large_image'])[has_pred].all()):
            warn_user(f'{type(self).__name__}: every predicted box coordinate lies in [0, 1] while the images '
                      f'are larger than 1 pixel: the predictions look NORMALISED, but boxes must be in original '
                      f'image pixels (xyxy). Multiply by the image width/height (e.g. mmdet rescale=True) before '
                      f'evaluation; the numbers below are not meaningful.')

    # ------------------------------------------------------------------ reporting
    def format_report(self, summary: Dict[str, Any], keys: Dict[str, float]) -> str:
        return format_grounding_report(summary, keys, type(self).__name__,
                                       str(self._meta('dataset_name', 'unknown dataset')), self.strict)

    def write_reports(self, summary: Dict[str, Any], keys: Dict[str, float], stem: str) -> Dict[str, str]:
        """``{stem}.metrics.json`` (the summary) and the Markdown / LaTeX / CSV tables (``{stem}.tables.*``)."""
        return write_grounding_reports(summary, self.report_dir, stem, str(self._meta('dataset_name',
                                                                                     'unknown dataset')))

    def write_outfile(self, summary: Dict[str, Any], keys: Dict[str, float], tables: Tables) -> str:
        return dump_metric_json(self.outfile_prefix, self.file_stem(), {
            'keys': summary['metrics'], 'hits': summary['hits'], 'strict': self.strict, 'protocol': self.protocol,
            'num_samples': summary['num_samples'], 'num_without_prediction': summary['num_without_prediction'],
            'num_missing_predictions': summary['num_missing_predictions'], 'per_sample': summary['per_sample']})
