"""Recall from first-hit ranks: R@K per image or micro, per-predicate recall and mR@K over predicates (present
or all), for every K at once. The ranks come from :func:`~mmsgg_eval.functional.first_hits.scene_graph_ranks`:
a GT relation is hit within the top K when its rank is < K, so the per-image state is a few integers per GT
relation, independent of the number of predictions.
"""
from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .compiled import kernels
from .limits import NO_HIT


_COMPILED_RANKS = (torch.int16, torch.int32, torch.int64)  # the rank dtypes the compiled counts read


def hits_per_k(rank: Tensor, key: Tensor, size: int, ks: Sequence[int]) -> Tensor:
    """[size, len(ks)] float64: for each key (0..size-1) and each K, the number of relations of that key with
    ``rank < K`` (:func:`hits_per_k_columns` side by side)."""
    columns = hits_per_k_columns(rank, key, size, ks)
    if not columns:
        return torch.zeros((size, 0), dtype=torch.float64, device=rank.device)
    return torch.stack(columns, dim=1)


def hits_per_k_columns(rank: Tensor, key: Tensor, size: int, ks: Sequence[int]) -> List[Tensor]:
    """:func:`hits_per_k` as one contiguous float64 [size] tensor per K (in the given order of ``ks``): one
    bincount of the keys of the relations hit within each K."""
    # a K above NO_HIT counts every hit and no miss, as K = NO_HIT does (ranks of hits are list positions)
    key = key.long()
    ops = kernels()
    if ops is not None and ks and key.device.type == 'cpu' and rank.dtype in _COMPILED_RANKS and size < 2 ** 31:
        counts = ops.hit_counts(key.contiguous(), rank.contiguous(), [rank_limit(k) for k in ks], size)
        return list(counts.double().unbind(0))  # (the same integer counts, in one pass over the relations)
    return [torch.bincount(key[rank < rank_limit(k)], minlength=size).double() for k in ks]


def rank_limit(k: int) -> int:
    """The rank a first hit must be below to count at K: K, or ``NO_HIT`` for a larger K (misses never count)."""
    return min(int(k), NO_HIT)


def hit_within(rank: Tensor, k: int) -> Tensor:
    """[..] bool: first-hit ranks below K (misses, ``NO_HIT``, never count, whatever the K)."""
    return rank < rank_limit(k)


def recall_from_ranks(rank: Tensor, image_of_rel: Tensor, num_images: int, ks: Sequence[int],
                      rel_mask: Optional[Tensor] = None, average: str = 'image', empty: float = 0.0) -> Tensor:
    """R@K per K (fraction, float64) from per-GT first-hit ranks.

    ``image_of_rel`` maps each GT relation to its (evaluated) image 0..num_images-1. With ``rel_mask``
    only those relations count, and images with none of them are left out (zero-shot recall).
    ``average='image'``: mean over images of hits/n; ``'micro'``: total hits / total GT. ``empty``: the value
    when no relation counts (0 for the whole evaluation, NaN for a subset: :data:`NO_VALUE`).
    """
    if rel_mask is not None:
        rank, image_of_rel = rank[rel_mask], image_of_rel[rel_mask]
    return recalls_from_ranks([(rank, ks)], image_of_rel, num_images, average, empty)[0]


def recalls_from_ranks(ranks: Sequence[Tuple[Tensor, Sequence[int]]], image_of_rel: Tensor, num_images: int,
                       average: str = 'image', empty: float = 0.0) -> List[Tensor]:
    """:func:`recall_from_ranks` of several first-hit rank columns of the same GT relations, each with its Ks
    (``ranks``: ``[(rank [G], ks), ...]``): one [len(ks)] float64 tensor per column, in the given order; the GT
    relations per image are counted once."""
    count = torch.bincount(image_of_rel, minlength=num_images).double()
    has = count > 0
    if average == 'micro':
        total = count.sum()
        counted = bool(total > 0)
    else:
        counted = bool(has.any())
        per_image = count[has]
    out = []
    for rank, ks in ranks:
        results = []
        for hits in hits_per_k_columns(rank, image_of_rel, num_images, ks):  # each K's sums over contiguous [I]
            if average == 'micro':
                results.append(hits.sum() / total if counted else hits.new_full((), empty))
            else:
                results.append((hits[has] / per_image).mean() if counted else hits.new_full((), empty))
        out.append(torch.stack(results) if results else torch.zeros(0, dtype=torch.float64))
    return out


