"""Both ranked lists built while the scores are read (mmsgg_eval._ext.ranked_relation_lists), the predicted pairs
kept per image (structures.pairs.RelationPairs) and the long-row top-k's block bound: each equal to what the
separate kernels, the torch path and a loop reference give, on ties, -0.0, NaN, bad indices and every size."""
import numpy as np
import pytest
import torch

from mmsgg_eval.functional import compiled
from mmsgg_eval.functional.ranking import prefix_topk
from mmsgg_eval.functional.first_hits import scene_graph_ranks
from mmsgg_eval.structures.pairs import RelationPairs
from mmsgg_eval.structures.reader import collate_scene_graphs
from tests.sgg_samples import random_dataset

needs_kernels = pytest.mark.skipif(not compiled.built(), reason='the compiled kernels are not built')


def _stable_top(values, count, k):
    """Loop reference: indices of the stable descending top-k of values[:count] (-0.0 ties with +0.0, NaN last)."""
    def key(i):
        v = values[i]
        return (float('inf') if v != v else -(v + 0.0), i)
    return sorted(range(count), key=key)[:k]


@needs_kernels
@pytest.mark.parametrize('k', [1, 3, 10, 100])
def test_block_bound_top_k_equals_a_stable_sort(k):
    """Rows around and far above the length where the block bound starts (8 k entries), in every order that
    moves the bound: random, ascending, descending, constant, few distinct values, -0.0 among +0.0, NaN."""
    g = np.random.default_rng(k)
    n = 8 * k
    rows = [g.random(n - 1), g.random(n), g.random(n + 13), g.random(40 * n), np.sort(g.random(9 * n)),
            np.sort(g.random(9 * n))[::-1].copy(), np.full(12 * n, 0.5), np.round(g.random(20 * n) * 3) / 3,
            np.where(g.random(10 * n) < 0.5, 0.0, -0.0), g.random(10 * n)]
    rows[-1][g.integers(0, len(rows[-1]), 2 * k)] = np.nan
    width = max(len(r) for r in rows)
    values = torch.zeros(len(rows), width)
    for b, r in enumerate(rows):
        values[b, :len(r)] = torch.tensor(r, dtype=torch.float32)
    count = torch.tensor([len(r) for r in rows])
    index, valid = prefix_topk(values, count, k)
    for b, r in enumerate(rows):
        assert index[b][valid[b]].tolist() == _stable_top(values[b].tolist(), len(r), k), b


def _inputs(seed, num_images=16, num_predicates=5, background=1, k=7, ng_topk=9, objects_range=(1, 12)):
    g = np.random.default_rng(seed)
    matrices, pairs, objects = [], [], []
    for b in range(num_images):
        n = int(g.integers(*objects_range))
        every = [(s, o) for s in range(n) for o in range(n) if s != o] or [(0, 0)]
        take = sorted(g.choice(len(every), int(g.integers(0, len(every) + 1)), replace=False))
        pairs.append(torch.tensor([every[i] for i in take], dtype=torch.long).reshape(-1, 2))
        scores = g.random((len(take), num_predicates + background)).astype(np.float32)
        if b % 3 == 0:  # ties within and across rows
            scores = (np.round(scores * 4) / 4).astype(np.float32)
        if b % 5 == 1 and len(scores):  # a row whose maximum is 0, given as -0.0 before +0.0
            scores[0] = 0.0
            scores[0, -2] = -0.0
        matrices.append(torch.tensor(scores))
        objects.append(torch.tensor(np.round(g.uniform(0.1, 1, n), 1), dtype=torch.float32))
    width = max(len(o) for o in objects)
    object_scores = torch.zeros(num_images, width)
    for b, o in enumerate(objects):
        object_scores[b, :len(o)] = o
    return matrices, pairs, object_scores


