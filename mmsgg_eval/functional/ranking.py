"""Ranked relation lists (graph-constrained, no-graph-constraint) on padded batches.

All functions take a batch of B images padded to a common length; ``valid`` masks mark real entries.
Scores are float32; ordering is descending and STABLE (ties keep their input order), so a list that is
already sorted by its key is returned unchanged.
"""
import atexit
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

import torch
from torch import Tensor

from . import compiled
from .overlap import Pending, run_shared
from .transfer import sync_free


# rows whose valid entries are at most 1 / SPARSE_FRACTION of their length are ranked on those entries alone
SPARSE_FRACTION = 4


def valid_counts(valid: Tensor) -> Tensor:
    """[B] int64 number of True entries of each row of a [B, L] bool mask (summed in int32: a bool sum's cast
    copy is then half the size of an int64 one)."""
    return valid.sum(1, dtype=torch.int32).long()


def positions_in_groups(group: Tensor, counts: Tensor) -> Tuple[Tensor, Tensor]:
    """For entries listed group by group (``group`` [n] non-decreasing group ids, ``counts`` [G] entries per
    group): ``(first [G], position [n])``, the index of each group's first entry and each entry's 0-based
    position within its group."""
    first = torch.cumsum(counts, 0) - counts
    return first, torch.arange(group.numel(), device=group.device) - first.index_select(0, group)


def sortable_key(scores: Tensor) -> Tensor:
    """Order-preserving int64 image of float32 scores (no NaN): a < b  <=>  key(a) < key(b), and equal keys
    for equal scores (-0.0 is turned into +0.0 first: they compare equal)."""
    bits = (scores.float() + 0.0).contiguous().view(torch.int32)
    return (bits ^ ((bits >> 31) & 0x7FFFFFFF)).long()


def stable_topk(scores: Tensor, valid: Optional[Tensor], k: int, count: Optional[Tensor] = None
                ) -> Tuple[Tensor, Tensor]:
    """Exact stable descending top-``k`` of each row of ``scores`` [B, L] (float32, no NaN).

    Invalid entries (``valid`` [B, L] False; None = all valid) come after every valid one (``count`` [B]: the
    number of valid entries of each row, when the caller has it). Returns
    ``(index [B, k'], valid [B, k'])`` with k' = min(k, L); ``valid`` is False where a row has fewer than k'
    valid entries. Rows longer than k first try a float ``topk`` of k' + 1 entries, exact for a row when no two
    listed values tie, no listed valid value is -inf and, where the row has more than k valid entries, the
    k-th is strictly above the next; the other rows (only those) give each entry a unique int64 key (score
    bits, then reversed position), so one ``topk`` gives their stable order. Rows with few valid entries (at most
    1 / ``SPARSE_FRACTION`` of L in every row) are ranked on those entries alone, moved to the front of a table.
    On accelerators (:func:`~mmsgg_eval.functional.transfer.sync_free`) every row takes the unique keys at once:
    the two shortcuts each read a value on the host first.
    """
    batch, length = scores.shape
    k = min(int(k), length)
    if k == 0 or batch == 0:
        empty = scores.new_zeros((batch, k), dtype=torch.long)
        return empty, empty.bool()
    if length <= k or sync_free(scores.device):
        return _keyed_topk(scores, valid, k)
    if count is None:
        count = valid_counts(valid) if valid is not None else torch.full((batch,), length, device=scores.device)
    if valid is not None:
        most = int(count.max())
        if most * SPARSE_FRACTION <= length:
            return _compacted_topk(scores, valid, count, most, k)
    # fast path: a float top-k is already the stable order of a row when no tie touches it
    minus_inf = scores.new_full((), float('-inf'), dtype=torch.float32)
    keyed = scores.float() if valid is None else torch.where(valid, scores.float(), minus_inf)
    values, order = torch.topk(keyed, k + 1, dim=1, sorted=True)
    listed = torch.arange(k, device=scores.device)[None, :] < count[:, None]  # [B, k] holds a valid entry
    head = values[:, :k]
    inexact = ((head == minus_inf) & listed).any(1) | \
        ((values[:, 1:k] == values[:, :k - 1]) & listed[:, 1:]).any(1) | \
        ((count > k) & (values[:, k - 1] <= values[:, k]))
    order = order[:, :k]
    if not bool(inexact.any()):
        return order, listed
    rows = inexact.nonzero().squeeze(1)
    exact_order, exact_valid = _keyed_topk(scores.index_select(0, rows),
                                           None if valid is None else valid.index_select(0, rows), k)
    return order.index_copy(0, rows, exact_order), listed.index_copy(0, rows, exact_valid)


