"""The summary half of :class:`~mmsgg_eval.metrics.scene_graph.SceneGraphMetric` (SGRecall / SGMeanRecall): the
reduced row tables become every key (the declared families of :mod:`mmsgg_eval.keys` through
:mod:`~mmsgg_eval.metrics.key_values`, the zero-shot set, the open-vocabulary subsets, the error analysis), the
per-predicate table, the keys without a value and the input warnings, and the logged text report. The rows
themselves (reading, ranking, matching) stay in ``scene_graph.py``."""
from functools import partial
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..functional import error_causes, triplet_keys
from ..functional.diagnostics import (box_frame_warnings, describe_score_columns, label_shift_warnings,
                                      score_column_warnings)
from ..functional.recall import evaluated_image_rows
from ..functional.triplets import triplet_parts
from ..keys import subset_families
from ..reports import format_recall_lost, format_scene_graph_report
from ..user_messages import warn_user
from ..zeroshot import as_zeroshot_triplets, derive_zeroshot, triplet_set_digest
from .accumulator import Tables
from .compute_group import Deferred
from .key_values import ErrorRows, Relations, predicate_table, scene_graph_contributions, summary_keys
from .predicate_groups import resolve_groups


def warn_no_value(metric: Any, no_value: Sequence[Dict[str, Any]]) -> None:
    """One warning naming the keys without a value (``summary['no_value']``) and why."""
    if no_value:
        warn_user(f'{type(metric).__name__} ({metric.prefix}): no value (NaN, shown as –) for '
                  + '; '.join(f'{", ".join(e["keys"])}: {e["why"]}' for e in no_value))


