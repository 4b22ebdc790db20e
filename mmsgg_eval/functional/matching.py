"""Many-to-many triplet matching and first-hit ranks, on padded batches.

A predicted triplet j hits GT relation g when subject class, predicate and object class are equal and both
the subject IoU and the object IoU are >= ``iou_thr`` (or, for phrase detection, the IoU of the union boxes).
No one-to-one assignment: one prediction may hit several GT relations and vice versa.
"""
from typing import NamedTuple, Optional, Tuple, Union

import torch
from torch import Tensor

from . import compiled
from .boxes import box_iou, box_iou_unchecked, mask_iou, paired_box_iou, union_boxes

from .limits import NO_HIT  # rank of a GT relation that no prediction hits
from .ranking import positions_in_groups, stable_topk
from .transfer import sync_free


def gather_pair_iou(object_iou: Tensor, pred_objects: Tensor, gt_objects: Tensor) -> Tensor:
    """IoU between predicted object ``pred_objects[b, j]`` and GT object ``gt_objects[b, g]``.

    ``object_iou`` [B, N, M] (pred objects x GT objects); returns [B, J, G].
    """
    num_gt_objects = object_iou.shape[-1]
    rows = object_iou.gather(1, pred_objects[..., None].expand(-1, -1, num_gt_objects))  # [B, J, M]
    return rows.gather(2, gt_objects[:, None, :].expand(-1, rows.shape[1], -1))


def triplet_hits(pred_subject: Tensor, pred_object: Tensor, pred_predicate: Tensor, pred_valid: Tensor,
                 pred_labels: Tensor, gt_subject: Tensor, gt_object: Tensor, gt_predicate: Tensor,
                 gt_valid: Tensor, gt_labels: Tensor, iou_thr: float,
                 object_iou: Optional[Tensor] = None, pred_boxes: Optional[Tensor] = None,
                 gt_boxes: Optional[Tensor] = None, phrase: bool = False, plus_one: bool = False) -> Tensor:
    """Hit matrix [B, J, G] between ranked predicted triplets and GT relations.

    Subject/object entries are object indices (into ``pred_labels`` [B, N] / ``gt_labels`` [B, M]),
    predicates are 0-based. ``object_iou`` [B, N, M] is required for box/mask matching; ``phrase=True``
    matches the union boxes instead (needs ``pred_boxes``/``gt_boxes``).
    """
    sub_label = pred_labels.gather(1, pred_subject)
    obj_label = pred_labels.gather(1, pred_object)
    gt_sub_label = gt_labels.gather(1, gt_subject)
    gt_obj_label = gt_labels.gather(1, gt_object)
    same = ((sub_label[:, :, None] == gt_sub_label[:, None, :])
            & (pred_predicate[:, :, None] == gt_predicate[:, None, :])
            & (obj_label[:, :, None] == gt_obj_label[:, None, :]))
    same &= pred_valid[:, :, None] & gt_valid[:, None, :]
    if phrase:
        def take(boxes: Tensor, index: Tensor) -> Tensor:
            return boxes.gather(1, index[..., None].expand(-1, -1, 4))
        pred_union = union_boxes(take(pred_boxes, pred_subject), take(pred_boxes, pred_object))
        gt_union = union_boxes(take(gt_boxes, gt_subject), take(gt_boxes, gt_object))
        return same & (box_iou(pred_union, gt_union, plus_one) >= iou_thr)
    sub_ok = gather_pair_iou(object_iou, pred_subject, gt_subject) >= iou_thr
    obj_ok = gather_pair_iou(object_iou, pred_object, gt_object) >= iou_thr
    return same & sub_ok & obj_ok


def same_class_matrix(pred_labels: Tensor, gt_labels: Tensor) -> Tensor:
    """[B, N, M] bool: predicted object n and GT object m have the same class (negative = padding, never)."""
    # int32 (class indices are small) halves the compare's memory traffic; padding (-2 / -1) never meets
    pred_labels = torch.where(pred_labels >= 0, pred_labels, torch.full_like(pred_labels, -2)).int()
    return pred_labels[:, :, None] == gt_labels.int()[:, None, :]


