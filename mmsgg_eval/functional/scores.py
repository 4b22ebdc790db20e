"""Predicate score matrices of a batch, in one of three layouts, behind one object.

Every image b has R_b predicted pairs and a score row of P predicate columns per pair (the background
column, when the model gave one, is already left out; entries that are not candidates, in single-label
rows, are ``-inf``). How the rows are held depends on the batch:

* ``stacked``: every image has the same R and the same columns: one [B, R, P] tensor (``dense``, a view
  of one stacked copy) and its [B * R, P] view ``flat``;
* ``concatenated``: small batches of unequal R: the [sum R, P] concatenation ``flat`` with the first row
  of each image in ``start``;
* ``views``: large batches (SGDet with all pairs): ``matrices[b]`` is image b's [R_b, P] view of the
  input, never copied; only selected rows are gathered.

The functional layer reads rows only through :meth:`rows`, :meth:`predicate_at` and the per-pair row
maxima ``best`` (and ``dense`` when present), so the layout is a speed choice that never changes a number.
"""
from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

LAYOUTS = ('stacked', 'concatenated', 'views')


@dataclass
class RelationScores:
    """Predicate scores of a batch (see the module docstring for the layouts).

    ``best`` [B, R] is the best predicate score of each pair (0 padding); ``best_predicate`` [B, R] its
    first maximal column (as ``argmax``; stacked / concatenated layouts only, else computed on demand);
    ``value_range`` [B, 2] the (min, max) of each image's entries (given scores for single-label images,
    every column of the input matrix otherwise), used by input validation.
    """
    layout: str
    num_predicates: int
    best: Tensor
    value_range: Tensor
    has_single_label: bool = False
    dense: Optional[Tensor] = None          # [B, R, P] (stacked)
    flat: Optional[Tensor] = None           # [sum R, P] (stacked, concatenated)
    start: Optional[Tensor] = None          # [B] first row of each image in ``flat``
    matrices: Optional[List[Tensor]] = None  # B x [R_b, P] (views)
    best_predicate: Optional[Tensor] = None  # [B, R]

    @property
    def device(self) -> torch.device:
        return self.best.device

    def rows(self, image: Tensor, pos: Tensor) -> Tensor:
        """Score rows of pairs (image[i], pos[i]) -> [n, P]; ``image`` must be non-decreasing."""
        if self.flat is not None:
            return self.flat[self.start[image] + pos]
        counts = torch.bincount(image, minlength=len(self.matrices)).tolist()
        parts = [m[p] for m, p, c in zip(self.matrices, torch.split(pos, counts), counts) if c]
        if not parts:
            return torch.zeros((0, self.num_predicates), device=self.device)
        return torch.cat(parts)

    def predicate_at(self, order: Tensor, valid: Tensor) -> Tensor:
        """Graph-constrained predicate (first maximal column) of pairs ``order`` [B, K]; invalid entries 0.

        Only the selected rows are arg-maxed when the row maxima were not computed with their positions.
        """
        if self.best_predicate is not None:
            return torch.where(valid, self.best_predicate.gather(1, order), torch.zeros_like(order))
        image, k = valid.nonzero(as_tuple=True)
        out = torch.zeros_like(order)
        if image.numel():
            out[image, k] = self.rows(image, order[image, k]).argmax(dim=1)
        return out


def pad_rows(tensors: Sequence[Tensor], value: float) -> Tensor:
    """[B, L, ...] from B tensors [L_b, ...]: one stacked copy when every L_b is equal, else padded."""
    tensors = list(tensors)
    try:
        return torch.stack(tensors)
    except RuntimeError:
        return pad_sequence(tensors, batch_first=True, padding_value=value)


def build_relation_scores(raw: Sequence[Tensor], background: Sequence[int], num_rel: Sequence[int],
                          num_predicates: int, single_label: Sequence[bool], given_scores: Sequence[Tensor],
                          small: bool, device: torch.device) -> RelationScores:
    """Choose the layout and reduce each row once.

    ``raw[b]``: image b's float32 [R_b, P] or [R_b, P + 1] matrix (``background[b]`` = 1 when column 0 is
    the background); single-label images were densified with ``-inf`` and ``given_scores`` holds their
    1-D scores (in image order). ``small``: the batch may be copied into one tensor (stacked /
    concatenated); otherwise the matrices stay views.
    """
    raw = list(raw)
    batch_size = len(raw)
    max_rel = max(num_rel) if batch_size else 0
    has_single = any(single_label)
    dense = flat = start = best_predicate = mats = None
    if small and all(m.shape == raw[0].shape for m in raw) and len(set(background)) == 1:
        layout = 'stacked'
        stacked = torch.stack(raw)  # one copy; views drop the background column
        dense = stacked[..., background[0]:]
        flat = dense.reshape(-1, num_predicates)
        whole = stacked.view(batch_size, -1)
        value_range = torch.stack([whole.amin(1), whole.amax(1)], 1) if whole.shape[1] else None
    else:
        mats = [m[:, bg:] for m, bg in zip(raw, background)]
        value_range = None
        if small:
            layout = 'concatenated'
            flat = torch.cat(mats)
        else:
            layout = 'views'
    row_maxima = None
    if value_range is None and batch_size:
        # per image (min, max) of the whole input matrix (one flat reduction; in the views layout right after
        # its row maxima, while the matrix is still in cache)
        zero = torch.zeros((), device=device)
        bounds = []
        row_maxima = [] if layout == 'views' and mats[0].shape[1] else None
        for m, view in zip(raw, mats or raw):
            if row_maxima is not None:
                row_maxima.append(view.amax(dim=1))
            bounds.extend(torch.aminmax(m) if m.numel() else (zero, zero))
        value_range = torch.stack(bounds).view(batch_size, 2)
    elif value_range is None:
        value_range = torch.zeros((0, 2), device=device)
    if has_single:  # densified rows hold -inf on purpose: their given scores are what the model returned
        given = iter(given_scores)
        value_range = value_range.clone()
        for b, single in enumerate(single_label):
            scores = next(given) if single else None
            if single:
                value_range[b] = torch.stack(torch.aminmax(scores)) if scores.numel() else 0.0
    if flat is not None:
        start = torch.cumsum(torch.tensor(list(num_rel), dtype=torch.long, device=device), 0) - \
            torch.tensor(list(num_rel), dtype=torch.long, device=device)
    if flat is not None and num_predicates and flat.shape[0]:
        values, best_predicate = flat.max(dim=1)  # the first maximal column, as argmax
        if dense is not None:
            best, best_predicate = values.view(dense.shape[:2]), best_predicate.view(dense.shape[:2])
        else:
            best = pad_rows(torch.split(values, list(num_rel)), 0.0)
            best_predicate = pad_rows(torch.split(best_predicate, list(num_rel)), 0)
    elif row_maxima is not None:
        best = pad_rows(row_maxima, 0.0)
    else:
        best = torch.zeros((batch_size, max_rel), device=device)
    return RelationScores(layout=layout, num_predicates=num_predicates, best=best, value_range=value_range,
                          has_single_label=has_single, dense=dense, flat=flat, start=start, matrices=mats,
                          best_predicate=best_predicate)
