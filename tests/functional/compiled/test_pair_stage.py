"""The compiled pair stage (mmsgg_eval._ext): the graph-constrained list with its end scores and products in one
pass, the zero padding of long rows (with the value range of pair indices), the one-pass row maxima at every
predicate count (vector tails), and the long-row top-k; each against the torch implementation or a loop
reference, with ties, and bad arguments refused naming the image."""
import numpy as np
import pytest
import torch
from torch.nn.utils.rnn import pad_sequence

from mmsgg_eval.functional import compiled
from mmsgg_eval.functional.ranking import graph_constrained_ranking, prefix_topk
from mmsgg_eval.functional.scores import build_relation_scores
from mmsgg_eval.structures.padded import _fast_padded
from mmsgg_eval.structures.reader import collate_scene_graphs

needs_kernels = pytest.mark.skipif(not compiled.built(), reason='the compiled kernels are not built')
CPU = torch.device('cpu')


def _stable_top(values, count, k):
    """Loop reference: indices of the stable descending top-k of values[:count] (-0.0 ties with +0.0)."""
    return sorted(range(count), key=lambda i: (-values[i], i))[:k]


@needs_kernels
@pytest.mark.parametrize('ties', [False, True])
def test_long_row_top_k_equals_a_stable_sort(ties):
    """Rows of thousands of entries (the buffer of 2k entries is compacted many times), ascending runs (every
    entry passes the bar), all-equal rows and k = 1, 100, 700."""
    g = np.random.default_rng(int(ties))
    rows = [g.random(3000), np.sort(g.random(2500)), np.full(1800, 0.25), g.random(150), np.zeros(0)]
    if ties:
        rows = [np.round(r * 4) / 4 for r in rows]
        rows[0][::7] = -0.0
    length = max(len(r) for r in rows)
    values = torch.zeros(len(rows), length)
    for b, r in enumerate(rows):
        values[b, :len(r)] = torch.tensor(r, dtype=torch.float32)
    count = torch.tensor([len(r) for r in rows])
    for k in (1, 100, 700):
        index, valid = prefix_topk(values, count, k)
        for b, r in enumerate(rows):
            expected = _stable_top(values[b].tolist(), len(r), k)
            assert index[b][valid[b]].tolist() == expected, (b, k)


def _pair_batch(seed, mode='sgdet', num_images=12):
    from tests.sgg_samples import random_dataset
    samples, _ = random_dataset(seed, num_images, mode, score_format='bg', num_classes=7, num_predicates=5)
    return collate_scene_graphs(samples, mode, 7, 5)


@needs_kernels
@pytest.mark.parametrize('seed', [0, 1, 2])
def test_graph_constrained_ranking_equals_the_torch_composition(seed):
    batch = _pair_batch(seed)
    for k in (1, 3, 50):
        order, valid, triplet, pair_score = graph_constrained_ranking(batch, k, prefix=True)
        with compiled.disabled():
            t_order, t_valid, t_triplet, t_pair = graph_constrained_ranking(batch, k, prefix=True)
        real = batch.rel_valid
        assert torch.equal(valid, t_valid) and torch.equal(order[valid], t_order[t_valid])
        assert torch.equal(triplet[real], t_triplet[real]) and torch.equal(pair_score[real], t_pair[real])
        # the products in the legacy order: (best * subject) * object, subject * object, float32
        s = batch.pred_scores.gather(1, batch.rel_pairs[..., 0])
        o = batch.pred_scores.gather(1, batch.rel_pairs[..., 1])
        assert torch.equal(triplet[real], ((batch.scores.best * s) * o)[real])
        assert torch.equal(pair_score[real], (s * o)[real])
        assert not triplet[~real].any() and not pair_score[~real].any()  # padding entries hold 0


