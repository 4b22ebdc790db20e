"""``functional.ranking.graph_constrained_list`` against a loop reference, and the per-mode object rule of the reader
(``structures.reader.evaluated_objects``) on one sample and on a padded batch."""
import numpy as np
import pytest
import torch

from mmsgg_eval.functional import graph_constrained_list, pair_end_scores
from mmsgg_eval.structures import collate_scene_graphs
from mmsgg_eval.structures.reader import ObjectList, evaluated_objects
from tests.sgg_samples import random_dataset

NUM_CLASSES, NUM_PREDICATES = 4, 5


def reference_triplet_scores(ref, mode, score_format):
    """Per pair: best predicate score x subject score x object score, in float32 and in that order (PredCls:
    object scores 1)."""
    out = []
    for (s, o), row in zip(ref['rel_pairs'], ref['rel_scores']):
        best = row if score_format == 'single' else max(row[1:] if score_format == 'bg' else row)
        sub, obj = (1.0, 1.0) if mode == 'predcls' else (ref['pred_scores'][s], ref['pred_scores'][o])
        out.append(float(np.float32(np.float32(best) * np.float32(sub)) * np.float32(obj)))
    return out


@pytest.mark.parametrize('mode,score_format,fixed_pairs', [('sgdet', 'bg', None), ('predcls', 'nobg', None),
                                                           ('sgcls', 'single', None), ('sgdet', 'bg', 9)])
@pytest.mark.parametrize('prefix', [False, True])
def test_graph_constrained_list_equals_a_stable_sort(mode, score_format, fixed_pairs, prefix, score_kernels):
    samples, refs = random_dataset(41, 24, mode, score_format=score_format, fixed_pairs=fixed_pairs,
                                   num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    batch = collate_scene_graphs(samples, mode, NUM_CLASSES, NUM_PREDICATES)
    for k in (1, 4, 50):
        order, valid, score = graph_constrained_list(batch, k, prefix=prefix)
        given, given_valid, given_score = graph_constrained_list(batch, k, rank_by='given', prefix=prefix)
        real = batch.rel_valid  # the triplet scores of padding pairs are unspecified
        assert torch.equal(score[real], given_score[real])
        assert order.shape == valid.shape == given.shape == (len(samples), min(k, batch.rel_valid.shape[1]))
        for b, ref in enumerate(refs):
            expected = reference_triplet_scores(ref, mode, score_format)
            num = len(expected)
            assert score[b, :num].tolist() == expected
            ranked = sorted(range(num), key=lambda i: (-expected[i], i))[:k]
            assert order[b][valid[b]].tolist() == ranked
            assert given[b][given_valid[b]].tolist() == list(range(min(k, num)))
    subject_score, object_score = pair_end_scores(batch)
    again = graph_constrained_list(batch, 4, prefix=prefix, end_scores=(subject_score, object_score))
    fused = graph_constrained_list(batch, 4, prefix=prefix)
    assert all(torch.equal(x, y) for x, y in zip(again[:2], fused[:2]))
    assert torch.equal(again[2][batch.rel_valid], fused[2][batch.rel_valid])


def test_graph_constrained_list_refuses_an_unknown_order():
    samples, _ = random_dataset(3, 2, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    batch = collate_scene_graphs(samples, 'sgdet', NUM_CLASSES, NUM_PREDICATES)
    with pytest.raises(ValueError, match="rank_by must be 'score' or 'given'"):
        graph_constrained_list(batch, 5, rank_by='random')


def _objects(n, lengths=None):
    boxes = torch.arange(n * 4, dtype=torch.float32).reshape(n, 4) if lengths is None else \
        torch.arange(len(lengths) * n * 4, dtype=torch.float32).reshape(len(lengths), n, 4)
    labels = torch.zeros(boxes.shape[:-1], dtype=torch.long)
    return ObjectList(boxes, labels, torch.full(boxes.shape[:-1], 0.5), lengths)


def test_evaluated_objects_per_mode_on_one_sample_and_on_a_batch():
    gt, model = _objects(3), _objects(2)
    objects, compared = evaluated_objects('predcls', gt, None, [2])
    assert objects.boxes is gt.boxes and objects.labels is gt.labels and objects.scores.tolist() == [1.0] * 3
    assert compared == [2]
    assert evaluated_objects('predcls', gt, None, [0])[1] == [-1]  # the model listed no boxes
    objects, compared = evaluated_objects('sgcls', gt, model, ())
    assert objects is model and compared == [2]
    no_boxes = ObjectList(None, model.labels, model.scores)
    objects, compared = evaluated_objects('sgcls', gt, no_boxes, ())
    assert objects.boxes is gt.boxes and objects.labels is model.labels and compared == [-1]
    for mode in ('sgdet', 'phrdet'):
        objects, compared = evaluated_objects(mode, gt, model, ())
        assert objects is model and compared == [-1]
    # a padded batch of 2 images with 3 and 1 GT objects: scores 1 on real objects, 0 on padding
    gt_batch, model_batch = _objects(3, [3, 1]), _objects(2, [2, 0])
    objects, compared = evaluated_objects('predcls', gt_batch, None, [3, 0])
    assert objects.scores.tolist() == [[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]] and compared == [3, -1]
    assert objects.lengths == [3, 1]
    assert evaluated_objects('sgcls', gt_batch, model_batch, ())[1] == [2, 0]
    full = ObjectList(model_batch.boxes, model_batch.labels, model_batch.scores)  # no padding
    assert evaluated_objects('sgcls', gt_batch, full, ())[1] == [2, 2]
    assert evaluated_objects('sgdet', gt_batch, model_batch, ())[1] == [-1, -1]