class ObjectMatches(NamedTuple):
    """The matching (predicted object, GT object) pairs of a padded batch of shape (B, N, M), as flat rows:
    ``pred_row`` = b * N + n, ``gt_row`` = b * M + m (one entry per matching pair, any order)."""
    pred_row: Tensor
    gt_row: Tensor
    shape: Tuple[int, int, int]

    @classmethod
    def from_matrix(cls, matches: Tensor) -> 'ObjectMatches':
        """From a [B, N, M] bool matrix."""
        batch, num_pred, num_gt = matches.shape
        flat = matches.reshape(-1).nonzero().squeeze(1)  # b * N * M + n * M + m
        return cls(flat // num_gt, flat // (num_pred * num_gt) * num_gt + flat % num_gt,
                   (batch, num_pred, num_gt))

    def dense(self) -> Tensor:
        """The [B, N, M] bool matrix."""
        batch, num_pred, num_gt = self.shape
        out = torch.zeros(batch * num_pred * num_gt, dtype=torch.bool, device=self.pred_row.device)
        out[self.pred_row * num_gt + self.gt_row % num_gt] = True
        return out.view(batch, num_pred, num_gt)


def same_class_pairs(pred_labels: Tensor, gt_labels: Tensor) -> ObjectMatches:
    """Every (predicted object, GT object) pair of an image with the same class (labels [B, N] / [B, M],
    0-based; negative = padding, in no pair), ordered by predicted object then GT object. A join on
    (image, class) buckets instead of comparing all N x M pairs (one host synchronisation: the largest label)."""
    batch, num_pred = pred_labels.shape
    num_gt = gt_labels.shape[1]
    device = pred_labels.device
    shape = (batch, num_pred, num_gt)
    empty = torch.zeros(0, dtype=torch.long, device=device)
    if not (pred_labels.numel() and gt_labels.numel()):
        return ObjectMatches(empty, empty, shape)
    num_classes = int(torch.maximum(pred_labels.max(), gt_labels.max()).clamp(min=0)) + 1
    if batch * num_classes > PAIR_TABLE_ENTRIES:  # sparse large labels: number the classes present instead
        present, inverse = torch.unique(torch.cat([pred_labels.reshape(-1), gt_labels.reshape(-1)]),
                                        return_inverse=True)
        inverse = inverse - int((present < 0).sum())  # padding labels stay negative
        pred_labels = inverse[:pred_labels.numel()].view(pred_labels.shape)
        gt_labels = inverse[pred_labels.numel():].view(gt_labels.shape)
        num_classes = max(int(present.numel()), 1)
    image = torch.arange(batch, device=device)[:, None] * num_classes
    dump = batch * num_classes  # the bucket of padding GT objects
    gt_bucket = torch.where(gt_labels >= 0, image + gt_labels, torch.full((), dump, device=device)).view(-1)
    count = torch.bincount(gt_bucket, minlength=dump + 1)
    start = torch.cumsum(count, 0) - count
    gt_order = torch.sort(gt_bucket, stable=True).indices  # b * M + m, by bucket, then by m
    pred_valid = pred_labels >= 0
    pred_bucket = torch.where(pred_valid, image + pred_labels, torch.full((), dump, device=device)).view(-1)
    partners = torch.where(pred_valid.view(-1), count.index_select(0, pred_bucket), torch.zeros((), dtype=torch.long,
                                                                                                 device=device))
    pred_row = torch.repeat_interleave(torch.arange(batch * num_pred, device=device), partners)
    offset = positions_in_groups(pred_row, partners)[1]
    gt_row = gt_order.index_select(0, start.index_select(0, pred_bucket.index_select(0, pred_row)) + offset)
    return ObjectMatches(pred_row, gt_row, shape)


