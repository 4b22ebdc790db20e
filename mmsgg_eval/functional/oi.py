"""The Open Images relation protocol (PySGG's OIv6 evaluator) as pure tensor functions.

Definitions (``docs/metrics.md``, section "OIRelationMetric"):

* **The OI ranked list of an image** (:func:`oi_ranked_lists`): every predicted pair row (repeated pairs count
  as separate rows) contributes its ``per_pair`` = 2 best predicates (background column excluded; on tied
  probabilities the lower predicate index first), scored ``(subject score * object score) * probability`` in
  float32, in that order of operations; the entries are ranked by score, descending (ties: the earlier pair
  row, then its first predicate), the first ``length`` = 100 kept, and entries scoring <= 1e-5 (compared in
  float32) dropped. What is kept is a prefix of the ranked entries, so an entry's position is its rank.
* **Recall matching** (:func:`oi_match`): an entry hits a GT relation when subject label, predicate and object
  label are equal and both the subject IoU and the object IoU are >= 0.5 (many-to-many).
* **AP flags** (:func:`oi_match`): an entry of predicate c is a true positive when its best overlapping GT
  relation of predicate c with the same subject and object labels (``rel``: min of the subject and object IoU;
  ``phr``: IoU of the union boxes) overlaps it by STRICTLY more than 0.5 and is not claimed by an earlier entry
  of the image (VOC greedy: the first GT, in the image's GT order, of those with the highest overlap; a claimed
  best GT makes the entry a false positive, with no fallback). Claims are per image, so the flags of an image
  depend on that image alone.
* **AP** (:func:`oi_average_precisions`): per predicate, the entries of all images sorted by score descending
  (ties: ``sample_idx``, then rank, ascending), precision and recall accumulated, VOC all-point interpolation
  (the precision envelope; the sum of recall steps times the envelope); a predicate without GT has AP 0.

IoU is the legacy +1-pixel float32 IoU (:func:`~mmsgg_eval.functional.boxes.box_iou`) when ``plus_one``.
"""
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .boxes import box_iou, union_boxes
from .limits import NO_HIT
from . import compiled
from .ranking import pair_kernels, pair_scores, positions_in_groups, prefix_topk, sortable_key
from .recall import rank_limit

#: entries of an image's OI list (PySGG's ``topk``)
OI_LIST_LENGTH = 100
#: predicates listed per predicted pair (PySGG's ``prd_k``)
OI_PREDICATES_PER_PAIR = 2
#: entries scoring at most this (compared in float32) are dropped
OI_MIN_SCORE = 1e-5
#: AP overlap threshold (compared with ``>``) and recall IoU threshold (compared with ``>=``)
OI_AP_THRESHOLD = 0.5
OI_RECALL_THRESHOLD = 0.5
#: score rows read at once when the top predicates of a pool are taken (bounds the working memory)
ROWS_PER_CHUNK = 2 ** 16
#: stored first-hit rank of a GT relation that no entry hits (int16; every hit's rank is below the list length)
OI_NO_HIT = 2 ** 15 - 1
#: the summary keys derived from the AP sweep
OI_AP_KEYS = ('mAP_rel', 'wmAP_rel', 'mAP_phr', 'wmAP_phr', 'final_score', 'w_final_score')


@dataclass
class OIList:
    """The OI ranked lists of a padded batch of B images, E = ``length`` entries each (padded).

    Entry e of image b (valid where ``valid[b, e]``; the valid entries of an image are its first ones) is the
    ``slot``-th best predicate ``predicate`` of predicted pair row ``pair`` (subject ``subject``, object
    ``object``: object indices into the evaluated object list), scored ``score`` (float32)."""
    valid: Tensor      # [B, E] bool
    score: Tensor      # [B, E] float32
    predicate: Tensor  # [B, E] int64, 0-based, background excluded
    pair: Tensor       # [B, E] int64 predicted pair row
    subject: Tensor    # [B, E] int64 object index
    object: Tensor     # [B, E] int64 object index

    @property
    def count(self) -> Tensor:
        """[B] entries of each image's list."""
        return self.valid.sum(1)


