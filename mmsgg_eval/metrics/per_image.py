"""Per-image results of the scene-graph metrics (``per_image_out``): one JSON line per image.

Everything here is built from the rows :class:`~mmsgg_eval.metrics.scene_graph.SceneGraphMetric` already
reduces (its ranking and matching code, :func:`~mmsgg_eval.functional.scene_graph_ranks`), extended by a few
columns when per-image results are asked for:

* ``relations`` (one row per GT relation): its index in the image's GT list, subject / object GT indices,
  labels and boxes (xyxy, original image frame, pixels), and ``pair_rank`` / ``pair_predicate``: the first
  graph-constrained position whose pair matches both ends of the relation whatever the predicate, and that
  entry's predicate (what the model ranked highest on the GT pair instead: the predicate confusion);
* ``top_triplets`` (a bounded table: at most ``per_image_topk`` rows per image): the head of the image's
  graph-constrained list: position, predicted subject / object indices, labels, boxes, predicate and triplet
  score;
* ``images``: ``img_id`` when it is an integer (-1 otherwise); image paths are not rows (strings do not
  cross ranks): they are those of the samples the main rank saw (all of them in a single process).

A prediction is a *hit* when it is the FIRST hit of a GT relation (``rank_gc`` of that relation equals its
position): exactly what the metric counts. A later prediction matching an already found relation adds
nothing to recall and is listed as a miss. A GT relation is *found at K* when ``rank_gc < K``.

Per-image R@K is ``100 * hits / num_gt`` over the image's GT relations; the mean over the images with
``evaluated: true`` is the reported R@K under ``recall_average='image'`` (the default). Under
``recall_average='micro'`` the reported R@K is ``100 * sum(num_hit) / sum(num_gt)`` over the evaluated images
(each line holds ``num_hit`` for that), not the mean of the per-image values.
"""
import json
import os
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

import torch
from torch import Tensor

from ..functional.limits import NO_HIT
from ..functional.recall import evaluated_image_rows, hits_per_k
from ..structures import get_field

#: Length of the per-image table of top graph-constrained triplets (and the default ``topk_drawn``).
PER_IMAGE_TOPK = 20


def per_image_schema(rank_dtype: torch.dtype) -> Dict[str, Dict[str, Any]]:
    """The columns per-image results add to the scene-graph rows (see the module docstring)."""
    i16 = torch.int16
    return {
        'images': {'img_id': (torch.int64, ())},
        'relations': {'gt_index': (i16, ()), 'subject': (i16, ()), 'object': (i16, ()),
                      'subject_label': (i16, ()), 'object_label': (i16, ()),
                      'subject_box': (torch.float32, (4,)), 'object_box': (torch.float32, (4,)),
                      'pair_rank': (rank_dtype, ()), 'pair_predicate': (i16, ())},
        'top_triplets': {'position': (i16, ()), 'subject': (i16, ()), 'object': (i16, ()),
                         'subject_label': (i16, ()), 'object_label': (i16, ()), 'predicate': (i16, ()),
                         'score': (torch.float32, ()), 'subject_box': (torch.float32, (4,)),
                         'object_box': (torch.float32, (4,))},
    }


def _int_id(value: Any) -> int:
    """``img_id`` as a non-negative int, else -1 (strings of digits count)."""
    try:
        out = int(value)
    except (TypeError, ValueError):
        return -1
    return out if out >= 0 else -1


