"""``OIRelationMetric``: the Open Images V6 relation protocol of PySGG (R@K pooled, mAP_rel / wmAP_rel,
mAP_phr / wmAP_phr, final_score / w_final_score; definitions: ``docs/metrics.md``).

Each pool of samples is read and validated like the scene-graph metrics' (:func:`collate_scene_graphs`), its
OI ranked lists built and matched (:mod:`mmsgg_eval.functional.oi`) into small rows: per image at most 100
entries (score, predicate, rank, the two true-positive flags), per GT relation its predicate and first-hit
rank. Whether an entry is a true positive depends on its own image only (claims are per image), so
``evaluate()`` reduces those rows across ranks once (no prediction is gathered) and sorts them per predicate
in one documented order (score descending, then ``sample_idx``, then rank): world sizes 1, 2, 3 give the same
numbers bit for bit. Values are percentages.
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..functional.limits import NO_HIT
from ..functional.recall import rank_limit
from ..functional.oi import (OI_AP_KEYS, OI_LIST_LENGTH, OI_NO_HIT, ap_order, copied_rows, oi_average_precisions,
                             oi_list_request, oi_match, oi_ranked_lists, oi_scores, pooled_recall, stored_first_hits,
                             tie_groups)
from ..registry import METRICS
from ..structures import SCORE_LAYOUTS, ObjectCounts
from ..functional.overlap import Staged
from .base import RowMetric, Schema, Tables
from .relation_vocabulary import RelationVocabulary
from .options import one_of, positive_ints
from .scene_graph_inputs import PoolReader, score_rows
from ..keys import RowKey
from .bootstrap import Contributions
from .row_keys import Columns, row_key_contributions, row_key_value, row_key_values

#: modes of the OI protocol (PySGG's PredCls / SGCls / SGDet; phrase detection is the AP_phr half of every mode)
OI_MODES = ('predcls', 'sgcls', 'sgdet')


@METRICS.register_module()
class OIRelationMetric(RelationVocabulary, RowMetric):
    """The Open Images relation protocol (PySGG's ``eval_rel_results`` with ``ap_eval``), in percent.

    Keys: ``R@K`` for K in ``topk`` (pooled over the images: distinct GT relations hit in the first K entries of
    their image's OI list / all GT relations), ``mAP_rel``, ``wmAP_rel``, ``mAP_phr``, ``wmAP_phr``,
    ``final_score`` (0.2 R@50 + 0.4 mAP_rel + 0.4 mAP_phr) and ``w_final_score`` (with the weighted mAPs). The
    per-predicate AP table (rel and phr, with GT counts) is in the logged report, the report files,
    ``outfile_prefix`` and ``metrics.json`` (:meth:`extra_results`).

    Args:
        mode: 'predcls' | 'sgcls' | 'sgdet' (which objects are evaluated: as :class:`SceneGraphMetric`).
        topk: the K of R@K (K > 100 saturates at the list's 100 entries); R@50 enters the final scores whatever
            ``topk``.
        iou_plus_one: legacy +1-pixel IoU; None = ``dataset_meta['iou_plus_one']`` (OIv6: True), else False.
        score_layout: how the columns of ``pred_relations.scores`` are read (as :class:`SceneGraphMetric`).
        strict_counts: refuse PredCls / SGCls images whose object list length differs from the GT.
        per_image_out: JSON lines, per image its OI list (with the true-positive flags) and its GT relations
            with their first-hit ranks (main rank, after the reduce).
        outfile_prefix, report_dir, pool_samples, collect_device, prefix: as every row metric (prefix: the mode).
    """

    file_tag = 'oi'
    overlaps_pools = True  # start_rows: the reader's compiled pass of a pool runs beside the previous pool's lists

    def contributions(self, tables: Tables) -> Contributions:
        """Every key per image (the bootstrap intervals and ``compare``): :func:`oi_contributions`."""
        return oi_contributions(self, tables)

    def __init__(self, mode: str = 'sgdet', topk: Sequence[int] = (20, 50, 100),
                 iou_plus_one: Optional[bool] = None, score_layout: str = 'auto', strict_counts: bool = False,
                 per_image_out: Optional[str] = None, outfile_prefix: Optional[str] = None,
                 report_dir: Optional[str] = None, pool_samples: int = 256, collect_device: str = 'cpu',
                 prefix: Optional[str] = None) -> None:
        owner = type(self).__name__
        one_of(mode, 'mode', owner, OI_MODES)
        one_of(score_layout, 'score_layout', owner, SCORE_LAYOUTS)
        if iou_plus_one is not None and not isinstance(iou_plus_one, bool):
            raise ValueError(f'{owner}: iou_plus_one must be True, False or None, got {iou_plus_one!r}')
        super().__init__(outfile_prefix=outfile_prefix, report_dir=report_dir, pool_samples=pool_samples,
                         collect_device=collect_device, prefix=prefix or mode)
        self.mode = mode
        self.topk = positive_ints(topk, 'topk', owner)
        self.iou_plus_one = iou_plus_one
        self.score_layout = score_layout
        self.object_counts = ObjectCounts(strict=strict_counts)
        self._reader = PoolReader()  # its buffers, and the reads shared with the scene-graph metrics
        self.per_image_out = per_image_out
        from .per_image import ImageNames
        self._image_names = ImageNames()

    # ------------------------------------------------------------------ dataset facts
    @property
    def plus_one(self) -> bool:
        if self.iou_plus_one is not None:
            return bool(self.iou_plus_one)
        return bool(self._meta('iou_plus_one', False))

    @property
    def conventions(self) -> Dict[str, Any]:
        """The protocol's conventions, JSON-ready (``metrics.json`` provenance)."""
        return {'protocol': 'oi (PySGG eval_rel_results + ap_eval)', 'mode': self.mode,
                'list': f'top {OI_LIST_LENGTH} of the 2 best predicates of every pair, score (subject x object) x '
                        f'predicate in float32, entries <= 1e-5 dropped',
                'recall': 'pooled over images; labels equal, subject and object IoU >= 0.5',
                'ap': 'per predicate; VOC greedy per image, overlap > 0.5 (rel: min of subject and object IoU, '
                      'phr: union-box IoU); all-point interpolation; ties: score desc, sample_idx, rank',
                'iou_plus_one': self.plus_one if self.dataset_meta else self.iou_plus_one}

    def before_epoch(self) -> None:
        for key in ('classes', 'predicates'):
            if self._meta(key) is None:
                getattr(self, key)  # raises the explanatory error
        super().before_epoch()
        self._reader.open_epoch()
        from mmengine.dist import is_main_process
        if self.per_image_out and is_main_process():
            import os
            from .base import ensure_writable_dir
            ensure_writable_dir(os.path.dirname(os.path.abspath(str(self.per_image_out))), self.name,
                                'per_image_out')

    # ------------------------------------------------------------------ rows
    def row_schema(self) -> Schema:
        entries = {'position': (torch.int16, ()), 'score': (torch.float32, ()), 'predicate': (torch.int16, ()),
                   'tp_rel': (torch.bool, ()), 'tp_phr': (torch.bool, ())}
        if self.per_image_out:
            entries.update({'ends': (torch.int32, (2,)), 'labels': (torch.int32, (2,))})
        return {'images': {'num_gt': (torch.int32, ()), 'num_pred': (torch.int32, ()),
                           'missing': (torch.bool, ())},
                'entries': entries,
                'relations': {'predicate': (torch.int16, ()), 'first_hit': (torch.int16, ())}}

    def pool_weight(self, samples: Sequence[Any]) -> int:
        return sum(score_rows(s) for s in samples)

    def pool_capacity(self) -> Optional[int]:
        from ..functional.limits import POOL_SCORE_ROWS
        return POOL_SCORE_ROWS

    def compute_rows(self, samples: List[Any]) -> Dict[str, Dict[str, Tensor]]:
        """Read a pool, build its OI lists and match them (:mod:`mmsgg_eval.functional.oi`): per image its GT and
        predicted-pair counts; per listed entry its rank, score, predicate and true-positive flags; per GT
        relation its predicate and first-hit rank (:data:`OI_NO_HIT` when no entry hits it)."""
        return Staged(self._row_stages(samples)).result()

    def start_rows(self, samples: List[Any]) -> Staged:
        """:meth:`compute_rows` with the reader's compiled pass (row maxima, value check, pair scores) left running
        in the background thread while the previous pool's lists are built."""
        return Staged(self._row_stages(samples, background=True))

    def _row_stages(self, samples: List[Any], background: bool = False):
        batch, missing, samples = yield from self._reader.stages(
            samples, self.mode, len(self.classes), len(self.predicates), counts=self.object_counts,
            score_layout=self.score_layout, ranking=(0, 0, False, oi_list_request()),
            background=background)  # the pass' row maxima and pair scores, no scene-graph lists, the OI lists
        self.accumulator.number_missing(batch.sample_idx, self.name)
        lists = oi_ranked_lists(batch)
        match = oi_match(batch, lists, self.plus_one)
        device = batch.device
        slot = lists.valid.reshape(-1).nonzero().squeeze(1)
        width = max(lists.valid.shape[1], 1)
        image_of = slot // width

        def listed(values: Tensor) -> Tensor:
            return values.reshape(-1).index_select(0, slot)
        entries = {'sample_idx': batch.sample_idx.index_select(0, image_of), 'position': slot % width,
                   'score': listed(lists.score), 'predicate': listed(lists.predicate),
                   'tp_rel': listed(match['tp_rel']), 'tp_phr': listed(match['tp_phr'])}
        if self.per_image_out:
            labels = batch.pred_labels
            entries['ends'] = torch.stack([listed(lists.subject), listed(lists.object)], 1)
            entries['labels'] = torch.stack([listed(labels.gather(1, lists.subject)),
                                             listed(labels.gather(1, lists.object))], 1)
        valid = batch.gt_valid
        gt_slot = valid.reshape(-1).nonzero().squeeze(1)
        gt_image = gt_slot // max(valid.shape[1], 1)
        rank = match['first_hit'].reshape(-1).index_select(0, gt_slot)
        relations = {'sample_idx': batch.sample_idx.index_select(0, gt_image),
                     'predicate': batch.gt_predicates.reshape(-1).index_select(0, gt_slot),
                     'first_hit': torch.where(rank < NO_HIT, rank, torch.full_like(rank, OI_NO_HIT))}
        images = {'sample_idx': batch.sample_idx, 'num_gt': valid.sum(1), 'num_pred': batch.num_rel_preds,
                  'missing': torch.tensor(missing, dtype=torch.bool, device=device)}
        return {'images': images, 'entries': entries, 'relations': relations}

    # ------------------------------------------------------------------ summary
    def evaluate(self, size: int) -> Dict[str, float]:
        self.flush()
        self._reader.close_epoch()
        self.object_counts.warn(self.mode)
        return super().evaluate(size)

    def recall_ks(self) -> List[int]:
        """The Ks whose pooled recall is computed: ``topk`` and 50 (for the final scores)."""
        return list(self.topk) + ([50] if 50 not in self.topk else [])

    def sorted_entries(self, entries: Dict[str, Tensor]) -> Dict[str, Tensor]:
        """The entry rows in the order of the AP sweep (:func:`~mmsgg_eval.functional.oi.ap_order`)."""
        order = ap_order(entries['predicate'], entries['score'], entries['sample_idx'], entries['position'])
        return {n: c.index_select(0, order) for n, c in entries.items()}

    def scores_of(self, sorted_rows: Dict[str, Tensor], relations: Dict[str, Tensor],
                  row_weight: Optional[Tensor] = None, rel_weight: Optional[Tensor] = None,
                  groups: Optional[Tuple[Tensor, Tensor]] = None, recall_50: Optional[float] = None
                  ) -> Dict[str, Any]:
        """The AP keys and final scores (fractions) and the per-predicate APs and GT counts of sorted entry rows and
        GT relations, optionally weighted (a bootstrap replicate's draws of each row's image: the rows are repeated
        as the copies of the images would be swept, :func:`~mmsgg_eval.functional.oi.copied_rows`; ``groups``: the
        rows' :func:`~mmsgg_eval.functional.oi.tie_groups` when already known). ``recall_50``: the pooled R@50
        (fraction) the final scores read; None: computed from the weighted relations (a replicate)."""
        num_predicates = len(self.predicates)
        pred = relations['predicate'].long()
        npos = torch.bincount(pred, weights=rel_weight, minlength=num_predicates).double() \
            if rel_weight is not None else torch.bincount(pred, minlength=num_predicates).double()
        if row_weight is not None:
            index = copied_rows(tie_groups(sorted_rows) if groups is None else groups, row_weight)
            sorted_rows = {n: sorted_rows[n].index_select(0, index) for n in ('predicate', 'tp_rel', 'tp_phr')}
        ap_rel, ap_phr = oi_average_precisions(sorted_rows, npos, num_predicates)
        if recall_50 is None:  # a replicate: the relations weighed by their image's draws, pooled
            recall_50 = float(pooled_recall(stored_first_hits(relations['first_hit']), [50], rel_weight)[0])
        values = oi_scores(ap_rel, ap_phr, npos, recall_50)
        return {'values': values, 'ap_rel': ap_rel, 'ap_phr': ap_phr, 'npos': npos}

    def row_keys(self) -> Tuple[RowKey, ...]:
        """``R@K``, declared once (:class:`~mmsgg_eval.keys.RowKey`): the GT relations hit within K over all GT
        relations, pooled over the images (0 without GT relations). The AP keys are :func:`ap_keys` of
        :meth:`scores_of`, recomputed per bootstrap replicate."""
        return tuple(self.recall_key(k) for k in self.topk)

    @staticmethod
    def recall_key(k: int, scale: float = 100.0) -> RowKey:
        """The declaration of the pooled ``R@{k}`` (``scale`` 1: the fraction the final scores read)."""
        return RowKey(f'R@{k}', 'relations', f'hit:{k}', scale=scale, empty=0.0, summation='mean')

    def key_columns(self, tables: Tables) -> Columns:
        """The columns :meth:`row_keys` read: per GT relation ``hit:{K}`` (its first hit is within K), for each K of
        :meth:`recall_ks` (R@50 of the final scores included)."""
        rels = tables['relations']
        rank = stored_first_hits(rels['first_hit'])
        return {'relations': {'sample_idx': rels['sample_idx'],
                              **{f'hit:{k}': rank < rank_limit(k) for k in self.recall_ks()}}}

    def summarize(self, tables: Tables) -> Dict[str, Any]:
        images, rels = tables['images'], tables['relations']
        columns = self.key_columns(tables)
        m = row_key_values(self.row_keys(), columns)
        result = self.scores_of(self.sorted_entries(tables['entries']), rels,
                                recall_50=row_key_value(self.recall_key(50, scale=1.0), columns))
        m.update(ap_keys(result))
        npos = result['npos'].long().tolist()
        ap_rel, ap_phr = result['ap_rel'].tolist(), result['ap_phr'].tolist()
        per_predicate = {name: {'AP_rel': 100.0 * ap_rel[i], 'AP_phr': 100.0 * ap_phr[i], 'num_gt': npos[i]}
                         for i, name in enumerate(self.predicates)}
        return {'metrics': m, 'per_predicate': per_predicate, 'num_images': int(images['sample_idx'].numel()),
                'num_gt_relations': int(rels['sample_idx'].numel()),
                'num_entries': int(tables['entries']['sample_idx'].numel()),
                'num_without_pairs': int((images['num_pred'] == 0).sum()),
                'num_missing_predictions': int(images['missing'].sum()), 'conventions': self.conventions}

    # ------------------------------------------------------------------ reporting
    def report_stem(self) -> str:
        """``{prefix}.oi``: the report files never take the name of the recall metrics of the same prefix."""
        return self.tagged_stem()

    def format_report(self, summary: Dict[str, Any], keys: Dict[str, float]) -> str:
        dataset = self._meta('dataset_name', 'unknown dataset')
        lines = [f'{type(self).__name__} | OI protocol | {dataset} | {self.mode} | {summary["num_images"]} images, '
                 f'{summary["num_gt_relations"]} GT relations ({summary["num_without_pairs"]} images without '
                 f'predicted pairs, {summary["num_missing_predictions"]} without prediction)',
                 '  '.join(f'{k}: {v:.2f}' for k, v in keys.items()),
                 f'{"predicate":<24} {"num_gt":>7} {"AP_rel":>8} {"AP_phr":>8}']
        for name, row in summary['per_predicate'].items():
            lines.append(f'{name:<24} {row["num_gt"]:>7d} {row["AP_rel"]:>8.2f} {row["AP_phr"]:>8.2f}')
        return '\n'.join(lines)

    def report_tables(self, summary: Dict[str, Any]) -> list:
        """The report tables: ``main`` (every key) and ``per_predicate`` (GT count, AP_rel, AP_phr)."""
        from ..reports import ReportTable, summary_values
        m = summary_values(summary)
        dataset = self._meta('dataset_name', 'unknown dataset')
        keys = list(m)
        main = ReportTable('main', 'Open Images protocol (percent; R@K pooled over images)',
                           ['Dataset', 'Mode'] + keys, [[dataset, self.mode] + [m[k] for k in keys]], text_columns=2)
        rows = [[name, row['num_gt'], row['AP_rel'], row['AP_phr']] for name, row in summary['per_predicate'].items()]
        per_pred = ReportTable('per_predicate', 'Per-predicate AP (percent); a predicate without GT has AP 0',
                               ['Predicate', 'GT', 'AP_rel', 'AP_phr'], rows)
        return [main, per_pred]

    def write_outfile(self, summary: Dict[str, Any], keys: Dict[str, float], tables: Tables) -> str:
        from ..reports import dump_metric_json, json_safe
        return dump_metric_json(self.outfile_prefix, self.file_stem(), json_safe({
            'mode': self.mode, 'keys': keys, 'per_predicate': summary['per_predicate'],
            'num_images': summary['num_images'], 'num_missing_predictions': summary['num_missing_predictions'],
            'conventions': summary['conventions']}, nan_as_null=False))

    def write_reports(self, summary: Dict[str, Any], keys: Dict[str, float], stem: str) -> Dict[str, str]:
        from ..reports import write_summary_json, write_tables
        paths = {'json': write_summary_json(summary, self.report_dir, stem)}
        title = (f'{self._meta("dataset_name", "unknown dataset")} — {self.mode}, OI protocol '
                 f'({summary["num_images"]} images)')
        paths.update(write_tables(self.report_dir, stem, title, self.report_tables(summary)))
        return paths

    def extra_results(self) -> Dict[str, Any]:
        """``{prefix}/per_predicate_ap`` (AP_rel, AP_phr, num_gt per predicate) and
        ``{prefix}/num_missing_predictions`` of the last evaluation, for ``metrics.json``."""
        if self.last_report is None:
            return {}
        return {f'{self.prefix}/per_predicate_ap': self.last_report['per_predicate'],
                f'{self.prefix}/num_missing_predictions': self.last_report['num_missing_predictions']}

    # ------------------------------------------------------------------ per-image results
    def per_image_records(self, tables: Tables, names: Optional[Dict[int, tuple]] = None) -> List[Dict[str, Any]]:
        """One record per image: its OI list (rank, subject / object object indices and labels, predicate, score,
        TP flags) and its GT relations (predicate, first-hit rank or None), with the image's pooled counts."""
        from .per_image import named
        classes, predicates = self.classes, self.predicates
        by_image: Dict[int, Dict[str, list]] = {}
        images = {n: c.tolist() for n, c in tables['images'].items()}
        for i, idx in enumerate(images['sample_idx']):
            by_image[idx] = {'entries': [], 'gt': [], 'num_pred_pairs': images['num_pred'][i],
                             'prediction_missing': bool(images['missing'][i])}
        e = {n: c.tolist() for n, c in tables['entries'].items()}
        for i, idx in enumerate(e['sample_idx']):
            entry = {'rank': e['position'][i], 'predicate': predicates[e['predicate'][i]], 'score': e['score'][i],
                     'tp_rel': bool(e['tp_rel'][i]), 'tp_phr': bool(e['tp_phr'][i])}
            if 'ends' in e:
                s, o = e['ends'][i]
                ls, lo = e['labels'][i]
                entry.update({'subject': s, 'object': o, 'subject_label': classes[ls], 'object_label': classes[lo]})
            by_image[idx]['entries'].append(entry)
        r = {n: c.tolist() for n, c in tables['relations'].items()}
        for i, idx in enumerate(r['sample_idx']):
            rank = r['first_hit'][i]
            by_image[idx]['gt'].append({'predicate': predicates[r['predicate'][i]],
                                        'first_hit': rank if rank < OI_NO_HIT else None})
        out = []
        for idx in sorted(by_image):
            record = by_image[idx]
            ranks = [g['first_hit'] for g in record['gt']]
            record['hits'] = {f'R@{k}': sum(1 for x in ranks if x is not None and x < k) for k in self.topk}
            out.append(named(record, idx, names or {}))
        return out

    def _write_files(self, summary: Dict[str, Any], keys: Dict[str, float], tables: Tables) -> None:
        super()._write_files(summary, keys, tables)
        if self.per_image_out:
            from .per_image import write_metric_per_image
            names = self._image_names.names
            write_metric_per_image(self, summary, lambda: self.per_image_records(tables, names))


# ---------------------------------------------------------------------------------------------- intervals

def ap_keys(result: Dict[str, Any]) -> Dict[str, float]:
    """The AP keys (percent, :data:`~mmsgg_eval.functional.oi.OI_AP_KEYS`) of a :meth:`OIRelationMetric.scores_of`
    result: the summary's values and each bootstrap replicate's."""
    return {key: 100.0 * result['values'][key] for key in OI_AP_KEYS}


def oi_contributions(metric: Any, tables: Tables) -> Contributions:
    """Every key of :class:`~mmsgg_eval.metrics.oi.OIRelationMetric`, per image: R@K from its declaration
    (:meth:`~OIRelationMetric.row_keys`); the AP keys (:func:`ap_keys`) recomputed on each replicate's rows (an
    image drawn w times weighs its GT relations w times and its entry rows are swept as w distinct copies of the
    image would be: :func:`~mmsgg_eval.functional.oi.copied_rows`). One sweep per replicate serves every AP key and
    the per-predicate tables ``AP_rel`` / ``AP_phr`` (:attr:`Contributions.resampled_tables`, for ``compare``)."""
    from ..functional.oi import tie_groups
    from ..functional.threads import compute_threads
    images, rels = tables['images'], tables['relations']
    c = Contributions(images['sample_idx'])
    row_key_contributions(c, metric.row_keys(), metric.key_columns(tables))
    rel_unit = c.unit_of(rels['sample_idx'])
    rows = metric.sorted_entries(tables['entries'])
    row_unit = c.unit_of(rows['sample_idx'])
    groups = tie_groups(rows)
    cache: Dict[bytes, Dict[str, Any]] = {}  # the AP keys and tables of a replicate (keyed by its counts)

    def values(counts: Tensor) -> Dict[str, Any]:
        counts = counts.double().cpu().contiguous()
        key = counts.numpy().tobytes()
        if key not in cache:
            if len(cache) >= 4096:
                cache.clear()
            with compute_threads():  # many short ops: the thread policy of the metrics' pools
                cache[key] = metric.scores_of(rows, rels, counts.index_select(0, row_unit),
                                              counts.index_select(0, rel_unit), groups)
        return cache[key]
    for key in OI_AP_KEYS:
        c.resampled[key] = lambda counts, key=key: ap_keys(values(counts))[key]
    for name in ('AP_rel', 'AP_phr'):  # the names of the summary's per-predicate table
        c.resampled_tables[name] = lambda counts, name=name: 100.0 * values(counts)[name.lower()]
    c.table_labels = list(metric.predicates)
    return c
