"""The compiled CPU score kernels (mmsgg_eval._ext): built where CI runs, equal to the torch implementation and to
a loop reference on ties and boundary sizes, chosen only for batches they can read, and refusing bad arguments."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from mmsgg_eval.functional import compiled
from mmsgg_eval.functional.no_graph_constraint import no_graph_constraint_list
from mmsgg_eval.functional.scores import build_relation_scores
from tests.functional.test_topk_iou_pruning import _reference_ng_list

needs_kernels = pytest.mark.skipif(not compiled.built(), reason='the compiled kernels are not built')
CPU = torch.device('cpu')


def test_kernels_are_built_where_ci_runs():
    """CI installs with tools/setup_env.sh, which builds the kernels: a silent fallback there would leave them
    untested."""
    if os.environ.get('CI', '').lower() != 'true' and not os.environ.get('MMSGG_EVAL_REQUIRE_COMPILED'):
        pytest.skip('only required in CI (CI=true) or with MMSGG_EVAL_REQUIRE_COMPILED set')
    assert compiled.built(), 'mmsgg_eval._ext is not importable: `pip install --no-build-isolation -e .` failed ' \
                             'to build mmsgg_eval/csrc/'


def test_switch_turns_the_kernels_off():
    with compiled.disabled():
        assert compiled.kernels() is None
        assert not compiled.suits([torch.zeros(2, 3)], [0], [False], 3)
    code = 'from mmsgg_eval.functional import compiled; print(compiled.kernels() is None)'
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, MMSGG_EVAL_COMPILED='0'))
    assert out.stdout.strip() == 'True'


def test_a_build_that_cannot_be_loaded_is_reported_and_the_torch_implementation_runs(monkeypatch):
    """An extension compiled against another torch fails to load (ImportError, not ModuleNotFoundError): one
    warning saying so, then the torch layouts."""
    import importlib.abc
    import mmsgg_eval

    class Broken(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == 'mmsgg_eval._ext':
                raise ImportError('undefined symbol: _ZN3c10 (built against another torch)')
            return None

    monkeypatch.delitem(sys.modules, 'mmsgg_eval._ext', raising=False)
    monkeypatch.delattr(mmsgg_eval, '_ext', raising=False)
    monkeypatch.setattr(sys, 'meta_path', [Broken()] + sys.meta_path)
    monkeypatch.setattr(compiled, '_loaded', False)
    monkeypatch.setattr(compiled, '_kernels', None)
    with pytest.warns(UserWarning, match=r'mmsgg_eval\._ext could not be loaded .*another torch.*torch '
                                         r'implementation runs instead'):
        assert compiled.kernels() is None
    assert compiled.kernels() is None  # reported once
    raw = [torch.rand(3, 5)]
    assert build_relation_scores(raw, [1], [3], 4, [False], [], 'compiled', CPU).layout == 'views'


def test_a_build_with_another_no_hit_sentinel_is_refused(monkeypatch):
    """The kernels' "no hit" rank is the one of functional.limits (exported by the module, checked on load)."""
    import types
    import mmsgg_eval
    from mmsgg_eval.functional.limits import NO_HIT
    if compiled.built():
        assert compiled._load().NO_HIT == NO_HIT
    stale = types.ModuleType('mmsgg_eval._ext')
    stale.NO_HIT = NO_HIT - 1
    monkeypatch.setitem(sys.modules, 'mmsgg_eval._ext', stale)
    monkeypatch.setattr(mmsgg_eval, '_ext', stale, raising=False)
    monkeypatch.setattr(compiled, '_loaded', False)
    monkeypatch.setattr(compiled, '_kernels', None)
    with pytest.warns(UserWarning, match=r'could not be loaded \(its NO_HIT sentinel is 1073741823'):
        assert compiled.kernels() is None


def _pair_scores(g, num_rel, zero_prob=0.2):
    width = max(num_rel, default=0)
    pair_score = torch.zeros(len(num_rel), width)
    valid = torch.zeros(len(num_rel), width, dtype=torch.bool)
    for b, r in enumerate(num_rel):
        ps = np.round(g.random(r) * 4) / 4
        ps[g.random(r) < zero_prob] = 0.0
        pair_score[b, :r] = torch.tensor(ps, dtype=torch.float32)
        valid[b, :r] = True
    return pair_score, valid