def _separately(ext, matrices, pairs, object_scores, column, num_predicates, k, ng_topk):
    count = torch.tensor([len(p) for p in pairs])
    width = int(count.max())
    best, passed = ext.row_maxima_checked(matrices, column, num_predicates, width)
    padded = torch.zeros(len(pairs), width, 2, dtype=torch.long)
    for b, p in enumerate(pairs):
        padded[b, :len(p)] = p
    order, valid, triplet, pair_score = ext.graph_constrained_pairs(padded, object_scores, best, count, k)
    top = torch.where(valid, order, -1)
    if ng_topk == 0:  # as functional.no_graph_constraint.no_graph_constraint_list: nothing listed
        empty = torch.zeros((len(pairs), 0), dtype=torch.long)
        ngc = (empty, empty, empty.bool())
    else:
        ngc = ext.no_graph_constraint_list(matrices, column, num_predicates, best, pair_score, ng_topk, top)
    return (best, passed, order, valid, triplet, pair_score) + tuple(ngc)


@needs_kernels
@pytest.mark.parametrize('seed', range(4))
@pytest.mark.parametrize('background', [0, 1])
@pytest.mark.parametrize('k,ng_topk', [(7, 9), (1, 1), (50, 3), (3, 50), (5, 0)])
def test_one_pass_equals_the_separate_kernels(seed, background, k, ng_topk):
    ext = compiled.kernels()
    matrices, pairs, object_scores = _inputs(seed, background=background)
    count = torch.tensor([len(p) for p in pairs])
    got = ext.ranked_relation_lists(matrices, background, 5, pairs, object_scores, count, k, ng_topk)
    expected = _separately(ext, matrices, pairs, object_scores, background, 5, k, ng_topk)
    for i, (a, b) in enumerate(zip(got[:9], expected)):
        assert a.shape == b.shape and torch.equal(a, b), i
    assert got[9].tolist() == [-1] * len(pairs)
    ranges = [(int(p.min()), int(p.max())) if len(p) else (0, -1) for p in pairs]
    assert got[10].tolist() == [list(r) for r in ranges]
    predicate = torch.zeros_like(got[2])  # each listed pair's first maximal predicate column, as argmax
    for b, m in enumerate(matrices):
        for i in got[3][b].nonzero().flatten().tolist():
            predicate[b, i] = m[got[2][b, i], background:].argmax()
    assert torch.equal(got[11], predicate)
    for ends, index, valid in ((got[12], got[2], got[3]), (got[13], got[6], got[8])):  # each entry's (s, o)
        expected_ends = torch.zeros_like(ends)
        for b, p in enumerate(pairs):
            listed = valid[b].nonzero().flatten()
            expected_ends[b, listed] = p[index[b, listed]]
        assert torch.equal(ends, expected_ends)
    padded = torch.zeros(len(pairs), int(count.max()), 2, dtype=torch.long)
    for b, p in enumerate(pairs):
        padded[b, :len(p)] = p
    again = ext.ranked_relation_lists(matrices, background, 5, [padded], object_scores, count, k, ng_topk)
    assert all(torch.equal(a, b) for a, b in zip(got, again))
    assert got[14].shape == (0, int(count.max()))  # not asked: no pair codes
    # asked: every pair's (subject << 8) | object as uint16 bits in int16, 0 on padding; the other outputs unchanged
    with_codes = ext.ranked_relation_lists(matrices, background, 5, pairs, object_scores, count, k, ng_topk,
                                           pair_codes=True)
    assert all(torch.equal(a, b) for a, b in zip(got[:14], with_codes[:14]))
    expected_codes = torch.zeros(len(pairs), int(count.max()), dtype=torch.int32)
    for b, p in enumerate(pairs):
        expected_codes[b, :len(p)] = p[:, 0].int() * 256 + p[:, 1].int()
    assert torch.equal(with_codes[14].int() & 0xFFFF, expected_codes)
    # more than 256 objects: no codes (the pair scan reads the int64 pairs)
    wide = torch.cat([object_scores, object_scores.new_zeros(len(pairs), 257 - object_scores.shape[1])], 1)
    assert ext.ranked_relation_lists(matrices, background, 5, pairs, wide, count, k, ng_topk,
                                     pair_codes=True)[14].shape == (0, int(count.max()))