def top_predicates(rows: Tensor, k: int) -> Tuple[Tensor, Tensor]:
    """The ``k' = min(k, P)`` largest columns of each row of ``rows`` [n, P] -> (values [n, k'], columns [n, k']),
    best first; on tied values the lower column first (repeated first-maximum ``argmax``)."""
    k = min(int(k), rows.shape[1])
    work = rows.clone() if k > 1 else rows
    values, columns = [], []
    for i in range(k):
        col = work.argmax(dim=1, keepdim=True)
        values.append(work.gather(1, col))
        columns.append(col)
        if i + 1 < k:
            work.scatter_(1, col, float('-inf'))
    if not columns:
        return rows.new_zeros((rows.shape[0], 0)), torch.zeros((rows.shape[0], 0), dtype=torch.long,
                                                                device=rows.device)
    return torch.cat(values, 1), torch.cat(columns, 1)


def _rows_top_predicates(scores, image: Tensor, pos: Tensor, k: int) -> Tuple[Tensor, Tensor]:
    """(probabilities [n, k], predicates [n, k]) of the ``k`` best predicates of the score rows of pairs
    (``image[i]``, ``pos[i]``) (``image`` non-decreasing) of ``scores`` (a
    :class:`~mmsgg_eval.functional.scores.RelationScores`), read in chunks of ``ROWS_PER_CHUNK`` rows."""
    parts_v, parts_c = [], []
    for start in range(0, image.numel(), ROWS_PER_CHUNK):
        stop = start + ROWS_PER_CHUNK
        values, columns = top_predicates(scores.rows(image[start:stop], pos[start:stop]).float(), k)
        parts_v.append(values)
        parts_c.append(columns)
    if not parts_v:
        return (torch.zeros((0, k), dtype=torch.float32, device=image.device),
                torch.zeros((0, k), dtype=torch.long, device=image.device))
    return torch.cat(parts_v), torch.cat(parts_c)


def candidate_pairs(first_score: Tensor, valid: Tensor, length: int, count: Optional[Tensor] = None) -> Tensor:
    """[B, R] bool: the pairs that can own one of the ``length`` best entries of their image. ``first_score``
    [B, R] is each pair's best entry score (>= 0); an entry of a pair scores at most its best, and the best entries
    of the ``length`` best pairs are ``length`` entries, so a pair whose best entry is strictly below the
    ``length``-th largest best entry of its image owns none of the image's ``length`` best entries (whatever
    the order of ties). The others (that many pairs, and those tied with the last) are kept. ``count`` [B]: when
    the valid pairs are each image's first ``count[b]``, the compiled top-k finds that value on the CPU."""
    if first_score.shape[1] <= length:
        return valid
    minus_inf = torch.tensor(float('-inf'), device=first_score.device)
    keyed = torch.where(valid, first_score, minus_inf)
    kernels = compiled.kernels() if keyed.device.type == 'cpu' else None
    if kernels is not None and count is not None and keyed.dtype == torch.float32:
        order, listed = kernels.stable_topk_prefix(keyed, count, int(length))  # (fewer pairs: every one is kept)
        threshold = torch.where(listed[:, -1:], keyed.gather(1, order[:, -1:]), minus_inf)
    else:
        threshold = keyed.topk(length, dim=1).values[:, -1:]
    return valid & (keyed >= threshold)