def per_image_rows(samples: Sequence[Any], batch: Any, ranks: Dict[str, Tensor], slot: Tensor,
                   rank_cap: int) -> Dict[str, Dict[str, Tensor]]:
    """The per-image columns of a ranked pool (``samples`` in batch order; ``slot``: ``b * G + g`` of the real
    GT relations, in the order of the metric's relation rows; ``ranks`` from ``scene_graph_ranks(...,
    list_length=L)``)."""
    device = batch.device
    valid = batch.gt_valid
    width = max(valid.shape[1], 1)

    def real(values: Tensor) -> Tensor:
        return values.reshape(-1, *values.shape[2:]).index_select(0, slot)

    def boxes_of(boxes: Tensor, index: Tensor) -> Tensor:  # [B, N, 4] gathered at [B, J] -> [B, J, 4]
        if boxes.shape[1] == 0:
            return boxes.new_zeros((*index.shape, 4))
        return boxes.gather(1, index.clamp(min=0)[..., None].expand(-1, -1, 4))

    def labels_of(labels: Tensor, index: Tensor) -> Tensor:
        if labels.shape[1] == 0:
            return torch.full_like(index, -1)
        return labels.gather(1, index.clamp(min=0))

    gt_sub, gt_obj = batch.gt_pairs[..., 0], batch.gt_pairs[..., 1]
    gt_index = torch.arange(valid.shape[1], device=device).expand_as(valid)
    relations = {
        'gt_index': real(gt_index).to(torch.int16), 'subject': real(gt_sub).to(torch.int16),
        'object': real(gt_obj).to(torch.int16),
        'subject_label': real(labels_of(batch.gt_labels, gt_sub)).to(torch.int16),
        'object_label': real(labels_of(batch.gt_labels, gt_obj)).to(torch.int16),
        'subject_box': real(boxes_of(batch.gt_boxes, gt_sub)).float(),
        'object_box': real(boxes_of(batch.gt_boxes, gt_obj)).float(),
        'pair_rank': real(ranks['pair_rank']).clamp(max=rank_cap),
        'pair_predicate': real(ranks['pair_predicate']).to(torch.int16),
    }
    del width
    pairs, listed = ranks['gc_pairs'], ranks['gc_valid']
    top_slot = listed.reshape(-1).nonzero().squeeze(1)
    length = max(listed.shape[1], 1)
    image = top_slot // length

    def top(values: Tensor) -> Tensor:
        return values.reshape(-1, *values.shape[2:]).index_select(0, top_slot)
    if pairs.shape[1]:
        pred_sub = batch.rel_pairs[..., 0].gather(1, pairs)
        pred_obj = batch.rel_pairs[..., 1].gather(1, pairs)
    else:
        pred_sub = pred_obj = pairs
    position = torch.arange(pairs.shape[1], device=device).expand_as(pairs)
    top_triplets = {
        'sample_idx': batch.sample_idx.index_select(0, image), 'position': top(position).to(torch.int16),
        'subject': top(pred_sub).to(torch.int16), 'object': top(pred_obj).to(torch.int16),
        'subject_label': top(labels_of(batch.pred_labels, pred_sub)).to(torch.int16),
        'object_label': top(labels_of(batch.pred_labels, pred_obj)).to(torch.int16),
        'predicate': top(ranks['gc_predicate']).to(torch.int16), 'score': top(ranks['gc_score']).float(),
        'subject_box': top(boxes_of(batch.pred_boxes, pred_sub)).float(),
        'object_box': top(boxes_of(batch.pred_boxes, pred_obj)).float(),
    }
    img_id = torch.tensor([_int_id(get_field(s, 'img_id')) for s in samples], dtype=torch.int64, device=device)
    return {'images': {'img_id': img_id}, 'relations': relations, 'top_triplets': top_triplets}


class ImageNames:
    """``sample_idx -> (img_id, img_path)`` of the samples this process saw (for the per-image file)."""

    def __init__(self) -> None:
        self.names: Dict[int, tuple] = {}

    def note(self, samples: Iterable[Any]) -> None:
        for sample in samples:
            idx = get_field(sample, 'sample_idx')
            try:
                idx = int(idx)
            except (TypeError, ValueError):
                continue
            self.names.setdefault(idx, (get_field(sample, 'img_id'), get_field(sample, 'img_path')))

    def clear(self) -> None:
        self.names = {}


def _rank(value: int, limit: int) -> Optional[int]:
    """A stored rank as an int, None when it is no hit (``NO_HIT`` or the int16 cap, both above every K)."""
    return int(value) if value < limit else None


