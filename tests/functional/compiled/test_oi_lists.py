"""The Open Images protocol's compiled kernels (``functional.oi``): ``oi_ranked_lists`` (each image's OI list from
its pairs and score rows, read in place) and ``oi_match_lists`` (the recall first hits and the AP true positives)
against the torch operations, bit for bit, on random pools: tied object and predicate scores (ties at the
candidate threshold and inside the lists), repeated pairs, images without pairs or GT relations, list lengths
below and above the pairs of an image and of the batch, one to three predicates per pair, entries at or below the
1e-5 floor, both background conventions, predicted boxes copied from GT boxes (tied overlaps), zero-area boxes (0/0
IoU without the +1) and both IoU conventions."""
import numpy as np
import pytest
import torch

from mmsgg_eval.functional import compiled
from mmsgg_eval.functional.oi import OIList, _compiled_ranked_lists, oi_list_request, oi_match, oi_ranked_lists
from mmsgg_eval.structures import collate_scene_graphs
from mmsgg_eval.testing.random_samples import random_dataset

NUM_CLASSES, NUM_PREDICATES = 3, 6

needs_kernels = pytest.mark.skipif(not compiled.built() or compiled.kernels() is None
                                   or not hasattr(compiled.kernels(), 'oi_ranked_lists'),
                                   reason='the compiled kernels (with oi_ranked_lists) are not built')


def pool(seed, mode, score_format, fixed_pairs):
    """Random samples with many ties; some predicted boxes copied from a GT box, some of zero area."""
    samples, _ = random_dataset(seed, 9, mode, num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES,
                                score_format=score_format, max_objects=9, tie_prob=0.6, fixed_pairs=fixed_pairs)
    rng = np.random.default_rng(seed)
    for s in samples:
        pred, gt = s.get('pred_instances'), s['gt_instances']['bboxes']
        if pred is None or not len(pred['bboxes']):
            continue
        boxes = pred['bboxes'].clone()
        for i in range(len(boxes)):
            u = rng.uniform()
            if u < 0.3 and len(gt):
                boxes[i] = gt[rng.integers(len(gt))]
            elif u < 0.4:
                boxes[i, 2] = boxes[i, 0]  # zero width
        pred['bboxes'] = boxes
    return samples


def both_batches(samples, mode, layout):
    """The same pool read with the kernels (score rows in place) and without them (the torch layouts)."""
    def read():
        return collate_scene_graphs(samples, mode, NUM_CLASSES, NUM_PREDICATES, score_layout=layout)
    batch = read()
    with compiled.disabled():
        reference = read()
    assert batch.scores.layout == 'compiled' and reference.scores.layout != 'compiled'
    return batch, reference


def assert_same_lists(got: OIList, want: OIList):
    for name in ('valid', 'score', 'predicate', 'pair', 'subject', 'object'):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and a.shape == b.shape, (name, a.shape, b.shape)
        assert torch.equal(a, b), name


@needs_kernels
@pytest.mark.parametrize('seed', range(6))
@pytest.mark.parametrize('mode', ['sgdet', 'predcls'])
def test_lists_and_matches_equal_the_torch_operations(seed, mode):
    compared = 0
    for score_format, layout in (('bg', 'background_first'), ('nobg', 'no_background')):
        for fixed_pairs in (None, 40):
            samples = pool(seed * 7 + len(score_format), mode, score_format, fixed_pairs)
            batch, reference = both_batches(samples, mode, layout)
            for length, per_pair in ((100, 2), (3, 2), (20, 1), (7, 3), (1, 2)):
                got = _compiled_ranked_lists(batch, length, per_pair, 1e-5)
                assert got is not None  # the kernel read this batch
                with compiled.disabled():
                    want = oi_ranked_lists(reference, length, per_pair)
                assert_same_lists(got, want)
                assert_same_lists(oi_ranked_lists(batch, length, per_pair), want)
                for plus_one in (True, False):
                    matched = oi_match(batch, got, plus_one)
                    with compiled.disabled():
                        expected = oi_match(reference, want, plus_one)
                    for name in ('first_hit', 'tp_rel', 'tp_phr'):
                        assert matched[name].dtype == expected[name].dtype, name
                        assert torch.equal(matched[name], expected[name]), (name, length, per_pair, plus_one)
                    compared += int(want.valid.sum())
    assert compared > 500  # the cases list entries


@needs_kernels
@pytest.mark.parametrize('seed', range(4))
@pytest.mark.parametrize('mode', ['sgdet', 'predcls'])
def test_lists_built_in_the_reading_pass_equal_the_torch_operations(seed, mode):
    """The reader's compiled pass asked for the OI lists (the fourth element of ``ranking``, with and without the
    scene-graph lists): each image's list built while its matrix is read, the same tensors as the torch
    operations; a request of another length is not taken (the kernel lists the batch then)."""
    for score_format, layout in (('bg', 'background_first'), ('nobg', 'no_background')):
        for fixed_pairs in (None, 40):
            samples = pool(seed * 5 + 1, mode, score_format, fixed_pairs)
            with compiled.disabled():
                reference = collate_scene_graphs(samples, mode, NUM_CLASSES, NUM_PREDICATES, score_layout=layout)
            for length, per_pair in ((100, 2), (3, 2), (20, 1), (7, 3)):
                request = oi_list_request(length, per_pair, 1e-5)
                with compiled.disabled():
                    want = oi_ranked_lists(reference, length, per_pair)
                for ranking in ((0, 0, False, request), (5, 7, True, request)):
                    batch = collate_scene_graphs(samples, mode, NUM_CLASSES, NUM_PREDICATES, score_layout=layout,
                                                 ranking=ranking)
                    assert batch.ranked_lists.oi_lists[0] == request
                    got = _compiled_ranked_lists(batch, length, per_pair, 1e-5)
                    assert got.score is batch.ranked_lists.oi_lists[1][0]  # the pass' lists, taken as they are
                    assert_same_lists(got, want)
                    other = _compiled_ranked_lists(batch, length + 1, per_pair, 1e-5)
                    assert other.score is not batch.ranked_lists.oi_lists[1][0]
                    with compiled.disabled():
                        assert_same_lists(other, oi_ranked_lists(reference, length + 1, per_pair))