#: The value of a key whose relations, predicates or images do not exist in the evaluation (a subset, group or
#: family without any GT relation): NaN, never a measured-looking 0 (reports show ``–`` and say why).
NO_VALUE = float('nan')


def mean_recall(per_predicate: Tensor, present: Tensor, members: Sequence[int], mr_average: str,
                empty: float = NO_VALUE) -> Tensor:
    """[K] mean of the per-predicate recalls ``per_predicate`` [K, P] over ``members``: over all of them
    (``mr_average='all'``, the legacy denominator: a member without GT counts 0) or over those ``present``
    [P] (``'present'``). ``empty`` when no member has a GT relation (NaN for a group or subset; the whole
    evaluation passes 0, its documented value when nothing was evaluated). The one mR rule of the metrics and
    the HTML report."""
    idx = torch.as_tensor(list(members), dtype=torch.long)
    held = idx[present[idx]] if idx.numel() else idx
    if held.numel() == 0:
        return torch.full((per_predicate.shape[0],), empty, dtype=torch.float64)
    if mr_average == 'present':
        idx = held
    return per_predicate[:, idx].sum(1) / idx.numel()


def per_predicate_recall(rank: Tensor, predicate: Tensor, image_of_rel: Tensor, num_images: int,
                         num_predicates: int, ks: Sequence[int], average: str = 'image'):
    """Per-predicate recall [len(ks), P] (float64) and presence mask [P].

    ``'image'`` (legacy mR): for predicate p, mean over the images containing p of hits_p / count_p.
    ``'micro'``: total hits of p / total GT of p. (:func:`per_predicate_recalls` with one rank column.)
    """
    tables, present = per_predicate_recalls([(rank, ks)], predicate, image_of_rel, num_images, num_predicates,
                                            average)
    return tables[0], present


def per_predicate_recalls(ranks: Sequence[Tuple[Tensor, Sequence[int]]], predicate: Tensor, image_of_rel: Tensor,
                          num_images: int, num_predicates: int, average: str = 'image') -> Tuple[List[Tensor], Tensor]:
    """:func:`per_predicate_recall` of several first-hit rank columns of the same GT relations, each with its Ks
    (``ranks``: ``[(rank [G], ks), ...]``), in one pass: the per-(image, predicate) GT counts are read once, the hits
    of each (column, K) are one bincount, and the per-predicate steps run on all of them at once. Returns one
    [len(ks), P] float64 table per column (in the given order) and the presence mask [P] (predicates with a GT
    relation).

    Each table is the same number, bit for bit, as its own call computes: per (column, K) the hits over the
    contiguous [I, P] table of the image and predicate counts, summed over the images (``'image'``) in that
    layout. Only the cells with a GT relation are counted and divided (the table's other entries are 0 / 1 = 0);
    one [I, P] table of quotients serves every column in turn (fresh memory of that size costs more to map than
    to fill). With the compiled kernels (CPU, ``'image'``) the cells' counts and hits are one pass over the
    relations and the same reduction runs on the same table: the same numbers, bit for bit."""
    key = (image_of_rel * num_predicates + predicate).long()
    ops = kernels()
    if ops is not None and average == 'image' and key.device.type == 'cpu' and num_images and num_predicates and \
            num_images * num_predicates < 2 ** 31 and any(ks for _, ks in ranks) and \
            all(rank.dtype in _COMPILED_RANKS for rank, _ in ranks):  # (the kernel's cells are int32)
        sums, images = ops.predicate_quotient_sums(key.contiguous(), [rank.contiguous() for rank, _ in ranks],
                                                   [[rank_limit(k) for k in ks] for _, ks in ranks], num_images,
                                                   num_predicates)
        n_img = images.double()
        return _split_tables(sums / n_img.clamp(min=1), n_img > 0, ranks)
    size = num_images * num_predicates
    count = torch.bincount(key, minlength=size)  # integer counts per (image, predicate) cell, flat
    cells = count.nonzero().squeeze(1)  # the cells with a GT relation, ascending
    cell_predicate = cells % max(num_predicates, 1)
    n_img = torch.bincount(cell_predicate, minlength=num_predicates).double()  # images containing each predicate
    present = n_img > 0
    columns = [(rank, k) for rank, ks in ranks for k in ks]
    if not columns:
        return [torch.zeros((0, num_predicates), dtype=torch.float64) for _ in ranks], present
    cell_of = (torch.cumsum(count > 0, 0) - 1).index_select(0, key)  # each relation's cell

    def cell_hits(rank: Tensor, k: int) -> Tensor:  # integer hits of each cell
        return torch.bincount(cell_of[rank < rank_limit(k)], minlength=cells.numel())
    if average == 'micro':  # integer sums (exact), one division per predicate
        totals = torch.bincount(predicate.long(), minlength=num_predicates)
        sums = [torch.bincount(cell_predicate, cell_hits(rank, k), minlength=num_predicates) for rank, k in columns]
        values = torch.stack(sums).double() / totals.clamp(min=1).double()
    else:
        divisor = count.index_select(0, cells).double()
        quotient = torch.zeros(size, dtype=torch.float64, device=key.device)  # 0 in the cells without a relation
        sums = [quotient.index_copy_(0, cells, cell_hits(rank, k) / divisor).view(num_images, num_predicates).sum(0)
                for rank, k in columns]
        values = torch.stack(sums) / n_img.clamp(min=1)
    return _split_tables(values, present, ranks)