@needs_kernels
def test_graph_constrained_pairs_refuses_bad_arguments_naming_the_image():
    ext = compiled.kernels()
    pairs = torch.zeros(2, 3, 2, dtype=torch.long)
    pairs[1, 2] = torch.tensor([0, 4])
    scores, best, count = torch.rand(2, 4), torch.rand(2, 3), torch.tensor([3, 3])
    with pytest.raises(RuntimeError, match=r'image 1 pair 2 has an object index outside \[0, 4\)'):
        ext.graph_constrained_pairs(pairs, scores, best, count, 2)
    with pytest.raises(RuntimeError, match='image 0 has count 4 outside'):
        ext.graph_constrained_pairs(pairs[:1], scores[:1], best[:1], torch.tensor([4]), 2)
    with pytest.raises(RuntimeError, match='pairs must be an int64'):
        ext.graph_constrained_pairs(pairs.int(), scores, best, count, 2)
    # only the counted pairs are read: a bad index in the padding is never looked at
    ok = ext.graph_constrained_pairs(pairs, scores, best, torch.tensor([3, 2]), 2)
    assert ok[1].all()
    # per-image pair tensors (read in place) give the same and are checked alike
    rows = [pairs[0].clone(), pairs[1, :2].clone()]
    per_image = ext.graph_constrained_pairs(rows, scores, best, torch.tensor([3, 2]), 2)
    assert all(torch.equal(x, y) for x, y in zip(per_image, ok))
    with pytest.raises(RuntimeError, match='image 1 has count 3 outside'):
        ext.graph_constrained_pairs(rows, scores, best, count, 2)
    with pytest.raises(RuntimeError, match=r"image 1's pairs must be an int64 \[R, 2\]"):
        ext.graph_constrained_pairs([rows[0], rows[1].int()], scores, best, torch.tensor([3, 2]), 2)
    with pytest.raises(RuntimeError, match='1 pair tensors for 2 images'):
        ext.graph_constrained_pairs(rows[:1], scores, best, torch.tensor([3, 2]), 2)


@needs_kernels
@pytest.mark.parametrize('dtype,trailing', [(torch.long, (2,)), (torch.float32, (4,)), (torch.bool, ()),
                                            (torch.int32, (2, 3))])
def test_pad_zero_rows_equals_pad_sequence(dtype, trailing):
    g = torch.Generator().manual_seed(5)
    lengths = [300, 0, 129, 1, 300, 57]
    tensors = [(torch.rand((n,) + trailing, generator=g) * 50).to(dtype) for n in lengths]
    ext = compiled.kernels()
    got = ext.pad_zero_rows(tensors, 310)
    expected = pad_sequence(tensors + [torch.zeros((310,) + trailing, dtype=dtype)], batch_first=True)[:-1]
    assert got.dtype == dtype and torch.equal(got, expected)
    with pytest.raises(RuntimeError, match='tensor 1 has another trailing shape'):
        ext.pad_zero_rows([torch.zeros(3, 2), torch.zeros(3, 5)], 4)
    with pytest.raises(RuntimeError, match='tensor 1 is not a contiguous CPU tensor'):
        ext.pad_zero_rows([torch.zeros(3, 2), torch.zeros(2, 3).t()], 4)


@needs_kernels
@pytest.mark.parametrize('value', [0, -1])
def test_pad_int64_rows_gives_each_images_index_range_and_length(value):
    tensors = [torch.tensor([[3, 1], [0, 7]]), torch.zeros((0, 2), dtype=torch.long), torch.tensor([[-2, 5]])]
    out, low, high, lengths = compiled.kernels().pad_int64_rows(tensors, value)
    expected = pad_sequence(tensors, batch_first=True, padding_value=value)
    assert out.shape == (3, 2, 2) and torch.equal(out, expected)
    assert low.tolist() == [0, 0, -2] and high.tolist() == [7, -1, 5] and lengths.tolist() == [2, 0, 1]
    flat = [torch.tensor([4, 2, 9]), torch.tensor([1])]
    out, low, high, lengths = compiled.kernels().pad_int64_rows(flat, value)
    assert out.tolist() == [[4, 2, 9], [1, value, value]] and low.tolist() == [2, 1] and high.tolist() == [9, 1]