def per_image_records(metric: Any, tables: Dict[str, Dict[str, Tensor]],
                      names: Optional[Dict[int, tuple]] = None,
                      key_name: Optional[Callable[[str], Optional[str]]] = None) -> List[Dict[str, Any]]:
    """One dict per image (sorted by ``sample_idx``) from the reduced tables of a scene-graph metric built
    with per-image rows: see the module docstring for the fields. ``key_name``: the owner's name of each
    per-image key (``'R@50'`` ...; None leaves the key out), e.g. the VLM metric's ``Recall`` for its K-free
    recall, so that no internal K reaches the file."""
    images, rels, top = tables['images'], tables['relations'], tables.get('top_triplets')
    if 'gt_index' not in rels:
        raise ValueError(f'{type(metric).__name__}: the rows hold no per-image columns (set per_image_out)')
    classes, predicates = metric.classes, metric.predicates
    ks = list(metric.topk)
    evaluated = metric._evaluated_images(images, quiet=True)  # the summary warns (once), not each record
    image_of, keep, num_images = evaluated_image_rows(images['sample_idx'], evaluated, rels['sample_idx'])
    # per evaluated image and K: hits, with the metric's own counting (hits_per_k, as recall_from_ranks)
    hits = {name: hits_per_k(rels[col][keep].long(), image_of, num_images, ks)
            for name, col in (('R', 'rank_gc'), ('ngR', 'rank_ngc'))}
    eval_sorted = images['sample_idx'][evaluated]
    eval_pos = {int(s): i for i, s in enumerate(eval_sorted.tolist())}
    limit = min(int(metric._rank_cap), NO_HIT)
    names = names or {}
    by_image = _rows_by_image(rels['sample_idx'])
    top_by_image = _rows_by_image(top['sample_idx']) if top is not None else {}
    r = {n: c.tolist() for n, c in rels.items()}
    t = {n: c.tolist() for n, c in top.items()} if top is not None else {}
    out = []
    image_rows = {n: c.tolist() for n, c in images.items()}
    for i in sorted(range(len(image_rows['sample_idx'])), key=lambda j: image_rows['sample_idx'][j]):
        idx = image_rows['sample_idx'][i]
        img_id, img_path = names.get(idx, (None, None))
        if img_id is None and image_rows['img_id'][i] >= 0:
            img_id = image_rows['img_id'][i]
        gt_rows = sorted(by_image.get(idx, []), key=lambda j: r['gt_index'][j])
        gt = _gt_relations(r, gt_rows, classes, predicates, limit)
        if 'cause' in r:  # error_analysis=True: each GT relation's outcome at each K and its evidence
            add_causes(gt, r, gt_rows, ks, image_rows['num_pred'][i] == 0 or bool(image_rows['missing'][i]),
                       classes, limit)
        predictions = _predictions(t, sorted(top_by_image.get(idx, []), key=lambda j: t['position'][j]), gt,
                                   classes, predicates)
        record = {'sample_idx': idx, 'img_id': img_id, 'img_path': img_path, 'mode': metric.mode,
                  'prefix': metric.prefix, 'recall_average': metric.recall_average,
                  'mr_average': metric.mr_average, 'evaluated': idx in eval_pos,
                  'prediction_missing': bool(image_rows['missing'][i]),
                  'num_gt': image_rows['num_gt'][i], 'num_pred': image_rows['num_pred'][i]}
        pos = eval_pos.get(idx)
        num_hit = {}
        for family in ('R', 'ngR'):
            for j, k in enumerate(ks):
                key = f'{family}@{k}' if key_name is None else key_name(f'{family}@{k}')
                if key is None:
                    continue
                if pos is None:
                    record[key] = None
                    num_hit[key] = None
                else:
                    n = int(hits[family][pos, j])
                    num_hit[key] = n
                    record[key] = 100.0 * n / record['num_gt'] if record['num_gt'] else 0.0
        record['num_hit'] = num_hit
        record['gt_relations'] = gt
        record['predictions'] = predictions
        out.append(record)
    return out


def _rows_by_image(sample_idx: Tensor) -> Dict[int, List[int]]:
    """``sample_idx -> [row, ...]`` of a reduced table (rows in table order)."""
    by_image: Dict[int, List[int]] = {}
    for row, idx in enumerate(sample_idx.tolist()):
        by_image.setdefault(idx, []).append(row)
    return by_image


def _name(table: Sequence[str], i: int) -> Optional[str]:
    return table[i] if 0 <= i < len(table) else None


