"""Functional layer against slow references: stable top-k, IoU conventions, no-graph-constraint pruning."""
import contextlib

import numpy as np
import pytest
import torch

from mmsgg_eval.functional import box_iou, mask_iou, paired_box_iou, stable_topk
from mmsgg_eval.functional.transfer import sync_free_paths
from mmsgg_eval.testing.host_syncs import HostSyncCounter
from tests.reference_sgg import iou as reference_iou


@pytest.mark.parametrize('path', ['cpu', 'sync-free'])  # the host's shortcuts / the accelerators' keys at once
@pytest.mark.parametrize('density', [0.85, 0.05])  # the float / keyed paths; rows ranked on their few valid entries
@pytest.mark.parametrize('quantised', [False, True])
def test_stable_topk_equals_a_stable_sort(quantised, density, path):
    g = torch.Generator().manual_seed(1)
    for trial in range(200 if path == 'cpu' else 60):
        batch = 3
        length = int(torch.randint(1, 700, (1,), generator=g))
        k = int(torch.randint(1, 160, (1,), generator=g))
        x = torch.rand(batch, length, generator=g)
        if quantised:  # many ties, also at the k-th value, in some rows (the others take the float path)
            tied = torch.rand(batch, 1, generator=g) < 0.5
            x = torch.where(tied, (x * 5).round() / 5, x)
        valid = torch.rand(batch, length, generator=g) < density
        with sync_free_paths() if path == 'sync-free' else contextlib.nullcontext(), HostSyncCounter() as syncs:
            order, order_valid = stable_topk(x, valid, k)
        assert path == 'cpu' or syncs.total == 0, syncs.report()
        assert order.shape == order_valid.shape == (batch, min(k, length))
        for b in range(batch):
            ref = sorted((i for i in range(length) if valid[b, i]), key=lambda i: -float(x[b, i]))[:k]
            n = len(ref)
            assert order[b, :n].tolist() == ref
            assert order_valid[b].tolist() == [True] * n + [False] * (min(k, length) - n)


def test_stable_topk_ties_negative_and_positive_zero():
    """-0.0 and +0.0 compare equal, so they tie (input order), as in a stable sort of the floats."""
    x = torch.tensor([[0.5, -0.0, 0.0, -0.0, 1.0, 0.0, 0.5], [-0.0, 0.0, -0.0, 0.0, 0.0, -0.0, 0.0]])
    for k in (3, 5, 7):
        order, _ = stable_topk(x, None, k)
        for b in range(2):
            assert order[b].tolist() == sorted(range(7), key=lambda i: -float(x[b, i]))[:k]


@pytest.mark.parametrize('plus_one', [True, False])
def test_box_iou_matches_float32_reference(plus_one):
    rng = np.random.default_rng(0)
    a = np.round(rng.uniform(0, 50, (30, 4)))
    b = np.round(rng.uniform(0, 50, (20, 4)))
    a[:, 2:] = np.maximum(a[:, 2:], a[:, :2])
    b[:, 2:] = np.maximum(b[:, 2:], b[:, :2])
    ours = box_iou(torch.tensor(a), torch.tensor(b), plus_one)
    ref = np.array([[reference_iou(x, y, plus_one) for y in b] for x in a], dtype=np.float32)
    assert np.array_equal(ours.numpy(), ref)  # bit-identical
    paired = paired_box_iou(torch.tensor(a[:20]), torch.tensor(b), plus_one)
    assert torch.equal(paired, ours[torch.arange(20), torch.arange(20)])


def test_iou_conventions_on_known_boxes():
    a = torch.tensor([[0., 0, 9, 9]])
    b = torch.tensor([[0., 0, 9, 4]])
    assert box_iou(a, b, plus_one=True).item() == 0.5       # 50 / 100 pixels
    assert box_iou(a, b, plus_one=False).item() == pytest.approx(36 / 81)
    zero = torch.tensor([[3., 3, 3, 3]])
    assert box_iou(zero, zero, plus_one=False).item() == 0.0  # no NaN for empty boxes
    assert box_iou(zero, zero, plus_one=True).item() == 1.0   # one pixel