def box_object_match_list(pred_boxes: Tensor, pred_labels: Tensor, gt_boxes: Tensor, gt_labels: Tensor,
                          iou_thr: float, plus_one: bool = False, sparse: Optional[bool] = None) -> ObjectMatches:
    """The pairs of :func:`box_object_matches` as :class:`ObjectMatches`. ``sparse`` (default: where not
    :func:`~.transfer.sync_free`, i.e. on the CPU)
    computes the IoU only for the same-class pairs (a few percent of N x M on VG-like data); otherwise the
    full matrix is computed."""
    if sparse is None:
        sparse = not sync_free(pred_labels.device)
    if not sparse:
        return ObjectMatches.from_matrix(box_object_matches(pred_boxes, pred_labels, gt_boxes, gt_labels, iou_thr,
                                                            plus_one, sparse=False))
    same = same_class_pairs(pred_labels, gt_labels)
    iou = paired_box_iou(pred_boxes.reshape(-1, 4).index_select(0, same.pred_row),
                         gt_boxes.reshape(-1, 4).index_select(0, same.gt_row), plus_one)
    keep = iou >= iou_thr
    return ObjectMatches(same.pred_row[keep], same.gt_row[keep], same.shape)


def box_object_matches(pred_boxes: Tensor, pred_labels: Tensor, gt_boxes: Tensor, gt_labels: Tensor,
                       iou_thr: float, plus_one: bool = False, sparse: Optional[bool] = None) -> Tensor:
    """[B, N, M] bool: predicted object n of image b matches GT object m (same class and box IoU >= thr).

    Padding labels are negative. ``sparse``: see :func:`box_object_match_list`; the dense way has no host
    synchronisation.
    """
    if sparse is None:
        sparse = not sync_free(pred_labels.device)
    if sparse:
        return box_object_match_list(pred_boxes, pred_labels, gt_boxes, gt_labels, iou_thr, plus_one, True).dense()
    iou = box_iou(pred_boxes, gt_boxes, plus_one) if iou_thr <= 0 else \
        box_iou_unchecked(pred_boxes, gt_boxes, plus_one)  # NaN >= thr is False, as 0 >= thr
    return same_class_matrix(pred_labels, gt_labels) & (iou >= iou_thr)


BITS_PER_WORD = 64  # GT relations per int64 word of a bit set


def object_iou_matrix(batch, plus_one: bool, use_masks: bool) -> Tensor:
    """IoU between predicted and GT objects of every image: [B, N, M] (boxes, or masks when asked)."""
    if not use_masks:
        return box_iou(batch.pred_boxes, batch.gt_boxes, plus_one)
    num_pred, num_gt = batch.pred_boxes.shape[1], batch.gt_boxes.shape[1]
    out = batch.pred_boxes.new_zeros((len(batch.pred_masks), num_pred, num_gt))
    for i, (pm, gm) in enumerate(zip(batch.pred_masks, batch.gt_masks)):
        if pm.shape[-2:] != gm.shape[-2:]:
            raise ValueError(f'sample_idx={int(batch.sample_idx[i])}: predicted masks {list(pm.shape[-2:])} and '
                             f'GT masks {list(gm.shape[-2:])} differ in size (masks must be in the original frame)')
        out[i, :pm.shape[0], :gm.shape[0]] = mask_iou(pm, gm)
    return out


def object_match_list(batch, iou_thr: float, plus_one: bool, use_masks: bool) -> ObjectMatches:
    """The (predicted object, GT object) pairs of every image that match (same class, box or mask IoU >=
    ``iou_thr``)."""
    if not use_masks:
        return box_object_match_list(batch.pred_boxes, batch.pred_labels, batch.gt_boxes, batch.gt_labels, iou_thr,
                                     plus_one)
    return ObjectMatches.from_matrix(object_match_matrix(batch, iou_thr, plus_one, use_masks))


def object_match_matrix(batch, iou_thr: float, plus_one: bool, use_masks: bool) -> Tensor:
    """[B, N, M] bool: predicted object n matches GT object m (same class, box or mask IoU >= ``iou_thr``)."""
    if not use_masks:
        return box_object_matches(batch.pred_boxes, batch.pred_labels, batch.gt_boxes, batch.gt_labels, iou_thr,
                                  plus_one)
    return same_class_matrix(batch.pred_labels, batch.gt_labels) & \
        (object_iou_matrix(batch, plus_one, use_masks=True) >= iou_thr)



