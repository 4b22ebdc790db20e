"""Ranked relation lists (SPEC 2.1) on padded batches.

All functions take a batch of B images padded to a common length; ``valid`` masks mark real entries.
Scores are float32; ordering is descending and STABLE (ties keep their input order), so a list that is
already sorted by its key is returned unchanged.
"""
from typing import Tuple

import torch
from torch import Tensor


def stable_topk(scores: Tensor, valid: Tensor, k: int) -> Tuple[Tensor, Tensor]:
    """Exact stable descending top-``k`` of each row of ``scores`` [B, L].

    Invalid entries never precede valid ones. Returns ``(index [B, k'], valid [B, k'])`` with
    k' = min(k, L); ``valid`` is False where a row has fewer than k' valid entries. Linear time in L
    (``torch.topk`` finds the k-th value, ties at that value are resolved by position).
    """
    batch, length = scores.shape
    k = min(int(k), length)
    if k == 0 or batch == 0:
        empty = scores.new_zeros((batch, k), dtype=torch.long)
        return empty, empty.bool()
    neg_inf = torch.tensor(float('-inf'), dtype=scores.dtype, device=scores.device)
    keyed = torch.where(valid, scores, neg_inf)
    if length <= 4 * k:
        order = torch.sort(keyed, dim=1, descending=True, stable=True).indices[:, :k]
    else:
        kth = torch.topk(keyed, k, dim=1, sorted=False).values.min(dim=1, keepdim=True).values
        above = keyed > kth
        ties = keyed == kth
        room = k - above.sum(dim=1, keepdim=True)
        chosen = above | (ties & (torch.cumsum(ties.int(), dim=1) <= room))
        # every row has exactly k chosen entries, in increasing position order
        positions = chosen.nonzero()[:, 1].view(batch, k)
        chosen_scores = keyed.gather(1, positions)
        within = torch.sort(chosen_scores, dim=1, descending=True, stable=True).indices
        order = positions.gather(1, within)
    # invalid entries share -inf with genuinely -inf scores: validity comes from the mask itself
    order_valid = valid.gather(1, order)
    # a valid -inf score ranked after an invalid one cannot happen: scores are validated finite upstream
    return order, order_valid


def graph_constrained_scores(rel_scores: Tensor, has_background: bool) -> Tuple[Tensor, Tensor]:
    """One predicate per pair: argmax over the non-background columns.

    ``rel_scores`` [B, R, C]; column 0 is "no relation" when ``has_background``. Returns
    ``(prob [B, R] float32, predicate [B, R] int64, 0-based)``; the first maximal column wins.
    """
    probs = rel_scores[..., 1:] if has_background else rel_scores
    prob, predicate = probs.float().max(dim=-1)
    return prob, predicate


def triplet_scores(prob: Tensor, subject_score: Tensor, object_score: Tensor) -> Tensor:
    """Legacy triplet score ``prob * subject_score * object_score`` in float32, in that order."""
    return prob.float() * subject_score.float() * object_score.float()


def no_graph_constraint_scores(rel_scores: Tensor, has_background: bool,
                               subject_score: Tensor, object_score: Tensor) -> Tensor:
    """Scores of every (pair, predicate): ``(subject_score * object_score) * prob`` (float32, legacy order).

    Returns [B, R, P]; flattening row-major gives the pair-major order the stable ranking uses.
    """
    probs = rel_scores[..., 1:] if has_background else rel_scores
    pair_score = subject_score.float() * object_score.float()
    return pair_score[..., None] * probs.float()