def prefix_topk(scores: Tensor, count: Tensor, k: int, valid: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """:func:`stable_topk` of rows whose valid entries are their first ``count[b]`` (e.g. each image's real pairs
    in a padded batch; ``valid``: that [B, L] mask when the caller has it): the compiled kernel on the CPU when it
    is built, else the torch implementation. Invalid entries of the result hold index 0 or any index (look at the
    returned ``valid`` only)."""
    kernels = compiled.kernels() if scores.device.type == 'cpu' else None
    if kernels is not None and scores.dtype == torch.float32:
        return kernels.stable_topk_prefix(scores, count, int(k))
    if valid is None:
        valid = torch.arange(scores.shape[1], device=scores.device)[None, :] < count[:, None]
    return stable_topk(scores, valid, k, count)


def _compacted_topk(scores: Tensor, valid: Tensor, count: Tensor, most: int, k: int) -> Tuple[Tensor, Tensor]:
    """:func:`stable_topk` of rows with few valid entries (``count`` [B], at most ``most``): the valid entries are
    moved to the front of a [B, most] table, in their order (so ties keep it), and ranked there."""
    batch, length = scores.shape
    device = scores.device
    flat = valid.reshape(-1).nonzero().squeeze(1)  # row-major
    row = flat // length
    slot = row * most + positions_in_groups(row, count)[1]
    position = torch.zeros(batch * most, dtype=torch.long, device=device).index_copy_(0, slot, flat % length)
    position = position.view(batch, most)
    listed = torch.arange(most, device=device)[None, :] < count[:, None]
    order, order_valid = stable_topk(scores.gather(1, position), listed, k, count)
    width = min(int(k), length)  # the caller's k' columns; the ones past ``most`` are empty
    index = torch.zeros((batch, width), dtype=torch.long, device=device)
    index[:, :order.shape[1]] = position.gather(1, order)
    out_valid = torch.zeros((batch, width), dtype=torch.bool, device=device)
    out_valid[:, :order.shape[1]] = order_valid
    return index, out_valid


def _keyed_topk(scores: Tensor, valid: Optional[Tensor], k: int) -> Tuple[Tensor, Tensor]:
    """:func:`stable_topk` through unique int64 keys (score bits, then reversed position), for any k <= L."""
    length = scores.shape[1]
    if valid is None:
        valid = torch.ones_like(scores, dtype=torch.bool)
    reversed_pos = torch.arange(length - 1, -1, -1, device=scores.device)
    key = (sortable_key(scores) << 32) + reversed_pos
    key = torch.where(valid, key, torch.iinfo(torch.long).min + reversed_pos)
    if length <= 2 * k:
        order = torch.sort(key, dim=1, descending=True).indices[:, :k]
    else:
        order = torch.topk(key, k, dim=1, sorted=True).indices
    return order, valid.gather(1, order)


def triplet_scores(prob: Tensor, subject_score: Tensor, object_score: Tensor) -> Tensor:
    """Legacy triplet score ``prob * subject_score * object_score`` in float32, in that order."""
    return prob.float() * subject_score.float() * object_score.float()


def pair_end_scores(batch) -> Tuple[Tensor, Tensor]:
    """``(subject score, object score)`` [B, R] of every predicted pair of a padded scene-graph batch (the object
    scores at its ``rel_pairs``; padding pairs point at object 0)."""
    return (batch.pred_scores.gather(1, batch.rel_pairs[..., 0]), batch.pred_scores.gather(1, batch.rel_pairs[..., 1]))


def graph_constrained_list(batch, k: int, rank_by: str = 'score', prefix: bool = False,
                           end_scores: Optional[Tuple[Tensor, Tensor]] = None) -> Tuple[Tensor, Tensor, Tensor]:
    """The graph-constrained ranked list of every image of a padded scene-graph batch (one predicate a pair).

    ``batch``: a :class:`~mmsgg_eval.structures.reader.SceneGraphBatch`. Each pair is scored
    ``best predicate score * subject score * object score`` (:func:`triplet_scores`, float32) and the pairs are
    ranked by that score, descending and stable (``rank_by='score'``), or kept in the order the model gave them
    (``rank_by='given'``). ``prefix=True`` uses :func:`prefix_topk` (an image's real pairs are its first
    ``num_rel_preds``; the compiled kernel on the CPU); otherwise :func:`stable_topk` on ``rel_valid``.
    ``end_scores``: :func:`pair_end_scores` of the batch when the caller already has them.
    Returns ``(order [B, k'], valid [B, k'], triplet_score [B, R])`` with k' = min(k, R): ``order`` indexes the
    batch's pairs, ``valid`` marks real entries; the triplet scores of padding pairs are unspecified.
    """
    if end_scores is None:
        return graph_constrained_ranking(batch, k, rank_by, prefix)[:3]
    return _ranked_by_end_scores(batch, k, rank_by, prefix, *end_scores)[:3]


def graph_constrained_ranking(batch, k: int, rank_by: str = 'score', prefix: bool = False
                              ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`graph_constrained_list` and each pair's score ``subject score * object score`` (float32 [B, R]):
    ``(order, valid, triplet_score, pair_score)``. With ``prefix`` on the CPU the compiled kernel computes the
    end scores, both products and the list in one pass over each image's real pairs (the same numbers; its
    padding entries hold 0; an unknown ``rank_by`` is refused by the torch path)."""
    kernels = pair_kernels(batch)
    if kernels is not None and prefix and rank_by == 'score':
        return kernels.graph_constrained_pairs(batch.pair_rows, batch.pred_scores, batch.scores.best,
                                               batch.num_rel_preds, int(k))
    return _ranked_by_end_scores(batch, k, rank_by, prefix, *pair_end_scores(batch))


def pair_scores(batch) -> Tensor:
    """``subject score * object score`` (float32 [B, R]) of every real pair of a padded scene-graph batch
    (padding entries: 0 from the compiled kernel, which reads the per-image pairs on the CPU without padding
    them; the product at object 0 from the torch operations)."""
    kernels = pair_kernels(batch)
    if kernels is not None:
        return kernels.graph_constrained_pairs(batch.pair_rows, batch.pred_scores, batch.scores.best,
                                               batch.num_rel_preds, 0)[3]
    subject_score, object_score = pair_end_scores(batch)
    return subject_score.float() * object_score.float()


def pair_kernels(batch):
    """The compiled kernels when their pass over each image's pairs applies to the batch (CPU, float32 object
    scores and row maxima of the batch's shape), else None."""
    kernels = compiled.kernels() if batch.device.type == 'cpu' else None
    best, object_scores = batch.scores.best, batch.pred_scores
    if (kernels is not None and object_scores.dtype == torch.float32 and best.dtype == torch.float32
            and object_scores.dim() == 2 and object_scores.shape[1] > 0
            and tuple(best.shape) == tuple(batch.rel_valid.shape)):
        return kernels
    return None


def _ranked_by_end_scores(batch, k: int, rank_by: str, prefix: bool, subject_score: Tensor, object_score: Tensor
                          ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`graph_constrained_ranking` from the pairs' end scores, with torch operations."""
    if rank_by not in ('score', 'given'):
        raise ValueError(f"rank_by must be 'score' or 'given', got {rank_by!r}")
    score = triplet_scores(batch.scores.best, subject_score, object_score)
    pair_score = subject_score.float() * object_score.float()
    if rank_by == 'given':
        length = min(int(k), batch.rel_valid.shape[1])
        order = torch.arange(length, device=batch.device).expand(batch.rel_valid.shape[0], length)
        return order, batch.rel_valid[:, :length], score, pair_score
    if prefix:
        order, valid = prefix_topk(score, batch.num_rel_preds, k, batch.rel_valid)
    else:
        order, valid = stable_topk(score, batch.rel_valid, k)
    return order, valid, score, pair_score


@dataclass
class RankedLists:
    """Both ranked lists of a pool, built while its score matrices were read (:func:`compiled_ranked_lists`):
    the graph-constrained list of length ``k`` with the triplet and pair scores of :func:`graph_constrained_ranking`
    (``rank_by='score'``, ``prefix=True``) and the ``ng_topk`` no-graph-constraint entries of
    :func:`~mmsgg_eval.functional.recall.no_graph_constraint_list` bounded by that list, exactly as those calls
    give them."""
    k: int
    ng_topk: int
    gc_order: Tensor    # [B, k'] pair indices
    gc_valid: Tensor    # [B, k']
    gc_score: Tensor    # [B, R] triplet scores (0 on padding)
    pair_score: Tensor  # [B, R] subject score x object score (0 on padding)
    ng_pair: Tensor     # [B, L]
    ng_predicate: Tensor
    ng_valid: Tensor
    gc_predicate: Tensor  # [B, k'] each listed pair's graph-constrained predicate (first maximal column; 0 unlisted)
    gc_ends: Tensor     # [B, k', 2] each listed pair's (subject, object) indices
    ng_ends: Tensor     # [B, L, 2] each no-graph-constraint entry's (subject, object) indices
    pair_codes: Optional[Tensor] = None  # [B, R] int16 every pair's (subject << 8) | object (uint16 bits), when asked
    #: the Open Images lists built in the same pass, when asked: ((length, per_pair, min_score), (score,
    #: predicate, pair, subject, object, valid)), each [B, E] (:func:`mmsgg_eval.functional.oi.oi_ranked_lists`)
    oi_lists: Optional[Tuple[Tuple[int, int, float], Tuple[Tensor, ...]]] = None

    def serves(self, k: int, ng_topk: int, rank_by: str) -> bool:
        """Whether these are the lists of ``(k, ng_topk)`` ranked by score."""
        return rank_by == 'score' and int(k) == self.k and int(ng_topk) == self.ng_topk


def compiled_ranked_lists(matrices: List[Tensor], column: int, num_predicates: int, rel_pairs: List[Tensor],
                          object_scores: Tensor, num_rel: Tensor, k: int, ng_topk: int, out: Optional[Tensor] = None,
                          pair_codes: bool = False, oi_lists: Optional[Tuple[int, int, float]] = None):
    """The compiled layout's row maxima and value check with both ranked lists, one pass per image while its
    matrix is in cache (``mmsgg_eval._ext.ranked_relation_lists``). ``matrices``: each image's contiguous
    float32 [R_b, column + P] input; ``rel_pairs``: each image's int64 [R_b, 2] pairs (0-based object indices),
    or one padded [B, R, 2] int64 tensor in a list (a batch's ``pair_rows``); ``object_scores``
    [B, N] float32, ``num_rel`` [B] the R_b; ``out``: a float32 [3, B, R] buffer for the row maxima, triplet and
    pair scores (a pool's buffer reused by its owner), else new tensors; ``pair_codes``: also every pair's
    ``(subject << 8) | object`` (``lists.pair_codes`` [B, R] int16 holding uint16 bit patterns, 0 on padding; None
    with more than 256 objects), written while the pairs stream by, what the error analysis' pair scan reads
    instead of the int64 pairs; ``oi_lists`` = (length, per_pair, min_score): also each image's Open Images list
    (``lists.oi_lists``), its candidates' rows read while the image's matrix is in cache (None with a build older
    than these sources). Values are not checked here (the reader
    validates the batch before the lists are used). Returns ``(lists, (best [B, R], passed [B]), bad [B],
    (min [B], max [B]))``: ``bad[b]`` >= 0 is the first pair of image b with an object index outside [0, N), -1
    when none (its lists are empty then); the last pair is each image's (min, max) pair index (0, -1 without
    pairs), for the reader's index check. None where the kernels do not apply (not built or switched off, no
    object column, other dtypes)."""
    call = _ranked_pass_call(object_scores, oi_lists)
    if call is None:
        return None
    kernels, extra, oi_lists = call
    results = kernels.ranked_relation_lists(matrices, int(column), int(num_predicates), rel_pairs, object_scores,
                                            num_rel, int(k), int(ng_topk), out, bool(pair_codes), **extra)
    return _ranked_from_results(results, k, ng_topk, oi_lists)


def compiled_ranked_lists_beside(matrices: List[Tensor], column: int, num_predicates: int, rel_pairs: List[Tensor],
                                 object_scores: Tensor, num_rel: Tensor, k: int, ng_topk: int,
                                 out: Optional[Tensor] = None, pair_codes: bool = False,
                                 oi_lists: Optional[Tuple[int, int, float]] = None) -> Pending:
    """:func:`compiled_ranked_lists` started on torch's inter-op threads, as many as the caller's compute threads
    less one (C++ tasks: they start at once, while the caller's Python holds the interpreter lock); the calling
    thread takes its share when it asks for the result (``Pending.result()``: it reads the images not started
    yet, then waits for those being read), so that the pass and the caller's own work never run more threads than
    the caller's count. Its value is None where the kernels do not apply."""
    call = _ranked_pass_call(object_scores, oi_lists)
    if call is None:
        return Pending(None)
    kernels, extra, oi_lists = call
    if not hasattr(kernels, 'RankedPass'):  # (a build older than these sources: the pass at once, nothing beside)
        return Pending(compiled_ranked_lists(matrices, column, num_predicates, rel_pairs, object_scores, num_rel, k,
                                             ng_topk, out, pair_codes, oi_lists))
    job = kernels.RankedPass(matrices, int(column), int(num_predicates), rel_pairs, object_scores, num_rel, int(k),
                             int(ng_topk), out, bool(pair_codes), **extra)
    _wait_at_exit(kernels)

    def join() -> tuple:
        job.work()
        return _ranked_from_results(job.finish(), k, ng_topk, oi_lists)
    return run_shared(job, join)


_exit_wait_registered = False


def _wait_at_exit(kernels: Any) -> None:
    """At interpreter exit, first wait for the passes still running on the kernels' threads (an evaluation
    stopped by an error or Ctrl-C): their last references to the inputs are released while Python still runs
    (a tensor that shares a numpy array's memory releases it under the interpreter lock)."""
    global _exit_wait_registered
    if not _exit_wait_registered and hasattr(kernels, 'wait_beside_idle'):
        atexit.register(kernels.wait_beside_idle)
        _exit_wait_registered = True


def _ranked_pass_call(object_scores: Tensor, oi_lists: Optional[Tuple[int, int, float]]):
    """(the kernels, the Open Images arguments of the pass, ``oi_lists`` or None where the build does not list them)
    for a pool of these object scores, or None where the kernels do not apply."""
    kernels = compiled.kernels()
    if (kernels is None or object_scores.dim() != 2 or not object_scores.shape[1]
            or object_scores.dtype != torch.float32):
        return None
    oi_lists = oi_lists if oi_lists is not None and 'oi_length' in (kernels.ranked_relation_lists.__doc__ or '') \
        else None  # (a build older than these sources: the OI metric lists its pools itself)
    extra = {} if oi_lists is None else dict(oi_length=int(oi_lists[0]), oi_per_pair=int(oi_lists[1]),
                                             oi_min_score=float(oi_lists[2]))
    return kernels, extra, oi_lists


def _ranked_from_results(results: List[Tensor], k: int, ng_topk: int, oi_lists: Optional[Tuple[int, int, float]]):
    """:func:`compiled_ranked_lists`' value from the outputs of the kernels' pass."""
    (best, passed, gc_order, gc_valid, gc_score, pair_score, ng_pair, ng_predicate, ng_valid, bad, pair_range,
     gc_predicate, gc_ends, ng_ends, codes) = results[:15]
    lists = RankedLists(int(k), int(ng_topk), gc_order, gc_valid, gc_score, pair_score, ng_pair, ng_predicate,
                        ng_valid, gc_predicate, gc_ends, ng_ends, codes if codes.shape[0] else None,
                        None if oi_lists is None else (tuple(oi_lists), tuple(results[15:21])))
    return lists, (best, passed), bad, (pair_range[:, 0], pair_range[:, 1])