@needs_kernels
@pytest.mark.parametrize('tensors', [
    [torch.zeros(2, 2)],                                        # float
    [torch.zeros(2, 2, dtype=torch.int32)],                     # another integer dtype
    [torch.zeros(3, 2, dtype=torch.long), torch.zeros(3, 5, dtype=torch.long)],  # another trailing shape
    [torch.zeros(3, 2, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long).t()],  # not contiguous
    [torch.zeros(3, dtype=torch.long), torch.zeros(3, 1, dtype=torch.long)],  # another rank
    [torch.tensor(3)],                                          # 0-d
    [],
])
def test_pad_int64_rows_leaves_other_tensors_to_the_general_path(tensors):
    assert compiled.kernels().pad_int64_rows(tensors, 0) is None


@needs_kernels
@pytest.mark.parametrize('value', [0, -1])
def test_pad_int64_rows_reads_strided_rows_when_asked(value):
    """The columns of one [G, 3] array (GT pairs and predicates as a dataset may give them): with strided=True the
    same padding and ranges as of their contiguous copies; without it they are left to the general path."""
    g = torch.Generator().manual_seed(3)
    arrays = [torch.randint(-5, 40, (n, 3), generator=g) for n in (12, 0, 7, 1)]
    for columns in ([a[:, :2] for a in arrays], [a[:, 2] for a in arrays], [a[::2, 1:] for a in arrays]):
        got = compiled.kernels().pad_int64_rows(columns, value, strided=True)
        expected = compiled.kernels().pad_int64_rows([c.contiguous() for c in columns], value)
        assert all(torch.equal(x, y) for x, y in zip(got, expected))
        assert torch.equal(got[0], pad_sequence(columns, batch_first=True, padding_value=value))
        assert compiled.kernels().pad_int64_rows(columns, value) is None
    assert compiled.kernels().pad_int64_rows([torch.zeros(2, 2, 2, dtype=torch.long).transpose(0, 1)], 0,
                                             strided=True) is None  # rank 3: only contiguous


@needs_kernels
@pytest.mark.parametrize('kind', ['boxes', 'score'])
def test_pad_float_rows_checked_equals_the_padding_and_the_torch_rule(kind):
    """Zero padding as pad_sequence, and per image the value rule of :mod:`mmsgg_eval.structures.validation`
    (its torch path on the padded batch): NaN, inf, negative scores, -0.0, x2 < x1 or y2 < y1 (also by one ulp),
    empty images."""
    from mmsgg_eval.structures.validation import FieldRule, bad_images
    g = np.random.default_rng(7 if kind == 'boxes' else 8)
    lengths = [5, 0, 9, 9, 3, 1, 9, 4, 2, 6]
    trailing = (4,) if kind == 'boxes' else ()
    tensors = []
    for n in lengths:
        t = torch.tensor(g.random((n,) + trailing).astype(np.float32) * 100)
        if kind == 'boxes':
            t[:, 2:] += t[:, :2]
        tensors.append(t)
    at = (lambda row, col: (row, col)) if kind == 'boxes' else (lambda row, col: row)  # an entry of a row
    tensors[2][at(3, 0)] = float('nan')
    tensors[3][at(8, -1)] = float('inf')
    tensors[4][0, ...] = -0.0
    if kind == 'boxes':
        tensors[5][0, 2] = torch.nextafter(tensors[5][0, 0], torch.tensor(-1.0))  # x2 just below x1
        tensors[6][1, 3] = tensors[6][1, 1] - 3
        tensors[7][2] = torch.tensor([-5.0, -5.0, -5.0, -5.0])  # a point: accepted
    else:
        tensors[5][0] = -1e-30
        tensors[6][1] = -float('inf')
    out, bad, got_lengths = compiled.kernels().pad_float_rows_checked(tensors, 1 if kind == 'boxes' else 0)
    padded = pad_sequence(tensors, batch_first=True)
    assert torch.equal(out.view(torch.int32), padded.view(torch.int32)) and got_lengths.tolist() == lengths  # bits: NaN
    reference = bad_images(FieldRule('field', kind, padded, lengths))
    assert bad.tolist() == reference.tolist() == [False, False, True, True, False, True, True, False, False, False]