def _gt_relations(r: Dict[str, list], rows: Sequence[int], classes: Sequence[str], predicates: Sequence[str],
                  limit: int) -> List[Dict[str, Any]]:
    """The ``gt_relations`` entries of one image from its relation rows (``r``: the table's columns as lists)."""
    return [{
        'index': r['gt_index'][j], 'subject': r['subject'][j], 'object': r['object'][j],
        'subject_label': _name(classes, r['subject_label'][j]), 'object_label': _name(classes, r['object_label'][j]),
        'predicate': _name(predicates, r['predicate'][j]),
        'rank_gc': _rank(r['rank_gc'][j], limit), 'rank_ngc': _rank(r['rank_ngc'][j], limit),
        'zeroshot': bool(r['zeroshot'][j]),
        'pair_rank': _rank(r['pair_rank'][j], limit),
        'pair_predicate': _name(predicates, r['pair_predicate'][j]),
        'subject_box': [round(v, 2) for v in r['subject_box'][j]],
        'object_box': [round(v, 2) for v in r['object_box'][j]]} for j in rows]


def add_causes(gt: Sequence[Dict[str, Any]], r: Dict[str, list], rows: Sequence[int], ks: Sequence[int],
               without_prediction: bool, classes: Sequence[str], limit: int) -> None:
    """Add to each ``gt`` entry ``'outcome'`` ``{K: 'hit' | cause}`` (:mod:`~..functional.error_causes`; the
    image's relations are ``no_prediction`` when it has no predicted pair) and, when the rows hold it,
    ``'evidence'``: for its subject and object the best IoU of any predicted object with it and that object's
    class and score (None without predicted objects)."""
    from ..functional.error_causes import CAUSES, NO_PREDICTION
    for entry, j in zip(gt, rows):
        rank = _rank(r['rank_gc'][j], limit)
        cause = NO_PREDICTION if without_prediction else int(r['cause'][j])
        entry['outcome'] = {str(k): 'hit' if rank is not None and rank < k else CAUSES[cause - 1] for k in ks}
        if 'subject_iou' in r:
            entry['evidence'] = {end: None if r[f'{end}_det_label'][j] < 0 else {
                'best_iou': round(r[f'{end}_iou'][j], 4), 'label': _name(classes, r[f'{end}_det_label'][j]),
                'score': round(r[f'{end}_det_score'][j], 4)} for end in ('subject', 'object')}


def _predictions(t: Dict[str, list], rows: Sequence[int], gt: Sequence[Dict[str, Any]], classes: Sequence[str],
                 predicates: Sequence[str]) -> List[Dict[str, Any]]:
    """The ``predictions`` entries of one image from its top-triplet rows; ``hits``: the GT relations (of ``gt``)
    whose first hit is at the entry's position."""
    first_hit: Dict[int, List[int]] = {}
    for rel in gt:
        if rel['rank_gc'] is not None:
            first_hit.setdefault(rel['rank_gc'], []).append(rel['index'])
    out = []
    for j in rows:
        entry = {'rank': t['position'][j], 'subject': t['subject'][j], 'object': t['object'][j],
                 'subject_label': _name(classes, t['subject_label'][j]),
                 'object_label': _name(classes, t['object_label'][j]),
                 'predicate': _name(predicates, t['predicate'][j]), 'score': t['score'][j],
                 'hits': first_hit.get(t['position'][j], []),
                 'subject_box': [round(v, 2) for v in t['subject_box'][j]],
                 'object_box': [round(v, 2) for v in t['object_box'][j]]}
        unknown = [end for end in ('subject', 'object') if is_placeholder_box(t[f'{end}_box'][j])]
        for end in unknown:  # a stand-in object (unknown name, legacy background): no index, class or box
            entry.update({end: None, f'{end}_label': None, f'{end}_box': None})
        if unknown:
            entry['unknown'] = unknown
        out.append(entry)
    return out


def is_placeholder_box(box: Sequence[float]) -> bool:
    """True for the box of a stand-in object (:data:`mmsgg_eval.io.samples.PLACEHOLDER_BOX`: an unknown VLM
    name, a legacy background object), which can never match and is no object of the image."""
    from ..io.samples import PLACEHOLDER_BOX
    return all(float(v) == float(p) for v, p in zip(box, PLACEHOLDER_BOX))