def relation_bits(rows: Tensor, valid: Tensor, num_rows: int) -> Tensor:
    """Bit sets of GT relations grouped by a row index: [B, G] rows in [0, ``num_rows``) -> [B, num_rows, W]
    int64 (W = ceil(G / 64), at least 1): bit g % 64 of word g // 64 of row ``rows[b, g]`` is set for every
    valid GT relation g (e.g. rows = subject objects: the relations whose subject is each GT object)."""
    batch, num_gt = rows.shape
    words = max(-(-num_gt // BITS_PER_WORD), 1)
    device = rows.device
    g = torch.arange(num_gt, device=device)
    bit = torch.ones_like(g) << (g % BITS_PER_WORD)  # bit 63 is the int64 sign bit: still one bit
    index = (torch.arange(batch, device=device)[:, None] * num_rows + rows) * words + g // BITS_PER_WORD
    size = batch * num_rows * words
    out = torch.zeros(size + 1, dtype=torch.long, device=device)  # + 1: where invalid relations add nothing
    # each relation sets its own bit once, so adding the bits is OR-ing them (masks kept as masks: no host wait)
    out.index_add_(0, torch.where(valid, index, size).reshape(-1),
                   torch.where(valid, bit.expand(batch, -1), 0).reshape(-1))
    return out[:size].view(batch, num_rows, words)


def expand_bits(bits: Tensor, num_gt: int) -> Tensor:
    """[..., W] int64 bit sets -> [..., num_gt] bool (bit g of the set)."""
    shifts = torch.arange(BITS_PER_WORD, device=bits.device)
    return ((bits[..., None] >> shifts) & 1).flatten(-2)[..., :num_gt].bool()


def relation_end_bits(matches: Union[ObjectMatches, Tensor], gt_subject: Tensor, gt_object: Tensor,
                      gt_valid: Tensor) -> Tuple[Tensor, Tensor]:
    """For every predicted object, the bit set (see :func:`relation_bits`) of the GT relations whose subject /
    object it matches: two [B, N, W] int64 from the object ``matches`` (a list, or the [B, N, M] bool matrix:
    then summed densely, without a host synchronisation); padded GT relations are in no set."""
    batch, num_pred, num_gt_objects = matches.shape
    subject_of = relation_bits(gt_subject, gt_valid, num_gt_objects)  # [B, M, W]
    object_of = relation_bits(gt_object, gt_valid, num_gt_objects)
    words = subject_of.shape[2]
    out = []
    for table in (subject_of, object_of):
        # a relation has one subject and one object, so the sets added into a predicted object are disjoint
        if isinstance(matches, Tensor):
            out.append((matches[..., None].long() * table[:, None]).sum(2))
            continue
        bits = torch.zeros((batch * num_pred, words), dtype=torch.long, device=gt_subject.device)
        bits.index_add_(0, matches.pred_row, table.reshape(-1, words).index_select(0, matches.gt_row))
        out.append(bits.view(batch, num_pred, words))
    return out[0], out[1]


def pair_end_bits(subject_bits: Tensor, object_bits: Tensor, pred_subject: Tensor, pred_object: Tensor,
                  pred_valid: Tensor) -> Tensor:
    """[B, J, W] bit sets of the GT relations whose subject AND object the entries' pairs match (J entries of
    (subject idx, object idx) [B, J] into the predicted objects); invalid entries match nothing."""
    batch, num_pred, words = subject_bits.shape
    length = pred_subject.shape[1]
    if num_pred == 0 or length == 0:
        return torch.zeros((batch, length, words), dtype=torch.long, device=subject_bits.device)
    base = torch.arange(batch, device=subject_bits.device)[:, None] * num_pred
    sub = subject_bits.reshape(-1, words).index_select(0, (pred_subject + base).reshape(-1))
    obj = object_bits.reshape(-1, words).index_select(0, (pred_object + base).reshape(-1))
    ends = (sub & obj).view(batch, length, words)
    return ends * pred_valid[..., None]


def predicate_bits(gt_predicate: Tensor, gt_valid: Tensor, num_predicates: int) -> Tensor:
    """[B, P + 1, W] bit sets of the GT relations carrying each predicate (0-based); row P holds none."""
    return relation_bits(torch.where(gt_valid, gt_predicate, torch.zeros_like(gt_predicate)), gt_valid,
                         num_predicates + 1)


def predicate_hit_bits(end_bits: Tensor, carries: Tensor, pred_predicate: Tensor, pred_valid: Tensor) -> Tensor:
    """The hits of ranked entries as [B, J, W] bit sets: ``end_bits`` (:func:`pair_end_bits`) restricted to the
    GT relations carrying the entry's predicate (``carries``: :func:`predicate_bits`; 0-based
    ``pred_predicate`` [B, J]; invalid entries and predicates outside [0, P) hit nothing)."""
    batch, length, words = end_bits.shape
    num_predicates = carries.shape[1] - 1
    in_range = pred_valid & (pred_predicate >= 0) & (pred_predicate < num_predicates)
    row = torch.where(in_range, pred_predicate, torch.full_like(pred_predicate, num_predicates))
    base = torch.arange(batch, device=end_bits.device)[:, None] * (num_predicates + 1)
    same = carries.reshape(-1, words).index_select(0, (row + base).reshape(-1)).view(batch, length, words)
    return end_bits & same


def first_hit_rank_bits(hit_bits: Tensor, num_gt: int, list_valid: Optional[Tensor] = None) -> Tensor:
    """:func:`first_hit_rank` of hits given as [B, J, W] bit sets: [B, G] int32 (``NO_HIT`` when none). Only the
    entries with a hit are expanded (few: most ranked entries hit no GT relation), except where
    :func:`~.transfer.sync_free`: there every entry's bits are expanded and the first hit of each GT relation is
    an arg-max along the list (no host synchronisation)."""
    batch, length, words = hit_bits.shape
    if sync_free(hit_bits.device):
        return _first_hit_rank_dense(hit_bits, num_gt, list_valid)
    out = torch.full((batch * words * BITS_PER_WORD,), NO_HIT, dtype=torch.long, device=hit_bits.device)
    if list_valid is not None:
        hit_bits = hit_bits * list_valid[..., None]
    entry = (hit_bits != 0).any(-1).view(-1).nonzero().squeeze(1)  # b * J + j of the entries with a hit
    if entry.numel():
        position = entry % length
        if list_valid is not None:  # positions count only the entries of the sub-list
            position = (torch.cumsum(list_valid.long(), dim=1) - 1).view(-1).index_select(0, entry)
        which = expand_bits(hit_bits.reshape(-1, words).index_select(0, entry), words * BITS_PER_WORD).nonzero()
        target = (entry // length).index_select(0, which[:, 0]) * (words * BITS_PER_WORD) + which[:, 1]
        out.scatter_reduce_(0, target, position.index_select(0, which[:, 0]), 'amin')
    return out.view(batch, -1)[:, :num_gt].int()


def _first_hit_rank_dense(hit_bits: Tensor, num_gt: int, list_valid: Optional[Tensor]) -> Tensor:
    """:func:`first_hit_rank_bits` on the expanded [B, J, G] hits: the first entry with a hit of each GT relation
    (arg-max of the hits along the list: the first maximum), its position (among the ``list_valid`` entries)."""
    batch, length, words = hit_bits.shape
    if length == 0 or num_gt == 0:
        return torch.full((batch, num_gt), NO_HIT, dtype=torch.int32, device=hit_bits.device)
    if list_valid is not None:
        hit_bits = hit_bits * list_valid[..., None]
    hits = expand_bits(hit_bits, num_gt)  # [B, J, G]
    first = hits.to(torch.uint8).argmax(dim=1)  # [B, G]
    if list_valid is not None:  # positions count only the entries of the sub-list
        first = (torch.cumsum(list_valid.long(), dim=1) - 1).gather(1, first)
    return torch.where(hits.any(dim=1), first, NO_HIT).int()


# pairs_in_reference uses a [B, S * S] lookup table up to this many entries (else a sorted search)
PAIR_TABLE_ENTRIES = 1 << 24


def gt_pair_sublist(batch, gc_score: Tensor, k: int, rank_by: str = 'score'
                    ) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
    """The graph-constrained list restricted to the predicted pairs that are GT pairs (index equality: pair
    accuracy), as ``(order [B, J], valid [B, J], list_valid)`` for a first-hit ranker.

    ``batch``: a :class:`~mmsgg_eval.structures.reader.SceneGraphBatch`; ``gc_score`` [B, R]: its pairs' triplet
    scores (the graph-constrained ranking's). ``rank_by='score'``: the top ``k`` of the sub-list by that score,
    descending and stable (``list_valid`` None; on the CPU one pass per image of the compiled kernel, the same
    list); ``'given'``: every pair in the model's order, the sub-list's positions counted through ``list_valid``
    (= ``valid``)."""
    kernels = compiled.kernels() if batch.device.type == 'cpu' else None
    if rank_by == 'score' and kernels is not None and gc_score.dtype == torch.float32:
        order, valid = kernels.gt_pair_list(batch.pair_rows, batch.num_rel_preds, batch.gt_pairs, batch.gt_valid,
                                            gc_score, k)
        return order, valid, None
    in_gt = pairs_in_reference(batch.rel_pairs, batch.rel_valid, batch.gt_pairs, batch.gt_valid,
                               max(batch.pred_boxes.shape[1], batch.gt_boxes.shape[1]))
    if rank_by == 'given':
        return torch.arange(in_gt.shape[1], device=batch.device).expand_as(in_gt), in_gt, in_gt
    order, valid = stable_topk(gc_score, in_gt, k)
    return order, valid, None


def pairs_in_reference(pairs: Tensor, valid: Tensor, ref_pairs: Tensor, ref_valid: Tensor,
                       num_objects: int) -> Tensor:
    """[B, R] bool: pair ``pairs[b, r]`` (subject idx, object idx) equals one of image b's valid
    ``ref_pairs[b]`` [G, 2] (index equality, e.g. a predicted pair that is a GT pair), and ``valid[b, r]``.

    Every index must lie in [0, ``num_objects``). A [B, S * S] table of the reference pairs is looked up
    (S = ``num_objects``) when it has at most ``PAIR_TABLE_ENTRIES`` entries, else the image-offset pair codes
    are searched in the sorted reference codes; both give the same result.
    """
    batch, length = valid.shape
    size = max(int(num_objects), 1)
    image = torch.arange(batch, device=valid.device)[:, None] * (size * size)
    ref_code = image + ref_pairs[..., 0] * size + ref_pairs[..., 1]
    code = image + pairs[..., 0] * size + pairs[..., 1]  # [B, R]
    entries = batch * size * size
    if entries <= PAIR_TABLE_ENTRIES:  # the mask kept as a mask: padding entries fill one extra slot
        table = torch.zeros(entries + 1, dtype=torch.bool, device=valid.device)
        table.index_fill_(0, torch.where(ref_valid, ref_code, entries).reshape(-1), True)
        return table[:entries].index_select(0, code.view(-1)).view(batch, length) & valid
    ref_code = ref_code.masked_select(ref_valid)
    if ref_code.numel() == 0:
        return torch.zeros_like(valid)
    ref_code = torch.sort(ref_code).values
    code = code.reshape(-1)
    at = torch.searchsorted(ref_code, code).clamp_(max=ref_code.numel() - 1)
    return (ref_code.index_select(0, at) == code).view(batch, length) & valid


def first_hit_rank(hits: Tensor, list_valid: Optional[Tensor] = None) -> Tensor:
    """0-based position of the first prediction hitting each GT relation: [B, J, G] -> [B, G] int32.

    GT relations that no prediction hits get ``NO_HIT`` (2**30, larger than any K). ``list_valid`` [B, J] optionally
    restricts the list (e.g. the pair-accuracy sub-list); positions then count only kept entries.
    """
    batch, length, num_gt = hits.shape
    if length == 0:
        return torch.full((batch, num_gt), NO_HIT, dtype=torch.int32, device=hits.device)
    if list_valid is not None:
        hits = hits & list_valid[:, :, None]
    any_hit, first = hits.view(torch.uint8).max(dim=1)  # max returns the first maximal index
    if list_valid is not None:
        first = (torch.cumsum(list_valid.int(), dim=1) - 1).gather(1, first)
    return torch.where(any_hit > 0, first.int(), torch.full((), NO_HIT, dtype=torch.int32, device=hits.device))
