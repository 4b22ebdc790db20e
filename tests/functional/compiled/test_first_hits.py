"""The compiled first-hit stage (mmsgg_eval._ext): the box-matched relation end bits, the first-hit ranks of a
ranked list (given predicates, predicates from score rows in place or at an image's first row of one matrix,
ends only, sub-list positions), the GT-pair sub-list and the matrix check; each against a loop reference or the
torch composition, with ties, degenerate boxes, two words of bits, padding and duplicate pairs, the metrics end
to end with the kernels on and off in every score layout, and bad arguments refused naming the problem."""
import collections
import dataclasses

import numpy as np
import pytest
import torch

from mmsgg_eval.functional import compiled, first_hits
from mmsgg_eval.functional.limits import NO_HIT
from mmsgg_eval.functional.matching import box_object_match_list, pairs_in_reference, relation_end_bits
from mmsgg_eval.functional.ranking import stable_topk
from mmsgg_eval.functional.first_hits import scene_graph_ranks
from mmsgg_eval.structures import reader
from mmsgg_eval.structures.reader import collate_scene_graphs

needs_kernels = pytest.mark.skipif(not compiled.built() or compiled.kernels() is None,
                                   reason='the compiled kernels are not built (or MMSGG_EVAL_COMPILED=0)')

NUM_CLASSES = 3  # few classes: many same-class (predicted, GT) pairs
NUM_PREDICATES = 4


# ------------------------------------------------------------------------------------------- random batches
def _half_boxes(g, n):
    """xyxy boxes on a half-pixel grid (every area, intersection and union exact in float32), many of zero width
    or height."""
    x1, y1 = g.integers(0, 30, n) / 2, g.integers(0, 30, n) / 2
    w, h = g.integers(2, 24, n) / 2, g.integers(2, 24, n) / 2
    w[g.random(n) < 0.12] = 0
    h[g.random(n) < 0.08] = 0
    return np.stack([x1, y1, x1 + w, y1 + h], 1).reshape(n, 4)


def _image(g, empty=False, num_gt_rel=None):
    """One image as Python lists: GT objects / relations, predicted objects (most near a GT object, many on it),
    pairs (most on objects near the ends of a GT relation, one repeated) and score rows (ties)."""
    m = 0 if empty else int(g.integers(1, 7))
    gt_boxes, gt_labels = _half_boxes(g, m), g.integers(0, NUM_CLASSES, m)
    if m >= 2 and g.random() < 0.6:  # two identical GT objects: many-to-many matches
        gt_boxes[1], gt_labels[1] = gt_boxes[0], gt_labels[0]
    n = int(g.integers(0, 3)) if empty else int(g.integers(m, m + 5))
    pred_boxes, pred_labels = _half_boxes(g, n), g.integers(0, NUM_CLASSES, n)
    near = collections.defaultdict(list)  # GT object -> the predicted objects placed near it
    for i in range(n):
        if m and g.random() < 0.85:  # near (or on) a GT object, mostly with its class
            src = int(g.integers(0, m))
            near[src].append(i)
            box = gt_boxes[src] + (g.integers(-1, 2, 4) / 2 if g.random() < 0.5 else 0)
            box[2:] = np.maximum(box[2:], box[:2])
            pred_boxes[i] = box
            if g.random() < 0.85:
                pred_labels[i] = gt_labels[src]
    count = num_gt_rel if num_gt_rel is not None else (int(g.integers(0, 8)) if m else 0)
    rels = [(int(g.integers(0, m)), int(g.integers(0, m)), int(g.integers(0, NUM_PREDICATES))) for _ in range(count)]
    if len(rels) >= 2 and g.random() < 0.5:
        rels[-1] = rels[0]  # a duplicate GT triplet
    r = int(g.integers(0, 4 * n + 1)) if n else 0
    pairs = [(int(g.integers(0, n)), int(g.integers(0, n))) for _ in range(r)]
    for i in range(r):  # most pairs on the objects near the two ends of a GT relation
        s, o, _ = rels[int(g.integers(0, len(rels)))] if rels else (0, 0, 0)
        if near[s] and near[o] and g.random() < 0.8:
            pairs[i] = (int(g.choice(near[s])), int(g.choice(near[o])))
    if r >= 2:
        pairs[1] = pairs[0]  # the same pair twice
    scores = np.round(g.random((r, NUM_PREDICATES)) * 4) / 4  # many exact ties within a row
    scores[g.random(r) < 0.1] = [-0.0, 0.0, -0.0, 0.0]  # -0.0 ties with +0.0: the first column is the maximum
    return dict(gt_boxes=gt_boxes.tolist(), gt_labels=gt_labels.tolist(), rels=rels, pred_boxes=pred_boxes.tolist(),
                pred_labels=pred_labels.tolist(), pairs=pairs, scores=scores.tolist())


def _ranked_batch(seed, length=24):
    """A padded batch of 8 images (image 2 has 70 GT relations: two words of bits; image 5 no GT object) and a
    ranked list of ``length`` entries per image, as tensors and as the per-image lists of the loop reference."""
    g = np.random.default_rng(seed)
    images = [_image(g, empty=b == 5, num_gt_rel=70 if b == 2 else None) for b in range(8)]
    batch = len(images)
    num_pred = max(len(im['pred_labels']) for im in images) + 1  # at least one padding object everywhere
    num_gt_obj = max(max(len(im['gt_labels']) for im in images), 1)
    num_rel = max(len(im['rels']) for im in images)
    num_pairs = max(max(len(im['pairs']) for im in images), 1)
    t = dict(pred_boxes=torch.rand(batch, num_pred, 4) * 20,  # padding: any box, label -1
             pred_labels=torch.full((batch, num_pred), -1, dtype=torch.long),
             gt_boxes=torch.rand(batch, num_gt_obj, 4) * 20,
             gt_labels=torch.full((batch, num_gt_obj), -1, dtype=torch.long),
             gt_pairs=torch.zeros(batch, num_rel, 2, dtype=torch.long),
             gt_predicates=torch.zeros(batch, num_rel, dtype=torch.long),
             gt_valid=torch.zeros(batch, num_rel, dtype=torch.bool),
             rel_pairs=torch.zeros(batch, num_pairs, 2, dtype=torch.long))
    for b, im in enumerate(images):
        n, m, r = len(im['pred_labels']), len(im['gt_labels']), len(im['pairs'])
        if n:
            t['pred_boxes'][b, :n] = torch.tensor(im['pred_boxes'])
            t['pred_labels'][b, :n] = torch.tensor(im['pred_labels'])
        if m:
            t['gt_boxes'][b, :m] = torch.tensor(im['gt_boxes'])
            t['gt_labels'][b, :m] = torch.tensor(im['gt_labels'])
        if im['rels']:
            rels = torch.tensor(im['rels'])
            t['gt_pairs'][b, :len(rels)] = rels[:, :2]
            t['gt_predicates'][b, :len(rels)] = rels[:, 2]
            t['gt_valid'][b, :len(rels)] = True
        if r:
            pairs = torch.tensor(im['pairs'])
            if g.random() < 0.5:  # a pair on a padding object (label -1: it matches nothing)
                pairs[0, 1] = n
                im['pairs'][0] = (im['pairs'][0][0], n)
            t['rel_pairs'][b, :r] = pairs
    # the ranked list: entries of the image's pairs (duplicates), invalid entries with any index, predicates
    # mostly the image's GT predicates, some outside [0, P) (they hit nothing), and a sub-list mask
    index = torch.zeros(batch, length, dtype=torch.long)
    valid = torch.zeros(batch, length, dtype=torch.bool)
    predicate = torch.zeros(batch, length, dtype=torch.long)
    for b, im in enumerate(images):
        r = len(im['pairs'])
        gt_pred = [p for _, _, p in im['rels']] or [0]
        for j in range(length):
            ok = r > 0 and g.random() < 0.85
            valid[b, j] = ok
            index[b, j] = int(g.integers(0, r)) if ok else int(g.integers(-3, num_pairs + 3))
            u = g.random()
            predicate[b, j] = int(g.choice(gt_pred)) if u < 0.6 else (-1 if u < 0.65 else NUM_PREDICATES if u < 0.7
                                                                       else int(g.integers(0, NUM_PREDICATES)))
    listed = torch.from_numpy(g.random((batch, length)) < 0.7)
    t.update(index=index, valid=valid, predicate=predicate, list_valid=listed)
    return images, t