def oi_ranked_lists(batch, length: int = OI_LIST_LENGTH, per_pair: int = OI_PREDICATES_PER_PAIR,
                    min_score: float = OI_MIN_SCORE) -> OIList:
    """The OI ranked list of every image of a padded scene-graph batch (see the module docstring).

    ``batch``: a :class:`~mmsgg_eval.structures.reader.SceneGraphBatch` (its evaluated objects: PredCls has
    the GT boxes and labels with object scores 1). Returns an :class:`OIList` of ``length`` entries per image.
    Only the score rows of the pairs that can own a listed entry are read (:func:`candidate_pairs`: about
    ``length`` per image, from the per-pair best scores the reader has already computed)."""
    compiled_lists = _compiled_ranked_lists(batch, length, per_pair, min_score)
    if compiled_lists is not None:
        return compiled_lists
    b_size, r_max = batch.rel_valid.shape
    k = min(int(per_pair), batch.num_predicates)
    device = batch.device
    pair_score = pair_scores(batch)  # [B, R]
    keep = candidate_pairs(pair_score * batch.scores.best.float(), batch.rel_valid, length, batch.num_rel_preds)
    where = keep.nonzero()  # (image, pair) of the candidates, image by image, in pair order
    image, pair_of = where[:, 0], where[:, 1]
    count = keep.sum(1)
    c_max = int(count.max()) if b_size and count.numel() else 0
    _, slot = positions_in_groups(image, count)
    prob, pred = _rows_top_predicates(batch.scores, image, pair_of, k)
    width = c_max * k
    score = torch.zeros((b_size, width), dtype=torch.float32, device=device)
    predicate = torch.zeros((b_size, width), dtype=torch.long, device=device)
    pair = torch.zeros((b_size, width), dtype=torch.long, device=device)
    if width and k:
        entry_score = pair_score[image, pair_of][:, None] * prob
        # a -inf probability (single-label rows without a second candidate) is no entry: score 0 is always dropped
        entry_score = torch.where(prob > float('-inf'), entry_score, torch.zeros_like(entry_score))
        flat = ((image * c_max + slot)[:, None] * k + torch.arange(k, device=device)).reshape(-1)
        score.view(-1).index_copy_(0, flat, entry_score.reshape(-1))
        predicate.view(-1).index_copy_(0, flat, pred.reshape(-1))
        pair.view(-1).index_copy_(0, flat, pair_of[:, None].expand(-1, k).reshape(-1))
    if width == 0:
        order = torch.zeros((b_size, 0), dtype=torch.long, device=device)
        listed = order.bool()
    else:  # the real entries of image b are its first count[b] * k (candidate-major, in pair order)
        order, listed = prefix_topk(score, count * k, length)
    top = score.gather(1, order)
    valid = listed & (top > torch.tensor(min_score, dtype=torch.float32, device=device))
    zero = torch.zeros_like(order)
    pair = torch.where(valid, pair.gather(1, order), zero)
    ends = batch.pairs.take(pair) if r_max else torch.zeros(pair.shape + (2,), dtype=torch.long, device=device)
    return OIList(valid=valid, score=torch.where(valid, top, torch.zeros_like(top)),
                  predicate=torch.where(valid, predicate.gather(1, order), zero), pair=pair,
                  subject=torch.where(valid, ends[..., 0], zero), object=torch.where(valid, ends[..., 1], zero))


def oi_list_request(length: int = OI_LIST_LENGTH, per_pair: int = OI_PREDICATES_PER_PAIR,
                    min_score: float = OI_MIN_SCORE) -> Tuple[int, int, float]:
    """What a reader's compiled pass is asked for to build the OI lists itself (the fourth element of its
    ``ranking``; ``batch.ranked_lists.oi_lists`` then holds them)."""
    return int(length), int(per_pair), float(min_score)


def _compiled_ranked_lists(batch, length: int, per_pair: int, min_score: float) -> Optional[OIList]:
    """:func:`oi_ranked_lists` by the compiled kernels (the same tensors: each image's pairs and score rows read in
    place, once): the lists the reader's ranking pass built (``batch.ranked_lists.oi_lists``, asked with
    :func:`oi_list_request`: the candidates' rows read while each matrix was in cache), else ``oi_ranked_lists``
    from that pass' pair scores where it ran; where the kernels apply: on the CPU, kernels built, score matrices
    read in place (the 'compiled' layout), float32 object scores; else None."""
    kernels = pair_kernels(batch)
    if kernels is None or batch.scores.layout != 'compiled' or not hasattr(kernels, 'oi_ranked_lists'):
        return None  # (a build older than these sources lacks the kernel: the torch operations)
    scores, ranked = batch.scores, batch.ranked_lists
    if ranked is not None and ranked.oi_lists is not None and \
            ranked.oi_lists[0] == oi_list_request(length, per_pair, min_score):  # built by the reader's pass
        tensors = ranked.oi_lists[1]
    else:
        tensors = kernels.oi_ranked_lists(
            scores.sources, scores.column, scores.num_predicates, batch.pair_rows, batch.pred_scores, scores.best,
            batch.num_rel_preds, int(length), int(per_pair), float(min_score),
            ranked.pair_score if ranked is not None else None)
    score, predicate, pair, subject, obj, valid = tensors
    return OIList(valid=valid, score=score, predicate=predicate, pair=pair, subject=subject, object=obj)