def _split_tables(values: Tensor, present: Tensor, ranks: Sequence[Tuple[Tensor, Sequence[int]]]
                  ) -> Tuple[List[Tensor], Tensor]:
    """The [len(ks), P] table of each rank column from the [sum of len(ks), P] ``values`` (0 where a predicate has
    no GT relation), and ``present``."""
    values = torch.where(present, values, torch.zeros_like(values))
    tables, start = [], 0
    for _, ks in ranks:
        tables.append(values[start:start + len(ks)])
        start += len(ks)
    return tables, present


def evaluated_image_rows(image_sample_idx: Tensor, evaluated: Tensor, rel_sample_idx: Tensor):
    """Map per-relation rows onto the evaluated images.

    ``image_sample_idx`` [I] and ``evaluated`` [I] bool: the images and which of them count;
    ``rel_sample_idx`` [G]: the image of every relation row. Returns ``(image_of [G'], keep [G], num_images)``:
    ``keep`` marks the rows of evaluated images, ``image_of`` numbers their image 0..num_images-1 (its position
    among the evaluated images). The images' ``sample_idx`` are distinct (the reduced tables hold each once).
    """
    eval_idx = image_sample_idx[evaluated]
    num_images = int(eval_idx.numel())
    if not num_images:
        keep = torch.zeros_like(rel_sample_idx, dtype=torch.bool)
        return rel_sample_idx[keep], keep, 0
    if eval_idx.device.type == 'cpu':  # (the summary's tables) a lookup table where the indices' range is small
        low, high = (int(v) for v in torch.aminmax(eval_idx))
        if high - low < 4 * (num_images + rel_sample_idx.numel()):
            table = torch.full((high - low + 1,), -1, dtype=torch.long)
            table[eval_idx - low] = torch.arange(num_images)
            clamped = rel_sample_idx.clamp(low, high)
            pos = table[clamped - low]
            keep = (pos >= 0) & (clamped == rel_sample_idx)
            return pos[keep], keep, num_images
    sorted_idx, order = torch.sort(eval_idx)
    pos = torch.searchsorted(sorted_idx, rel_sample_idx).clamp(max=num_images - 1)
    keep = sorted_idx[pos] == rel_sample_idx
    return order[pos][keep], keep, num_images