class SceneGraphSummary:
    """Keys, tables and the text report of a scene-graph metric from its reduced rows (a mixin of
    :class:`~mmsgg_eval.metrics.scene_graph.SceneGraphMetric`, which holds the options and the rows)."""

    report_keys: Sequence[str] = ()
    _reports_per_predicate = False
    _warns_no_value = True  # False: the owner (VLMSceneGraphMetric) names the keys without a value itself

    def contributions(self, tables: Tables):
        """Every key per image (the bootstrap intervals and ``compare``): :func:`scene_graph_contributions`."""
        return scene_graph_contributions(self, tables)

    def select_keys(self, summary: Dict[str, Any]) -> Dict[str, float]:
        return {k: v for k, v in summary['metrics'].items() if k.split('@')[0] in self.report_keys}

    def _evaluated_images(self, images: Dict[str, Tensor], quiet: bool = False) -> Tensor:
        """[N] bool: images that count. Images without GT relations never count; with
        ``skip_empty_predictions`` images without predicted pairs are skipped (legacy), except those whose
        prediction is missing (the user did not predict them: they count as recall 0)."""
        evaluated = images['num_gt'] > 0
        if self.skip_empty_predictions:
            evaluated &= (images['num_pred'] > 0) | images['missing']
        if not quiet and not bool(evaluated.any()):
            num = int(images['sample_idx'].numel())
            no_gt = int((images['num_gt'] == 0).sum())
            reason = f'{no_gt} without GT relations'
            if self.skip_empty_predictions:
                reason += (f', {int(((images["num_gt"] > 0) & (images["num_pred"] == 0)).sum())} without any '
                           f'predicted pair (skipped: skip_empty_predictions=True)')
            warn_user(f'{type(self).__name__} ({self.prefix}): no image was evaluated ({num} samples: {reason}); '
                  f'every recall is 0')
        return evaluated

    def summarize_for_keys(self, tables: Tables) -> Dict[str, Any]:
        """:meth:`summarize` with the per-predicate cause table deferred until the summary is read."""
        return self.summarize(tables, defer_tables=True)

    def summarize(self, tables: Tables, defer_tables: bool = False) -> Dict[str, Any]:
        """All keys (percent) and the per-predicate table from de-duplicated row tables: the zero-shot set
        (:meth:`_zeroshot_relations`), the declared keys (:mod:`mmsgg_eval.keys`, :func:`~.key_values.summary_keys`;
        the error analysis' with :meth:`error_rows`), the per-predicate causes (:meth:`_cause_table`) and the
        per-predicate table (:meth:`_per_predicate_table`). ``defer_tables``: the per-predicate cause table as a
        :class:`~.compute_group.Deferred` (the summary :meth:`evaluate` keeps builds it when read)."""
        images, rels = tables['images'], tables['relations']
        evaluated = self._evaluated_images(images)
        image_of, keep, num_images = evaluated_image_rows(images['sample_idx'], evaluated, rels['sample_idx'])
        kept = keep.nonzero().squeeze(1)
        rel = {n: c.index_select(0, kept) for n, c in rels.items()}
        image = {n: c[evaluated] for n, c in images.items()}  # the evaluated images, numbered as ``image_of``
        zs_mask, zs_info = self._zeroshot_relations(rels['triplet'], rel)
        novel = self.novel_indices()
        subsets = self.novel_subsets(rel['triplet'], novel) if novel else {}
        groups = resolve_groups(self.predicates, self.user_groups, self._meta('predicate_counts'))
        counted = self.key_relations(rel, image_of, num_images, image['num_gt'], zs_mask, novel, subsets, groups)
        if self.error_analysis:
            counted.errors = self.error_rows(rel, image, image_of, counted)
        m = summary_keys(self, counted)
        per_pred = predicate_table(self, counted)
        pred = rel['predicate'].long()
        no_value = self.no_value_reasons(m, zs_info, subsets, groups)
        if self._warns_no_value:
            warn_no_value(self, no_value)
        causes = {}
        if self.error_analysis:  # the table deferred: built when the summary or a report is read
            causes = {'per_predicate_causes': Deferred(partial(self._cause_table, counted)) if defer_tables
                      else self._cause_table(counted),
                      'causes': list(counted.errors.causes)}
        return {'metrics': m, 'per_predicate': self._per_predicate_table(per_pred, pred), 'num_images': num_images,
                'no_value': no_value, **causes,
                'num_samples': int(images['sample_idx'].numel()), 'num_gt_relations': int(pred.numel()),
                'num_missing_predictions': int(images['missing'].sum()),
                'zeroshot': zs_info, 'groups': {n: [self.predicates[i] for i in g] for n, g in groups.items()},
                'conventions': self.conventions,
                **self.input_diagnostics(images, m, num_images, torch.bincount(pred, minlength=len(self.predicates))),
                **({'open_vocab': {'source': novel['source'],
                                   'novel_objects': [self.classes[i] for i in novel['objects']],
                                   'novel_predicates': [self.predicates[i] for i in novel['predicates']],
                                   'num_gt_relations': {n: int(mk.sum()) for n, mk in subsets.items()}}}
                   if novel else {})}

    def no_value_reasons(self, m: Dict[str, float], zs_info: Optional[Dict[str, Any]], subsets: Dict[str, Tensor],
                         groups: Dict[str, Sequence[int]]) -> List[Dict[str, Any]]:
        """The keys of ``m`` without a value (NaN: a subset, group or family without any GT relation in the
        evaluated images) and why, ``[{'keys': [...], 'why': text}]`` (``summary['no_value']``)."""
        def nan_keys(predicate) -> List[str]:
            return [k for k, v in m.items() if v != v and predicate(k)]
        out = []
        zero_shot = nan_keys(lambda k: k.split('@')[0] in subset_families('zeroshot'))
        if zero_shot:
            out.append({'keys': zero_shot, 'why': f'no evaluated GT relation is in the zero-shot set '
                                                  f'({zs_info["size"]} triplets, {zs_info["source"]})'})
        for subset in subsets:
            keys = nan_keys(lambda k: k.endswith(f'_{subset}'))
            if keys:
                out.append({'keys': keys, 'why': f'no evaluated GT relation is in the {subset} subset'})
        for name in groups:
            keys = nan_keys(lambda k: k.endswith(f'_{name}'))
            if keys:
                out.append({'keys': keys, 'why': f'no predicate of the {name} group has a GT relation in the '
                                                 f'evaluated images'})
        return out

    def _zeroshot_relations(self, triplets: Tensor, rel: Dict[str, Tensor]
                            ) -> Tuple[Optional[Tensor], Optional[Dict[str, Any]]]:
        """The zero-shot flags of the evaluated GT relations ``rel`` (None: no zero-shot set) and the set's
        description: the given set (``zeroshot_triplets``, else ``dataset_meta['zeroshot_triplets']``: the rows'
        own flags), else the set derived from ``dataset_meta['train_triplets']``: the GT triplets of the split
        (the codes ``triplets`` of every relation row) absent from training."""
        if self.user_zeroshot is not None or self._meta('zeroshot_triplets') is not None:
            z = self.user_zeroshot if self.user_zeroshot is not None else \
                as_zeroshot_triplets(self._meta('zeroshot_triplets'))
            return rel['zeroshot'], {'source': 'given', 'size': int(z.shape[0]), 'sha1': triplet_set_digest(z)}
        if self._meta('train_triplets') is None:
            return None, None
        train = torch.as_tensor(self._meta('train_triplets')).long().reshape(-1, 3)
        c, p = len(self.classes), len(self.predicates)
        derived = derive_zeroshot(torch.stack(triplet_parts(triplets, c, p), 1), train)
        codes = triplet_keys(derived[:, 0], derived[:, 1], derived[:, 2], c, p)
        return torch.isin(rel['triplet'], codes), {
            'source': 'derived (evaluated GT triplets absent from training)', 'size': int(derived.shape[0]),
            'sha1': triplet_set_digest(derived)}

    def relative_ranks(self, rank_gc: Tensor, num_gt: Tensor) -> Tensor:
        """Ranks that count a GT relation at K = 1 exactly when it is hit within the first n graph-constrained
        entries, n = its image's number of GT relations ``num_gt`` [G] (duplicates included): R@rel / mR@rel
        are R@1 / mR@1 of these (stored ranks are capped, so n is too)."""
        return error_causes.as_rank(rank_gc.long() < num_gt.long().clamp(max=self._rank_cap))

    def key_relations(self, rel: Dict[str, Tensor], image_of: Tensor, num_images: int, num_gt: Tensor,
                      zs_mask: Optional[Tensor], novel: Optional[Dict[str, Any]], subsets: Dict[str, Tensor],
                      groups: Dict[str, Sequence[int]]) -> Relations:
        """The evaluated relations ``rel`` as the key declarations read them (:mod:`~.key_values`):
        ``image_of`` numbers their image (or resampling unit) among ``num_images``, ``num_gt`` [num_images] the GT
        relations of each (for R@rel), ``zs_mask`` the zero-shot flags (None: no zero-shot set)."""
        rank_gc = rel['rank_gc'].long()
        ranks = {'rank_gc': rank_gc, 'rank_ngc': rel['rank_ngc'].long(), 'rank_pair': rel['rank_pair'].long(),
                 'rank_rel': self.relative_ranks(rank_gc, num_gt.index_select(0, image_of))}
        masks = dict(subsets)
        if zs_mask is not None:
            masks['zeroshot'] = zs_mask
        return Relations(ranks, rel['predicate'].long(), image_of, num_images, masks, novel, groups, tuple(subsets))

    def reported_causes(self, images: Dict[str, Tensor]) -> Tuple[str, ...]:
        """The causes with a ``miss@K_{cause}`` key: all, ``no_prediction`` only where it can occur (images
        without predicted pairs counted: ``skip_empty_predictions=False``, or predictions missing)."""
        can = not self.skip_empty_predictions or bool(images['missing'].any())
        return tuple(c for c in error_causes.CAUSES if c != 'no_prediction' or can)

    def no_prediction_rows(self, image: Dict[str, Tensor], image_of: Tensor) -> Tensor:
        """[G] bool: GT relations of counted images without any predicted pair (or with a missing prediction),
        whose misses are ``no_prediction`` (``image``: columns of the evaluated images, numbered by ``image_of``)."""
        return ((image['num_pred'] == 0) | image['missing']).index_select(0, image_of)

    def error_rows(self, rel: Dict[str, Tensor], image: Dict[str, Tensor], image_of: Tensor,
                   counted: Relations) -> ErrorRows:
        """The error analysis' rows (:class:`~.key_values.ErrorRows`) of the evaluated relations ``rel`` and images
        ``image`` (numbered by ``image_of``); adds the stage-wise rank columns to ``counted.ranks``."""
        counted.ranks.update({column: rel[column].long() for _, column in error_causes.STAGE_RANKS})
        return ErrorRows(rel['cause'].long(), self.no_prediction_rows(image, image_of), image['num_gt'],
                         torch.ones(int(image['num_gt'].numel()), dtype=torch.bool), ~image['missing'],
                         {name: image[name] for name in ('inst_loc', 'inst_det')}, image['num_gt_objects'],
                         self.reported_causes(image), self.ng_topk)

    def _cause_table(self, counted: Relations) -> Dict[str, Dict[str, float]]:
        """The summary's ``per_predicate_causes`` (:class:`~.compute_group.Deferred`): per predicate, the share of its
        GT relations lost to each reported cause (:func:`~..functional.error_causes.per_predicate_cause_shares`;
        the ``miss@K_{cause}`` keys themselves are declared: :data:`mmsgg_eval.keys.ERROR_FAMILIES`), read from the
        evaluated relations ``counted`` (their ranks, predicates and error rows)."""
        ks, avg, e = self.topk, self.recall_average, counted.errors
        reported = e.causes
        table = error_causes.per_predicate_cause_shares(counted.ranks['rank_gc'], e.cause, counted.predicate,
                                                        counted.image_of, counted.num_images, len(self.predicates),
                                                        ks, avg, e.no_prediction)
        num_gt = torch.bincount(counted.predicate, minlength=len(self.predicates)).tolist()
        rows = {name: values.tolist() for name, values in table.items()}
        # (key, outcome, K index) of each column, in the row's order: R@K, then the causes at K, for each K
        columns = [c for j, k in enumerate(ks) for c in [(f'R@{k}', 'hit', j)] + [(f'miss@{k}_{c}', c, j)
                                                                                     for c in reported]]
        names = self.predicates
        return {names[i]: {'num_gt': num_gt[i], **{key: 100.0 * rows[outcome][j][i] for key, outcome, j in columns}}
                for i in self._predicate_order() if num_gt[i]}

    def _predicate_order(self) -> List[int]:
        """Predicate indices by descending training frequency when ``predicate_counts`` is known, else in order."""
        counts = self._meta('predicate_counts')
        order = list(range(len(self.predicates)))
        if counts is not None and len(counts) == len(order):
            order.sort(key=lambda i: (-float(counts[i]), i))
        return order

    def _per_predicate_table(self, per_pred: Tensor, pred: Tensor) -> Dict[str, Dict[str, Any]]:
        """``{predicate: {'R@K': percent, ..., 'num_gt': GT relations}}`` from the per-predicate recalls [K, P] and
        the evaluated relations' predicates, by descending training frequency when ``predicate_counts`` is known
        (else in predicate order)."""
        ks, names = self.topk, self.predicates
        order = self._predicate_order()
        per_pred_rows = per_pred.tolist()  # [K][P] floats (element-wise tensor reads are slow)
        num_gt = torch.bincount(pred, minlength=len(names)).tolist()
        return {names[i]: {**{f'R@{k}': 100.0 * per_pred_rows[j][i] for j, k in enumerate(ks)}, 'num_gt': num_gt[i]}
                for i in order}

    def novel_subsets(self, triplets: Tensor, novel: Dict[str, Any]) -> Dict[str, Tensor]:
        """[G] bool masks of the open-vocabulary subsets of GT relations (their triplet codes): 'novel_obj'
        (subject and object novel; when novel classes are set), 'novel_pred' (novel predicate; when set) and
        'base' (no novel subject, object or predicate)."""
        c, p = len(self.classes), len(self.predicates)
        subject, obj, predicate = triplet_parts(triplets, c, p)
        novel_obj = torch.zeros(c, dtype=torch.bool)
        novel_obj[novel['objects']] = True
        novel_pred = torch.zeros(p, dtype=torch.bool)
        novel_pred[novel['predicates']] = True
        out = {}
        if novel['objects']:
            out['novel_obj'] = novel_obj[subject] & novel_obj[obj]
        if novel['predicates']:
            out['novel_pred'] = novel_pred[predicate]
        out['base'] = ~(novel_obj[subject] | novel_obj[obj] | novel_pred[predicate])
        return out

    def input_diagnostics(self, images: Dict[str, Tensor], metrics: Dict[str, float],
                          num_evaluated: int, gt_counts: Optional[Tensor] = None) -> Dict[str, Any]:
        """``score_columns`` (how the predicate scores were read) and ``input_warnings`` of the reduced image
        rows; each warning is issued once here (summaries are computed once per group of metrics)."""
        if 'score_width' not in images:
            return {}
        k = max(self.topk)
        warnings_ = box_frame_warnings(images['box_flags'])
        if 'label_offsets' in images:
            warnings_ += label_shift_warnings(images['label_offsets'], len(self.classes))
        warnings_ += score_column_warnings(metrics.get(f'R@{k}'), metrics.get(f'ngR@{k}'), k, num_evaluated,
                                           images['top_predicate'], images['score_width'], self.predicates,
                                           self.score_layout, images.get('head_predicates'), gt_counts)
        for text in warnings_:
            warn_user(f'{type(self).__name__} ({self.prefix}): {text}')
        return {'score_columns': describe_score_columns(images['score_width'], len(self.predicates),
                                                        self.score_layout),
                'input_warnings': warnings_}

    def format_report(self, summary: Dict[str, Any], keys: Dict[str, float]) -> str:
        text = format_scene_graph_report(summary, keys, mode=self.mode,
                                         dataset=self._meta('dataset_name', 'unknown dataset'),
                                         metric_name=f'{type(self).__name__} | protocol={self.protocol.name}',
                                         ks=self.topk,
                                         with_per_predicate=self._reports_per_predicate)
        lines = [text]
        info = summary.get('open_vocab')
        if info:
            lines.append(f'open-vocabulary subsets ({info["source"]}; GT relations: '
                         + ', '.join(f'{n} {c}' for n, c in info['num_gt_relations'].items()) + ')')
            for subset in info['num_gt_relations']:
                shown = [f'{k}: {"–" if v != v else format(v, ".2f")}' for k, v in keys.items()
                         if k.endswith(f'_{subset}')]
                if shown:
                    lines.append(f'  {subset}: ' + '  '.join(shown))
        lines += [f'no value (–) for {", ".join(e["keys"])}: {e["why"]}' for e in summary.get('no_value', ())
                  if any(k in keys for k in e['keys'])]
        if summary.get('causes') and any(k.startswith('miss@') for k in keys):
            lines += format_recall_lost(summary['metrics'], self.topk, summary['causes'])
        if summary.get('score_columns'):
            lines.append(f'predicate scores read as {summary["score_columns"]}')
        lines += [f'WARNING: {w}' for w in summary.get('input_warnings', ())]
        return '\n'.join(lines)
