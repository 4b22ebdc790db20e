"""Legacy Scene-Graph-Benchmark dumps (eval_results.pytorch): safe loading and conversion."""
import contextlib
import io
import os
import pickle
import sys

import pytest
import torch

from mmsgg_eval.io.legacy import (BOXLIST_PATH, LegacyBoxList, convert_legacy_results, iter_legacy_samples,
                               legacy_gt_to_fields, legacy_to_data_sample, load_legacy_results)
from mmsgg_eval.metrics.scene_graph import SGRecall
from mmsgg_eval.io.vlm import PLACEHOLDER_BOX
from tests.sgg_samples import importable_as

NUM_PRED = 5
META = dict(classes=['a', 'b', 'c', 'd'], predicates=[f'p{i}' for i in range(NUM_PRED)], iou_plus_one=True)
MODULES = ('maskrcnn_benchmark', 'maskrcnn_benchmark.structures', 'maskrcnn_benchmark.structures.bounding_box')


@contextlib.contextmanager
def fake_maskrcnn_benchmark():
    """A stand-in of the legacy ``BoxList`` class importable under its real path while saving."""
    class BoxList:  # same attributes as maskrcnn_benchmark.structures.bounding_box.BoxList
        def __init__(self, bbox, image_size, mode='xyxy'):
            self.bbox = torch.as_tensor(bbox, dtype=torch.float32)
            self.size = image_size
            self.mode = mode
            self.extra_fields = {}
            self.triplet_extra_fields = []

        def add_field(self, name, value):
            self.extra_fields[name] = value

    BoxList.__qualname__ = 'BoxList'
    with importable_as(BoxList, MODULES[-1]):
        yield BoxList


def legacy_records(BoxList, mode='xyxy'):
    """Image 0: 3 objects, 2 GT relations; image 1: 2 objects, 1 GT relation (sizes (W, H))."""
    gts, preds = [], []
    # image 0 -- GT
    g = BoxList([[0, 0, 49, 49], [60, 60, 99, 99], [10, 70, 40, 95]], (120, 100))
    g.add_field('labels', torch.tensor([1, 2, 3]))
    g.add_field('relation_tuple', torch.tensor([[0, 1, 1], [2, 1, 4]]))  # (sub, obj, 1-based predicate)
    gts.append(g)
    # image 0 -- prediction (boxes slightly off, still IoU >= 0.5)
    boxes = torch.tensor([[1., 1, 49, 49], [60, 61, 99, 99], [10, 70, 41, 95]])
    if mode == 'xywh':
        boxes = torch.cat([boxes[:, :2], boxes[:, 2:] - boxes[:, :2] + 1], 1)
    p = BoxList(boxes, (120, 100), mode)
    p.add_field('pred_labels', torch.tensor([1, 2, 3]))
    p.add_field('pred_scores', torch.tensor([0.9, 0.8, 0.7]))
    p.add_field('rel_pair_idxs', torch.tensor([[0, 1], [2, 1], [1, 0]]))
    scores = torch.full((3, NUM_PRED + 1), 0.01)
    scores[0, 0] = 0.5   # background is ignored
    scores[0, 1] = 0.4   # predicate 0 (1-based 1): hits GT relation 0
    scores[1, 2] = 0.3   # predicate 1, but GT says 3 (1-based 4): miss in GC...
    scores[1, 4] = 0.25  # ...NGC second choice hits it
    scores[2, 3] = 0.9
    p.add_field('pred_rel_scores', scores)
    p.add_field('pred_rel_labels', scores[:, 1:].argmax(1) + 1)
    preds.append(p)
    # image 1
    g = BoxList([[0, 0, 20, 20], [30, 30, 60, 60]], (80, 70))
    g.add_field('labels', torch.tensor([4, 4]))
    g.add_field('relation_tuple', torch.tensor([[1, 0, 5]]))
    gts.append(g)
    p = BoxList([[0., 0, 20, 20], [30, 30, 60, 60]], (80, 70))
    p.add_field('pred_labels', torch.tensor([4, 4]))
    p.add_field('pred_scores', torch.tensor([1.0, 1.0]))
    p.add_field('rel_pair_idxs', torch.tensor([[0, 1], [1, 0]]))
    scores = torch.full((2, NUM_PRED + 1), 0.01)
    scores[0, 5] = 0.8
    scores[1, 5] = 0.6
    p.add_field('pred_rel_scores', scores)
    preds.append(p)
    return gts, preds