def _score_matrices(images, column, seed):
    """Each image's [R_b, column + P] float32 score matrix (a background column first when column = 1) and the
    same rows in one matrix with gaps between the images, with each image's first row ``start``."""
    g = np.random.default_rng(seed)
    per_image, blocks, start, row = [], [], [], 0
    for im in images:
        rows = torch.tensor(im['scores'], dtype=torch.float32).reshape(-1, NUM_PREDICATES)
        m = torch.cat([torch.rand(rows.shape[0], column), rows], 1)
        per_image.append(m.contiguous())
        gap = torch.rand(int(g.integers(0, 3)), column + NUM_PREDICATES)  # rows of no image
        blocks += [gap, m]
        start.append(row + gap.shape[0])
        row += gap.shape[0] + m.shape[0]
    return per_image, torch.cat(blocks).contiguous(), torch.tensor(start)


# ---------------------------------------------------------------------------------------- loop reference
def _iou(a, b, plus_one):
    """IoU of two xyxy boxes, float32 quotient of the exact intersection and union (exact on the half-pixel
    grid); 0 when both are empty (0 / 0)."""
    e = 1.0 if plus_one else 0.0
    w = max(min(a[2], b[2]) - max(a[0], b[0]) + e, 0.0)
    h = max(min(a[3], b[3]) - max(a[1], b[1]) + e, 0.0)
    inter = w * h
    union = (a[2] - a[0] + e) * (a[3] - a[1] + e) + (b[2] - b[0] + e) * (b[3] - b[1] + e) - inter
    if union == 0:
        return np.float32(0.0)
    return np.float32(inter) / np.float32(union)


def _matches(im, n, m, thr, plus_one):
    """Predicted object n matches GT object m: same class (n a real object) and box IoU >= thr."""
    if n >= len(im['pred_labels']) or im['pred_labels'][n] != im['gt_labels'][m]:
        return False
    return bool(_iou(im['pred_boxes'][n], im['gt_boxes'][m], plus_one) >= np.float32(thr))


def _reference_ranks(images, t, thr, plus_one, how, use_list_valid):
    """[B][G] first-hit ranks by the definition: the first list position whose entry's pair matches the GT
    subject and object (many-to-many) and whose predicate (given, the first maximal score column, or any for
    ``how='ends'``) is the GT predicate; positions count only the sub-list entries with ``use_list_valid``."""
    out = []
    num_rel, length = t['gt_valid'].shape[1], t['index'].shape[1]
    index, valid, given, listed = (t[k].tolist() for k in ('index', 'valid', 'predicate', 'list_valid'))
    for b, im in enumerate(images):
        ranks = [NO_HIT] * num_rel
        for g_, (gs, go, gp) in enumerate(im['rels']):
            position = -1
            for j in range(length):
                if use_list_valid:
                    if not listed[b][j]:
                        continue
                    position += 1
                else:
                    position = j
                if not valid[b][j]:
                    continue
                r = index[b][j]
                s, o = im['pairs'][r]
                if not (_matches(im, s, gs, thr, plus_one) and _matches(im, o, go, thr, plus_one)):
                    continue
                if how == 'given':
                    p = given[b][j]
                elif how == 'ends':
                    p = gp
                else:
                    row = im['scores'][r]
                    p = row.index(max(row))  # the first maximal column
                if p == gp:
                    ranks[g_] = position
                    break
        out.append(ranks)
    return out


@needs_kernels
@pytest.mark.parametrize('thr', [0.5, 0.3, 0.7, 0.0])
@pytest.mark.parametrize('plus_one', [False, True])
@pytest.mark.parametrize('seed', [0, 1, 2])
def test_first_hit_ranks_equal_a_loop_reference(seed, plus_one, thr):
    """Box bits and first hits of a ranked list against the definition, for given predicates, predicates from
    score rows (one matrix per image, or one matrix with each image's first row), ends only, with and without
    sub-list positions; ties, zero-width boxes, 70 GT relations, duplicate pairs, padding."""
    ext = compiled.kernels()
    images, t = _ranked_batch(seed)
    sub, obj = ext.box_relation_end_bits(t['pred_boxes'], t['pred_labels'], t['gt_boxes'], t['gt_labels'],
                                         t['gt_pairs'], t['gt_valid'], thr, plus_one)
    assert sub.shape[2] == 2  # image 2: 70 GT relations
    column = seed % 2
    per_image, joined, start = _score_matrices(images, column, seed)
    hits = misses = 0
    for how in ('given', 'scores', 'scores_start', 'ends'):
        for use_list_valid in (False, True):
            if how == 'given':
                source = (t['predicate'], [], None)
            elif how == 'scores':
                source = (None, per_image, None)
            elif how == 'scores_start':
                source = (None, [joined], start)
            else:
                source = (None, [], None)
            predicate, matrices, first = source
            got = ext.first_hit_ranks(sub, obj, t['gt_predicates'], t['gt_valid'], t['rel_pairs'], t['index'],
                                      t['valid'], predicate, t['list_valid'] if use_list_valid else None, matrices,
                                      first, column, NUM_PREDICATES, how == 'ends')
            assert got.dtype == torch.int32 and got.shape == t['gt_valid'].shape
            expected = _reference_ranks(images, t, thr, plus_one, how.split('_')[0], use_list_valid)
            assert got.tolist() == [ranks + [NO_HIT] * (got.shape[1] - len(ranks)) for ranks in expected], \
                (how, use_list_valid)
            real = got[t['gt_valid']]
            hits += int((real < NO_HIT).sum())
            misses += int((real == NO_HIT).sum())
    assert hits > 20 and misses > 20  # the lists do hit and miss


# ------------------------------------------------------------------------------------ box relation end bits
def _float_boxes(g, n, degenerate=0.2):
    """Boxes of arbitrary float32 coordinates (rounding in every operation), some zero-width or zero-height, some
    repeated."""
    xy = g.uniform(0, 60, (n, 2))
    wh = g.uniform(0, 30, (n, 2))
    wh[g.random(n) < degenerate, 0] = 0
    wh[g.random(n) < degenerate / 2, 1] = 0
    boxes = np.concatenate([xy, xy + wh], 1).astype(np.float32)
    if n >= 2:
        boxes[-1] = boxes[0]
    return boxes


def _end_bits_batch(seed, batch, num_pred, num_gt_obj, num_rel):
    g = np.random.default_rng(seed)
    gt_boxes = torch.from_numpy(_float_boxes(g, batch * num_gt_obj).reshape(batch, num_gt_obj, 4))
    gt_labels = torch.from_numpy(g.integers(0, NUM_CLASSES, (batch, num_gt_obj)))
    pred = _float_boxes(g, batch * num_pred).reshape(batch, num_pred, 4)
    if num_gt_obj:  # most predicted boxes near a GT box (some exactly on it)
        src = g.integers(0, num_gt_obj, (batch, num_pred))
        near = gt_boxes.numpy()[np.arange(batch)[:, None], src] + g.normal(0, 2, (batch, num_pred, 4)) * \
            (g.random((batch, num_pred, 1)) < 0.7)
        near[..., 2:] = np.maximum(near[..., 2:], near[..., :2])
        take = g.random((batch, num_pred)) < 0.8
        pred[take] = near[take]
    pred_boxes = torch.from_numpy(pred.astype(np.float32))
    pred_labels = torch.from_numpy(g.integers(0, NUM_CLASSES, (batch, num_pred)))
    pred_labels[torch.from_numpy(g.random((batch, num_pred)) < 0.15)] = -1  # padding
    gt_labels[torch.from_numpy(g.random((batch, num_gt_obj)) < 0.1)] = -1
    gt_pairs = torch.from_numpy(g.integers(0, max(num_gt_obj, 1), (batch, num_rel, 2)))
    gt_valid = torch.from_numpy(g.random((batch, num_rel)) < 0.8) if num_gt_obj else \
        torch.zeros(batch, num_rel, dtype=torch.bool)
    if batch:
        gt_valid[0] = False  # an image without GT relations
    return pred_boxes, pred_labels, gt_boxes, gt_labels, gt_pairs, gt_valid


