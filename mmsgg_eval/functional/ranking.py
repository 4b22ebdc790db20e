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


def triplet_scores(prob: Tensor, subject_score: Tensor, object_score: Tensor) -> Tensor:
    """Legacy triplet score ``prob * subject_score * object_score`` in float32, in that order."""
    return prob.float() * subject_score.float() * object_score.float()