def greedy_claims(overlap: Tensor, threshold: float = OI_AP_THRESHOLD) -> Tensor:
    """[B, E] bool true positives of the VOC greedy assignment within each image.

    ``overlap`` [B, E, G]: the overlap of entry e with GT g where g is a candidate of e, negative elsewhere;
    entries are in processing order. Entry e takes its best candidate (the first of the highest overlap); it is
    a true positive when that overlap is > ``threshold`` and no earlier entry took the same GT as a true
    positive (a taken GT makes the entry a false positive; an entry at or below the threshold takes nothing)."""
    b_size, e_size, g_size = overlap.shape
    if g_size == 0 or e_size == 0:
        return torch.zeros((b_size, e_size), dtype=torch.bool, device=overlap.device)
    best, target = overlap.max(dim=2)  # the first maximal GT
    ok = best > threshold
    earlier = torch.ones((e_size, e_size), dtype=torch.bool, device=overlap.device).tril(-1)  # [e, e'] e' < e
    taken = ((target[:, :, None] == target[:, None, :]) & ok[:, None, :] & earlier).any(2)
    return ok & ~taken


def oi_match(batch, lists: OIList, plus_one: bool) -> Dict[str, Tensor]:
    """Recall hits and AP flags of the OI lists ``lists`` of ``batch`` against its GT relations.

    Returns ``first_hit`` [B, G] int64 (rank of the first entry hitting each GT relation, IoU >= 0.5 on both
    ends; ``NO_HIT`` when none or on padding), ``tp_rel`` / ``tp_phr`` [B, E] bool (AP true positives, see
    :func:`greedy_claims`)."""
    gt_valid = batch.gt_valid
    b_size, g_size = gt_valid.shape
    e_size = lists.valid.shape[1]
    device = gt_valid.device
    if g_size == 0 or e_size == 0:
        return {'first_hit': torch.full((b_size, g_size), NO_HIT, dtype=torch.long, device=device),
                'tp_rel': torch.zeros((b_size, e_size), dtype=torch.bool, device=device),
                'tp_phr': torch.zeros((b_size, e_size), dtype=torch.bool, device=device)}

    kernels = _match_kernels(batch, lists)
    if kernels is not None:  # the same flags, image by image
        first_hit, tp_rel, tp_phr = kernels.oi_match_lists(
            batch.pred_boxes, batch.pred_labels, batch.gt_boxes, batch.gt_labels, batch.gt_pairs, batch.gt_predicates,
            gt_valid, lists.subject, lists.object, lists.predicate, lists.valid, bool(plus_one),
            OI_RECALL_THRESHOLD, OI_AP_THRESHOLD)
        return {'first_hit': first_hit, 'tp_rel': tp_rel, 'tp_phr': tp_phr}

    def take(values: Tensor, index: Tensor) -> Tensor:
        if values.dim() == 3:
            return values.gather(1, index[..., None].expand(-1, -1, values.shape[2]))
        return values.gather(1, index)
    gt_sub, gt_obj = batch.gt_pairs[..., 0], batch.gt_pairs[..., 1]
    gt_sub_box, gt_obj_box = take(batch.gt_boxes, gt_sub), take(batch.gt_boxes, gt_obj)
    gt_sub_label, gt_obj_label = take(batch.gt_labels, gt_sub), take(batch.gt_labels, gt_obj)
    sub_box, obj_box = take(batch.pred_boxes, lists.subject), take(batch.pred_boxes, lists.object)
    sub_label, obj_label = take(batch.pred_labels, lists.subject), take(batch.pred_labels, lists.object)
    iou_sub = box_iou(sub_box, gt_sub_box, plus_one)  # [B, E, G]
    iou_obj = box_iou(obj_box, gt_obj_box, plus_one)
    same = (lists.valid[:, :, None] & gt_valid[:, None, :] &
            (lists.predicate[:, :, None] == batch.gt_predicates[:, None, :]) &
            (sub_label[:, :, None] == gt_sub_label[:, None, :]) & (obj_label[:, :, None] == gt_obj_label[:, None, :]))
    hit = same & (iou_sub >= OI_RECALL_THRESHOLD) & (iou_obj >= OI_RECALL_THRESHOLD)
    rank = torch.arange(e_size, device=device)[None, :, None].expand_as(hit)
    first_hit = torch.where(hit, rank, torch.full_like(rank, NO_HIT)).amin(1)
    minus = torch.tensor(-1.0, device=device)
    overlap_rel = torch.where(same, torch.minimum(iou_sub, iou_obj), minus)
    overlap_phr = torch.where(same, box_iou(union_boxes(sub_box.float(), obj_box.float()),
                                            union_boxes(gt_sub_box.float(), gt_obj_box.float()), plus_one), minus)
    return {'first_hit': torch.where(gt_valid, first_hit, torch.full_like(first_hit, NO_HIT)),
            'tp_rel': greedy_claims(overlap_rel) & lists.valid, 'tp_phr': greedy_claims(overlap_phr) & lists.valid}


