"""``SGRecall`` and ``SGMeanRecall``: the legacy VG150/GQA200/PSG scene-graph protocol (SPEC section 2).

Each ``process()`` call validates its batch, ranks and matches it on the samples' device
(:mod:`mmsgg_eval.functional`), and stores a few integers per GT relation (its first-hit rank in each
ranked list). ``evaluate()`` reduces those rows across ranks once, removes sampler padding by
``sample_idx`` and derives every key for every K. Values are percentages.
"""
from typing import Any, Dict, List, Optional, Sequence, Union

import torch
from mmengine.evaluator import BaseMetric
from torch import Tensor

from ..functional.limits import NO_HIT, RANK_CAP_INT16
from ..functional import per_predicate_recall, recall_from_ranks, scene_graph_ranks, triplet_keys
from ..registry import METRICS
from ..structures import MODES, ObjectCounts, collate_scene_graphs, get_field, sample_index
from ..zeroshot import as_zeroshot_triplets, derive_zeroshot, triplet_set_digest
from ..reports import dump_metric_json, format_scene_graph_report, log_block, write_scene_graph_reports
from .accumulator import RowAccumulator, same_objects
from .predicate_groups import resolve_groups

# rows of the last processed batch, and the last epoch summary, shared by SGRecall / SGMeanRecall with
# identical settings in one evaluator (they see the same batches)
_LAST_ROWS: Dict[str, Any] = {}
_LAST_SUMMARY: Dict[str, Any] = {}


POOL_SCORE_ROWS = 1 << 18  # predicted pairs (score rows) a pool may hold: ~53 MB of 51-column float32 scores


def _score_rows(sample: Any) -> int:
    """Number of predicted pairs of a sample (0 when unreadable: the pool's reader reports that)."""
    scores = get_field(get_field(sample, 'pred_relations'), 'scores')
    shape = getattr(scores, 'shape', None)
    return int(shape[0]) if shape else 0


def _first_occurrences(samples: List[Any]) -> List[Any]:
    """``samples`` without repeated ``sample_idx`` (samples without one are all kept)."""
    seen, keep = set(), []
    for sample in samples:
        idx = sample_index(sample)
        if idx is None or idx not in seen:
            keep.append(sample)
            if idx is not None:
                seen.add(idx)
    return keep if len(keep) < len(samples) else samples