@needs_kernels
@pytest.mark.parametrize('values', ['all-equal', 'three-levels', 'continuous'])
def test_no_graph_constraint_list_at_boundary_sizes_equals_a_stable_sort(values):
    """Images with k - 1, k, k + 1 pairs, fewer entries than k, every entry tied, zero rows: the compiled list
    equals a stable sort of all entries (ties in row-major order) and the torch implementation."""
    g = np.random.default_rng({'all-equal': 1, 'three-levels': 2, 'continuous': 3}[values])
    num_pred = 4
    for k in (1, 2, 7, 30):
        num_rel = [k - 1, k, k + 1, 0, 3 * k, 1]
        raw = []
        for r in num_rel:
            m = g.random((r, num_pred + 1)).astype(np.float32)
            if values == 'all-equal':
                m[:] = 0.5
            elif values == 'three-levels':
                m = (np.round(m * 2) / 2).astype(np.float32)
            raw.append(torch.tensor(m))
        pair_score, valid = _pair_scores(g, num_rel, zero_prob=0.0 if values == 'all-equal' else 0.2)
        if values == 'all-equal':
            pair_score[valid] = 1.0
        scores = build_relation_scores(raw, [1] * len(raw), num_rel, num_pred, [False] * len(raw), [], 'compiled',
                                       CPU)
        assert scores.layout == 'compiled'
        pair, pred, ok = no_graph_constraint_list(scores, valid, k, pair_score)
        ref = _reference_ng_list([m[:, 1:] for m in raw], [pair_score[b, :r].tolist() for b, r in enumerate(num_rel)],
                                 False, k)
        for b in range(len(raw)):
            n = int(ok[b].sum())
            assert ok[b, :n].all()
            assert list(zip(pair[b, :n].tolist(), pred[b, :n].tolist())) == ref[b], (k, b)
        with compiled.disabled():
            torch_scores = build_relation_scores(raw, [1] * len(raw), num_rel, num_pred, [False] * len(raw), [],
                                                 'concatenated', CPU)
            t_pair, t_pred, t_ok = no_graph_constraint_list(torch_scores, valid, k, pair_score)
        assert torch.equal(ok, t_ok) and torch.equal(pair[ok], t_pair[t_ok]) and torch.equal(pred[ok], t_pred[t_ok])


@needs_kernels
def test_rows_are_the_predicate_columns_of_the_inputs():
    g = np.random.default_rng(4)
    num_rel = [5, 0, 9, 3]
    for background in (0, 1):
        raw = [torch.tensor(g.random((r, 6 + background)).astype(np.float32)) for r in num_rel]
        scores = build_relation_scores(raw, [background] * 4, num_rel, 6, [False] * 4, [], 'compiled', CPU)
        image = torch.tensor([0, 0, 2, 2, 2, 3])
        pos = torch.tensor([4, 0, 8, 1, 1, 2])
        expected = torch.stack([raw[i][p, background:] for i, p in zip(image.tolist(), pos.tolist())])
        assert torch.equal(scores.rows(image, pos), expected)
        assert scores.rows(image[:0], pos[:0]).shape == (0, 6)
        # the graph-constrained predicate is the first maximal column (argmax), only for valid entries
        order = torch.tensor([[4, 0], [0, 0], [8, 1], [2, 0]])
        valid = torch.tensor([[True, True], [False, False], [True, False], [True, True]])
        got = scores.predicate_at(order, valid)
        for b in range(4):
            for j in range(2):
                want = int(raw[b][order[b, j], background:].argmax()) if valid[b, j] else 0
                assert int(got[b, j]) == want