def _match_kernels(batch, lists: OIList):
    """The compiled kernels when :func:`oi_match`'s kernel reads the batch (CPU, float32 boxes, int64 indices and
    labels), else None."""
    kernels = compiled.kernels() if batch.device.type == 'cpu' else None
    if kernels is None or not hasattr(kernels, 'oi_match_lists'):
        return None
    indices = (batch.pred_labels, batch.gt_labels, batch.gt_pairs, batch.gt_predicates, lists.subject, lists.object,
               lists.predicate)
    if batch.pred_boxes.dtype == batch.gt_boxes.dtype == torch.float32 and all(t.dtype == torch.long for t in indices):
        return kernels
    return None


def ap_order(predicate: Tensor, score: Tensor, sample_idx: Tensor, rank: Tensor) -> Tensor:
    """Permutation of entry rows sorting them by predicate, then score descending, then ``sample_idx``, then
    ``rank`` (ascending): the documented order of the AP sweep (scores are float32, no NaN). Integer keys
    only: (predicate, score) packed into one int64 when the predicates are in [0, 2^31), and (``sample_idx``,
    ``rank``) not sorted again when the rows are in that order already (as the reduced tables are)."""
    sample_idx, rank, predicate = sample_idx.long(), rank.long(), predicate.long()
    descending = -sortable_key(score)
    packed = not predicate.numel() or (int(predicate.min()) >= 0 and int(predicate.max()) < 2 ** 31)
    keys = [(predicate << 32) + (descending + (2 ** 31 - 1))] if packed else [descending, predicate]
    in_order = bool(((sample_idx[1:] > sample_idx[:-1]) |
                     ((sample_idx[1:] == sample_idx[:-1]) & (rank[1:] > rank[:-1]))).all())
    order = None  # each stable sort in turn, least significant key first (the identity skipped)
    for key in ([] if in_order else [rank, sample_idx]) + keys:
        step = torch.sort(key if order is None else key.index_select(0, order), stable=True).indices
        order = step if order is None else order.index_select(0, step)
    return order


def tie_groups(sorted_rows: Dict[str, Tensor]) -> Tuple[Tensor, Tensor]:
    """(start [G], size [G]) of the runs of entry rows (sorted by :func:`ap_order`) with equal predicate, score and
    ``sample_idx``: the rows of one image that the sweep meets tied, in rank order."""
    n = sorted_rows['predicate'].numel()
    pred, score, sample = sorted_rows['predicate'], sorted_rows['score'], sorted_rows['sample_idx']
    new_group = torch.ones(n, dtype=torch.bool)
    new_group[1:] = (pred[1:] != pred[:-1]) | (score[1:] != score[:-1]) | (sample[1:] != sample[:-1])
    start = new_group.nonzero().squeeze(1)
    return start, torch.diff(start, append=torch.tensor([n]))


def copied_rows(groups: Tuple[Tensor, Tensor], copies: Tensor) -> Tensor:
    """Indices of the entry rows (sorted by :func:`ap_order`; ``groups`` their :func:`tie_groups`) of a resample
    in which the image of row i is drawn ``copies[i]`` times (an integer count per row, equal over an image's
    rows), in the order the sweep takes the copies as distinct images (consecutive ``sample_idx``): each tie
    group is repeated as a whole, copy after copy. Weighting each row instead would reorder tied TP / FP rows of
    one image (TP TP FP FP instead of TP FP TP FP)."""
    start, size = groups
    length = copies.index_select(0, start).round().long() * size
    group = torch.repeat_interleave(torch.arange(start.numel()), length)
    offset = torch.arange(int(length.sum())) - torch.repeat_interleave(torch.cumsum(length, 0) - length, length)
    return start.index_select(0, group) + offset % size.index_select(0, group)