@needs_kernels
@pytest.mark.parametrize('seed', range(3))
@pytest.mark.parametrize('k,ng_topk', [(100, 100), (20, 7), (1, 30)])
def test_one_pass_on_long_images_equals_the_separate_kernels(seed, k, ng_topk):
    """Images of up to 80 objects (up to 6,320 pairs): the pass skips the blocks of rows below its bars (the
    maxima it keeps per 16 rows while reading); its lists are those of the separate kernels, which key every
    row. Every third image's scores take four levels only (ties within and across blocks)."""
    ext = compiled.kernels()
    matrices, pairs, object_scores = _inputs(seed, num_images=8, objects_range=(20, 81))
    count = torch.tensor([len(p) for p in pairs])
    assert int(count.max()) >= 32 * k or k == 100  # (the long rows reach the blocked lists)
    got = ext.ranked_relation_lists(matrices, 1, 5, pairs, object_scores, count, k, ng_topk)
    expected = _separately(ext, matrices, pairs, object_scores, 1, 5, k, ng_topk)
    for i, (a, b) in enumerate(zip(got[:9], expected)):
        assert a.shape == b.shape and torch.equal(a, b), i


@needs_kernels
def test_one_pass_never_refuses_values_it_flags_them():
    """Bad values reach the kernel before the reader's validation: a pair index outside the object list and
    NaN / negative scores are flagged (bad, passed), never read out of bounds, never raised here."""
    ext = compiled.kernels()
    matrices, pairs, object_scores = _inputs(5, num_images=6)
    pairs = [p.clone() for p in pairs]
    with_pairs = [b for b, p in enumerate(pairs) if len(p) >= 2]
    pairs[with_pairs[0]][1, 0] = object_scores.shape[1] + 3
    pairs[with_pairs[1]][0, 1] = -1
    matrices = [m.clone() for m in matrices]
    matrices[with_pairs[2]][0, 2] = float('nan')
    matrices[with_pairs[3]][-1, 0] = -0.5
    count = torch.tensor([len(p) for p in pairs])
    out = ext.ranked_relation_lists(matrices, 1, 5, pairs, object_scores, count, 7, 9)
    bad, passed = out[9], out[1]
    assert bad[with_pairs[0]] == 1 and bad[with_pairs[1]] == 0
    assert out[10].tolist() == [[int(p.min()), int(p.max())] if len(p) else [0, -1] for p in pairs]
    assert not out[3][with_pairs[0]].any() and not out[8][with_pairs[0]].any()  # lists of a bad image: empty
    assert not passed[with_pairs[2]] and not passed[with_pairs[3]]
    with pytest.raises(RuntimeError, match='score rows and'):
        ext.ranked_relation_lists(matrices, 1, 5, pairs, object_scores, count + 1, 7, 9)


@needs_kernels
@pytest.mark.parametrize('mode', ['sgdet', 'sgcls', 'predcls', 'phrdet'])
@pytest.mark.parametrize('seed', range(3))
def test_ranks_from_the_lists_built_while_reading_equal_the_torch_path(mode, seed):
    samples, _ = random_dataset(seed, 24, mode, score_format='bg', num_classes=6, num_predicates=5)
    batch = collate_scene_graphs(samples, mode, 6, 5, ranking=(20, 30))
    assert batch.ranked_lists is not None and batch.scores.layout == 'compiled'
    assert batch.pairs.rows is not None  # the pairs were kept per image
    got = scene_graph_ranks(batch, 20, 30, phrase=mode == 'phrdet', with_pair_accuracy=mode != 'sgdet',
                            list_length=5)
    with compiled.disabled():
        reference_batch = collate_scene_graphs(samples, mode, 6, 5, ranking=(20, 30))
        assert reference_batch.ranked_lists is None and reference_batch.pairs.rows is None
        expected = scene_graph_ranks(reference_batch, 20, 30, phrase=mode == 'phrdet',
                                     with_pair_accuracy=mode != 'sgdet', list_length=5)
    assert got.keys() == expected.keys()
    for key in got:
        valid = got['gc_valid'] if key.startswith('gc_') and key != 'gc' else None
        a, b = got[key], expected[key]
        if valid is not None:  # padding slots of the list head are unspecified
            a, b = a[valid], b[valid]
        assert torch.equal(a, b), key
    # lists of another length are not reused
    other = scene_graph_ranks(batch, 10, 30)
    with compiled.disabled():
        assert torch.equal(other['gc'], scene_graph_ranks(reference_batch, 10, 30)['gc'])