def write_per_image(path: str, records: Sequence[Dict[str, Any]]) -> str:
    """Write ``records`` as JSON lines to ``path`` (directories created); returns the path."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = f'{path}.tmp'
    with open(tmp, 'w') as f:
        for record in records:
            f.write(json.dumps(record, allow_nan=False) + '\n')
    os.replace(tmp, path)
    return path


def write_metric_per_image(metric: Any, summary: Dict[str, Any],
                           records: Callable[[], Sequence[Dict[str, Any]]]) -> Optional[str]:
    """Write ``records()`` to ``metric.per_image_out`` (main rank; an ``OSError`` is logged as the other
    files' are, :meth:`~mmsgg_eval.metrics.base.RowMetric._guarded`), note the path in
    ``summary['report_files']['per_image']`` and forget the image names noted for it."""
    path = metric._guarded('per_image_out', lambda: write_per_image(metric.output_path('per_image_out'),
                                                                    records()))
    if path is not None:
        summary.setdefault('report_files', {})['per_image'] = path
    names = getattr(metric, '_image_names', None)
    if names is not None:
        names.clear()
    return path


def named(record: Dict[str, Any], idx: int, names: Dict[int, tuple]) -> Dict[str, Any]:
    """``record`` with ``sample_idx`` / ``img_id`` / ``img_path`` first (from ``names`` where noted)."""
    img_id, img_path = names.get(idx, (None, None))
    return {'sample_idx': idx, 'img_id': img_id, 'img_path': img_path, **record}


def read_per_image(path: str) -> List[Dict[str, Any]]:
    """The records of a per-image file (:func:`write_per_image`)."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def image_record(metric: Any, sample: Any, topk: int = PER_IMAGE_TOPK) -> Dict[str, Any]:
    """The per-image record of ONE data sample, computed by ``metric``'s own rows (ranking and matching) on
    a private copy of its settings: what the visualizer draws. ``metric`` needs its ``dataset_meta``."""
    if not callable(getattr(metric, 'compute_rows_per_image', None)):  # SceneGraphMetric and its subclasses
        raise ValueError(f'image_record: a scene-graph metric is needed, got {type(metric).__name__}')
    rows = metric.compute_rows_per_image([sample], topk)
    tables = {t: {n: c.cpu() for n, c in cols.items()} for t, cols in rows.items()}
    records = per_image_records(metric, tables, None)
    record = records[0]
    record['img_id'] = get_field(sample, 'img_id', record['img_id'])
    record['img_path'] = get_field(sample, 'img_path')
    return record


#: Metric types that take ``per_image_out`` (``--per-image`` of the command lines).
PER_IMAGE_METRICS = ('SGRecall', 'SGMeanRecall', 'VLMSceneGraphMetric', 'GroundingPr', 'OIRelationMetric')


def set_per_image_out(metric_cfgs: Sequence[Dict[str, Any]], path: str) -> List[str]:
    """Give ``per_image_out`` to the metric configs that take it (:data:`PER_IMAGE_METRICS`), in place; returns
    the paths set. Metrics of one key prefix (``prefix``, else ``mode``: e.g. the SGRecall and SGMeanRecall of a
    run, which share their rows and write the same lines) get ``path``; metrics of a further prefix get
    ``{path stem}.{prefix}{ext}`` (``OIRelationMetric`` counts as prefix ``{prefix}.oi``: its records differ).
    ``ValueError`` naming ``--per-image`` when no metric takes it."""
    stem, ext = os.path.splitext(path)
    paths: Dict[str, str] = {}
    for cfg in metric_cfgs:
        kind = str(cfg.get('type', '')).split('.')[-1]
        if kind not in PER_IMAGE_METRICS:
            continue
        prefix = str(cfg.get('prefix') or cfg.get('mode') or kind)
        if kind == 'OIRelationMetric':  # its own records (the OI list), never the lines of a recall metric
            prefix += '.oi'
        if prefix not in paths:
            paths[prefix] = path if not paths else f'{stem}.{prefix}{ext or ".jsonl"}'
        cfg['per_image_out'] = paths[prefix]
    if not paths:
        kinds = ', '.join(str(c.get('type')) for c in metric_cfgs) or 'none'
        raise ValueError(f'--per-image: no metric of the run writes per-image results (metrics: {kinds}; it is '
                         f'written by {", ".join(PER_IMAGE_METRICS)})')
    return list(paths.values())