def voc_ap(tp: Tensor, weight: Tensor, npos: float) -> float:
    """VOC all-point AP of rows already sorted by score: ``tp`` [n] bool, ``weight`` [n] float64 (how many copies
    of each row, 1 normally; a bootstrap replicate's draws), ``npos`` GT relations. Each true-positive row adds
    ``weight / npos`` times the precision envelope at it (the highest precision at or after it); 0 when
    ``npos`` is 0."""
    if npos <= 0 or tp.numel() == 0:
        return 0.0
    hits = torch.where(tp, weight, torch.zeros_like(weight))
    cum_tp = torch.cumsum(hits, 0)
    cum_all = torch.cumsum(weight, 0)
    precision = cum_tp / cum_all.clamp(min=torch.finfo(torch.float64).eps)
    envelope = torch.flip(torch.cummax(torch.flip(precision, (0,)), 0).values, (0,))
    return float((hits * envelope).sum()) / float(npos)


def oi_average_precisions(sorted_rows: Dict[str, Tensor], npos: Tensor, num_predicates: int,
                          weight: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """(AP_rel [P], AP_phr [P]) float64 fractions of entry rows sorted by :func:`ap_order`.

    ``sorted_rows``: ``predicate``, ``tp_rel``, ``tp_phr`` [n]; ``npos`` [P] GT relations per predicate;
    ``weight`` [n] float64 copies of each row (None: 1)."""
    predicate = sorted_rows['predicate'].long()
    if weight is None:
        weight = torch.ones(predicate.shape, dtype=torch.float64)
    counts = torch.bincount(predicate, minlength=num_predicates).tolist()
    npos_list = npos.double().tolist()
    ap = torch.zeros((2, num_predicates), dtype=torch.float64)
    start = 0
    for c, n in enumerate(counts):
        if n and npos_list[c] > 0:
            w = weight[start:start + n]
            ap[0, c] = voc_ap(sorted_rows['tp_rel'][start:start + n].bool(), w, npos_list[c])
            ap[1, c] = voc_ap(sorted_rows['tp_phr'][start:start + n].bool(), w, npos_list[c])
        start += n
    return ap[0], ap[1]


def oi_scores(ap_rel: Tensor, ap_phr: Tensor, npos: Tensor, recall_50: float) -> Dict[str, float]:
    """The summary fractions: ``mAP_rel`` / ``mAP_phr`` (mean over all predicates), ``wmAP_rel`` / ``wmAP_phr``
    (weighted by the GT counts ``npos``; 0 without GT), ``final_score`` = 0.2 R@50 + 0.4 mAP_rel + 0.4 mAP_phr
    and ``w_final_score`` (with the weighted mAPs)."""
    num = max(int(ap_rel.numel()), 1)
    total = float(npos.double().sum())
    share = npos.double() / total if total > 0 else torch.zeros_like(npos, dtype=torch.float64)
    out = {'mAP_rel': float(ap_rel.sum()) / num, 'wmAP_rel': float((ap_rel * share).sum()),
           'mAP_phr': float(ap_phr.sum()) / num, 'wmAP_phr': float((ap_phr * share).sum())}
    out['final_score'] = 0.4 * out['mAP_rel'] + 0.2 * recall_50 + 0.4 * out['mAP_phr']
    out['w_final_score'] = 0.4 * out['wmAP_rel'] + 0.2 * recall_50 + 0.4 * out['wmAP_phr']
    return out


def pooled_recall(first_hit: Tensor, ks: Sequence[int], weight: Optional[Tensor] = None) -> Tensor:
    """[len(ks)] float64 pooled R@K: GT relations (optionally weighted, [n] float64) with ``first_hit < K``
    over all GT relations (0 when there are none)."""
    w = torch.ones(first_hit.shape, dtype=torch.float64) if weight is None else weight
    total = float(w.sum())
    values = [float(w[first_hit.long() < rank_limit(k)].sum()) / total if total > 0 else 0.0 for k in ks]
    return torch.tensor(values, dtype=torch.float64)


def stored_first_hits(first_hit: Tensor) -> Tensor:
    """[G] int64 first-hit ranks as stored (``OI_NO_HIT`` for a miss) -> ranks with misses as ``NO_HIT`` (above
    every K)."""
    rank = first_hit.long()
    return torch.where(rank < OI_NO_HIT, rank, torch.full_like(rank, NO_HIT))
