"""``SGBenchMetric``: the sgbench protocol (instance matching) and the metrics it adds.

Protocol (``protocol='sgbench'``, see ``docs/protocols.md``): every detection is assigned to the GT object of
highest IoU (plain IoU, ``>= 0.5``) among those with its label, predicted triplets are remapped through that
assignment and must equal a GT triplet's (subject GT, object GT, predicate); GT triplets are de-duplicated,
predicted triplets repeating an earlier (subject, object, predicate) index triplet are dropped before the
first K are taken (:mod:`mmsgg_eval.functional.instance_matching`). Images without GT relations are
skipped; images without predictions count 0 (an image marked ``prediction_missing`` has no detection either:
its InstR is 0).

Keys (percent, except PRank):

* ``R@K``: mean over images of (distinct GT triplets hit by the first K) / (distinct GT triplets);
* ``mR@K``: for each predicate, the mean of the per-image recalls over the images containing it; then the
  mean over the predicates present (``mr_average='present'``; 'all' divides by every predicate);
* ``PairR@K``: as ``R@K`` on distinct GT (subject, object) pairs, the predicate ignored: a pair is hit when the
  remapped pair of one of the first K predicted triplets equals it (the whole GT counts, not its first K);
* ``R@inf`` / ``mR@inf`` / ``PairR@inf``: the same over every predicted triplet;
* ``InstR``: mean over images of (GT objects with a detection assigned) / (GT objects);
* ``PRank``: in the no-graph-constraint list, the 0-based rank of the GT predicate among the distinct
  predicates listed for the matched GT pair; averaged per (image, predicate) over the GT triplets found, then
  over all (image, predicate) cells with a value (a raw rank, not a percentage).

The state is a few integers per distinct GT relation and per image, reduced across ranks like
:class:`~mmsgg_eval.metrics.SGRecall` (de-duplicated by ``sample_idx``); the life cycle (pooling, one reduce,
report, files) is :class:`~mmsgg_eval.metrics.base.RowMetric`'s.
"""
from typing import Any, Dict, List, Sequence, Tuple

import torch
from torch import Tensor

from ..functional.overlap import Staged
from ..functional.instance_matching import (assign_detections, deduplicate_gt_triplets, first_occurrence,
                                            matched_instances, predicate_ranks, remapped_first_hits)
from ..functional.diagnostics import HEAD_ENTRIES
from ..functional.limits import K_ALL, NO_HIT
from ..functional.ranking import graph_constrained_list, pair_end_scores
from ..functional.matching import object_iou_matrix
from ..functional.no_graph_constraint import no_graph_constraint_list
from ..functional.recall import evaluated_image_rows
from ..registry import METRICS
from ..reports import write_scene_graph_reports
from .base import Schema, Tables
from .scene_graph import SceneGraphMetric
from ..keys import SGBENCH_FAMILIES, RowKey
from .bootstrap import Contributions
from .key_values import Relations, key_contributions, predicate_table, relation_units, summary_keys
from .row_keys import Columns, row_key_contributions, row_key_values