def test_mask_iou():
    m = torch.zeros(3, 8, 8, dtype=torch.bool)
    m[0, :4, :4] = True
    m[1, :4, :2] = True
    iou = mask_iou(m, m)
    assert iou[0, 1].item() == 0.5 and iou[0, 0].item() == 1.0
    assert iou[2, 2].item() == 0.0  # two empty masks


@pytest.mark.parametrize('plus_one,thr', [(True, 0.5), (False, 0.5), (False, 0.0), (True, 0.7)])
def test_sparse_and_dense_object_matches_agree(plus_one, thr):
    """The CPU (same-class pairs only) and GPU (full IoU matrix) ways of matching objects agree exactly,
    including zero-area boxes, padding labels and IoU exactly at the threshold."""
    from mmsgg_eval.functional import box_object_matches
    g = torch.Generator().manual_seed(int(thr * 10) + plus_one)
    boxes = lambda n: torch.cat([xy := torch.randint(0, 40, (6, n, 2), generator=g).float(),  # noqa: E731
                                 xy + torch.randint(0, 12, (6, n, 2), generator=g).float()], -1)
    pred_boxes, gt_boxes = boxes(9), boxes(5)
    pred_boxes[:, :3] = gt_boxes[:, :3]  # exact IoU 1 and shared zero-area boxes
    pred_labels = torch.randint(0, 3, (6, 9), generator=g)
    gt_labels = torch.randint(0, 3, (6, 5), generator=g)
    pred_labels[0, 6:] = -1  # padding
    gt_labels[1, 3:] = -1
    sparse = box_object_matches(pred_boxes, pred_labels, gt_boxes, gt_labels, thr, plus_one, sparse=True)
    dense = box_object_matches(pred_boxes, pred_labels, gt_boxes, gt_labels, thr, plus_one, sparse=False)
    assert torch.equal(sparse, dense) and sparse.any()
    expected = (pred_labels[:, :, None] == gt_labels[:, None, :]) & (pred_labels[:, :, None] >= 0) & \
        (box_iou(pred_boxes, gt_boxes, plus_one) >= thr)
    assert torch.equal(sparse, expected)


@pytest.mark.parametrize('scale', [1, 10 ** 7])  # dense class buckets; sparse large labels (classes renumbered)
def test_same_class_pairs_equal_the_pairwise_comparison(scale):
    """The bucket join lists exactly the same-class pairs of the N x M comparison, in its order (predicted
    object, then GT object), with padding labels, an image without GT objects and empty batches."""
    from mmsgg_eval.functional import ObjectMatches, same_class_pairs
    from mmsgg_eval.functional.matching import same_class_matrix
    g = torch.Generator().manual_seed(5)
    pred_labels = torch.randint(0, 4, (6, 9), generator=g) * scale
    gt_labels = torch.randint(0, 4, (6, 5), generator=g) * scale
    pred_labels[0, 6:] = -1
    gt_labels[1, 3:] = -1
    gt_labels[2] = -1
    pairs = same_class_pairs(pred_labels, gt_labels)
    expected = ObjectMatches.from_matrix(same_class_matrix(pred_labels, gt_labels))
    assert torch.equal(pairs.pred_row, expected.pred_row) and torch.equal(pairs.gt_row, expected.gt_row)
    assert pairs.pred_row.numel() and pairs.shape == (6, 9, 5)
    for p, q in ((pred_labels[:0], gt_labels[:0]), (pred_labels[:, :0], gt_labels), (pred_labels, gt_labels[:, :0])):
        assert same_class_pairs(p, q).pred_row.numel() == 0


