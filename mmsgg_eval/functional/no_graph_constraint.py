"""The no-graph-constraint ranked list: every image's exact stable top-``ng_topk`` of all its (pair, predicate)
entries, found without sorting the whole score matrix. A lower bound of the ``ng_topk``-th best entry (from the
best entries of top-ranked pairs, and for images with few pairs from the rows of their first pairs) leaves only
the entries that reach it; they are ranked by unique keys (score bits, then earlier entries first), which is
exactly the order of a stable sort of the full matrix (the compiled kernels do the same in place).
"""
from typing import Optional

import torch
from torch import Tensor

from . import compiled
from .ranking import positions_in_groups, sortable_key, stable_topk, valid_counts
from .transfer import sync_free

# the stacked layout ranks all entries of an image at once up to this many (pair, predicate) entries
DENSE_NGC_ENTRIES = 8192
# the second (probe) bound of the no-graph-constraint threshold is computed for the images with fewer pairs than
# this many times ``ng_topk``: there most of an image's pairs are among its top pairs and only the probe bound is
# tight; with more pairs (e.g. 300-1,000 candidates, SGDet with all pairs) the top pairs' own bound lets about as
# few rows through and the probe costs more than it saves
NGC_PROBE_PAIRS_PER_ENTRY = 2


def _entry_threshold(scores, pair_score: Tensor, best: Tensor, rel_count: Tensor, top_pairs: Tensor,
                     top_valid: Tensor, ng_topk: int) -> Tensor:
    """[B] lower bound of each image's ``ng_topk``-th best entry from some of its pairs ``top_pairs`` [B, L]
    (any distinct pairs give a bound; high-ranked ones a tight one), the larger of:

    * the smallest best entry ``best`` of the first ``ng_topk`` valid pairs (each has an entry that large);
    * the ``ng_topk``-th best entry among all entries of the first m = ceil(10 * ``ng_topk`` / P) pairs
      (only for the images with fewer than ``NGC_PROBE_PAIRS_PER_ENTRY * ng_topk`` pairs, ``rel_count``).

    -inf where the pairs given are too few for both.
    """
    batch, width = best.shape
    num_pred = scores.num_predicates
    minus_inf = best.new_full((batch,), float('-inf'))
    head, head_valid = top_pairs[:, :ng_topk], top_valid[:, :ng_topk]
    pair_bound = torch.where(head_valid, best.gather(1, head), best.new_full((), float('inf'))).amin(dim=1) \
        if head.shape[1] else minus_inf
    threshold = torch.where(head_valid.sum(1) >= ng_topk, pair_bound, minus_inf)
    m = min(-(-10 * ng_topk // num_pred), top_pairs.shape[1])
    if m * num_pred < ng_topk:
        return threshold
    probed = (rel_count < NGC_PROBE_PAIRS_PER_ENTRY * ng_topk).nonzero().squeeze(1)  # ascending
    if not probed.numel():
        return threshold
    slot = top_valid[:, :m].index_select(0, probed).reshape(-1).nonzero().squeeze(1)  # i * m + j: probed image i
    image = probed.index_select(0, slot // m)
    probe = top_pairs[:, :m].index_select(0, probed).reshape(-1).index_select(0, slot)
    rows = scores.rows(image, probe)
    entries = rows * pair_score.reshape(-1).index_select(0, image * width + probe)[:, None]
    if scores.has_single_label:  # -inf marks a non-candidate (and -inf * 0 is NaN)
        entries = torch.where(rows == float('-inf'), rows, entries)
    table = entries.new_full((probed.numel() * m, num_pred), float('-inf')).index_copy_(0, slot, entries)
    bound = table.view(probed.numel(), -1).topk(ng_topk, dim=1, sorted=False).values.amin(dim=1)
    return threshold.index_copy(0, probed, torch.maximum(threshold.index_select(0, probed), bound))


def no_graph_constraint_list(scores, rel_valid: Tensor, ng_topk: int, pair_score: Tensor,
                             top_pairs: Optional[Tensor] = None, top_valid: Optional[Tensor] = None,
                             rel_count: Optional[Tensor] = None):
    """Exact stable top-``ng_topk`` of all (pair, predicate) scores ``pair_score * prob`` of every image.

    ``scores``: the batch's :class:`~mmsgg_eval.functional.scores.RelationScores`; ``rel_valid`` [B, R] the
    real pairs; ``pair_score`` [B, R] subject score x object score (non-negative). ``top_pairs`` [B, L] (with
    ``top_valid``): distinct pairs the caller ranked high (e.g. the graph-constrained list), which bound the
    ``ng_topk``-th best entry of each image from below; by default the ``ng_topk`` pairs of highest best entry.
    ``rel_count`` [B]: the number of real pairs of each image, when the caller has it.

    Only entries reaching that bound can be in the list: they are picked from the rows of the pairs whose best
    entry reaches it and ranked alone. Ties at the bound are all kept and entries keep their row-major
    (pair, predicate) order, so the result equals a stable sort of the full matrix. In the ``compiled`` layout
    the kernel bounds each image's list from ``top_pairs`` too (or from its rows' best entries), and an image's
    real pairs are the rows of its matrix (``rel_valid`` must mark them, as the reader's batches do).
    Returns ``(pair index [B, L], predicate [B, L], valid [B, L])``, L <= ``ng_topk``.
    """
    num_pred = scores.num_predicates
    batch, num_rel = rel_valid.shape
    device = rel_valid.device
    if scores.dense is not None and num_rel * num_pred <= DENSE_NGC_ENTRIES:
        # fixed-size outputs with few entries per image: rank the whole [B, R * P] matrix at once
        ranked = scores.dense * pair_score[..., None]
        valid = (scores.dense != float('-inf')).flatten(1) if scores.has_single_label else None
        flat_order, flat_valid = stable_topk(ranked.flatten(1), valid, ng_topk)
        return flat_order // max(num_pred, 1), flat_order % max(num_pred, 1), flat_valid
    empty = torch.zeros((batch, 0), dtype=torch.long, device=device)
    if batch == 0 or num_rel == 0 or num_pred == 0 or ng_topk <= 0:
        return empty, empty, empty.bool()
    if scores.layout == 'compiled':  # every image's entries ranked in place (its real pairs: its matrix's rows)
        top = None if top_pairs is None else torch.where(top_valid, top_pairs, -1)  # distinct pairs, -1: none
        return compiled.kernels().no_graph_constraint_list(scores.sources, scores.column, num_pred, scores.best,
                                                           pair_score.float(), ng_topk, top)
    best = pair_score * scores.best  # == max over p of pair_score * prob_p (rounding is monotone)
    if scores.flat is not None and sync_free(device):
        return _list_from_top_rows(scores, rel_valid, ng_topk, pair_score, best)
    if rel_count is None:
        rel_count = valid_counts(rel_valid)
    if top_pairs is None:
        top_pairs, top_valid = stable_topk(best, rel_valid, ng_topk, rel_count)
    threshold = _entry_threshold(scores, pair_score, best, rel_count, top_pairs, top_valid, ng_topk)  # [B]
    pair_flat = (rel_valid & (best >= threshold[:, None])).view(-1).nonzero().squeeze(1)  # row-major
    image, pos = pair_flat // num_rel, pair_flat % num_rel
    rows = scores.rows(image, pos)  # [n, P]
    entries = rows * pair_score.reshape(-1).index_select(0, pair_flat)[:, None]
    keep = entries >= threshold.index_select(0, image)[:, None]
    if scores.has_single_label:
        keep &= rows != float('-inf')  # not a candidate of a single-label row
    entry_flat = keep.view(-1).nonzero().squeeze(1)  # row-major: image, pair order, predicate
    if entry_flat.numel() == 0:
        return empty, empty, empty.bool()
    entry_image = image.index_select(0, entry_flat // num_pred)  # non-decreasing
    values = entries.view(-1).index_select(0, entry_flat)
    which, valid = _ranked_entries(entry_image, entry_flat, values, batch, ng_topk)  # row * P + predicate
    return pos.index_select(0, (which // num_pred).view(-1)).view_as(which), which % num_pred, valid


def _list_from_top_rows(scores, rel_valid: Tensor, ng_topk: int, pair_score: Tensor, best: Tensor):
    """:func:`no_graph_constraint_list` in fixed sizes, with no host synchronisation (accelerators; ``scores`` in
    one copy, ``flat``): the entries of each image's k = ``ng_topk`` pairs of largest best entry ``best`` [B, R]
    (ties: earlier pairs first) are ranked by unique keys (score bits, then earlier (pair, predicate) entries
    first).

    Every listed entry lies in those rows: each of the k rows has a best entry at least as large as any entry of a
    row outside them, and earlier than it where the two are equal, so an entry outside them has k entries ranked
    before it. Returns ``(pair index [B, L], predicate [B, L], valid [B, L])``, L = min(``ng_topk``, R * P).
    """
    num_pred = scores.num_predicates
    batch, num_rel = rel_valid.shape
    device = rel_valid.device
    row_k = min(ng_topk, num_rel)
    top, top_valid = stable_topk(best, rel_valid, row_k)  # [B, row_k]
    pos = torch.where(top_valid, top, 0)
    row = (scores.start[:, None] + pos).clamp(max=max(scores.flat.shape[0] - 1, 0)).view(-1)
    rows = scores.flat.index_select(0, row).view(batch, row_k, num_pred)
    entries = rows * pair_score.gather(1, pos)[..., None]
    valid = top_valid[..., None].expand(batch, row_k, num_pred)
    if scores.has_single_label:  # -inf marks a non-candidate (and -inf * 0 is NaN)
        valid = valid & (rows != float('-inf'))
    entry = pos[..., None] * num_pred + torch.arange(num_pred, device=device)  # row-major index in the image
    key = torch.where(valid, (sortable_key(entries) << 32) + (num_rel * num_pred - 1 - entry),
                      torch.iinfo(torch.long).min)
    width = min(ng_topk, row_k * num_pred)
    top_key, at = key.view(batch, -1).topk(width, dim=1, sorted=True)
    which = entry.view(batch, -1).gather(1, at)
    listed = top_key != torch.iinfo(torch.long).min
    return torch.where(listed, which // num_pred, 0), torch.where(listed, which % num_pred, 0), listed


# the kept entries of a batch are ranked in a [B, most kept by an image] table up to this many times their
# number (else, for very uneven images, by one sort of them all)
RANK_TABLE_SLACK = 4


def _ranked_entries(entry_image: Tensor, entry: Tensor, values: Tensor, batch: int, ng_topk: int):
    """The first ``ng_topk`` of each image's kept entries by descending value, ties in their given order:
    ``(entry [B, L], valid [B, L])``, L = min(``ng_topk``, most entries of an image). ``entry_image`` [n]
    non-decreasing, ``entry`` [n] what to return for each, ``values`` [n] finite and >= 0 (so that their keys
    fit 31 bits)."""
    device = entry.device
    # (bincount would read the largest image index on the host first: the counts are added instead)
    counts = torch.zeros(batch, dtype=torch.long, device=device).index_add_(0, entry_image, torch.ones_like(entry_image))
    most = int(counts.max())
    width = min(most, ng_topk)
    first, slot = positions_in_groups(entry_image, counts)  # slot: the entry's place among its image's entries
    score_key = sortable_key(values)
    if batch * most <= RANK_TABLE_SLACK * entry.numel():
        # unique keys (value bits, then earlier first): one top-k per image row of a table, -1 below every key
        table = torch.full((batch * most,), -1, dtype=torch.long, device=device)
        table.index_copy_(0, entry_image * most + slot, (score_key << 32) + (most - 1 - slot))
        top, at = table.view(batch, most).topk(width, dim=1, sorted=True)
        valid = top >= 0
        picked = (first[:, None] + at).clamp(max=entry.numel() - 1)
        return torch.where(valid, entry.index_select(0, picked.view(-1)).view(batch, width), 0), valid
    # one stable sort of all entries by (image, descending value): ties keep the given order; the images stay
    # in their order, so the sorted entry at ``slot`` is the slot-th of its image
    order = torch.sort((entry_image << 32) + ((2 ** 31 - 1) - score_key), stable=True).indices
    listed = (slot < width).nonzero().squeeze(1)
    table_slot = entry_image.index_select(0, listed) * width + slot.index_select(0, listed)
    which = torch.zeros(batch * width, dtype=torch.long, device=device)
    which.index_copy_(0, table_slot, entry.index_select(0, order.index_select(0, listed)))
    valid = torch.zeros(batch * width, dtype=torch.bool, device=device).index_fill_(0, table_slot, True)
    return which.view(batch, width), valid.view(batch, width)