@pytest.fixture
def dumps(tmp_path):
    with fake_maskrcnn_benchmark() as BoxList:
        gts, preds = legacy_records(BoxList)
        obj = {'groundtruths': gts, 'predictions': preds}
        paths = {'zip': str(tmp_path / 'eval_results.pytorch'), 'old': str(tmp_path / 'old.pth'),
                 'pickle': str(tmp_path / 'eval_results.pkl')}
        torch.save(obj, paths['zip'])
        torch.save(obj, paths['old'], _use_new_zipfile_serialization=False)
        with open(paths['pickle'], 'wb') as f:
            pickle.dump(obj, f, protocol=4)
    assert MODULES[0] not in sys.modules
    return paths


class Payload:
    """A pickle that calls a function when loaded (harmless here: os.getcwd)."""

    def __reduce__(self):
        return (os.getcwd, ())


@pytest.mark.parametrize('kind', ['zip', 'old', 'pickle'])
def test_safe_loading(dumps, kind):
    obj = load_legacy_results(dumps[kind])
    assert set(obj) == {'groundtruths', 'predictions'}
    pred = obj['predictions'][0]
    assert isinstance(pred, LegacyBoxList) and pred.size == (120, 100) and pred.mode == 'xyxy'
    assert pred.get_field('pred_rel_scores').shape == (3, NUM_PRED + 1)
    assert pred.fields() == ['pred_labels', 'pred_scores', 'rel_pair_idxs', 'pred_rel_scores', 'pred_rel_labels']
    unsafe = load_legacy_results(dumps[kind], unsafe=True)  # maskrcnn_benchmark is not needed either way
    assert isinstance(unsafe['predictions'][1], LegacyBoxList)
    assert torch.equal(unsafe['groundtruths'][0].bbox, obj['groundtruths'][0].bbox)


def test_safe_loading_refuses_code(tmp_path):
    pth, pkl = str(tmp_path / 'evil.pth'), str(tmp_path / 'evil.pkl')
    torch.save([Payload()], pth)
    with open(pkl, 'wb') as f:
        pickle.dump([Payload()], f)
    for path in (pth, pkl):
        with pytest.raises(pickle.UnpicklingError, match='unsafe=True'):
            load_legacy_results(path)
        assert load_legacy_results(path, unsafe=True) == [os.getcwd()]


def test_plain_pickle_with_numpy_and_tensors(tmp_path):
    import numpy as np
    path = str(tmp_path / 'preds.pkl')
    obj = [{'bbox': np.zeros((2, 4), np.float32), 'pred_labels': torch.tensor([1, 2]), 'size': (10, 10)}]
    with open(path, 'wb') as f:
        pickle.dump(obj, f)
    loaded = load_legacy_results(path)
    assert loaded[0]['bbox'].dtype == np.float32 and torch.equal(loaded[0]['pred_labels'], torch.tensor([1, 2]))


def test_conversion_fields(dumps):
    samples = convert_legacy_results(dumps['zip'], mode='sgdet')
    assert [s['sample_idx'] for s in samples] == [0, 1]
    s = samples[0]
    assert s['ori_shape'] == (100, 120)
    assert s['gt_instances']['labels'].tolist() == [0, 1, 2]
    assert s['gt_relations']['pair_idxs'].tolist() == [[0, 1], [2, 1]]
    assert s['gt_relations']['labels'].tolist() == [0, 3]
    assert s['pred_instances']['labels'].tolist() == [0, 1, 2]
    assert s['pred_relations']['scores'].shape == (3, NUM_PRED + 1)  # background column kept
    assert s['pred_relations']['pair_idxs'].tolist() == [[0, 1], [2, 1], [1, 0]]


def score(samples, mode, ks=(1, 2, 3)):
    metric = SGRecall(mode=mode, topk=ks)
    metric.dataset_meta = META
    metric.process(None, samples)
    with contextlib.redirect_stdout(io.StringIO()):
        metric.evaluate(len(samples))
    return metric.last_report['metrics']