@pytest.mark.parametrize('num_gt', [7, 64, 130])  # one word, exactly one full word, three words
def test_bit_set_hits_equal_gathered_hits(num_gt):
    """The hot path's bit sets (relation_end_bits -> pair_end_bits -> predicate_hit_bits ->
    first_hit_rank_bits) == triplet_hits (gathers per entry x GT relation) + first_hit_rank, with padded GT
    relations, invalid entries, several GT relations on one object pair and out-of-range predicates."""
    from mmsgg_eval.functional import (box_object_match_list, expand_bits, first_hit_rank, first_hit_rank_bits,
                                       pair_end_bits, predicate_bits, predicate_hit_bits, relation_end_bits,
                                       triplet_hits)
    g = torch.Generator().manual_seed(3)
    B, N, M, G, J, P = 5, 8, 6, num_gt, 60, 2
    xy = torch.randint(0, 30, (B, M, 2), generator=g).float()
    gt_boxes = torch.cat([xy, xy + torch.randint(1, 15, (B, M, 2), generator=g)], -1)
    pick = torch.randint(0, M, (B, N), generator=g)
    pred_boxes = gt_boxes.gather(1, pick[..., None].expand(-1, -1, 4)) + torch.randint(-2, 3, (B, N, 4), generator=g)
    pred_boxes[..., 2:] = torch.maximum(pred_boxes[..., 2:], pred_boxes[..., :2])
    gt_labels = torch.randint(0, 3, (B, M), generator=g)
    pred_labels = torch.where(torch.rand(B, N, generator=g) < 0.8, gt_labels.gather(1, pick),
                              torch.randint(0, 3, (B, N), generator=g))
    gt_sub, gt_obj = torch.randint(0, M, (B, G), generator=g), torch.randint(0, M, (B, G), generator=g)
    gt_pred = torch.randint(0, P, (B, G), generator=g)
    gt_valid = torch.rand(B, G, generator=g) < 0.8
    gt_valid[2] = False  # an image without GT relations
    sub, obj = torch.randint(0, N, (B, J), generator=g), torch.randint(0, N, (B, J), generator=g)
    pred = torch.randint(0, P, (B, J), generator=g)
    pred[0, :5] = P  # out of range: hits nothing
    valid = torch.rand(B, J, generator=g) < 0.9
    iou = box_iou(pred_boxes, gt_boxes, True)
    gathered = triplet_hits(sub, obj, pred, valid, pred_labels, gt_sub, gt_obj, gt_pred, gt_valid, gt_labels, 0.5,
                            object_iou=iou)
    ends = relation_end_bits(box_object_match_list(pred_boxes, pred_labels, gt_boxes, gt_labels, 0.5, True),
                             gt_sub, gt_obj, gt_valid)
    end_bits = pair_end_bits(*ends, sub, obj, valid)
    assert end_bits.shape == (B, J, -(-G // 64))
    bits = predicate_hit_bits(end_bits, predicate_bits(gt_pred, gt_valid, P), pred, valid)
    assert torch.equal(expand_bits(bits, G), gathered) and gathered.any()
    # the ends alone: every entry whose pair could hit, whatever its predicate
    any_pred = torch.stack([triplet_hits(sub, obj, torch.full_like(pred, p), valid, pred_labels, gt_sub, gt_obj,
                                         gt_pred, gt_valid, gt_labels, 0.5, object_iou=iou) for p in range(P)]).any(0)
    assert torch.equal(expand_bits(end_bits, G), any_pred)
    sub_list = torch.rand(B, J, generator=g) < 0.5
    for list_valid in (None, sub_list):
        assert torch.equal(first_hit_rank_bits(bits, G, list_valid), first_hit_rank(gathered, list_valid))


@pytest.mark.parametrize('table_entries', [1 << 24, 0])  # the lookup table, then the sorted search
def test_pairs_in_reference_equals_a_loop(monkeypatch, table_entries):
    """pairs_in_reference: (subject idx, object idx) equality against each image's valid reference pairs,
    with duplicate and padded reference pairs, images without any and reversed pairs (not the same pair)."""
    import mmsgg_eval.functional.matching as matching
    monkeypatch.setattr(matching, 'PAIR_TABLE_ENTRIES', table_entries)
    g = torch.Generator().manual_seed(7)
    B, R, G, S = 7, 40, 9, 6
    pairs = torch.randint(0, S, (B, R, 2), generator=g)
    ref = torch.randint(0, S, (B, G, 2), generator=g)
    ref[:, 1] = ref[:, 0].flip(-1)  # the reversed pair is another pair
    ref[:, 2] = ref[:, 0]  # a duplicate reference pair
    valid = torch.rand(B, R, generator=g) < 0.85
    ref_valid = torch.rand(B, G, generator=g) < 0.7
    ref_valid[3] = False  # an image without reference pairs
    got = matching.pairs_in_reference(pairs, valid, ref, ref_valid, S)
    listed = [{tuple(ref[b, j].tolist()) for j in range(G) if ref_valid[b, j]} for b in range(B)]
    expected = torch.tensor([[bool(valid[b, r]) and tuple(pairs[b, r].tolist()) in listed[b] for r in range(R)]
                             for b in range(B)])
    assert torch.equal(got, expected) and got.any() and not got[3].any()
    empty = matching.pairs_in_reference(pairs[:0], valid[:0], ref[:0], ref_valid[:0], S)
    assert empty.shape == (0, R)


def _reference_ng_list(matrices, pair_scores, single_label, ng_topk):
    """Stable descending sort of every (pair, predicate) entry pair_score * prob, row-major order on ties;
    single-label rows (-inf = not a candidate) contribute their one entry."""
    out = []
    for matrix, pair_score in zip(matrices, pair_scores):
        entries = []
        for r, row in enumerate(matrix.tolist()):
            for p, prob in enumerate(row):
                if single_label and prob == float('-inf'):
                    continue
                entries.append((float(np.float32(prob) * np.float32(pair_score[r])), r, p))
        ranked = sorted(range(len(entries)), key=lambda i: -entries[i][0])[:ng_topk]
        out.append([(entries[i][1], entries[i][2]) for i in ranked])
    return out


@pytest.mark.parametrize('layout', ['stacked', 'stacked-pruned', 'concatenated', 'concatenated-sorted', 'views',
                                    'views-no-probe', 'compiled', 'stacked-sync-free', 'concatenated-sync-free'])
@pytest.mark.parametrize('single_label', [False, True])
def test_no_graph_constraint_pruning_equals_a_full_stable_sort(monkeypatch, layout, single_label):
    """The pruned no-graph-constraint list equals a stable sort of all entries whatever pairs bound its
    threshold (none given, the top pairs, arbitrary pairs, too few pairs; with and without the probe bound; kept
    entries ranked in a table or by one sort), with exact ties, zero pair scores, images with fewer entries than
    ng_topk and images without pairs."""
    from mmsgg_eval.functional import compiled, no_graph_constraint as ngc
    from mmsgg_eval.functional.no_graph_constraint import no_graph_constraint_list
    from mmsgg_eval.functional.scores import build_relation_scores
    if layout == 'compiled' and not compiled.built():
        pytest.skip('the compiled kernels are not built')
    if layout == 'stacked-pruned':  # fixed sizes ranked through the pruned path too
        monkeypatch.setattr(ngc, 'DENSE_NGC_ENTRIES', 0)
        layout = 'stacked'
    if layout == 'concatenated-sorted':  # kept entries ranked by one sort (very uneven images) instead of a table
        monkeypatch.setattr(ngc, 'RANK_TABLE_SLACK', 0)
        layout = 'concatenated'
    if layout == 'views-no-probe':  # the threshold from the top pairs' bound alone (many pairs per image)
        monkeypatch.setattr(ngc, 'NGC_PROBE_PAIRS_PER_ENTRY', 0)
        layout = 'views'
    sync_free = layout.endswith('-sync-free')  # the accelerators' fixed-size list from each image's top rows
    if sync_free:
        monkeypatch.setattr(ngc, 'DENSE_NGC_ENTRIES', 0)
        layout = layout[:-len('-sync-free')]
    g = np.random.default_rng(7 + single_label)
    num_pred = 6
    for trial in range(60):
        batch = int(g.integers(1, 6))
        fixed = int(g.integers(0, 40)) if layout == 'stacked' else None
        num_rel = [fixed if fixed is not None else int(g.integers(0, 60)) for _ in range(batch)]
        background = int(g.integers(0, 2)) if not single_label else 0
        raw, given = [], []
        for r in num_rel:
            m = g.random((r, num_pred + background)).astype(np.float32)
            if g.random() < 0.6:
                m = (np.round(m * 3) / 3).astype(np.float32)  # many exact ties, also at the threshold
            if single_label:
                labels = g.integers(0, num_pred, r)
                dense = np.full((r, num_pred), -np.inf, np.float32)
                dense[np.arange(r), labels] = m[:, 0]
                given.append(torch.tensor(m[:, 0]))
                m = dense
            raw.append(torch.tensor(m))
        scores = build_relation_scores(raw, [background] * batch, num_rel, num_pred, [single_label] * batch, given,
                                       layout, torch.device('cpu'))
        assert scores.layout == ('views' if layout == 'compiled' and single_label else layout)
        width = max(num_rel) if num_rel else 0
        pair_score = torch.zeros(batch, width)
        valid = torch.zeros(batch, width, dtype=torch.bool)
        for b, r in enumerate(num_rel):
            ps = np.round(g.random(r) * 4) / 4  # ties and zeros
            pair_score[b, :r] = torch.tensor(ps, dtype=torch.float32)
            valid[b, :r] = True
        ng_topk = int(g.integers(1, 120))
        choices = [(None, None)]
        if width:
            count = int(g.integers(1, width + 1))  # distinct pairs (as any ranked list gives them)
            random_pairs = torch.tensor(np.stack([g.permutation(width)[:count] for _ in range(batch)]))
            choices += [(random_pairs, valid.gather(1, random_pairs)),
                        (random_pairs[:, :1], valid.gather(1, random_pairs[:, :1]))]
        matrices = [m[:, background:] for m in raw]
        ref = _reference_ng_list(matrices, [pair_score[b, :r].tolist() for b, r in enumerate(num_rel)],
                                 single_label, ng_topk)
        for top_pairs, top_valid in choices:
            with sync_free_paths() if sync_free else contextlib.nullcontext(), HostSyncCounter() as syncs:
                pair, pred, ok = no_graph_constraint_list(scores, valid, ng_topk, pair_score, top_pairs, top_valid)
            assert not sync_free or syncs.total == 0, syncs.report()
            for b in range(batch):
                n = int(ok[b].sum())
                assert ok[b, :n].all()
                got = list(zip(pair[b, :n].tolist(), pred[b, :n].tolist()))
                assert got == ref[b], (trial, layout, b)


@pytest.mark.parametrize('mean_rows', [5, 300])  # scattered concatenation, per-tensor copies
def test_pad_rows_equals_a_loop(mean_rows):
    """pad_rows pads like a loop on both of its paths (short tensors: one concatenation scattered by
    padded_positions; long ones: each tensor copied in place), with empty tensors and trailing dims, and
    refuses mixed dtypes, devices and 0-d tensors."""
    from mmsgg_eval.functional.scores import LONG_ROWS, pad_rows, padded_positions, scatters
    g = torch.Generator().manual_seed(mean_rows)
    lengths = torch.randint(0, 2 * mean_rows, (9,), generator=g).tolist()
    lengths[3] = 0
    assert scatters(lengths) == (mean_rows < LONG_ROWS)
    for shape in ((), (2,)):
        tensors = [torch.randint(0, 50, (n,) + shape, generator=g) for n in lengths]
        width = max(lengths)
        expected = torch.full((len(lengths), width) + shape, -1, dtype=torch.long)
        for b, t in enumerate(tensors):
            expected[b, :len(t)] = t
        assert torch.equal(pad_rows(tensors, -1), expected)
        positions = padded_positions(lengths, width, torch.device('cpu'))
        assert torch.equal(pad_rows(tensors, -1, lengths, positions), expected)
    same = [torch.ones(4, 2)] * 3
    assert torch.equal(pad_rows(same, 0.0), torch.ones(3, 4, 2))
    with pytest.raises(RuntimeError):
        pad_rows([torch.ones(3), torch.ones(2, dtype=torch.long)], 0)
    with pytest.raises(RuntimeError):
        pad_rows([torch.ones(2 * LONG_ROWS), torch.ones(3 * LONG_ROWS, device='meta')], 0)
    with pytest.raises(RuntimeError):
        pad_rows([torch.ones(2, 1), torch.ones(3, 1, device='meta')], 0)
    with pytest.raises(TypeError):
        pad_rows([torch.tensor(1.0), torch.ones(2)], 0)


SPECIAL_VALUES = [float('nan'), -float('nan'), float('inf'), -float('inf'), -1e-45, -0.5, -0.0, 0.0, 1e-45, 3e38]


@pytest.mark.parametrize('layout', ['stacked', 'concatenated', 'views', 'compiled'])
def test_row_maxima_and_value_check_equal_float_reductions(layout):
    """Row maxima taken on the float bit patterns equal float maxima for valid rows (ties of -0.0 and +0.0 compare
    equal), and the bit-pattern check flags exactly the images with a NaN (either sign), +-inf or a negative
    entry anywhere, the background column included, and accepts -0.0."""
    from mmsgg_eval.functional import compiled
    from mmsgg_eval.functional.scores import build_relation_scores
    if layout == 'compiled' and not compiled.built():
        pytest.skip('the compiled kernels are not built')
    g = np.random.default_rng(11)
    num_pred = 5
    for trial in range(120):
        batch = int(g.integers(1, 5))
        fixed = int(g.integers(0, 30))
        num_rel = [fixed if layout == 'stacked' else int(g.integers(0, 30)) for _ in range(batch)]
        background = int(g.integers(0, 2))
        raw = []
        for r in num_rel:
            m = g.random((r, num_pred + background)).astype(np.float32)
            if g.random() < 0.3:
                m[m < 0.4] = 0.0
            if r and g.random() < 0.5:  # a special value somewhere, also in the background column
                m[g.integers(0, r), g.integers(0, num_pred + background)] = SPECIAL_VALUES[g.integers(0, 10)]
            raw.append(torch.tensor(m))
        scores = build_relation_scores(raw, [background] * batch, num_rel, num_pred, [False] * batch, [], layout,
                                       torch.device('cpu'))
        assert scores.layout == ('concatenated' if layout == 'stacked' and len(set(num_rel)) > 1 else layout)
        expected_bad = [bool(m.numel()) and not bool((torch.isfinite(m) & (m >= 0)).all()) for m in raw]
        assert scores.bad_images.tolist() == expected_bad, trial
        for b, m in enumerate(raw):
            if not expected_bad[b] and m.shape[0]:
                assert torch.equal(scores.best[b, :m.shape[0]], m[:, background:].amax(1)), (trial, b)


def test_score_workspace_reuse_gives_the_same_batches():
    """Batches built one after the other in one workspace (growing, shrinking, stacked and concatenated) hold the
    same scores and rank the same as batches built in fresh tensors; the workspace's memory is reused."""
    from mmsgg_eval.functional.no_graph_constraint import no_graph_constraint_list
    from mmsgg_eval.functional.scores import ScoreWorkspace, build_relation_scores
    g = np.random.default_rng(5)
    workspace = ScoreWorkspace()
    buffers = set()
    for trial, (batch, rows) in enumerate([(3, 40), (6, 200), (2, 10), (5, 120), (4, 0)]):
        fixed = trial % 2 == 0
        num_rel = [rows if fixed else int(g.integers(0, rows + 1)) for _ in range(batch)]
        raw = [torch.tensor(g.random((r, 7)).astype(np.float32)) for r in num_rel]
        args = (raw, [1] * batch, num_rel, 6, [False] * batch, [], 'stacked', torch.device('cpu'))
        fresh = build_relation_scores(*args)
        reused = build_relation_scores(*args, workspace=workspace)
        assert reused.layout == fresh.layout == ('stacked' if fixed else 'concatenated')
        assert torch.equal(reused.best, fresh.best) and torch.equal(reused.flat, fresh.flat)
        width = max(num_rel)
        valid = torch.arange(width)[None, :] < torch.tensor(num_rel)[:, None]
        pair_score = torch.rand(batch, width)
        for a, b in zip(no_graph_constraint_list(fresh, valid, 30, pair_score),
                        no_graph_constraint_list(reused, valid, 30, pair_score)):
            assert torch.equal(a, b)
        if reused.flat.numel():
            buffers.add(reused.flat.untyped_storage().data_ptr())
    assert len(buffers) <= 2  # grown once (to the 6 x 200 batch), then reused
    assert workspace.take((2, 3), torch.device('meta')) is None


def test_hits_per_k_equals_a_loop():
    """hits_per_k counts, for every key and every K (any order, repeated K included), the relations with rank < K."""
    from mmsgg_eval.functional.recall import hits_per_k
    g = torch.Generator().manual_seed(3)
    for ks in ([20, 50, 100], [100, 1, 20], [5, 5], [1]):
        rank = torch.randint(0, 120, (500,), generator=g)
        rank[::7] = 2 ** 30  # not hit
        key = torch.randint(0, 13, (500,), generator=g)
        got = hits_per_k(rank, key, 13, ks)
        expected = torch.tensor([[float(((key == b) & (rank < k)).sum()) for k in ks] for b in range(13)],
                                dtype=torch.float64)
        assert torch.equal(got, expected), ks