@METRICS.register_module()
class SGBenchMetric(SceneGraphMetric):
    """R@K, mR@K, PairR@K (K and inf), InstR and PRank under the sgbench protocol. Arguments as
    :class:`~mmsgg_eval.metrics.SGRecall` (``protocol`` defaults to 'sgbench'; ``zeroshot_triplets`` and
    ``predicate_groups`` are not used)."""

    report_keys = ('R', 'mR', 'PairR', 'InstR', 'PRank')
    _reports_per_predicate = True
    protocol_target = 'sgbench'

    def __init__(self, mode: str = 'sgdet', topk: Sequence[int] = (20, 50, 100), protocol: str = 'sgbench',
                 **kwargs: Any) -> None:
        for name in ('zeroshot_triplets', 'predicate_groups', 'novel_objects', 'novel_predicates', 'novel_split'):
            if kwargs.get(name) is not None:
                raise ValueError(f'SGBenchMetric does not use {name}')
        if mode == 'phrdet':
            raise ValueError('SGBenchMetric: instance matching is not defined for phrdet (union boxes)')
        if kwargs.get('per_image_out') is not None:
            raise ValueError('SGBenchMetric: per_image_out is not supported (its rows are per distinct GT triplet); '
                             'set it on SGRecall / SGMeanRecall')
        super().__init__(mode=mode, topk=topk, protocol=protocol, **kwargs)
        self._rank_cap = NO_HIT

    def row_schema(self) -> Schema:
        return {
            'images': {'num_gt': (torch.int32, ()), 'num_pred': (torch.int32, ()), 'missing': (torch.bool, ()),
                       'num_gt_objects': (torch.int32, ()), 'num_matched_objects': (torch.int32, ()),
                       **self.diagnostic_columns()},
            'relations': {'predicate': (torch.int32, ()), 'first_pair': (torch.bool, ()),
                          'rank_gc': (torch.int32, ()), 'rank_pair': (torch.int32, ()), 'prank': (torch.int32, ())},
        }

    # compute_key() / summary_key() are derived (RowMetric.compute_key): they name the class that computes the
    # rows (this one), so an SGBenchMetric never shares rows or summaries with SGRecall / SGMeanRecall.

    overlaps_pools = False  # its rows are computed in one stage (compute_rows)

    def compute_rows(self, samples: List[Any]) -> Dict[str, Dict[str, Tensor]]:
        """Instance-match a pool: per image its distinct GT triplets, predicted pairs, GT objects and matched GT
        objects; per distinct GT relation its first-hit ranks and predicate rank. A ``sample_idx`` repeated
        within the pool counts once; an image marked ``prediction_missing`` predicts nothing."""
        predicates = self.predicates
        use_masks = self.match == 'mask'
        batch, missing, samples = Staged(self._read_pool(samples)).result()
        pred_valid, gt_obj_valid = batch.pred_labels >= 0, batch.gt_labels >= 0
        iou = object_iou_matrix(batch, self.plus_one, use_masks)
        assigned = assign_detections(iou, batch.pred_labels, pred_valid, batch.gt_labels, gt_obj_valid, self.iou_thr)
        base = max(batch.pred_boxes.shape[1], batch.gt_boxes.shape[1], len(predicates), 1) + 1
        gt_sub, gt_obj = batch.gt_pairs[..., 0], batch.gt_pairs[..., 1]
        gt_valid = deduplicate_gt_triplets(gt_sub, gt_obj, batch.gt_predicates, batch.gt_valid, base)

        subject_score, object_score = pair_end_scores(batch)
        length = batch.rel_valid.shape[1]  # the whole list: R@inf, and de-duplication never shortens the top K
        gc_order, gc_valid, _ = graph_constrained_list(batch, length, self.rank,
                                                       end_scores=(subject_score, object_score))
        gc_pred = batch.gc_predicate_at(gc_order, gc_valid)
        head = min(length, HEAD_ENTRIES)  # the diagnostics' look at the head of the list
        head_predicate = torch.where(gc_valid[:, :head], gc_pred[:, :head], -1)
        top_predicate = head_predicate[:, 0] if length else \
            torch.full((gc_valid.shape[0],), -1, dtype=torch.long, device=batch.device)
        rank_gc, rank_pair, _ = remapped_first_hits(
            assigned, batch.rel_pairs[..., 0].gather(1, gc_order), batch.rel_pairs[..., 1].gather(1, gc_order),
            gc_pred, gc_valid, gt_sub, gt_obj, batch.gt_predicates, gt_valid, base)

        ng_pair, ng_pred, ng_valid = no_graph_constraint_list(batch.scores, batch.rel_valid, self.ng_topk,
                                                              subject_score.float() * object_score.float())
        prank = predicate_ranks(assigned, batch.rel_pairs[..., 0].gather(1, ng_pair),
                                batch.rel_pairs[..., 1].gather(1, ng_pair), ng_pred, ng_valid, gt_sub, gt_obj,
                                batch.gt_predicates, gt_valid, base)
        first_pair = first_occurrence(gt_sub.long() * base + gt_obj.long(), gt_valid)
        # a missing prediction stands on the GT objects only so that every mode reads it: no detection counts
        inst = matched_instances(assigned, batch.gt_boxes.shape[1]) & gt_obj_valid & ~missing[:, None]

        image_of = torch.arange(gt_valid.shape[0], device=batch.device)[:, None].expand_as(gt_valid)[gt_valid]
        return {
            'images': {'sample_idx': batch.sample_idx, 'num_gt': gt_valid.sum(1), 'num_pred': batch.num_rel_preds,
                       'missing': missing, 'num_gt_objects': gt_obj_valid.sum(1), 'num_matched_objects': inst.sum(1),
                       **self.diagnostic_rows(samples, batch, {'top_predicate': top_predicate,
                                                                'head_predicate': head_predicate,
                                                                'head_valid': gc_valid[:, :head]})},
            'relations': {'sample_idx': batch.sample_idx[image_of], 'predicate': batch.gt_predicates[gt_valid],
                          'first_pair': first_pair[gt_valid], 'rank_gc': rank_gc[gt_valid],
                          'rank_pair': rank_pair[gt_valid], 'prank': prank[gt_valid]},
        }

    # ------------------------------------------------------------------ declared keys
    def bench_relations(self, rel: Dict[str, Tensor], image_of: Tensor, num_images: int) -> Relations:
        """The evaluated relation rows ``rel`` as :data:`~mmsgg_eval.keys.SGBENCH_FAMILIES` read them (``image_of``:
        their image, or resampling unit, among ``num_images``; the subset ``first_pair``: each GT pair once)."""
        return Relations({'rank_gc': rel['rank_gc'].long(), 'rank_pair': rel['rank_pair'].long()},
                         rel['predicate'].long(), image_of, num_images, {'first_pair': rel['first_pair'].bool()},
                         None, {})

    def row_keys(self) -> Tuple[RowKey, ...]:
        """``InstR`` and ``PRank``, declared once (:class:`~mmsgg_eval.keys.RowKey`; R, mR and PairR are the
        families :data:`~mmsgg_eval.keys.SGBENCH_FAMILIES`): InstR the mean over the evaluated images of their
        share of GT objects with a detection assigned (0 without images); PRank the mean over the (image,
        predicate) cells with a found GT triplet of the cell's mean predicate rank (NaN without cells)."""
        return (RowKey('InstR', 'images', 'inst', where='evaluated', empty=0.0, summation='mean'),
                RowKey('PRank', 'cells', 'prank', scale=1.0, summation='mean'))

    def key_columns(self, tables: Tables, evaluated: Tensor) -> Columns:
        """The columns :meth:`row_keys` read, of the ``evaluated`` images: per image ``inst`` (matched GT objects /
        GT objects); per (image, predicate) cell holding a found GT triplet (image-major) its mean ``prank``."""
        images, rels = tables['images'], tables['relations']
        image_of, keep, num_images = evaluated_image_rows(images['sample_idx'], evaluated, rels['sample_idx'])
        num_predicates = len(self.predicates)
        prank, pred = rels['prank'][keep], rels['predicate'][keep].long()
        found = prank >= 0
        cell = image_of[found] * num_predicates + pred[found]
        size = max(num_images * num_predicates, 1)
        sums = torch.bincount(cell, weights=prank[found].double(), minlength=size)
        counts = torch.bincount(cell, minlength=size).double()
        has = counts > 0
        cell_image = has.nonzero().squeeze(1) // num_predicates
        inst = images['num_matched_objects'].double() / images['num_gt_objects'].double().clamp(min=1)
        return {'images': {'sample_idx': images['sample_idx'], 'evaluated': evaluated, 'inst': inst},
                'cells': {'sample_idx': images['sample_idx'][evaluated][cell_image], 'prank': sums[has] / counts[has]}}

    def contributions(self, tables: Tables) -> Contributions:
        """Every key per image (the bootstrap intervals and ``compare``): the families and :meth:`row_keys`, and
        the per-predicate tables ``R@K``."""
        images, rels = tables['images'], tables['relations']
        c = Contributions(images['sample_idx'])
        rel, unit = relation_units(c, self, images, rels)
        blocks = key_contributions(c, self, self.bench_relations(rel, unit, c.num_units), SGBENCH_FAMILIES)
        row_key_contributions(c, self.row_keys(), self.key_columns(tables, self._evaluated_images(images, quiet=True)))
        per_pred = blocks[('rank_gc', None, tuple(self.topk) + (K_ALL,))]
        for j, name in enumerate([str(k) for k in self.topk] + ['inf']):
            c.tables[f'R@{name}'] = lambda t, j=j: 100.0 * per_pred(t)[:, j]
        c.table_labels = list(self.predicates)
        return c

    def summarize(self, tables: Tables, defer_tables: bool = False) -> Dict[str, Any]:
        """Every key (:data:`~mmsgg_eval.keys.SGBENCH_FAMILIES` and :meth:`row_keys`) and the per-predicate
        table from the reduced rows (no table to defer: ``defer_tables`` changes nothing)."""
        images, rels = tables['images'], tables['relations']
        num_predicates = len(self.predicates)
        evaluated = self._evaluated_images(images)
        image_of, keep, num_images = evaluated_image_rows(images['sample_idx'], evaluated, rels['sample_idx'])
        counted = self.bench_relations({n: c[keep] for n, c in rels.items()}, image_of, num_images)
        m = summary_keys(self, counted, SGBENCH_FAMILIES)
        m.update(row_key_values(self.row_keys(), self.key_columns(tables, evaluated)))
        per_pred, pred = predicate_table(self, counted, SGBENCH_FAMILIES), counted.predicate
        names = [str(k) for k in self.topk] + ['inf']
        per_predicate = {
            self.predicates[i]: {f'R@{n}': 100.0 * float(per_pred[j, i]) for j, n in enumerate(names)}
            for i in range(num_predicates)}
        num_gt = torch.bincount(pred, minlength=num_predicates).tolist()
        for i in range(num_predicates):
            per_predicate[self.predicates[i]]['num_gt'] = num_gt[i]
        return {'metrics': m, 'per_predicate': per_predicate, 'num_images': num_images,
                'num_samples': int(images['sample_idx'].numel()), 'num_gt_relations': int(pred.numel()),
                'num_missing_predictions': int(images['missing'].sum()),
                'zeroshot': None, 'groups': {}, 'conventions': self.conventions,
                **self.input_diagnostics(images, m, num_images, torch.bincount(pred, minlength=num_predicates))}

    def write_reports(self, summary: Dict[str, Any], keys: Dict[str, float], stem: str) -> Dict[str, str]:
        """The scene-graph report files (metrics.json, chart, tables) with K = ``topk`` and ``inf``: the tables
        hold R, mR and PairR at every K, InstR and PRank."""
        return write_scene_graph_reports(summary, self.report_dir, stem, list(self.topk) + ['inf'],
                                         self._meta('dataset_name', 'unknown dataset'), self.mode)

    def format_report(self, summary: Dict[str, Any], keys: Dict[str, float]) -> str:
        table = super().format_report(summary, {k: v for k, v in keys.items()
                                                if '@' in k and not k.endswith('@inf')})
        return table + '\nSGBench: ' + '  '.join(f'{k}: {v:.4f}' for k, v in keys.items()
                                                if '@' not in k or k.endswith('@inf'))