@needs_kernels
def test_kept_pairs_pad_on_demand_and_name_a_bad_index_alike():
    samples, _ = random_dataset(11, 10, 'sgdet', score_format='bg', num_classes=6, num_predicates=5)
    batch = collate_scene_graphs(samples, 'sgdet', 6, 5)
    assert batch.pairs.rows is not None
    with compiled.disabled():
        reference = collate_scene_graphs(samples, 'sgdet', 6, 5)
    assert torch.equal(batch.rel_pairs, reference.rel_pairs)
    assert batch.rel_pairs is batch.rel_pairs  # padded once
    bad = [dict(s) for s in samples]
    index = next(i for i, s in enumerate(bad) if len(s['pred_relations']['pair_idxs']))
    rel = dict(bad[index]['pred_relations'])
    rel['pair_idxs'] = rel['pair_idxs'].clone()
    rel['pair_idxs'][0, 0] = 99
    bad[index]['pred_relations'] = rel
    messages = []
    for off in (False, True):
        with pytest.raises(ValueError) as err:
            if off:
                with compiled.disabled():
                    collate_scene_graphs(bad, 'sgdet', 6, 5, ranking=(20, 30))
            else:
                collate_scene_graphs(bad, 'sgdet', 6, 5, ranking=(20, 30))
        messages.append(str(err.value))
    assert messages[0] == messages[1] and 'has pair [99, ' in messages[0]


def test_relation_pairs_take_one_form():
    rows = [torch.tensor([[0, 1], [1, 0]]), torch.zeros(0, 2, dtype=torch.long), torch.tensor([[2, 0]])]
    pairs = RelationPairs(rows=rows, lengths=[2, 0, 1])
    assert pairs.width == 2 and pairs.batch_size == 3
    assert pairs.padded.tolist() == [[[0, 1], [1, 0]], [[0, 0], [0, 0]], [[2, 0], [0, 0]]]
    assert pairs.kernel_input is pairs.rows or pairs.kernel_input == rows
    padded = RelationPairs(padded=torch.zeros(2, 3, 2, dtype=torch.int32))
    assert padded.long().padded.dtype == torch.long and padded.long().kernel_input[0].shape == (2, 3, 2)
    with pytest.raises(ValueError, match='either'):
        RelationPairs()


