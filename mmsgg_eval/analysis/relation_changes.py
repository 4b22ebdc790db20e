"""Which GT relations run B finds that run A misses, and the reverse: the images behind a change of R@K.

For two runs of one scene-graph metric on the same ground truth (the reduced ``relations`` / ``images`` tables of
their states, :func:`mmsgg_eval.metrics.state.summary_tables`), a GT relation is *found at K* by a run when its
graph-constrained first-hit rank ``rank_gc < K`` (exactly R@K's hits). Per image: ``gained`` lists the relations
found by B and not by A, ``lost`` those found by A and not by B, ``net = len(gained) - len(lost)``. Each changed
relation carries the cause of the miss on the LOSING side (A's cause for a gain, B's for a loss;
:mod:`mmsgg_eval.functional.error_causes`), or None when that run was evaluated without ``error_analysis=True``
(its rows hold no cause). Every image is listed whatever the metric's ``skip_empty_predictions`` (an image not
counted by R@K can still gain or lose relations).

A GT relation is the same in both runs by its index in the image's GT list when the rows carry it (per-image
results, ``per_image_out``), else by its position among the image's rows (the metric writes them in GT order);
the subject / object class and predicate of the two rows must agree, else the pairing is refused.
"""
from typing import Any, Dict, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..functional.limits import NO_HIT
from ..functional.error_causes import CAUSES, outcome_codes
from ..functional.recall import hit_within
from ..functional.triplets import triplet_parts


def _relation_order(rels: Dict[str, Tensor]) -> Tensor:
    """Row order by (sample_idx, GT index): ``gt_index`` when present, else the rows' own order (stable)."""
    second = rels['gt_index'].long() if 'gt_index' in rels else torch.arange(rels['sample_idx'].numel())
    order = torch.argsort(second, stable=True)
    return order[torch.argsort(rels['sample_idx'][order].long(), stable=True)]


def _rank(rank: Tensor, limit: int) -> Optional[int]:
    return int(rank) if int(rank) < min(int(limit), NO_HIT) else None


def _losing_cause(rels: Dict[str, Tensor], images: Dict[str, Tensor], k: int) -> Optional[Tensor]:
    """[G] cause codes at K (0 = hit) of a run's relation rows, or None without a ``cause`` column."""
    if 'cause' not in rels:
        return None
    empty = (images['num_pred'] == 0) | images['missing'].bool()
    without = torch.isin(rels['sample_idx'], images['sample_idx'][empty])
    return outcome_codes(rels['rank_gc'].long(), rels['cause'].long(), k, without)