@needs_kernels
def test_batches_the_kernels_cannot_read_in_place_use_the_torch_layouts():
    """Single-label images, non-contiguous or non-float32 matrices, mixed background conventions, no predicate
    columns: the compiled layout is not chosen (and when asked for, 'views' runs instead)."""
    from mmsgg_eval.structures import reader
    g = np.random.default_rng(5)
    good = [torch.tensor(g.random((4, 6)).astype(np.float32)) for _ in range(3)]
    assert compiled.suits(good, [1, 1, 1], [False] * 3, 5)
    cases = [
        (good, [1, 1, 1], [False, True, False], 5),              # a single-label image
        (good[:2] + [good[2].t().contiguous().t()], [1, 1, 1], [False] * 3, 5),  # strided
        (good[:2] + [good[2].double()], [1, 1, 1], [False] * 3, 5),  # float64
        (good, [1, 0, 1], [False] * 3, 5),                       # mixed background columns
        ([m[:, :1] for m in good], [1, 1, 1], [False] * 3, 0),   # no predicate column
    ]
    for raw, background, single, num_pred in cases:
        assert not compiled.suits(raw, background, single, num_pred)
    assert not compiled.suits(good, [1, 1, 1], [False] * 3, 5, torch.device('meta'))
    strided = build_relation_scores(cases[1][0], [1] * 3, [4] * 3, 5, [False] * 3, [], 'compiled', CPU)
    assert strided.layout == 'views'
    # the reader picks the compiled layout for CPU batches of any size it suits, else the torch rule
    padded = reader._Padded(sample_idx=[0, 1, 2], pred_boxes=None, pred_labels=None, pred_scores=None,
                            gt_boxes=None, gt_labels=None, gt_pairs=None, gt_predicates=None, rel_pairs=None,
                            num_pred=None, num_gt=None, num_gt_rel=None, num_rel=[4, 4, 4], raw_scores=good,
                            background=[1, 1, 1], single_label=[False] * 3, given_scores=[], model_objects=[-1] * 3)
    assert reader._score_layout(padded, 5, CPU) == 'compiled'
    padded.background = [1, 0, 1]
    assert reader._score_layout(padded, 5, CPU) == 'stacked'


@needs_kernels
def test_kernels_refuse_bad_arguments_naming_the_image():
    ext = compiled.kernels()
    good = torch.rand(3, 5)
    with pytest.raises(RuntimeError, match='image 1: the score matrix is not float32'):
        ext.row_maxima_checked([good, good.double()], 1, 4, 3)
    with pytest.raises(RuntimeError, match=r'image 0: the score matrix must have shape \[R, 5\]'):
        ext.row_maxima_checked([torch.rand(3, 6)], 1, 4, 3)
    with pytest.raises(RuntimeError, match='image 0: the score matrix is not contiguous'):
        ext.row_maxima_checked([torch.rand(5, 3).t()], 1, 4, 3)
    with pytest.raises(RuntimeError, match='image 0 has more rows than the width 2'):
        ext.row_maxima_checked([good], 1, 4, 2)
    with pytest.raises(RuntimeError, match='row 3 out of range for image 0'):
        ext.gather_rows([good], torch.tensor([0]), torch.tensor([3]), 1, 4)
    with pytest.raises(RuntimeError, match='image 2 out of range'):
        ext.gather_rows([good], torch.tensor([2]), torch.tensor([0]), 1, 4)
    best, _ = ext.row_maxima_checked([good], 1, 4, 3)
    with pytest.raises(RuntimeError, match='float32 \\[B, R\\] of one shape'):
        ext.no_graph_constraint_list([good], 1, 4, best, torch.rand(1, 4), 5)