@needs_kernels
def test_ties_at_the_candidate_threshold_and_the_floor():
    """Every pair scores the same best entry (ties at the length-th largest one: every pair is a candidate) and
    half of the rows are all zeros (entries at the 1e-5 floor are dropped); the second predicate ties with the first
    (the lower column first)."""
    samples, _ = random_dataset(3, 4, 'predcls', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES,
                                score_format='nobg', max_objects=6, fixed_pairs=30)
    for i, s in enumerate(samples):
        rows = torch.zeros(30, NUM_PREDICATES)
        rows[::2, 1] = rows[::2, 4] = 0.5
        if i == 1:
            rows[:] = 0.0  # an image whose entries all fall at the floor
        if i == 2:
            rows[:, 3] = 1e-5  # entries scoring exactly the floor (object scores 1): dropped
        s['pred_relations']['scores'] = rows
    batch, reference = both_batches(samples, 'predcls', 'no_background')
    for length in (4, 15, 16, 100):
        got = _compiled_ranked_lists(batch, length, 2, 1e-5)
        with compiled.disabled():
            want = oi_ranked_lists(reference, length, 2)
        assert_same_lists(got, want)
        assert not got.valid[1].any()
        assert not (got.valid[2] & (got.predicate[2] == 3)).any()
        listed = got.predicate[0][got.valid[0]].tolist()
        assert listed[:2] == [1, 4] and got.pair[0][:2].tolist() == [0, 0]


@needs_kernels
def test_bad_inputs_are_refused_by_the_kernels():
    kernels = compiled.kernels()
    matrices = [torch.rand(3, NUM_PREDICATES)]
    pairs = [torch.tensor([[0, 1], [1, 2], [2, 5]])]
    args = dict(matrices=matrices, column=0, num_predicates=NUM_PREDICATES, rel_pairs=pairs,
                object_scores=torch.ones(1, 3), best=matrices[0].amax(1)[None], count=torch.tensor([3]), length=100,
                per_pair=2, min_score=1e-5)
    with pytest.raises(RuntimeError, match='image 0 pair 2 has an object index outside'):
        kernels.oi_ranked_lists(**args)
    with pytest.raises(RuntimeError, match='outside its pairs and score rows'):
        kernels.oi_ranked_lists(**{**args, 'count': torch.tensor([4])})
    boxes = torch.tensor([[[0.0, 0.0, 4.0, 4.0]] * 2])
    one = torch.ones(1, 1, dtype=torch.long)
    with pytest.raises(RuntimeError, match='GT relation 0 has an object index outside'):
        kernels.oi_match_lists(boxes, torch.zeros(1, 2, dtype=torch.long), boxes, torch.zeros(1, 2, dtype=torch.long),
                               torch.tensor([[[0, 2]]]), torch.zeros(1, 1, dtype=torch.long),
                               torch.ones(1, 1, dtype=torch.bool), one, one, one * 0, torch.ones(1, 1, dtype=torch.bool),
                               True, 0.5, 0.5)


@needs_kernels
def test_an_entry_tied_between_two_gt_relations_takes_the_first():
    """Entry 0 overlaps GT relations 0 and 1 equally, ends and union boxes (its object box halfway between theirs):
    it takes the first, so entry 1, whose best GT is relation 0, is a false positive (taking the last would leave it
    relation 0)."""
    p = 2
    rows = torch.zeros(2, NUM_PREDICATES)
    rows[0, p], rows[1, p] = 0.9, 0.8
    sample = dict(sample_idx=0,
                  gt_instances=dict(bboxes=torch.tensor([[5.0, 20, 7, 30], [0, 0, 10, 10], [2, 0, 12, 10]]),
                                    labels=torch.tensor([0, 1, 1])),
                  gt_relations=dict(pair_idxs=torch.tensor([[0, 1], [0, 2]]), labels=torch.tensor([p, p])),
                  pred_instances=dict(bboxes=torch.tensor([[5.0, 20, 7, 30], [1, 0, 11, 10], [0, 0, 10, 10]]),
                                      labels=torch.tensor([0, 1, 1]), scores=torch.ones(3)),
                  pred_relations=dict(pair_idxs=torch.tensor([[0, 1], [0, 2]]), scores=rows))
    batch, reference = both_batches([sample], 'sgdet', 'no_background')
    lists = _compiled_ranked_lists(batch, 100, 1, 1e-5)
    assert lists.pair[0].tolist() == [0, 1]
    for plus_one in (True, False):
        matched = oi_match(batch, lists, plus_one)
        with compiled.disabled():
            expected = oi_match(reference, lists, plus_one)
        for name in ('first_hit', 'tp_rel', 'tp_phr'):
            assert torch.equal(matched[name], expected[name]), name
        assert matched['tp_rel'][0].tolist() == matched['tp_phr'][0].tolist() == [True, False]