def relation_changes(tables_a: Dict[str, Dict[str, Tensor]], tables_b: Dict[str, Dict[str, Tensor]], k: int,
                     classes: Sequence[str], predicates: Sequence[str],
                     names: Tuple[str, str] = ('A', 'B'), limit: int = NO_HIT) -> Dict[str, Any]:
    """The images where B gains or loses GT relations at K against A (tables of one metric on the same images),
    sorted by net change from the largest loss to the largest gain (then by sample_idx); JSON-ready:
    ``{'k', 'a', 'b', 'causes_known': {'a': bool, 'b': bool}, 'num_gained', 'num_lost', 'images': [...]}``;
    ranks at or beyond ``limit`` (the metric's rank cap: never found) are None."""
    rel_a, rel_b = tables_a['relations'], tables_b['relations']
    order_a, order_b = _relation_order(rel_a), _relation_order(rel_b)
    sample = rel_a['sample_idx'][order_a].long()
    if not torch.equal(sample, rel_b['sample_idx'][order_b].long()) or \
            not torch.equal(rel_a['triplet'][order_a], rel_b['triplet'][order_b]):
        raise ValueError(f'runs {names[0]} and {names[1]}: their GT relations differ (image, subject / object '
                         f'class or predicate); the relations cannot be paired')
    rank_a, rank_b = rel_a['rank_gc'][order_a].long(), rel_b['rank_gc'][order_b].long()
    found_a, found_b = hit_within(rank_a, k), hit_within(rank_b, k)
    cause_a, cause_b = _losing_cause(rel_a, tables_a['images'], k), _losing_cause(rel_b, tables_b['images'], k)
    cause_a = cause_a[order_a] if cause_a is not None else None
    cause_b = cause_b[order_b] if cause_b is not None else None
    sub, obj, pred = triplet_parts(rel_a['triplet'][order_a], len(classes), len(predicates))
    gt_index = rel_a['gt_index'][order_a].long() if 'gt_index' in rel_a else None
    position = torch.arange(sample.numel()) - torch.searchsorted(sample, sample)  # index among the image's rows
    img_id = {}
    if 'img_id' in tables_a['images']:
        img_id = {int(s): int(i) for s, i in zip(tables_a['images']['sample_idx'].tolist(),
                                                 tables_a['images']['img_id'].tolist()) if int(i) >= 0}
    changed = (found_a != found_b).nonzero().flatten().tolist()
    per_image: Dict[int, Dict[str, Any]] = {}
    for j in changed:
        idx = int(sample[j])
        gained = bool(found_b[j])
        losing = cause_a if gained else cause_b
        entry = {'index': int(gt_index[j] if gt_index is not None else position[j]),
                 'subject_label': classes[int(sub[j])], 'predicate': predicates[int(pred[j])],
                 'object_label': classes[int(obj[j])],
                 'rank_a': _rank(rank_a[j], limit), 'rank_b': _rank(rank_b[j], limit),
                 'cause': None if losing is None else CAUSES[int(losing[j]) - 1]}
        image = per_image.setdefault(idx, {'sample_idx': idx, 'img_id': img_id.get(idx), 'gained': [], 'lost': []})
        image['gained' if gained else 'lost'].append(entry)
    images = list(per_image.values())
    for image in images:
        image['net'] = len(image['gained']) - len(image['lost'])
    images.sort(key=lambda r: (r['net'], r['sample_idx']))
    return {'k': int(k), 'a': names[0], 'b': names[1],
            'causes_known': {'a': cause_a is not None, 'b': cause_b is not None},
            'num_gained': int((found_b & ~found_a).sum()), 'num_lost': int((found_a & ~found_b).sum()),
            'images': images}


def changes_markdown(changes: Sequence[Dict[str, Any]]) -> str:
    """Markdown of :func:`relation_changes` results (each with its ``'metric'`` name); cells escaped with
    :func:`mmsgg_eval.reports.markdown_cell`."""
    from ..reports import markdown_cell as cell
    lines = ['# GT relations gained and lost', '']
    for ch in changes:
        a, b, k = ch['a'], ch['b'], ch['k']
        lines += [f'## {cell(ch["metric"])}: {cell(b)} against {cell(a)} at K = {k}', '',
                  f'{ch["num_gained"]} GT relations found by {cell(b)} and not by {cell(a)} (gained), '
                  f'{ch["num_lost"]} found by {cell(a)} and not by {cell(b)} (lost), on {len(ch["images"])} images; '
                  f'images from the largest net loss to the largest net gain. Cause: why the losing run misses '
                  f'the relation.', '']
        for side, known in ch['causes_known'].items():
            if not known:
                lines += [f'Run {cell(ch[side])} was evaluated without `error_analysis=True`: the causes of its '
                          f'misses are unknown (–).', '']
        if not ch['images']:
            lines += ['No GT relation changes.', '']
            continue
        lines += ['| sample_idx | img_id | net | change | GT index | relation | rank A | rank B | cause |',
                  '|---|---|---|---|---|---|---|---|---|']
        for image in ch['images']:
            for what in ('lost', 'gained'):
                for g in image[what]:
                    relation = f'{g["subject_label"]} {g["predicate"]} {g["object_label"]}'
                    lines.append(f'| {image["sample_idx"]} | {"–" if image["img_id"] is None else image["img_id"]} '
                                 f'| {image["net"]:+d} | {what} | {g["index"]} | {cell(relation)} '
                                 f'| {_cell_rank(g["rank_a"])} | {_cell_rank(g["rank_b"])} '
                                 f'| {cell(g["cause"] or "–")} |')
        lines.append('')
    return '\n'.join(lines)


def _cell_rank(rank: Optional[int]) -> str:
    return '–' if rank is None else str(rank)