def _same_bits(a, b):
    """Equal shapes, dtypes and values, NaN bit patterns included."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.view(torch.int32), b.view(torch.int32)) if a.dtype == torch.float32 else torch.equal(a, b)


@needs_kernels
@pytest.mark.parametrize('seed', range(3))
@pytest.mark.parametrize('with_oi', [False, True])
def test_a_pass_shared_by_threads_equals_the_pass_in_one_call(seed, with_oi):
    """RankedPass: images taken one at a time by several threads (work() from three Python threads and the caller,
    or start(2) on torch's inter-op threads; some images with bad pair indices and flagged scores), then finish():
    every output equal to ranked_relation_lists'."""
    import threading
    ext = compiled.kernels()
    matrices, pairs, object_scores = _inputs(seed, num_images=40)
    pairs = [p.clone() for p in pairs]
    with_pairs = [b for b, p in enumerate(pairs) if len(p) >= 2]
    pairs[with_pairs[0]][1, 0] = object_scores.shape[1] + 1
    matrices[with_pairs[1]] = matrices[with_pairs[1]].clone()
    matrices[with_pairs[1]][0, 1] = float('nan')
    count = torch.tensor([len(p) for p in pairs])
    oi = dict(oi_length=12, oi_per_pair=2, oi_min_score=0.0) if with_oi else {}
    expected = ext.ranked_relation_lists(matrices, 1, 5, pairs, object_scores, count, 7, 9, pair_codes=True, **oi)
    job = ext.RankedPass(matrices, 1, 5, pairs, object_scores, count, 7, 9, pair_codes=True, **oi)
    workers = [threading.Thread(target=job.work) for _ in range(3)]
    for w in workers:
        w.start()
    job.work()
    for w in workers:
        w.join()
    got = job.finish()
    assert len(got) == len(expected) == 21

    def defined(outputs):  # (a bad image's triplet and pair scores are not defined: the reader refuses the image)
        return [o.index_fill(0, torch.tensor([with_pairs[0]]), 0) if i in (4, 5) else o for i, o in enumerate(outputs)]
    assert all(_same_bits(a, b) for a, b in zip(defined(got), defined(expected)))
    started = ext.RankedPass(matrices, 1, 5, pairs, object_scores, count, 7, 9, pair_codes=True, **oi)
    started.start(2)  # two tasks on torch's inter-op threads; finish() waits for them
    assert all(_same_bits(a, b) for a, b in zip(defined(started.finish()), defined(expected))) and started.finished()
    with pytest.raises(RuntimeError, match='score rows and'):  # the inputs are checked when the pass is made
        ext.RankedPass(matrices, 1, 5, pairs, object_scores, count + 1, 7, 9)


@needs_kernels
def test_a_shared_pass_gives_the_lists_of_one_call_and_ends_the_pass_started_before_it():
    """compiled_ranked_lists_beside: the pass on the process' own threads and the caller gives
    compiled_ranked_lists' value; a pass never asked for has ended once a later one is joined."""
    from mmsgg_eval.functional import threads
    from mmsgg_eval.functional.ranking import compiled_ranked_lists, compiled_ranked_lists_beside
    matrices, pairs, object_scores = _inputs(7, num_images=24)
    count = torch.tensor([len(p) for p in pairs])
    args = (matrices, 1, 5, pairs, object_scores, count, 7, 9)
    pending = compiled_ranked_lists_beside(*args)
    assert pending.in_background
    lists, (best, passed), bad, (low, high) = pending.result()
    e_lists, (e_best, e_passed), e_bad, (e_low, e_high) = compiled_ranked_lists(*args)
    compiled_ranked_lists_beside(*args)  # a pass never asked for (an error in between), dropped
    later = compiled_ranked_lists_beside(*args)
    assert torch.equal(later.result()[1][0], e_best)
    assert threads.busy_beside() == 0  # the pass started before it has ended too: it writes nothing later
    for a, b in ((best, e_best), (passed, e_passed), (bad, e_bad), (low, e_low), (high, e_high),
                 (lists.gc_order, e_lists.gc_order), (lists.ng_pair, e_lists.ng_pair), (lists.gc_ends, e_lists.gc_ends)):
        assert torch.equal(a, b)


@needs_kernels
def test_an_interpreter_exiting_with_a_shared_pass_in_flight_exits_cleanly():
    """A process that starts a pass on numpy-backed score matrices and exits without asking for it (an
    evaluation stopped by an error) waits for it at exit and ends with status 0 and nothing on stderr."""
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent('''
        import numpy as np, torch
        from mmsgg_eval.functional.ranking import compiled_ranked_lists_beside
        g = np.random.default_rng(0)
        matrices = [torch.from_numpy(g.random((6320, 51), dtype=np.float32)) for _ in range(48)]
        pairs = [torch.from_numpy(np.stack(np.nonzero(~np.eye(80, dtype=bool)), 1).astype(np.int64))] * 48
        objects = torch.from_numpy(g.random((48, 80), dtype=np.float32))
        count = torch.full((48,), 6320, dtype=torch.long)
        torch.set_num_threads(2)
        compiled_ranked_lists_beside(matrices, 1, 50, pairs, objects, count, 100, 100)
        del matrices
        raise SystemExit(0)
    ''')
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == '', done.stderr