@needs_kernels
@pytest.mark.parametrize('tensors,kind', [
    ([torch.zeros(2, 4, dtype=torch.float64)], 1),              # another dtype
    ([torch.zeros(2, 4), torch.zeros(4, 2).t()], 1),            # not contiguous
    ([torch.zeros(2, 5)], 1),                                   # boxes of another trailing shape
    ([torch.zeros(4)], 1),                                      # boxes of rank 1
    ([torch.zeros(3), torch.zeros(3, 1)], 0),                   # another rank
    ([torch.tensor(1.0)], 0),                                   # 0-d
    ([], 0),
    ([torch.zeros(3)], 2),                                      # no such rule
])
def test_pad_float_rows_checked_leaves_other_tensors_to_the_general_path(tensors, kind):
    assert compiled.kernels().pad_float_rows_checked(tensors, kind) is None


@needs_kernels
@pytest.mark.parametrize('field,value', [('gt_instances.bboxes', float('nan')), ('pred_instances.bboxes', -1.0),
                                         ('pred_instances.scores', -0.5), ('gt_relations.pair_idxs', 99),
                                         ('gt_relations.labels', -3)])
def test_bad_values_read_by_the_padding_kernels_are_named_alike_with_and_without_them(field, value):
    """Boxes and object scores ruled on while they are padded, GT pairs and predicates as columns of one [G, 3]
    array (strided rows, padded by the compiled kernel): the same error as the torch path, naming the sample and
    the field; a valid batch of such columns is read alike (the same padded fields)."""
    from tests.sgg_samples import random_dataset
    samples, _ = random_dataset(11, 6, 'sgdet', score_format='bg', num_classes=7, num_predicates=5)
    for s in samples:  # GT relations as column views of one [G, 3] array
        rel = s['gt_relations']
        joined = torch.cat([rel['pair_idxs'], rel['labels'][:, None]], 1).long()
        rel['pair_idxs'], rel['labels'] = joined[:, :2], joined[:, 2]
    with compiled.disabled():
        plain = collate_scene_graphs(samples, 'sgdet', 7, 5)
    fast = collate_scene_graphs(samples, 'sgdet', 7, 5)
    for name in ('gt_boxes', 'gt_labels', 'gt_pairs', 'gt_predicates', 'pred_boxes', 'pred_scores', 'gt_valid'):
        assert torch.equal(getattr(fast, name), getattr(plain, name)), name
    read = _fast_padded(samples, 'sgdet', 5, None)  # the kernels read the rules and ranges of these fields
    assert set(read.value_flags) == {'gt_boxes', 'pred_boxes', 'pred_scores'}
    assert all(read.value_ranges[name] is not None for name in ('gt_labels', 'gt_pairs', 'gt_predicates'))
    target = next(s for s in samples[2:] if s['gt_relations']['labels'].numel())
    container, key = field.split('.')
    entry = target[container][key]
    if key == 'bboxes':
        entry[0, 2 if value == -1.0 else 1] = value
    elif entry.dim() == 2:
        entry[0, 0] = value
    else:
        entry[0] = value
    messages = refusals_with_and_without_kernels(samples)
    assert messages[0] == messages[1]
    assert f'`{field}`' in messages[0] and f'sample_idx={target["sample_idx"]}' in messages[0]


@needs_kernels
@pytest.mark.parametrize('bad', [-1, 'objects'])
def test_a_bad_pair_index_is_named_alike_with_and_without_the_kernels(bad):
    """The reader's index check reads the value range the padding kernel gives: the same error as the torch
    path, naming the sample and the field."""
    from tests.sgg_samples import random_dataset
    samples, _ = random_dataset(7, 6, 'sgdet', score_format='bg', num_classes=7, num_predicates=5)
    pairs = samples[3]['pred_relations']['pair_idxs']
    num_objects = samples[3]['pred_instances']['labels'].shape[0]
    pairs[-1, 1] = -1 if bad == -1 else num_objects
    messages = refusals_with_and_without_kernels(samples)
    assert messages[0] == messages[1]
    assert 'pred_relations.pair_idxs' in messages[0] and 'sample_idx=' in messages[0]


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def refusals_with_and_without_kernels(samples):
    """The ValueError messages of reading ``samples`` (SGDet, 7 classes, 5 predicates) with the compiled kernels
    and without them, in that order."""
    messages = []
    for switch in (False, True):
        with compiled.disabled() if switch else _nothing():
            with pytest.raises(ValueError) as err:
                collate_scene_graphs(samples, 'sgdet', 7, 5)
        messages.append(str(err.value))
    return messages