@needs_kernels
@pytest.mark.parametrize('num_predicates', [8, 9, 15, 16, 17, 50, 63])
def test_row_maxima_and_value_check_equal_a_loop_reference_on_special_values(num_predicates):
    """The compiled reader's row maxima and bit check (each image's entries, background column included, are the
    bit patterns of finite floats >= 0: negative values, -0.0, inf and NaN fail it) against a loop: special values
    at every column (first, middle, the overlapping last vector, the background). An image that fails only on
    -0.0 is accepted by the reader's second look at its values and its maxima are used: they must be the maxima
    of the values (-0.0 below every positive entry), also in the fused ranking pass, whose pair step (first bad
    pair, index range) is the same where a failed check reads the image twice."""
    ext = compiled.kernels()
    g = np.random.default_rng(num_predicates)
    specials = [-0.0, float('nan'), float('inf'), -1.0, -float('inf'), 0.0]
    matrices = []
    for trial in range(40):
        rows = int(g.integers(0, 12))
        m = g.random((rows, num_predicates + 1)).astype(np.float32)
        m[g.random(m.shape) < 0.3] = 0.0
        for _ in range(int(g.integers(0, 3)) if rows else 0):
            m[g.integers(rows), g.integers(num_predicates + 1)] = specials[trial % len(specials)]
        if trial % 7 == 3 and rows:  # a row of zeros and -0.0 only
            m[0, 1:] = np.where(g.random(num_predicates) < 0.5, -0.0, 0.0)
        matrices.append(torch.from_numpy(m))
    width = max(m.shape[0] for m in matrices)
    best, passed = ext.row_maxima_checked(matrices, 1, num_predicates, width)
    object_scores = torch.rand(len(matrices), 4)
    pairs = [torch.randint(0, 4, (m.shape[0], 2)) for m in matrices]
    for b in range(0, len(pairs), 3):  # every third image: an index outside [0, 4) at a random place or none
        if len(pairs[b]) and b % 2:
            pairs[b][g.integers(len(pairs[b])), g.integers(2)] = int(g.choice([-1, 4, 9]))
    count = torch.tensor([m.shape[0] for m in matrices])
    fused = ext.ranked_relation_lists(matrices, 1, num_predicates, pairs, object_scores, count, 5, 5)
    for b, p in enumerate(pairs):  # the pair step's first bad pair and index range (read once or twice)
        outside = ((p < 0) | (p >= 4)).any(1).nonzero().flatten().tolist()
        assert int(fused[9][b]) == (outside[0] if outside else -1), b
        assert fused[10][b].tolist() == ([int(p.min()), int(p.max())] if len(p) else [0, -1]), b
    for b, m in enumerate(matrices):
        bits = m.numpy().view(np.int32)
        assert bool(passed[b]) == bool(((bits >= 0) & (bits < 0x7F800000)).all()), b
        assert bool(fused[1][b]) == bool(passed[b]), b
        values_ok = bool((np.isfinite(m.numpy()) & (m.numpy() >= 0)).all())
        if values_ok:  # (only -0.0 can fail the bits and pass the values)
            for r in range(m.shape[0]):
                expected = max(float(v) for v in m[r, 1:])
                assert float(best[b, r]) == expected and float(fused[0][b, r]) == expected, (b, r)
                assert not (expected > 0 and np.signbit(best[b, r].numpy())), (b, r)


@needs_kernels
@pytest.mark.parametrize('workload,images', [('variable', 24), ('variable-nobg', 24), ('sgdet-variable', 6),
                                             ('triplets', 24)])
def test_metrics_equal_the_torch_implementation_on_realistic_workloads(workload, images):
    """SGRecall + SGMeanRecall (every key) on the benchmark's VG150-like workloads: the same numbers, bit for bit,
    with and without the kernels."""
    from mmsgg_eval.benchmarks.workloads import make_workload, meta
    from mmsgg_eval.metrics import SGMeanRecall, SGRecall
    data = make_workload(workload, images, seed=3)

    def run():
        out = {}
        for cls in (SGRecall, SGMeanRecall):
            metric = cls(mode='sgdet', ng_topk=100)
            metric.dataset_meta = meta()
            for i in range(0, images, 8):
                metric.process({}, data[i:i + 8])
            out.update(metric.evaluate(images))
        return out

    with_kernels = run()
    with compiled.disabled():
        without = run()
    assert with_kernels.keys() == without.keys()
    for key, value in with_kernels.items():
        if isinstance(value, float):
            assert value == without[key], key


@needs_kernels
@pytest.mark.parametrize('quantised', [False, True])
def test_prefix_topk_equals_the_torch_stable_topk(quantised):
    """The graph-constrained list's ranking: the stable top-k of each row's first count[b] entries, with ties
    (also of -0.0 and +0.0), empty and full rows, k above the row length and k = 0."""
    from mmsgg_eval.functional.ranking import prefix_topk, stable_topk
    g = torch.Generator().manual_seed(int(quantised))
    for trial in range(40):
        batch, length = int(torch.randint(1, 7, (1,), generator=g)), int(torch.randint(0, 90, (1,), generator=g))
        values = torch.rand(batch, length, generator=g)
        if quantised:
            values = (values * 3).round() / 3
            values[values == 0] = -0.0 if trial % 2 else 0.0
        count = torch.randint(0, length + 1, (batch,), generator=g)
        count[0] = length
        for k in (0, 1, 5, 50, 200):
            got_index, got_valid = prefix_topk(values, count, k)
            with compiled.disabled():
                index, valid = prefix_topk(values, count, k)
            mask = torch.arange(length)[None, :] < count[:, None]
            assert torch.equal(stable_topk(values, mask, k, count)[1], valid)
            with compiled.disabled():
                given = prefix_topk(values, count, k, mask)
            assert torch.equal(given[0], index) and torch.equal(given[1], valid)
            assert got_index.shape == index.shape == (batch, min(k, length))
            assert torch.equal(got_valid, valid), (trial, k)
            assert torch.equal(got_index[got_valid], index[valid]), (trial, k)
    ext = compiled.kernels()
    with pytest.raises(RuntimeError, match='row 0 has count 4 outside'):
        ext.stable_topk_prefix(torch.rand(1, 3), torch.tensor([4]), 2)