@pytest.mark.parametrize('mode', ['predcls', 'sgcls', 'sgdet'])
def test_rescoring_hand_computed(dumps, mode):
    m = score(convert_legacy_results(dumps['zip'], mode=mode), mode, ks=(1, 2, 3, 4))
    # image 0, GC order by prob x obj scores: pair (1,0) 0.9*.8*.9, (0,1) .4*.9*.8, (2,1) .3*.7*.8
    #   -> (0,1,p0) hits GT 0 at rank 2, (2,1,p1) misses GT 1 (p3); image 1: (0,1,p4) rank 1 misses
    #   (GT is (1,0,p4)), (1,0,p4) hits at rank 2.   (PredCls: object scores 1 -> (1,0) .9, (0,1) .4, (2,1) .3)
    assert m['R@1'] == 0.0
    assert m['R@2'] == pytest.approx(100 * (0.5 + 1.0) / 2)
    assert m['R@3'] == pytest.approx(100 * (0.5 + 1.0) / 2)
    assert m['R@4'] == pytest.approx(75.0)
    # NGC: (2,1,p3) with prob 0.25 is 4th in image 0's list; image 1 hits at rank 2
    assert m['ngR@3'] == pytest.approx(75.0)
    assert m['ngR@4'] == pytest.approx(100.0)


def test_rescoring_equals_direct_samples(dumps):
    converted = convert_legacy_results(dumps['old'], mode='sgdet')
    obj = load_legacy_results(dumps['zip'])
    direct = []
    for i, (g, p) in enumerate(zip(obj['groundtruths'], obj['predictions'])):
        direct.append(dict(
            sample_idx=i,
            gt_instances=dict(bboxes=g.bbox, labels=g.get_field('labels') - 1),
            gt_relations=dict(pair_idxs=g.get_field('relation_tuple')[:, :2],
                              labels=g.get_field('relation_tuple')[:, 2] - 1),
            pred_instances=dict(bboxes=p.bbox, labels=p.get_field('pred_labels') - 1,
                                scores=p.get_field('pred_scores')),
            pred_relations=dict(pair_idxs=p.get_field('rel_pair_idxs'), scores=p.get_field('pred_rel_scores'))))
    assert score(converted, 'sgdet', (1, 2, 20)) == score(direct, 'sgdet', (1, 2, 20))


def test_xywh_boxes_and_background_labels():
    with fake_maskrcnn_benchmark() as BoxList:
        gts, preds = legacy_records(BoxList, mode='xywh')
        ref_gts, ref_preds = legacy_records(BoxList, mode='xyxy')
    s = legacy_to_data_sample(preds[0], gts[0], sample_idx=0)
    ref = legacy_to_data_sample(ref_preds[0], ref_gts[0], sample_idx=0)
    assert torch.allclose(s['pred_instances']['bboxes'], ref['pred_instances']['bboxes'])
    # a background (0) object keeps its slot but can never match
    preds[0].extra_fields['pred_labels'] = torch.tensor([1, 0, 3])
    s = legacy_to_data_sample(preds[0], gts[0], sample_idx=0, mode='sgdet')
    assert s['pred_instances']['bboxes'][1].tolist() == list(PLACEHOLDER_BOX)
    assert s['pred_instances']['labels'].tolist() == [0, 0, 2]
    with pytest.raises(ValueError, match='background'):
        legacy_to_data_sample(preds[0], gts[0], sample_idx=0, mode='sgcls')


def test_gt_from_relation_matrix_and_external_gt():
    gt = {'bbox': torch.tensor([[0., 0, 5, 5], [1, 1, 6, 6]]), 'labels': torch.tensor([1, 2]),
          'relation': torch.tensor([[0, 3], [0, 0]]), 'size': (10, 8)}
    fields = legacy_gt_to_fields(gt)
    assert fields['gt_relations']['pair_idxs'].tolist() == [[0, 1]]
    assert fields['gt_relations']['labels'].tolist() == [2] and fields['ori_shape'] == (8, 10)
    pred = {'bbox': gt['bbox'], 'pred_labels': torch.tensor([1, 2]), 'pred_scores': torch.ones(2),
            'rel_pair_idxs': torch.tensor([[0, 1]]), 'pred_rel_scores': torch.rand(1, NUM_PRED + 1)}
    samples = list(iter_legacy_samples([pred], gts=[fields]))
    assert samples[0]['gt_relations']['labels'].tolist() == [2] and samples[0]['sample_idx'] == 0
    assert BOXLIST_PATH == 'maskrcnn_benchmark.structures.bounding_box.BoxList'
    with pytest.raises(ValueError, match='ground-truth records'):
        list(iter_legacy_samples([pred, pred], gts=[fields]))