class SceneGraphMetric(BaseMetric):
    """Shared machinery of :class:`SGRecall` and :class:`SGMeanRecall`.

    Args:
        mode: 'predcls' | 'sgcls' | 'sgdet' | 'phrdet'. PredCls replaces predicted boxes/labels by the GT and
            object scores by 1; SGCls uses the model's boxes (GT boxes only when it gives none) with its
            labels/scores, as the legacy evaluator; PhrDet matches union boxes.
        topk: the K of R@K.
        iou_thr: IoU threshold, compared with ``>=``.
        iou_plus_one: legacy +1-pixel IoU; None = ``dataset_meta['iou_plus_one']`` (VG150/GQA200: True),
            else False.
        ng_topk: length of the no-graph-constraint list.
        rank: 'score' (stable sort by predicate prob x subject score x object score) or 'given'.
        skip_empty_predictions: images without predicted pairs are skipped (legacy) or count as recall 0.
        mr_average: 'all' (sum over all P predicates / P, legacy) or 'present'.
        recall_average: 'image' (mean of per-image recalls, legacy) or 'micro' (sum of hits / sum of GT).
        match: 'box' or 'mask' (PSG; needs ``gt_instances.masks`` / ``pred_instances.masks``).
        zeroshot_triplets: path to the legacy zero-shot file, or 0-based (subject, object, predicate)
            triplets; None = ``dataset_meta['zeroshot_triplets']``, else derived from
            ``dataset_meta['train_triplets']`` (evaluated GT triplets unseen in training), else no zR.
        predicate_groups: {group: [predicate names]}; None = VG150 preset for VG150, else thirds by
            training frequency (``dataset_meta['predicate_counts']``).
        outfile_prefix: when set, ``{outfile_prefix}.{prefix}.json`` receives all keys and per-predicate
            recalls.
        report_dir: when set, ``{prefix}.metrics.json``, ``{prefix}.per_predicate.png`` (long-tail bar chart)
            and ``{prefix}.tables.md`` are written there (tools/test.py sets it to the work dir).
        pool_samples: samples pooled across ``process()`` calls and ranked as one batch (1 = each call on
            its own); a pool is also processed once it holds ``POOL_SCORE_ROWS`` predicted pairs (SGDet with
            all pairs), which bounds the memory it keeps alive. Results do not depend on it.
        prefix: key prefix; default the mode.
        strict_counts: PredCls/SGCls images whose predicted object list is shorter or longer than the GT are
            evaluated as the legacy evaluator does, with one warning per evaluation (False), or refused (True).
    """

    default_prefix: Optional[str] = None
    report_keys: Sequence[str] = ()

    def __init__(self, mode: str = 'predcls', topk: Sequence[int] = (20, 50, 100), iou_thr: float = 0.5,
                 iou_plus_one: Optional[bool] = None, ng_topk: int = 100, rank: str = 'score',
                 skip_empty_predictions: bool = True, mr_average: str = 'all', recall_average: str = 'image',
                 match: str = 'box', zeroshot_triplets: Union[None, str, Sequence] = None,
                 predicate_groups: Optional[Dict[str, Sequence[str]]] = None,
                 outfile_prefix: Optional[str] = None, report_dir: Optional[str] = None,
                 pool_samples: int = 256, collect_device: str = 'cpu',
                 prefix: Optional[str] = None, strict_counts: bool = False) -> None:
        if mode not in MODES:
            raise ValueError(f'mode must be one of {MODES}, got {mode!r}')
        for name, value, allowed in (('rank', rank, ('score', 'given')), ('mr_average', mr_average, ('all', 'present')),
                                     ('recall_average', recall_average, ('image', 'micro')),
                                     ('match', match, ('box', 'mask'))):
            if value not in allowed:
                raise ValueError(f'{name} must be one of {allowed}, got {value!r}')
        if match == 'mask' and mode == 'phrdet':
            raise ValueError("match='mask' is not defined for phrdet (union boxes)")
        topk = tuple(int(k) for k in topk)
        if not topk or min(topk) < 1:
            raise ValueError(f'topk must be positive integers, got {topk}')
        if int(pool_samples) < 1:
            raise ValueError(f'pool_samples must be >= 1, got {pool_samples}')
        super().__init__(collect_device=collect_device, prefix=prefix or mode)
        self.mode = mode
        self.topk = topk
        self.iou_thr = float(iou_thr)
        self.iou_plus_one = iou_plus_one
        self.ng_topk = int(ng_topk)
        self.rank = rank
        self.skip_empty_predictions = skip_empty_predictions
        self.mr_average = mr_average
        self.recall_average = recall_average
        self.match = match
        self.user_zeroshot = as_zeroshot_triplets(zeroshot_triplets)
        self.user_groups = predicate_groups
        self.outfile_prefix = outfile_prefix
        self.report_dir = report_dir
        self.pool_samples = int(pool_samples)
        self.object_counts = ObjectCounts(strict=strict_counts)
        self._pending: List[Any] = []
        self._pending_rows = 0
        # ranks only matter below max K: int16 (capped) keeps the state ~25 bytes per GT relation
        self._rank_cap = RANK_CAP_INT16 if max(topk) < RANK_CAP_INT16 else NO_HIT
        rank_dtype = torch.int16 if self._rank_cap == RANK_CAP_INT16 else torch.int32
        self.accumulator = RowAccumulator({
            'images': {'num_gt': (torch.int32, ()), 'num_pred': (torch.int32, ())},
            'relations': {'predicate': (torch.int16, ()), 'triplet': (torch.int32, ()),
                          'zeroshot': (torch.bool, ()), 'rank_gc': (rank_dtype, ()),
                          'rank_ngc': (rank_dtype, ()), 'rank_pair': (rank_dtype, ())},
        })
        self.last_report: Optional[Dict[str, Any]] = None

    # ------------------------------------------------------------------ dataset facts
    def _meta(self, key: str, default: Any = None) -> Any:
        meta = self.dataset_meta or {}
        return meta.get(key, default)

    @property
    def classes(self) -> List[str]:
        classes = self._meta('classes')
        if classes is None:
            raise ValueError(f'{type(self).__name__}: dataset_meta has no `classes`; use a dataset wrapper of '
                             f'mmsgg_eval or set metric.dataset_meta = dict(classes=..., predicates=...)')
        return list(classes)

    @property
    def predicates(self) -> List[str]:
        predicates = self._meta('predicates')
        if predicates is None:
            raise ValueError(f'{type(self).__name__}: dataset_meta has no `predicates`')
        return list(predicates)

    def _require_meta(self) -> None:
        for key in ('classes', 'predicates'):
            if self._meta(key) is None:
                getattr(self, key)  # raises the explanatory error

    @property
    def plus_one(self) -> bool:
        if self.iou_plus_one is not None:
            return bool(self.iou_plus_one)
        return bool(self._meta('iou_plus_one', False))

    def _zeroshot_codes(self, device: torch.device) -> Optional[Tensor]:
        """Sorted integer codes of the given zero-shot triplets (cached per dataset_meta), or None."""
        meta_zs = self._meta('zeroshot_triplets')
        cache_key = (id(self._dataset_meta), str(device))
        if getattr(self, '_zs_cache_key', None) != cache_key:
            triplets = self.user_zeroshot
            if triplets is None and meta_zs is not None:
                triplets = as_zeroshot_triplets(meta_zs)
            codes = None
            if triplets is not None:
                codes = torch.sort(triplet_keys(triplets[:, 0], triplets[:, 1], triplets[:, 2], len(self.classes),
                                                len(self.predicates))).values.to(device)
            self._zs_cache_key, self._zs_codes = cache_key, codes
        return self._zs_codes

    # ------------------------------------------------------------------ per batch
    def process(self, data_batch: Any, data_samples: Sequence[Any]) -> None:
        """Pool the samples; every ``pool_samples`` samples, rank and match them as one batch and store
        per-GT-relation first-hit ranks (no predictions are kept once a pool is processed).

        Pooling makes the speed independent of the dataloader's batch size (mmdet tests with batches of 1).
        Pooled samples are referenced, not copied: do not modify them in place after ``process()``. A bad
        sample raises when its pool is processed (at the latest in ``evaluate()``), naming the sample.
        """
        self._require_meta()  # a missing dataset_meta fails at once, not at the first pool
        self._pending.extend(data_samples)
        self._pending_rows += sum(_score_rows(s) for s in data_samples)
        if len(self._pending) >= self.pool_samples or self._pending_rows >= POOL_SCORE_ROWS:
            self.flush()

    def flush(self) -> None:
        """Rank and match the pooled samples now.

        When SGRecall and SGMeanRecall with the same settings pool the same sample objects (one evaluator),
        the second reuses the rows of the first instead of ranking and matching again. A sample_idx repeated
        within the pool (sampler padding) is processed once: the first occurrence counts (SPEC 2.6).
        """
        samples, self._pending, self._pending_rows = self._pending, [], 0
        if not samples:
            return
        samples = _first_occurrences(samples)
        key = self._rows_key()
        if _LAST_ROWS.get('key') == key and same_objects(_LAST_ROWS.get('samples'), samples):
            rows = _LAST_ROWS['rows']
        else:
            rows = self._compute_rows(samples)
            _LAST_ROWS.update(key=key, samples=samples, rows=rows)
        self.accumulator.add(rows)

    def _rows_key(self) -> tuple:
        zs = self._zeroshot_codes(torch.device('cpu'))
        zs_key = None if zs is None else (zs.numel(), int(zs.sum()))
        return (self.mode, self._rank_cap, max(self.topk), self.ng_topk, self.iou_thr, self.plus_one, self.rank,
                self.match, len(self.classes), len(self.predicates), zs_key)

    def _summary_key(self, size: int) -> tuple:
        """Everything :meth:`summarize` depends on besides the rows."""
        return (type(self).__mro__[1], size, self.mode, self.topk, self.skip_empty_predictions, self.mr_average,
                self.recall_average, repr(self.user_zeroshot is None or self.user_zeroshot.tolist()),
                repr(self.user_groups), id(self._dataset_meta))

    def _compute_rows(self, data_samples: Sequence[Any]) -> Dict[str, Dict[str, Tensor]]:
        classes, predicates = self.classes, self.predicates
        batch = collate_scene_graphs(data_samples, self.mode, len(classes), len(predicates),
                                     with_masks=self.match == 'mask', counts=self.object_counts)
        self.accumulator.number_missing(batch.sample_idx, type(self).__name__)
        max_k = max(self.topk)
        ranks = scene_graph_ranks(batch, max_k, self.ng_topk, self.iou_thr, self.plus_one,
                                  phrase=self.mode == 'phrdet', use_masks=self.match == 'mask',
                                  rank_by=self.rank, with_pair_accuracy=self.mode in ('predcls', 'sgcls'))
        valid = batch.gt_valid
        image_of = torch.arange(valid.shape[0], device=batch.device)[:, None].expand_as(valid)[valid]
        sub_cls = batch.gt_labels.gather(1, batch.gt_pairs[..., 0])[valid]
        obj_cls = batch.gt_labels.gather(1, batch.gt_pairs[..., 1])[valid]
        pred = batch.gt_predicates[valid]
        if len(classes) ** 2 * len(predicates) >= 2 ** 31:
            raise ValueError(f'{len(classes)} classes x {len(predicates)} predicates: triplet codes exceed int32')
        codes = triplet_keys(sub_cls, obj_cls, pred, len(classes), len(predicates))
        zs_codes = self._zeroshot_codes(batch.device)
        if zs_codes is not None and zs_codes.numel():
            zeroshot = torch.isin(codes, zs_codes)
        else:
            zeroshot = torch.zeros_like(codes, dtype=torch.bool)
        pair_rank = ranks.get('pair_acc', torch.full_like(ranks['gc'], NO_HIT))
        return {
            'images': {'sample_idx': batch.sample_idx, 'num_gt': valid.sum(1), 'num_pred': batch.num_rel_preds},
            'relations': {'sample_idx': batch.sample_idx[image_of], 'predicate': pred, 'triplet': codes,
                          'zeroshot': zeroshot, 'rank_gc': ranks['gc'][valid].clamp(max=self._rank_cap),
                          'rank_ngc': ranks['ngc'][valid].clamp(max=self._rank_cap),
                          'rank_pair': pair_rank[valid].clamp(max=self._rank_cap)},
        }

    # ------------------------------------------------------------------ epoch end
    def evaluate(self, size: int) -> Dict[str, Any]:
        self.flush()
        self.object_counts.warn(self.mode)
        key = self._summary_key(size)
        if _LAST_SUMMARY.get('key') == key and self.accumulator.holds_same_rows(_LAST_SUMMARY.get('sources')):
            # SGRecall + SGMeanRecall in one evaluator: same rows on every rank, so the same reduced tables
            summary = dict(_LAST_SUMMARY['summary'])
            self.accumulator.reset()
        else:
            sources = self.accumulator.sources
            tables = self.accumulator.reduce_to_cpu(size, type(self).__name__)
            summary = self.summarize(tables)
            _LAST_SUMMARY.update(key=key, sources=sources, summary=dict(summary))
        _LAST_ROWS.clear()
        self.last_report = summary
        keys = {k: v for k, v in summary['metrics'].items() if self._wanted(k)}
        metrics = {f'{self.prefix}/{k}': v for k, v in keys.items()}
        if self._reports_per_predicate:
            metrics[f'{self.prefix}/per_predicate_recall'] = summary['per_predicate']
        self._log_report(summary, keys)
        from mmengine.dist import is_main_process
        if is_main_process():
            if self.outfile_prefix:
                self._dump(summary, keys)
            if self.report_dir:
                        summary['report_files'] = write_scene_graph_reports(
                    summary, self.report_dir, self.prefix, self.topk,
                    self._meta('dataset_name', 'unknown dataset'), self.mode)
        return metrics

    _reports_per_predicate = False

    def _wanted(self, key: str) -> bool:
        return key.split('@')[0] in self.report_keys

    def summarize(self, tables: Dict[str, Dict[str, Tensor]]) -> Dict[str, Any]:
        """All keys (percent) and the per-predicate table from de-duplicated row tables."""
        images, rels = tables['images'], tables['relations']
        num_pred_classes = len(self.predicates)
        evaluated = images['num_gt'] > 0
        if self.skip_empty_predictions:
            evaluated &= images['num_pred'] > 0
        eval_idx = images['sample_idx'][evaluated]
        num_images = int(eval_idx.numel())
        sorted_idx, order = torch.sort(eval_idx)
        pos = torch.searchsorted(sorted_idx, rels['sample_idx']).clamp(max=max(num_images - 1, 0))
        keep = (sorted_idx[pos] == rels['sample_idx']) if num_images else torch.zeros_like(rels['sample_idx'],
                                                                                               dtype=torch.bool)
        image_of = order[pos][keep]
        rel = {n: c[keep] for n, c in rels.items()}
        ks = self.topk
        m: Dict[str, float] = {}
        avg = self.recall_average

        def put(name: str, values: Tensor) -> None:
            for k, v in zip(ks, values.tolist()):
                m[f'{name}@{k}'] = 100.0 * v

        rank_gc, rank_ngc = rel['rank_gc'].long(), rel['rank_ngc'].long()
        put('R', recall_from_ranks(rank_gc, image_of, num_images, ks, average=avg))
        put('ngR', recall_from_ranks(rank_ngc, image_of, num_images, ks, average=avg))
        has_zs = self.user_zeroshot is not None or self._meta('zeroshot_triplets') is not None
        zs_mask = rel['zeroshot']
        zs_info = None
        if not has_zs and self._meta('train_triplets') is not None:
            train = torch.as_tensor(self._meta('train_triplets')).long().reshape(-1, 3)
            c, p = len(self.classes), num_pred_classes
            split_trip = rels['triplet']  # every GT relation of the split, evaluated image or not
            eval_trip = torch.stack([split_trip // p // c, split_trip // p % c, split_trip % p], 1)
            derived = derive_zeroshot(eval_trip, train)
            codes = triplet_keys(derived[:, 0], derived[:, 1], derived[:, 2], c, p)
            zs_mask = torch.isin(rel['triplet'], codes)
            zs_info = {'source': 'derived (evaluated GT triplets absent from training)',
                       'size': int(derived.shape[0]), 'sha1': triplet_set_digest(derived)}
            has_zs = True
        elif has_zs:
            z = self.user_zeroshot if self.user_zeroshot is not None else \
                as_zeroshot_triplets(self._meta('zeroshot_triplets'))
            zs_info = {'source': 'given', 'size': int(z.shape[0]), 'sha1': triplet_set_digest(z)}
        if has_zs:
            put('zR', recall_from_ranks(rank_gc, image_of, num_images, ks, rel_mask=zs_mask, average=avg))
            put('ngzR', recall_from_ranks(rank_ngc, image_of, num_images, ks, rel_mask=zs_mask, average=avg))
        if self.mode in ('predcls', 'sgcls'):
            hits = torch.stack([(rel['rank_pair'].long() < k).sum() for k in ks]).double() if ks else None
            total = float(rel['predicate'].numel())
            for k, h in zip(ks, hits.tolist()):
                m[f'A@{k}'] = 100.0 * h / total if total else 0.0

        pred = rel['predicate'].long()
        per_pred, present = per_predicate_recall(rank_gc, pred, image_of, num_images, num_pred_classes, ks, avg)
        ng_per_pred, _ = per_predicate_recall(rank_ngc, pred, image_of, num_images, num_pred_classes, ks, avg)

        def mean_over(values: Tensor, members: Sequence[int]) -> Tensor:
            idx = torch.as_tensor(list(members), dtype=torch.long)
            if self.mr_average == 'present':
                idx = idx[present[idx]]
            if idx.numel() == 0:
                return torch.zeros(values.shape[0], dtype=torch.float64)
            return values[:, idx].sum(1) / idx.numel()

        everyone = range(num_pred_classes)
        mr = mean_over(per_pred, everyone)
        put('mR', mr)
        put('ngmR', mean_over(ng_per_pred, everyone))
        groups = resolve_groups(self.predicates, self.user_groups, self._meta('predicate_counts'))
        for name, members in groups.items():
            for k, v in zip(ks, mean_over(per_pred, members).tolist()):
                m[f'mR@{k}_{name}'] = 100.0 * v
        for k in ks:
            r, mrk = m[f'R@{k}'], m[f'mR@{k}']
            m[f'F@{k}'] = 2 * r * mrk / (r + mrk) if r + mrk > 0 else 0.0
            m[f'AVG@{k}'] = (r + mrk) / 2
        counts = self._meta('predicate_counts')
        order = list(range(num_pred_classes))
        if counts is not None and len(counts) == num_pred_classes:
            order.sort(key=lambda i: (-float(counts[i]), i))
        per_predicate = {
            self.predicates[i]: {f'R@{k}': 100.0 * float(per_pred[j, i]) for j, k in enumerate(ks)}
            for i in order}
        num_gt = torch.bincount(pred, minlength=num_pred_classes).tolist()
        for i in order:
            per_predicate[self.predicates[i]]['num_gt'] = num_gt[i]
        return {'metrics': m, 'per_predicate': per_predicate, 'num_images': num_images,
                'num_samples': int(images['sample_idx'].numel()), 'num_gt_relations': int(pred.numel()),
                'zeroshot': zs_info, 'groups': {n: [self.predicates[i] for i in g] for n, g in groups.items()}}

    # ------------------------------------------------------------------ reporting
    def _log_report(self, summary: Dict[str, Any], keys: Dict[str, float]) -> None:
        log_block(format_scene_graph_report(summary, keys, mode=self.mode,
                                            dataset=self._meta('dataset_name', 'unknown dataset'),
                                            metric_name=type(self).__name__, ks=self.topk,
                                            with_per_predicate=self._reports_per_predicate))

    def _dump(self, summary: Dict[str, Any], keys: Dict[str, float]) -> None:
        dump_metric_json(self.outfile_prefix, self.prefix, {
            'mode': self.mode, 'keys': keys, 'per_predicate': summary['per_predicate'],
            'num_images': summary['num_images'], 'zeroshot': summary['zeroshot']})

    def compute_metrics(self, results: list) -> dict:  # pragma: no cover - evaluate() is overridden
        raise NotImplementedError('scene-graph metrics reduce row tables in evaluate()')


@METRICS.register_module()
class SGRecall(SceneGraphMetric):
    """R@K, ngR@K, zR@K, ngzR@K and (PredCls/SGCls) A@K, in percent. See :class:`SceneGraphMetric`."""
    report_keys = ('R', 'ngR', 'zR', 'ngzR', 'A')


@METRICS.register_module()
class SGMeanRecall(SceneGraphMetric):
    """mR@K, ngmR@K, mR@K_head/_body/_tail, F@K, AVG@K and the per-predicate recall table, in percent."""
    report_keys = ('mR', 'ngmR', 'F', 'AVG')
    _reports_per_predicate = True