def _stable_order(values: torch.Tensor, k: int) -> list:
    """The first k indices of a stable descending sort of ``values`` (NaN last, as -inf; -0.0 ties with +0.0)."""
    keyed = [(-(float('-inf') if v != v else v + 0.0), i) for i, v in enumerate(values.tolist())]
    return [i for _, i in sorted(keyed)[:k]]


@needs_kernels
def test_top_lists_ranked_by_counting_equal_a_stable_sort_at_every_tie_position():
    """Lists of up to 256 candidates are ranked by counting the larger values (keys of equal value share a count);
    a tie at the last listed place keeps its earliest entry, a tie anywhere else above it falls back to sorting:
    tie groups placed before, across and at the k-th place, candidates on both sides of 256, k above the count."""
    ext = compiled.kernels()
    g = torch.Generator().manual_seed(7)
    cases = 0
    for length in (1, 2, 7, 8, 9, 100, 101, 155, 255, 256, 257, 300):
        for k in sorted({1, 2, max(length // 2, 1), max(length - 1, 1), length, length + 3, 100}):
            for tie_at in (None, 0, k - 2, k - 1, k):
                values = torch.rand(length, generator=g) * 0.9 + 0.05
                if tie_at is not None and 0 <= tie_at < length:  # three entries equal to the (tie_at + 1)-th largest
                    order = _stable_order(values, length)
                    value = values[order[tie_at]]
                    for shift in (1, 2):
                        if tie_at + shift < length:
                            values[order[tie_at + shift]] = value
                index, valid = ext.stable_topk_prefix(values[None], torch.tensor([length]), k)
                expected = _stable_order(values, k)
                assert index[0][valid[0]].tolist() == expected, (length, k, tie_at)
                cases += 1
    quantised = (torch.rand(4, 200, generator=g) * 4).round() / 4  # few distinct values: ties everywhere
    quantised[0, :20] = float('nan')
    quantised[1, ::3] = -0.0
    for k in (1, 3, 50, 99, 100, 150, 199, 200):
        index, valid = ext.stable_topk_prefix(quantised, torch.full((4,), 200), k)
        for row in range(4):
            assert index[row][valid[row]].tolist() == _stable_order(quantised[row], k), (row, k)
    assert cases > 300


@needs_kernels
@pytest.mark.parametrize('spread', ['uniform', 'wide', 'clustered', 'equal', 'special'])
def test_long_rows_cut_by_their_block_maxima_keep_the_stable_top(spread):
    """Rows of at least 8 k entries keep only the entries reaching a bound of the k-th largest block maximum (found by
    counting the maxima into bins): the list equals a stable sort's on values spread evenly, over 60 orders of
    magnitude, in a few tight clusters, all equal, and with NaN, negatives, infinities and both zeros."""
    ext = compiled.kernels()
    g = torch.Generator().manual_seed(11)
    for k in (1, 7, 100):
        for length in (8 * k, 8 * k + 5, 6320):
            values = torch.rand(3, length, generator=g)
            if spread == 'wide':
                values = torch.pow(10.0, values * 60 - 30)
            elif spread == 'clustered':
                values = (torch.randint(0, 3, (3, length), generator=g).float()
                          + torch.rand(3, length, generator=g) * 1e-6)
            elif spread == 'equal':
                values = torch.full((3, length), 0.25)
            elif spread == 'special':
                pick = torch.randint(0, 9, (3, length), generator=g)
                specials = torch.tensor([float('nan'), -1.0, float('inf'), -0.0, 0.0, float('-inf')])
                values = torch.where(pick < 6, specials[pick.clamp(max=5)], values)
            index, valid = ext.stable_topk_prefix(values, torch.full((3,), length), k)
            for row in range(3):
                assert index[row][valid[row]].tolist() == _stable_order(values[row], k), (spread, k, length, row)


def test_thread_policy_settings_and_their_errors():
    """MMSGG_EVAL_NUM_THREADS / threads.set_num_threads: 'auto' or a positive integer; anything else is refused
    with an error naming the setting."""
    from mmsgg_eval.functional import threads
    assert threads.parse_setting(None) == threads.parse_setting('') == threads.parse_setting('auto') == 'auto'
    assert threads.parse_setting('3') == 3 and threads.parse_setting(2) == 2
    for bad in ('0', '-1', 'two', 1.5, True, 0):
        with pytest.raises(ValueError, match="MMSGG_EVAL_NUM_THREADS must be 'auto' or a positive integer"):
            threads.parse_setting(bad, 'MMSGG_EVAL_NUM_THREADS')
    saved = threads.get_setting()
    try:
        threads.set_num_threads('1')
        assert threads.get_setting() == 1
        with pytest.raises(ValueError, match='num_threads'):
            threads.set_num_threads('many')
        assert threads.get_setting() == 1
    finally:
        threads.set_num_threads(saved)
    # a bad environment value: the import works, the first use is a ValueError naming the variable
    bad_env = subprocess.run([sys.executable, '-c', 'import mmsgg_eval.functional.threads as t; print("imported"); '
                              't.choose_threads()'], capture_output=True,
                             text=True, env=dict(os.environ, MMSGG_EVAL_NUM_THREADS='x'), timeout=120)
    assert 'imported' in bad_env.stdout
    assert bad_env.returncode != 0 and "ValueError: MMSGG_EVAL_NUM_THREADS must be" in bad_env.stderr


def test_thread_policy_follows_the_idle_cores_and_restores_torchs_count(monkeypatch):
    """'auto': torch's count while the cores are idle, fewer when other processes' runnable threads take them
    (at least one), torch's count where /proc does not tell; an integer bounds it; torch's count is restored
    after the block, also on an error."""
    from mmsgg_eval.functional import threads
    saved = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        monkeypatch.setattr(threads, 'usable_cores', lambda: 4)
        for others, expected in ((0, 4), (1, 3), (3, 1), (9, 1), (None, 4)):
            monkeypatch.setattr(threads, 'runnable_elsewhere', lambda n=others: n)
            assert threads.choose_threads('auto') == expected, others
        monkeypatch.setattr(threads, 'runnable_elsewhere', lambda: 0)
        assert threads.choose_threads(2) == 2 and threads.choose_threads(16) == 4
        monkeypatch.setattr(threads, 'runnable_elsewhere', lambda: 3)
        with threads.compute_threads('auto') as chosen:
            assert chosen == 1 and torch.get_num_threads() == 1
        assert torch.get_num_threads() == 4
        with pytest.raises(KeyError):
            with threads.compute_threads(2):
                assert torch.get_num_threads() == 2
                raise KeyError('inside')
        assert torch.get_num_threads() == 4
    finally:
        torch.set_num_threads(saved)
    others = threads.runnable_elsewhere()
    assert others is None or others >= 0
    assert threads.usable_cores() >= 1


@pytest.mark.parametrize('workload', ['variable', 'sgdet-variable'])
def test_metrics_give_the_same_numbers_with_one_thread_and_with_several(workload):
    """The thread policy changes the speed only: SGRecall + SGMeanRecall (every key), bit for bit, with one thread
    and with torch's count (two at least) per pool."""
    from mmsgg_eval.benchmarks.workloads import make_workload, meta
    from mmsgg_eval.functional import threads
    from mmsgg_eval.metrics import SGMeanRecall, SGRecall
    data = make_workload(workload, 12, seed=5)

    def run(setting):
        saved_setting, saved_threads = threads.get_setting(), torch.get_num_threads()
        threads.set_num_threads(setting)
        torch.set_num_threads(max(2, saved_threads))
        try:
            out = {}
            for cls in (SGRecall, SGMeanRecall):
                metric = cls(mode='sgdet')
                metric.dataset_meta = meta()
                for i in range(0, 12, 4):
                    metric.process({}, data[i:i + 4])
                out.update(metric.evaluate(12))
            return out
        finally:
            threads.set_num_threads(saved_setting)
            torch.set_num_threads(saved_threads)

    one, several = run(1), run(max(2, torch.get_num_threads()))
    assert one.keys() == several.keys()
    for key, value in one.items():
        if isinstance(value, float):
            assert value == several[key] or (value != value and several[key] != several[key]), key