@needs_kernels
@pytest.mark.parametrize('shape', [(5, 9, 6, 20), (3, 12, 8, 130), (4, 7, 5, 64), (3, 0, 4, 5), (3, 5, 4, 0),
                                   (2, 4, 0, 0), (0, 3, 3, 2), (1, 1, 1, 1)])
@pytest.mark.parametrize('seed', [0, 1])
def test_box_relation_end_bits_equal_the_torch_composition(seed, shape):
    """Bit for bit equal to relation_end_bits(box_object_match_list(...)) (the sparse and the dense torch
    matching) at every threshold and both conventions: float32 boxes with rounding, zero-area boxes, repeated
    boxes, padding labels, invalid GT relations, 1 to 3 words (bit 63 is the sign bit); N = 0, G = 0, M = 0,
    B = 0."""
    ext = compiled.kernels()
    pred_boxes, pred_labels, gt_boxes, gt_labels, gt_pairs, gt_valid = _end_bits_batch(seed, *shape)
    words = max(-(-shape[3] // 64), 1)
    for plus_one in (False, True):
        for thr in (0.5, 0.3, 0.7, 0.0, 1.0):
            sub, obj = ext.box_relation_end_bits(pred_boxes, pred_labels, gt_boxes, gt_labels, gt_pairs, gt_valid,
                                                 thr, plus_one)
            assert sub.dtype == torch.long and sub.shape == (shape[0], shape[1], words) == obj.shape
            for sparse in (True, False):
                try:
                    matches = box_object_match_list(pred_boxes, pred_labels, gt_boxes, gt_labels, thr, plus_one,
                                                     sparse=sparse)
                    t_sub, t_obj = relation_end_bits(matches, gt_pairs[..., 0], gt_pairs[..., 1], gt_valid)
                except (RuntimeError, IndexError) as err:  # an edge case the torch path does not take
                    pytest.skip(f'the torch composition refuses shape {shape}: {err}')
                assert torch.equal(sub, t_sub) and torch.equal(obj, t_obj), (plus_one, thr, sparse)


@needs_kernels
@pytest.mark.parametrize('shape', [(5, 9, 6, 20), (3, 12, 8, 130), (4, 7, 5, 64), (3, 20, 19, 70), (2, 9, 33, 12),
                                   (3, 0, 4, 5), (3, 5, 4, 0), (2, 4, 0, 0), (0, 3, 3, 2), (1, 1, 1, 1)])
@pytest.mark.parametrize('seed', [0, 1])
def test_box_overlap_flags_equal_the_torch_composition(seed, shape):
    """The error analysis' overlap kernel, bit for bit equal to its torch composition (box_iou_unchecked: 0 / 0 of
    two empty boxes is NaN and overlaps nothing, even at threshold 0; located_objects, same_class_matrix, any over
    the predicted objects, relation_end_bits of the overlap matrix) at every threshold and both conventions, with
    padding labels on both sides, invalid GT relations, 1 to 3 words, GT objects in whole 8-lane vectors and a
    tail; N = 0, G = 0, M = 0, B = 0."""
    from mmsgg_eval.functional.boxes import box_iou_unchecked
    from mmsgg_eval.functional.error_causes import located_objects
    from mmsgg_eval.functional.matching import ObjectMatches, same_class_matrix
    ext = compiled.kernels()
    pred_boxes, pred_labels, gt_boxes, gt_labels, gt_pairs, gt_valid = _end_bits_batch(seed, *shape)
    if shape[1] >= 2 and shape[2] >= 1:  # an empty predicted box on an empty GT box: NaN IoU
        pred_boxes[:, 1] = gt_boxes[:, 0] = torch.tensor([3.0, 3.0, 3.0, 3.0])
    words = max(-(-shape[3] // 64), 1)
    for plus_one in (False, True):
        for thr in (0.5, 0.3, 0.7, 0.0, 1.0):
            located_any, detected_any, sub, obj = ext.box_overlap_flags(
                pred_boxes, pred_labels, gt_boxes, gt_labels, gt_pairs, gt_valid, thr, plus_one)
            assert sub.dtype == torch.long and sub.shape == (shape[0], shape[1], words) == obj.shape
            located = located_objects(box_iou_unchecked(pred_boxes, gt_boxes, plus_one), pred_labels >= 0,
                                      gt_labels >= 0, thr)
            detected = located & same_class_matrix(pred_labels, gt_labels)
            assert torch.equal(located_any, located.any(1)) and torch.equal(detected_any, detected.any(1))
            try:
                t_sub, t_obj = relation_end_bits(ObjectMatches.from_matrix(located), gt_pairs[..., 0],
                                                 gt_pairs[..., 1], gt_valid)
            except (RuntimeError, IndexError) as err:  # an edge case the torch path does not take
                pytest.skip(f'the torch composition refuses shape {shape}: {err}')
            assert torch.equal(sub, t_sub) and torch.equal(obj, t_obj), (plus_one, thr)


@needs_kernels
@pytest.mark.parametrize('plus_one', [False, True])
def test_zero_area_boxes_match_only_at_threshold_zero(plus_one):
    """Two empty boxes (continuous convention): IoU 0 / 0 is read as 0, so they match at thr 0.0 and not above;
    with +1 pixel the same boxes are one pixel each and overlap fully. A GT relation whose subject is a zero-width
    box that its predicted copy matches: bit set at thr 0.0 only."""
    ext = compiled.kernels()
    pred_boxes = torch.tensor([[[2.0, 2.0, 2.0, 2.0], [5.0, 5.0, 5.0, 9.0], [0.0, 0.0, 4.0, 4.0]]])
    gt_boxes = torch.tensor([[[2.0, 2.0, 2.0, 2.0], [5.0, 5.0, 5.0, 9.0], [0.0, 0.0, 4.0, 4.0]]])
    labels = torch.tensor([[1, 1, 1]])
    gt_pairs = torch.tensor([[[0, 2], [1, 2]]])
    gt_valid = torch.tensor([[True, True]])
    for thr in (0.0, 1e-6, 0.5, 1.0):
        sub, obj = ext.box_relation_end_bits(pred_boxes, labels, gt_boxes, labels, gt_pairs, gt_valid, thr,
                                             plus_one)
        t_sub, t_obj = relation_end_bits(box_object_match_list(pred_boxes, labels, gt_boxes, labels, thr, plus_one),
                                         gt_pairs[..., 0], gt_pairs[..., 1], gt_valid)
        assert torch.equal(sub, t_sub) and torch.equal(obj, t_obj)
        if thr == 0.0:  # every same-class pair matches: both relations on each of the first two objects
            assert sub[0, :, 0].tolist() == [3, 3, 3]
        elif not plus_one:  # the empty boxes match nothing (0 / 0 is 0), the 4x4 box only itself
            assert sub[0, :, 0].tolist() == [0, 0, 0] and obj[0, :, 0].tolist() == [0, 0, 3]
        elif thr >= 0.5:  # one pixel / a 1x5 column: each matches its copy (the pixel inside the 4x4 box: 1/25)
            assert sub[0, :, 0].tolist() == [1, 2, 0] and obj[0, :, 0].tolist() == [0, 0, 3]


@needs_kernels
@pytest.mark.parametrize('plus_one', [False, True])
def test_iou_exactly_at_the_threshold_matches(plus_one):
    """IoU 7/10, 3/10 and 1/2 (float32 quotients, 7/10 rounds below 0.7 as the threshold does) match at 0.7, 0.3
    and 0.5, as the torch path compares them (in float32); 13/20 does not match at 0.7."""
    ext = compiled.kernels()
    e = 1.0 if plus_one else 0.0
    gt = torch.tensor([[[0.0, 0.0, 10.0 - e, 1.0 - e]] * 4])  # area 10 in either convention
    pred = torch.tensor([[[0.0, 0.0, 7.0 - e, 1.0 - e], [0.0, 0.0, 3.0 - e, 1.0 - e], [0.0, 0.0, 5.0 - e, 1.0 - e],
                          [0.0, 0.0, 6.5 - e, 1.0 - e]]])
    labels = torch.zeros(1, 4, dtype=torch.long)
    gt_pairs = torch.tensor([[[m, m] for m in range(4)]])
    gt_valid = torch.ones(1, 4, dtype=torch.bool)
    for thr, matched in ((0.7, [1, 0, 0, 0]), (0.3, [1, 1, 1, 1]), (0.5, [1, 0, 1, 1]), (0.65, [1, 0, 0, 1])):
        sub, _ = ext.box_relation_end_bits(pred, labels, gt, labels, gt_pairs, gt_valid, thr, plus_one)
        t_sub, _ = relation_end_bits(box_object_match_list(pred, labels, gt, labels, thr, plus_one),
                                     gt_pairs[..., 0], gt_pairs[..., 1], gt_valid)
        assert torch.equal(sub, t_sub)
        assert [int(sub[0, n, 0] != 0) for n in range(4)] == matched, thr


# --------------------------------------------------------------------------------------------- GT-pair list
def _reference_gt_pair_list(rel_pairs, count, gt_pairs, gt_valid, values, k):
    """Per image: the pairs among its first count[b] that equal a valid GT pair, by descending value, ties in
    ascending index (-0.0 ties with +0.0), the first k."""
    out = []
    for b in range(rel_pairs.shape[0]):
        gt = {tuple(p) for p, ok in zip(gt_pairs[b].tolist(), gt_valid[b].tolist()) if ok}
        listed = [r for r in range(int(count[b])) if tuple(rel_pairs[b, r].tolist()) in gt]
        out.append(sorted(listed, key=lambda r: (-float(values[b, r]), r))[:k])
    return out


@needs_kernels
@pytest.mark.parametrize('seed', [0, 1, 2, 3])
def test_gt_pair_list_equals_the_torch_composition(seed):
    """stable_topk(values, pairs_in_reference(prefix mask ...), k) and a loop reference: ties (-0.0 and +0.0
    among them), count < W, count 0, an image without GT relations, duplicate pairs, k from 0 to past W."""
    ext = compiled.kernels()
    g = np.random.default_rng(seed)
    batch, width, num_rel, num_obj = 7, 12, 9, 5
    rel_pairs = torch.from_numpy(g.integers(0, num_obj, (batch, width, 2)))
    count = torch.from_numpy(g.integers(width // 2, width + 1, batch))
    count[0], count[1], count[3] = width, 0, 3  # all, none, a few
    gt_pairs = torch.from_numpy(g.integers(0, num_obj, (batch, num_rel, 2)))
    gt_valid = torch.from_numpy(g.random((batch, num_rel)) < 0.7)
    copied = torch.from_numpy(g.random((batch, width)) < 0.4)  # many predicted pairs are GT pairs
    rel_pairs[copied] = gt_pairs[torch.arange(batch)[:, None].expand(-1, width)[copied],
                                 torch.from_numpy(g.integers(0, num_rel, (batch, width)))[copied]]
    rel_pairs[:, 1] = rel_pairs[:, 0]  # the same pair twice
    gt_valid[2] = False  # no GT relations
    values = torch.from_numpy(np.round(g.random((batch, width)) * 3) / 3).float()
    values[torch.from_numpy(g.random((batch, width)) < 0.15)] = -0.0
    values[torch.from_numpy(g.random((batch, width)) < 0.15)] = 0.0
    prefix = torch.arange(width)[None, :] < count[:, None]
    in_gt = pairs_in_reference(rel_pairs, prefix, gt_pairs, gt_valid, num_obj)
    assert in_gt.sum() > 10
    for k in (0, 1, 3, width, width + 4):
        index, valid = ext.gt_pair_list(rel_pairs, count, gt_pairs, gt_valid, values, k)
        t_index, t_valid = stable_topk(values, in_gt, k)
        assert index.shape == valid.shape == (batch, min(k, width)) == t_index.shape
        assert torch.equal(valid, t_valid) and torch.equal(index[valid], t_index[t_valid]), k
        expected = _reference_gt_pair_list(rel_pairs, count, gt_pairs, gt_valid, values, k)
        assert [index[b][valid[b]].tolist() for b in range(batch)] == expected
        assert not index[~valid].any()  # invalid slots hold index 0


# -------------------------------------------------------------------------------------------- end to end
def _samples(seed, mode, score_format='bg', fixed_pairs=None):
    from tests.sgg_samples import random_dataset
    kwargs = dict(score_format=score_format, num_classes=7, num_predicates=5)
    if fixed_pairs:
        kwargs['fixed_pairs'] = fixed_pairs
    return random_dataset(seed, 24, mode, **kwargs)[0]


def _spy(monkeypatch, ext, names):
    """Count the calls of the kernels ``names`` (the ranker looks them up on the module at call time)."""
    calls = collections.Counter()
    for name in names:
        def wrapped(*args, _original=getattr(ext, name), _name=name, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)
        monkeypatch.setattr(ext, name, wrapped)
    return calls


def _assert_same_ranks(got, expected, where=None):
    """Every output identical; the list head's pair indices on its valid slots (the others are unspecified:
    graph_constrained_ranking's kernel leaves 0 there, the torch top-k any index)."""
    assert sorted(got) == sorted(expected)
    for key in expected:
        a, b = got[key], expected[key]
        if key == 'gc_pairs':
            valid = expected['gc_valid']
            a, b = torch.where(valid, a, 0), torch.where(valid, b, 0)
        assert a.dtype == b.dtype and torch.equal(a, b), (key, where)


LAYOUTS = {  # (score format, fixed pairs, forced layout, expected layout)
    'compiled': ('bg', None, None, 'compiled'),
    'compiled_no_background': ('nobg', None, None, 'compiled'),
    'stacked': ('bg', 6, 'stacked', 'stacked'),
    'concatenated': ('bg', None, 'concatenated', 'concatenated'),
    'concatenated_no_background': ('nobg', None, 'concatenated', 'concatenated'),
    'views': ('bg', None, 'views', 'views'),
    'single_label': ('single', None, None, None),
}


# (rank_by, with_pair_accuracy, plus_one, max_k, ng_topk): every value of each, short and long lists with each
RUNS = [('score', True, False, 50, 100), ('score', True, True, 3, 2), ('score', False, False, 3, 2),
        ('given', True, False, 50, 100), ('given', False, True, 50, 100), ('given', True, True, 3, 2)]


# every layout for SGCls and SGDet; PredCls (GT boxes) in three; PhrDet (union boxes: no compiled ranker) in two
MODE_LAYOUTS = ([(mode, layout) for mode in ('sgcls', 'sgdet') for layout in LAYOUTS]
                + [('predcls', layout) for layout in ('compiled', 'stacked', 'concatenated')]
                + [('phrdet', layout) for layout in ('compiled', 'concatenated')])


@needs_kernels
@pytest.mark.parametrize('mode,layout', MODE_LAYOUTS)
def test_scene_graph_ranks_equal_with_the_kernels_on_and_off(monkeypatch, mode, layout):
    """Every output of scene_graph_ranks (list_length=5, with and without pair accuracy, ranked by score and
    given, both box conventions, short and long lists) is identical with the kernels on and off; with them on,
    the compiled ranker reads the score rows where the layout holds them (its kernels are called, except for
    phrase detection) and the GT-pair sub-list is the kernel's."""
    score_format, fixed_pairs, forced, expected_layout = LAYOUTS[layout]
    seed = 11 + list(LAYOUTS).index(layout)
    ext = compiled.kernels()
    with monkeypatch.context() as patch:
        if forced:
            patch.setattr(reader, 'choose_layout', lambda *args: forced)
        batch = collate_scene_graphs(_samples(seed, mode, score_format, fixed_pairs), mode, 7, 5)
    with compiled.disabled():
        reference = collate_scene_graphs(_samples(seed, mode, score_format, fixed_pairs), mode, 7, 5)
    if expected_layout:
        assert batch.scores.layout == expected_layout
    else:
        assert batch.scores.layout != 'compiled' and batch.scores.has_single_label
    assert first_hits._score_row_source(batch.scores) is not None
    assert first_hits._compiled_first_hit_ranker(batch, 0.5, False) is not None
    assert batch.gt_valid.any() and batch.rel_valid.any()
    calls = _spy(monkeypatch, ext, ['first_hit_ranks', 'box_relation_end_bits', 'gt_pair_list'])
    hits = 0
    for rank_by, with_pair_accuracy, plus_one, max_k, ng_topk in RUNS:
        args = (max_k, ng_topk, 0.5, plus_one, mode == 'phrdet')
        kwargs = dict(rank_by=rank_by, with_pair_accuracy=with_pair_accuracy, list_length=5)
        calls.clear()
        got = scene_graph_ranks(batch, *args, **kwargs)
        used = dict(calls)
        with compiled.disabled():
            expected = scene_graph_ranks(reference, *args, **kwargs)
        _assert_same_ranks(got, expected, (rank_by, with_pair_accuracy, plus_one, max_k))
        hits += sum(int((got[key][batch.gt_valid] < NO_HIT).sum()) for key in ('gc', 'ngc', 'pair_rank'))
        if mode == 'phrdet':
            assert 'first_hit_ranks' not in used and 'box_relation_end_bits' not in used
        else:  # gc, ngc, pair ranks (list_length), pair accuracy
            assert used.get('box_relation_end_bits') == 1
            assert used.get('first_hit_ranks') == 3 + with_pair_accuracy
        assert used.get('gt_pair_list', 0) == (with_pair_accuracy and rank_by == 'score')
    assert hits > 0


def _without(field, sample):
    """The sample without predicted pairs (``'pairs'``) or without GT relations (``'gt'``)."""
    if field == 'pairs':
        sample['pred_relations'] = dict(pair_idxs=torch.zeros((0, 2), dtype=torch.long), scores=torch.zeros((0, 6)))
    else:
        sample['gt_relations'] = dict(pair_idxs=torch.zeros((0, 2), dtype=torch.long),
                                      labels=torch.zeros(0, dtype=torch.long))
    return sample


@needs_kernels
@pytest.mark.parametrize('field', ['pairs', 'gt', 'some_pairs'])
@pytest.mark.parametrize('mode', ['sgcls', 'sgdet'])
def test_scene_graph_ranks_of_images_without_pairs_or_gt_relations(monkeypatch, mode, field):
    """Batches where no image (or every other image) has predicted pairs, or no image has GT relations, in the
    compiled, stacked (no rows at all: an empty row source) and views layouts: the same outputs with the kernels
    on and off."""
    def samples():
        out = _samples(5, mode)[:4]
        if field == 'some_pairs':
            return [_without('pairs', s) if i % 2 else s for i, s in enumerate(out)]
        return [_without(field, s) for s in out]
    with compiled.disabled():
        reference = collate_scene_graphs(samples(), mode, 7, 5)
    for forced in (None, 'stacked', 'views'):
        with monkeypatch.context() as patch:
            if forced:
                patch.setattr(reader, 'choose_layout', lambda *args: forced)
            batch = collate_scene_graphs(samples(), mode, 7, 5)
        assert first_hits._compiled_first_hit_ranker(batch, 0.5, False) is not None
        for rank_by in ('score', 'given'):
            got = scene_graph_ranks(batch, 20, 30, rank_by=rank_by, list_length=5)
            with compiled.disabled():
                expected = scene_graph_ranks(reference, 20, 30, rank_by=rank_by, list_length=5)
            _assert_same_ranks(got, expected, (forced, rank_by))


@needs_kernels
def test_score_rows_the_kernels_cannot_address_run_the_torch_ranker(monkeypatch):
    """A concatenated copy that is not row-contiguous: no row source, the torch ranker runs (no box-bit kernel),
    the same ranks."""
    ext = compiled.kernels()
    with monkeypatch.context() as patch:
        patch.setattr(reader, 'choose_layout', lambda *args: 'concatenated')
        batch = collate_scene_graphs(_samples(3, 'sgdet'), 'sgdet', 7, 5)
    with compiled.disabled():
        reference = collate_scene_graphs(_samples(3, 'sgdet'), 'sgdet', 7, 5)
    flat = batch.scores.flat
    column_major = torch.empty(flat.shape[1], flat.shape[0]).t().copy_(flat)
    batch = dataclasses.replace(batch, scores=dataclasses.replace(batch.scores, flat=column_major))
    assert first_hits._score_row_source(batch.scores) is None
    assert first_hits._compiled_first_hit_ranker(batch, 0.5, False) is None
    calls = _spy(monkeypatch, ext, ['first_hit_ranks', 'box_relation_end_bits'])
    got = scene_graph_ranks(batch, 20, 30, list_length=5)
    assert not calls
    with compiled.disabled():
        expected = scene_graph_ranks(reference, 20, 30, list_length=5)
    _assert_same_ranks(got, expected)


# ------------------------------------------------------------------------------------------- bad arguments
def _small_args():
    """Valid first_hit_ranks arguments for 2 images, 3 objects, 2 GT relations, 3 pairs, 2 entries."""
    bits = torch.zeros(2, 3, 1, dtype=torch.long)
    return dict(subject_bits=bits, object_bits=bits.clone(), gt_predicates=torch.zeros(2, 2, dtype=torch.long),
                gt_valid=torch.ones(2, 2, dtype=torch.bool), rel_pairs=torch.zeros(2, 3, 2, dtype=torch.long),
                index=torch.zeros(2, 2, dtype=torch.long), valid=torch.ones(2, 2, dtype=torch.bool), predicate=None,
                list_valid=None, matrices=[torch.rand(3, 4), torch.rand(3, 4)], start=None, column=1,
                num_predicates=3, ends_only=False)


@needs_kernels
def test_first_hit_ranks_refuses_bad_arguments_naming_the_problem():
    ext = compiled.kernels()
    assert ext.first_hit_ranks(**_small_args()).tolist() == [[NO_HIT] * 2] * 2
    cases = [
        (dict(subject_bits=torch.zeros(2, 3, 1, dtype=torch.int32)), 'subject_bits must be int64'),
        (dict(gt_valid=torch.ones(2, 2, dtype=torch.uint8)), 'gt_valid must be bool'),
        (dict(index=torch.zeros(2, 2, dtype=torch.int32)), 'index must be int64'),
        (dict(object_bits=torch.zeros(2, 4, 1, dtype=torch.long)), 'the batch fields do not have matching shapes'),
        (dict(valid=torch.ones(2, 3, dtype=torch.bool)), 'the batch fields do not have matching shapes'),
        (dict(gt_predicates=torch.zeros(2, 65, dtype=torch.long), gt_valid=torch.ones(2, 65, dtype=torch.bool)),
         'the batch fields do not have matching shapes'),  # 65 GT relations need two words
        (dict(predicate=torch.zeros(2, 3, dtype=torch.long)), 'predicate must have the shape of index'),
        (dict(predicate=torch.zeros(2, 2)), 'predicate must be int64'),
        (dict(list_valid=torch.ones(2, 1, dtype=torch.bool)), 'list_valid must have the shape of index'),
        (dict(matrices=[torch.rand(3, 4)]), 'one score matrix per image'),
        (dict(matrices=[torch.rand(3, 4), torch.rand(3, 4)], start=torch.zeros(2, dtype=torch.long)),
         'with start, one matrix holds the rows of every image'),
        (dict(matrices=[torch.rand(3, 4), torch.rand(3, 4).double()]), 'image 1: the score matrix is not float32'),
        (dict(matrices=[torch.rand(3, 4), torch.rand(3, 5)]), 'image 1'),
        (dict(matrices=[torch.rand(4, 3).t(), torch.rand(3, 4)]), 'image 0: the score matrix is not contiguous'),
        (dict(num_predicates=0, column=4), 'no predicate columns'),
    ]
    for change, message in cases:
        with pytest.raises(RuntimeError, match=message):
            ext.first_hit_ranks(**{**_small_args(), **change})


@needs_kernels
def test_first_hit_ranks_refuses_entries_outside_their_pairs_objects_or_rows():
    """An entry pointing outside its image's pairs, a pair on an object outside [0, N), a score row past the
    image's matrix: refused naming the image and the entry, only when the entry is valid (and, with sub-list
    positions, listed)."""
    ext = compiled.kernels()
    message = 'first_hit_ranks: image 1 entry 1 points outside its pairs, objects or score rows'
    bits = torch.full((2, 3, 1), -1, dtype=torch.long)  # every object matches both GT relations: a lookup is needed
    base = {**_small_args(), 'subject_bits': bits, 'object_bits': bits.clone()}
    index = torch.tensor([[0, 2], [1, 3]])
    with pytest.raises(RuntimeError, match=message):
        ext.first_hit_ranks(**{**base, 'index': index})
    with pytest.raises(RuntimeError, match=message):
        ext.first_hit_ranks(**{**base, 'index': torch.tensor([[0, 2], [1, -1]])})
    pairs = torch.zeros(2, 3, 2, dtype=torch.long)
    pairs[1, 2] = torch.tensor([0, 3])
    with pytest.raises(RuntimeError, match=message):
        ext.first_hit_ranks(**{**base, 'rel_pairs': pairs, 'index': torch.tensor([[0, 2], [0, 2]])})
    short = [torch.rand(3, 4), torch.rand(1, 4)]  # image 1 has one score row
    with pytest.raises(RuntimeError, match=message):
        ext.first_hit_ranks(**{**base, 'matrices': short, 'index': torch.tensor([[0, 2], [0, 2]])})
    with pytest.raises(RuntimeError, match=message):  # past the shared matrix from the image's first row
        ext.first_hit_ranks(**{**base, 'matrices': [torch.rand(4, 4)], 'start': torch.tensor([0, 2]),
                               'index': torch.tensor([[0, 2], [1, 2]])})
    # invalid entries (and entries outside the sub-list) are never looked at
    masked = torch.tensor([[True, True], [True, False]])
    predicate = torch.zeros(2, 2, dtype=torch.long)  # every entry hits both GT relations
    for change in (dict(valid=masked), dict(list_valid=masked)):
        ok = ext.first_hit_ranks(**{**base, 'index': index, 'predicate': predicate, **change})
        assert ok.tolist() == [[0, 0], [0, 0]]


@needs_kernels
@pytest.mark.parametrize('kernel', ['box_relation_end_bits', 'box_overlap_flags'])
def test_box_kernels_refuse_bad_arguments_naming_the_problem(kernel):
    """Both box kernels check their inputs alike, each error naming the kernel, the field and the image."""
    run = getattr(compiled.kernels(), kernel)
    args = dict(pred_boxes=torch.rand(2, 3, 4), pred_labels=torch.zeros(2, 3, dtype=torch.long),
                gt_boxes=torch.rand(2, 4, 4), gt_labels=torch.zeros(2, 4, dtype=torch.long),
                gt_pairs=torch.zeros(2, 5, 2, dtype=torch.long), gt_valid=torch.ones(2, 5, dtype=torch.bool),
                iou_thr=0.5, plus_one=False)
    run(**args)
    bad_pairs = torch.zeros(2, 5, 2, dtype=torch.long)
    bad_pairs[1, 3, 1] = 4
    negative = torch.zeros(2, 5, 2, dtype=torch.long)
    negative[0, 2, 0] = -1
    cases = [
        (dict(pred_boxes=torch.rand(2, 3, 4).double()), 'pred_boxes must be float32'),
        (dict(gt_labels=torch.zeros(2, 4, dtype=torch.int32)), 'gt_labels must be int64'),
        (dict(gt_valid=torch.ones(2, 5, dtype=torch.long)), 'gt_valid must be bool'),
        (dict(pred_boxes=torch.rand(2, 3, 5)), r'boxes must be \[B, N, 4\]'),
        (dict(pred_labels=torch.zeros(2, 4, dtype=torch.long)), 'the batch fields do not have matching shapes'),
        (dict(gt_valid=torch.ones(2, 6, dtype=torch.bool)), 'the batch fields do not have matching shapes'),
        (dict(gt_boxes=torch.rand(1, 4, 4)), 'the batch fields do not have matching shapes'),
        (dict(gt_pairs=bad_pairs), r'image 1 GT relation 3 has an object index outside \[0, 4\)'),
        (dict(gt_pairs=negative), r'image 0 GT relation 2 has an object index outside \[0, 4\)'),
    ]
    for change, message in cases:
        with pytest.raises(RuntimeError, match=f'{kernel}: .*{message}'):
            run(**{**args, **change})
    # an invalid GT relation's indices are never looked at
    run(**{**args, 'gt_pairs': bad_pairs, 'gt_valid': torch.tensor([[True] * 5, [True, True, True, False, True]])})


@needs_kernels
def test_gt_pair_list_refuses_bad_arguments_naming_the_problem():
    ext = compiled.kernels()
    args = dict(rel_pairs=torch.zeros(2, 4, 2, dtype=torch.long), count=torch.tensor([4, 2]),
                gt_pairs=torch.zeros(2, 3, 2, dtype=torch.long), gt_valid=torch.ones(2, 3, dtype=torch.bool),
                values=torch.rand(2, 4), k=3)
    ext.gt_pair_list(**args)
    negative = torch.zeros(2, 3, 2, dtype=torch.long)
    negative[1, 0, 1] = -2
    cases = [
        (dict(values=torch.rand(2, 4).double()), 'values must be float32'),
        (dict(count=torch.tensor([4, 2], dtype=torch.int32)), 'count must be int64'),
        (dict(values=torch.rand(3, 4)), r'padded pairs must be an int64 \[B, W, 2\] CPU tensor with B = 3'),
        (dict(rel_pairs=[torch.zeros(4, 2, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long)]),
         r'image 1 has count 2 outside \[0, 1\]'),
        (dict(count=torch.tensor([4])), 'the batch fields do not have matching shapes'),
        (dict(count=torch.tensor([4, 5])), r'image 1 has count 5 outside \[0, 4\]'),
        (dict(count=torch.tensor([-1, 2])), r'image 0 has count -1 outside \[0, 4\]'),
        (dict(k=-1), 'k must be >= 0'),
        (dict(gt_pairs=negative), 'image 1 has a negative GT index'),
    ]
    for change, message in cases:
        with pytest.raises(RuntimeError, match=message):
            ext.gt_pair_list(**{**args, **change})


# ------------------------------------------------------------------------------------------- matrices_suit
@needs_kernels
def test_matrices_suit_only_contiguous_float32_cpu_matrices_of_few_entries():
    ext = compiled.kernels()
    good = [torch.rand(5, 4), torch.rand(0, 4), torch.rand(3, 4)]
    assert ext.matrices_suit(good, 3, 1 << 32)
    assert ext.matrices_suit([], 3, 1 << 32)
    assert not ext.matrices_suit(good + [torch.rand(4, 5).t()], 3, 1 << 32)  # not contiguous
    assert not ext.matrices_suit(good + [torch.rand(3, 4, dtype=torch.float64)], 3, 1 << 32)
    assert not ext.matrices_suit(good + [torch.rand(3, 4).half()], 3, 1 << 32)
    assert not ext.matrices_suit([torch.tensor(1.0)], 3, 1 << 32)  # 0-d
    # rows x num_predicates must stay below max_entries: 5 x 3 = 15
    assert ext.matrices_suit(good, 3, 16)
    assert not ext.matrices_suit(good, 3, 15)
    assert not ext.matrices_suit([torch.rand(5, 4)], 3, 15)
    assert compiled.suits(good, [1, 1, 1], [False] * 3, 3)
    assert not compiled.suits(good[:2] + [torch.rand(3, 4).double()], [1, 1, 1], [False] * 3, 3)


@pytest.mark.parametrize('seed', range(4))
def test_pair_flags_from_pair_codes_equal_those_from_the_pair_list(seed):
    """relation_pair_flags reads each pair as the ranking pass' 2-byte code ((subject << 8) | object, uint16 bits
    in int16: indices of 128-255 make negative int16 values) or as the int64 pair list: the same (scored, listed)
    flags, also with more than 64 GT relations (several words) and padded pair slots; a code naming an object
    beyond the image's objects is refused like a bad pair index."""
    from mmsgg_eval.functional import compiled
    ext = compiled.kernels()
    if ext is None or not hasattr(ext, 'relation_pair_flags'):
        pytest.skip('the compiled kernels are not built')
    g = torch.Generator().manual_seed(seed)
    batch, objects, num_pred = 5, 256, 6
    num_rel = 40 if seed % 2 else 100  # one word / two words of GT-relation bits
    words = (num_rel + 63) // 64
    bits = [torch.randint(-2 ** 62, 2 ** 62, (batch, objects, words), generator=g) &
            torch.randint(-2 ** 62, 2 ** 62, (batch, objects, words), generator=g) for _ in range(2)]
    gt_predicates = torch.randint(0, num_pred, (batch, num_rel), generator=g)
    gt_valid = torch.rand(batch, num_rel, generator=g) < 0.8
    count = torch.randint(0, 300, (batch,), generator=g)
    width = int(count.max()) + 3
    pairs = torch.randint(0, objects, (batch, width, 2), generator=g)
    matrices = [torch.rand(int(n), num_pred + 1, generator=g) for n in count]
    codes = (pairs[..., 0] * 256 + pairs[..., 1]).to(torch.int32).to(torch.int16)  # wraps above 32767
    assert (codes < 0).any()
    args = (bits[0], bits[1], gt_predicates, gt_valid, [pairs], count, matrices, None, 1, num_pred)
    from_pairs = ext.relation_pair_flags(*args)
    from_codes = ext.relation_pair_flags(*args, codes)
    assert all(torch.equal(a, b) for a, b in zip(from_pairs, from_codes))
    assert from_pairs[0].any() and from_pairs[1].any() and not from_pairs[1].all()
    narrow = [b[:, :200].contiguous() for b in bits]  # 200 objects: a code of object 200-255 points outside
    with pytest.raises(RuntimeError, match='points outside its objects'):
        ext.relation_pair_flags(narrow[0], narrow[1], *args[2:], codes)



@pytest.mark.parametrize('seed', range(6))
def test_pair_flags_from_sparse_pair_codes_equal_the_pair_list_and_refuse_the_same_pair(seed):
    """Few objects matching some end, as in real pools: the pair codes give the flags of the int64 pair list at
    every count (0, 1, 7, 8, 203, 2,700 pairs), objects 0-255 named; a code naming an object beyond the image's
    objects is refused at the same image and pair as the pair list refuses it (first, middle, last pairs)."""
    ext = compiled.kernels()
    if ext is None or not hasattr(ext, 'relation_pair_flags'):
        pytest.skip('the compiled kernels are not built')
    g = torch.Generator().manual_seed(seed)
    batch, objects, num_pred, num_rel = 6, 256, 2, 40 if seed % 2 else 90
    words = (num_rel + 63) // 64
    bits = []
    for _ in range(2):  # each object matches an end of some GT relation with probability 0.15
        b = torch.zeros(batch, objects, words, dtype=torch.long)
        some = torch.rand(batch, objects, generator=g) < 0.15
        rel = torch.where(torch.rand(batch, objects, generator=g) < 0.6, torch.randint(0, 4, (batch, objects),
                          generator=g), torch.randint(num_rel - 4, num_rel, (batch, objects), generator=g))
        b[..., 0] = torch.where(some & (rel < 64), torch.ones_like(rel) << rel.clamp(max=63), 0)
        if words > 1:
            b[..., 1] = torch.where(some & (rel >= 64), torch.ones_like(rel) << (rel - 64).clamp(min=0), 0)
        bits.append(b)
    gt_predicates = torch.randint(0, num_pred, (batch, num_rel), generator=g)
    gt_valid = torch.rand(batch, num_rel, generator=g) < 0.9
    count = torch.tensor([0, 1, 7, 8, 203, 2700])[torch.randperm(6, generator=g)]
    width = int(count.max()) + 5
    pairs = torch.randint(0, objects, (batch, width, 2), generator=g)
    matrices = [torch.rand(int(n), num_pred + 1, generator=g) for n in count]
    codes = (pairs[..., 0] * 256 + pairs[..., 1]).to(torch.int32).to(torch.int16)
    args = (bits[0], bits[1], gt_predicates, gt_valid, [pairs], count, matrices, None, 1, num_pred)
    from_pairs = ext.relation_pair_flags(*args)
    from_codes = ext.relation_pair_flags(*args, codes)
    assert all(torch.equal(a, b) for a, b in zip(from_pairs, from_codes))
    assert from_pairs[0].any() and from_pairs[1].any()
    # 100 objects: pairs naming objects 100-255 are refused; the same image and pair either way
    narrow_pairs = torch.randint(0, 100, (batch, width, 2), generator=g)
    big = int(count.argmax())
    for at in (0, 5, 8, 13, int(count[big]) - 1, int(count[big]) - 9):
        bad_pairs = narrow_pairs.clone()
        bad_pairs[big, at, int(torch.randint(0, 2, (1,), generator=g))] = 100 + int(torch.randint(0, 156, (1,),
                                                                                                  generator=g))
        bad_codes = (bad_pairs[..., 0] * 256 + bad_pairs[..., 1]).to(torch.int32).to(torch.int16)
        narrow = [b[:, :100].contiguous() for b in bits]
        messages = []
        for extra in ((), (bad_codes,)):
            with pytest.raises(RuntimeError, match='points outside its objects') as err:
                ext.relation_pair_flags(narrow[0], narrow[1], gt_predicates, gt_valid, [bad_pairs], count, matrices,
                                        None, 1, num_pred, *extra)
            messages.append(str(err.value).splitlines()[0])
        assert messages[0] == messages[1] and f'image {big} pair {at} ' in messages[0]

# ------------------------------------------------------------------ the error analysis' one-pass kernels
@needs_kernels
@pytest.mark.parametrize('shape', [(5, 9, 6, 20), (3, 12, 8, 130), (4, 7, 5, 64), (3, 20, 19, 70), (2, 9, 33, 12),
                                   (2, 11, 70, 9), (3, 0, 4, 5), (3, 5, 4, 0), (2, 4, 0, 0), (0, 3, 3, 2),
                                   (1, 1, 1, 1)])
@pytest.mark.parametrize('seed', [0, 1])
def test_box_match_overlap_flags_equal_the_two_box_kernels_and_the_cause_rule(seed, shape):
    """The matching and overlap pass in one: its match bits are box_relation_end_bits', its located bits
    box_overlap_flags' (a match overlaps: they hold the match bits too), its codes before the pairs miss_causes'
    with no pair scored, its counts the valid GT objects and those overlapped / matched; at thresholds > 0 and both
    conventions, with an empty predicted box on an empty GT box (NaN IoU), padding on both sides, invalid GT
    relations, 1 to 3 words of relations, 1 or 2 words of GT objects (M = 70), N = 0, G = 0, M = 0, B = 0."""
    from mmsgg_eval.functional import error_causes as ec
    ext = compiled.kernels()
    pred_boxes, pred_labels, gt_boxes, gt_labels, gt_pairs, gt_valid = _end_bits_batch(seed, *shape)
    if shape[1] >= 2 and shape[2] >= 1:
        pred_boxes[:, 1] = gt_boxes[:, 0] = torch.tensor([3.0, 3.0, 3.0, 3.0])
    args = (pred_boxes, pred_labels, gt_boxes, gt_labels, gt_pairs, gt_valid)
    for plus_one in (False, True):
        for thr in (0.5, 0.3, 0.7, 1.0, 1e-6):
            sub, obj, loc_sub, loc_obj, pre, objects, inst_loc, inst_det = ext.box_match_overlap_flags(
                *args, thr, plus_one, list(ec.OVERLAP_CAUSES))
            r_sub, r_obj = ext.box_relation_end_bits(*args, thr, plus_one)
            located_any, detected_any, r_loc_sub, r_loc_obj = ext.box_overlap_flags(*args, thr, plus_one)
            assert torch.equal(sub, r_sub) and torch.equal(obj, r_obj), (plus_one, thr)
            assert torch.equal(loc_sub, r_loc_sub | r_sub) and torch.equal(loc_obj, r_loc_obj | r_obj)
            assert torch.equal(loc_sub, r_loc_sub) and torch.equal(loc_obj, r_loc_obj)  # thr > 0: match => overlap
            valid_objects = gt_labels >= 0
            assert objects.dtype == inst_loc.dtype == inst_det.dtype == torch.int32
            assert objects.tolist() == valid_objects.sum(1).tolist()
            assert inst_loc.tolist() == (located_any & valid_objects).sum(1).tolist()
            assert inst_det.tolist() == (detected_any & valid_objects).sum(1).tolist()
            assert pre.dtype == torch.int8 and pre.shape == gt_valid.shape
            if shape[2]:  # every GT pair in range: the torch rule on every entry, valid or not
                none = torch.zeros_like(gt_valid)
                s_loc, o_loc = ec.end_flags(located_any, gt_pairs)
                s_det, o_det = ec.end_flags(detected_any, gt_pairs)
                assert torch.equal(pre, ec.miss_causes(s_loc, o_loc, s_det, o_det, none, none)), (plus_one, thr)
            else:
                assert (pre == ec.SUBJECT_LOC).all()


@needs_kernels
@pytest.mark.parametrize('shape', [(5, 9, 6, 20, 12), (3, 12, 8, 130, 30), (4, 7, 5, 64, 9), (2, 6, 4, 3, 0),
                                   (3, 5, 4, 0, 6), (0, 3, 3, 2, 4)])
@pytest.mark.parametrize('seed', [0, 1])
def test_stage_first_hit_ranks_equal_three_first_hit_rank_passes(seed, shape):
    """The three stage-wise ranks in one pass equal first_hit_ranks on the list's own ends: located ends only
    (pair_loc), matched ends only (pair_det), located ends and the entry's predicate (pred_cls; -1 and P hit
    nothing); with invalid entries, repeated entries, GT predicates outside [0, P) and invalid GT relations."""
    batch, num_pred, num_gt_obj, num_rel, length = shape
    ext = compiled.kernels()
    pred_boxes, pred_labels, gt_boxes, gt_labels, gt_pairs, gt_valid = _end_bits_batch(seed, *shape[:4])
    args = (pred_boxes, pred_labels, gt_boxes, gt_labels, gt_pairs, gt_valid)
    sub, obj = ext.box_relation_end_bits(*args, 0.5, False)
    _, _, loc_sub, loc_obj = ext.box_overlap_flags(*args, 0.3, False)
    g = np.random.default_rng(seed + 10)
    gt_predicates = torch.from_numpy(g.integers(0, NUM_PREDICATES, (batch, num_rel)))
    gt_predicates[torch.from_numpy(g.random((batch, num_rel)) < 0.1)] = NUM_PREDICATES  # outside [0, P)
    gt_predicates[torch.from_numpy(g.random((batch, num_rel)) < 0.05)] = -1
    ends = torch.from_numpy(g.integers(0, max(num_pred, 1), (batch, length, 2)))
    predicate = torch.from_numpy(g.integers(-1, NUM_PREDICATES + 1, (batch, length)))
    for b in range(batch):  # most entries on objects overlapping the ends of some GT relation: many hits
        for j in range(length):
            rel = int(g.integers(0, max(num_rel, 1)))
            bit = (loc_sub[b, :, rel // 64] >> (rel % 64)) & 1, (loc_obj[b, :, rel // 64] >> (rel % 64)) & 1
            subjects, objects = bit[0].nonzero().flatten(), bit[1].nonzero().flatten()
            if num_rel and len(subjects) and len(objects) and g.random() < 0.7:
                ends[b, j] = torch.stack([subjects[int(g.integers(0, len(subjects)))],
                                          objects[int(g.integers(0, len(objects)))]])
                if g.random() < 0.6:  # and its predicate
                    predicate[b, j] = gt_predicates[b, rel]
    if length >= 2:
        ends[:, 1] = ends[:, 0]  # a repeated pair
    valid = torch.from_numpy(g.random((batch, length)) < 0.85) if num_pred else \
        torch.zeros(batch, length, dtype=torch.bool)
    positions = torch.arange(length).expand(batch, -1).contiguous()

    def ranks(s, o, p):
        return ext.first_hit_ranks(s, o, gt_predicates, gt_valid, [ends], positions, valid, p, None, [], None, 0,
                                   NUM_PREDICATES, p is None)
    out = ext.stage_first_hit_ranks(sub, obj, loc_sub, loc_obj, gt_predicates, gt_valid, ends, valid, predicate,
                                    NUM_PREDICATES)
    assert out.dtype == torch.int32 and out.shape == (3, batch, num_rel)
    assert torch.equal(out[0], ranks(loc_sub, loc_obj, None))
    assert torch.equal(out[1], ranks(sub, obj, None))
    assert torch.equal(out[2], ranks(loc_sub, loc_obj, predicate))
    if batch and num_rel and length and num_pred:
        assert (out[0] < NO_HIT).any() and (out[2] < NO_HIT).any()  # hits: not a comparison of empty results


@needs_kernels
def test_error_analysis_kernels_refuse_bad_arguments_naming_the_problem():
    """box_match_overlap_flags: the box kernels' checks, a threshold > 0 and five int8 cause codes;
    stage_first_hit_ranks: types, shapes and an entry outside its image's objects, naming the image and entry."""
    ext = compiled.kernels()
    args = dict(pred_boxes=torch.rand(2, 3, 4), pred_labels=torch.zeros(2, 3, dtype=torch.long),
                gt_boxes=torch.rand(2, 4, 4), gt_labels=torch.zeros(2, 4, dtype=torch.long),
                gt_pairs=torch.zeros(2, 5, 2, dtype=torch.long), gt_valid=torch.ones(2, 5, dtype=torch.bool),
                iou_thr=0.5, plus_one=False, cause_codes=[1, 2, 3, 4, 5])
    sub, obj, loc_sub, loc_obj, *_ = ext.box_match_overlap_flags(**args)
    bad_pairs = torch.zeros(2, 5, 2, dtype=torch.long)
    bad_pairs[1, 3, 1] = 4
    for change, message in [(dict(iou_thr=0.0), 'iou_thr must be > 0'),
                            (dict(cause_codes=[1, 2, 3]), 'cause_codes must hold 5 codes'),
                            (dict(cause_codes=[1, 2, 3, 4, 500]), 'a cause code must fit int8'),
                            (dict(gt_labels=torch.zeros(2, 4, dtype=torch.int32)), 'gt_labels must be int64'),
                            (dict(gt_boxes=torch.rand(1, 4, 4)), 'the batch fields do not have matching shapes'),
                            (dict(gt_pairs=bad_pairs), r'image 1 GT relation 3 has an object index outside \[0, 4\)')]:
        with pytest.raises(RuntimeError, match=f'box_match_overlap_flags: .*{message}'):
            ext.box_match_overlap_flags(**{**args, **change})
    stage = dict(subject_bits=sub, object_bits=obj, located_subject_bits=loc_sub, located_object_bits=loc_obj,
                 gt_predicates=torch.zeros(2, 5, dtype=torch.long), gt_valid=torch.ones(2, 5, dtype=torch.bool),
                 ends=torch.zeros(2, 4, 2, dtype=torch.long), valid=torch.ones(2, 4, dtype=torch.bool),
                 predicate=torch.zeros(2, 4, dtype=torch.long), num_predicates=3)
    assert ext.stage_first_hit_ranks(**stage).shape == (3, 2, 5)
    outside = torch.zeros(2, 4, 2, dtype=torch.long)
    outside[1, 2, 0] = 3
    for change, message in [(dict(ends=torch.zeros(2, 4, 2, dtype=torch.int32)), 'ends must be int64'),
                            (dict(predicate=torch.zeros(2, 3, dtype=torch.long)), 'do not have matching shapes'),
                            (dict(located_subject_bits=sub[:, :2]), 'do not have matching shapes'),
                            (dict(valid=torch.ones(2, 4, dtype=torch.long)), 'valid must be bool'),
                            (dict(ends=outside), 'image 1 entry 2 points outside its objects')]:
        with pytest.raises(RuntimeError, match=f'stage_first_hit_ranks: .*{message}'):
            ext.stage_first_hit_ranks(**{**stage, **change})
    # an invalid entry is never looked at
    ext.stage_first_hit_ranks(**{**stage, 'ends': outside, 'valid': torch.tensor([[True] * 4, [True, True, False,
                                                                                                 True]])})