@needs_kernels
@pytest.mark.parametrize('num_predicates', [1, 7, 8, 9, 15, 16, 17, 50])
@pytest.mark.parametrize('background', [0, 1])
def test_row_maxima_at_every_predicate_count_equal_the_torch_path(num_predicates, background):
    """The one-pass row maxima (8-lane vectors, an overlapping last vector) and the value check, including
    -0.0 (refused by the integer check, looked at again by value), inf and NaN in any column."""
    g = np.random.default_rng(num_predicates * 2 + background)
    num_rel = [0, 1, 37, 64, 65, 200]
    raw = [torch.tensor(g.random((r, num_predicates + background)).astype(np.float32)) for r in num_rel]
    raw[2][5, -1] = float('inf')
    raw[3][0, 0] = -0.0
    raw[4][64, 0] = float('nan')
    raw[5][17, num_predicates // 2 + background] = 7.5
    args = ([1 if background else 0] * len(raw), num_rel, num_predicates, [False] * len(raw), [])
    scores = build_relation_scores(raw, *args, 'compiled', CPU)
    assert scores.layout == 'compiled' or num_predicates < 1
    with compiled.disabled():
        reference = build_relation_scores(raw, *args, 'concatenated', CPU)
    assert torch.equal(scores.bad_images, reference.bad_images)
    assert scores.bad_images.tolist() == [False, False, True, False, True, False]
    good = ~reference.bad_images
    assert torch.equal(scores.best[good], reference.best[good])


@pytest.mark.parametrize('case', ['valid', 'negative', 'at_bound', 'at_image_bound', 'flagged', 'extra', 'float'])
def test_the_host_decision_of_value_rules_accepts_only_valid_batches(case):
    """The value rules decided from the compiled reader's host values (flags, index ranges) without a torch
    operation: a valid batch passes; any breaking value (a negative index, an index at an int or per-image bound,
    a flagged box, a flagged score matrix) or a value it cannot decide (float indices) goes to the torch rules,
    which raise naming the first bad sample and field, as without the host decision."""
    from mmsgg_eval.structures.validation import FieldRule, validate_padded
    values = torch.tensor([[0, 2, 1], [3, 0, 0]])  # image 1: one real entry
    low, high = torch.tensor([0, 3]), torch.tensor([2, 3])
    boxes = torch.zeros(2, 3, 4)
    box_flags, score_flags = torch.tensor([False, False]), torch.tensor([False, False])
    bound = [3, 4]
    if case == 'negative':
        values[1, 0], low[1] = -1, -1
    elif case == 'at_bound':
        values[1, 0], high[1] = 5, 5
    elif case == 'at_image_bound':
        values[1, 0], high[1] = 4, 4
    elif case == 'flagged':
        boxes[1, 0, 0], box_flags = float('nan'), torch.tensor([False, True])
    elif case == 'extra':
        score_flags = torch.tensor([False, True])
    elif case == 'float':
        values = values.float()
        values[1, 0] = 1.5
    rules = [FieldRule('gt_instances.bboxes', 'boxes', boxes, [3, 1], bad=box_flags),
             FieldRule('gt_instances.labels', 'index', values, [3, 1], 5, 'class', value_range=(low, high)),
             FieldRule('gt_relations.pair_idxs', 'index', values, [3, 1], bound, 'object', zero_padded=True,
                       value_range=(low, high))]
    samples = [{'sample_idx': 7}, {'sample_idx': 9}]
    if case == 'valid':
        validate_padded(rules, samples, [score_flags], [lambda b: 'scores'])
        return
    expected = {'negative': 'gt_instances.labels', 'at_bound': 'gt_instances.labels', 'flagged': 'bboxes',
                'at_image_bound': 'gt_relations.pair_idxs', 'extra': 'scores', 'float': 'must be integers'}[case]
    with pytest.raises(ValueError, match=expected) as err:
        validate_padded(rules, samples, [score_flags], [lambda b: 'scores'])
    assert case == 'extra' or 'sample_idx=9' in str(err.value)


@needs_kernels
def test_matrix_shapes_reads_the_metadata_the_reader_checks():
    """Rows, columns, whether all are C-contiguous float32 (read in place) and one device of 2-D tensors in one
    call; None when one is not 2-D; the reader gives the same padded batch with and without it (a float64 matrix
    is cast, an unfitting one is refused by the per-sample reader naming the sample, as without the kernels)."""
    ext = compiled.kernels()
    mats = [torch.zeros(3, 6), torch.zeros(0, 5), torch.zeros(7, 6)]
    assert ext.matrix_shapes(mats) == ([3, 0, 7], [6, 5, 6], True, True)
    assert ext.matrix_shapes(mats + [torch.zeros(2, 6, dtype=torch.float64)])[2] is False
    strided = [torch.zeros(7, 6).t().contiguous().t(), torch.zeros(6, 2).t()]  # float32, not C-contiguous
    assert ext.matrix_shapes(mats[:2] + strided) == ([3, 0, 7, 2], [6, 5, 6, 6], False, True)
    assert ext.matrix_shapes(mats + [torch.zeros(6)]) is None
    assert ext.matrix_shapes([]) == ([], [], True, True)
    from tests.sgg_samples import random_dataset
    samples, _ = random_dataset(5, 4, 'sgdet', score_format='bg', num_classes=7, num_predicates=5)
    samples[1]['pred_relations']['scores'] = samples[1]['pred_relations']['scores'].double()
    fast = _fast_padded(samples, 'sgdet', 5, None)
    with compiled.disabled():
        plain = _fast_padded(samples, 'sgdet', 5, None)
    assert fast.score_width == plain.score_width and fast.background == plain.background
    assert all(a.dtype == torch.float32 and torch.equal(a, b) for a, b in zip(fast.raw_scores, plain.raw_scores))
    samples[3]['pred_relations']['scores'] = samples[3]['pred_relations']['scores'][:-1]  # one row short
    messages = refusals_with_and_without_kernels(samples)
    assert messages[0] == messages[1] and 'pred_relations' in messages[0]


@needs_kernels
def test_the_padding_kernels_split_large_batches_over_threads_with_the_same_outputs():
    """Below 2^18 entries the padding kernels run on the calling thread, above it over the intra-op threads: a
    batch far above (two threads) gives the padding, ranges, lengths and rule flags of each image padded alone."""
    g = torch.Generator().manual_seed(11)
    lengths = torch.randint(0, 700, (240,), generator=g).tolist()
    boxes = [torch.rand(n, 4, generator=g) * 100 for n in lengths]
    for t in boxes:
        t[:, 2:] += t[:, :2]  # valid xyxy
    for b in range(0, len(boxes), 7):
        if lengths[b]:
            boxes[b][0, 2] = -1.0  # x2 < x1: flagged
    labels = [torch.randint(-3, 90, (n,), generator=g) for n in lengths]
    ext, threads = compiled.kernels(), torch.get_num_threads()
    assert sum(lengths) * 4 >= 2 ** 18
    torch.set_num_threads(2)
    try:
        pad_boxes, bad, box_lengths = ext.pad_float_rows_checked(boxes, 1)
        pad_labels, low, high, label_lengths = ext.pad_int64_rows(labels, -1)
        zeros = ext.pad_zero_rows(boxes, max(lengths))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(pad_boxes, pad_sequence(boxes, batch_first=True)) and torch.equal(zeros, pad_boxes)
    assert torch.equal(pad_labels, pad_sequence(labels, batch_first=True, padding_value=-1))
    assert box_lengths.tolist() == label_lengths.tolist() == lengths
    for b in range(len(lengths)):
        assert bool(bad[b]) == bool(ext.pad_float_rows_checked([boxes[b]], 1)[1][0])
        assert (int(low[b]), int(high[b])) == tuple(int(v) for v in ext.pad_int64_rows([labels[b]], -1)[1:3])
    assert bool(bad.any()) and not bool(bad.all())
