"""Bad input gives a ValueError naming the sample and the field; zero-shot file; import hygiene."""
import os
import subprocess
import sys

import pytest
import torch

from mmsgg_eval.metrics import SGRecall
from mmsgg_eval.structures.reader import read_scene_graph as READ_SCENE_GRAPH
from mmsgg_eval.zeroshot import as_zeroshot_triplets, derive_zeroshot
from tests.test_scene_graph_metrics import META


def good_sample():
    return dict(sample_idx=7, img_id='2343',
                gt_instances=dict(bboxes=torch.tensor([[0., 0, 9, 9], [20, 20, 29, 29]]), labels=torch.tensor([0, 1])),
                gt_relations=dict(pair_idxs=torch.tensor([[0, 1]]), labels=torch.tensor([2])),
                pred_instances=dict(bboxes=torch.tensor([[0., 0, 9, 9], [20, 20, 29, 29]]),
                                    labels=torch.tensor([0, 1]), scores=torch.tensor([0.9, 0.8])),
                pred_relations=dict(pair_idxs=torch.tensor([[0, 1]]), scores=torch.rand(1, 6)))


def check_error(mutate, field, mode='sgdet', **options):
    sample = good_sample()
    mutate(sample)
    metric = SGRecall(mode=mode, **options)
    metric.dataset_meta = META
    with pytest.raises(ValueError) as info:
        metric.process({}, [sample])
        metric.flush()  # samples are pooled; the pool is ranked (and checked) at the latest in evaluate()
    message = str(info.value)
    assert 'sample_idx=7' in message and 'img_id=2343' in message, message
    assert field in message, message


def test_good_sample_passes():
    metric = SGRecall(mode='sgdet')
    metric.dataset_meta = META
    metric.process({}, [good_sample()])
    assert metric.evaluate(1)['sgdet/R@20'] in (0.0, 100.0)


@pytest.mark.parametrize('mutate,field', [
    (lambda s: s.pop('pred_relations'), 'pred_relations'),
    (lambda s: s['pred_relations'].pop('pair_idxs'), 'pred_relations.pair_idxs'),
    (lambda s: s['pred_relations'].update(pair_idxs=torch.tensor([[0, 5]])), 'pred_relations.pair_idxs'),
    (lambda s: s['pred_relations'].update(pair_idxs=torch.tensor([[-1, 0]])), 'pred_relations.pair_idxs'),
    (lambda s: s['pred_relations'].update(scores=torch.rand(1, 4)), 'pred_relations.scores'),
    (lambda s: s['pred_relations'].update(scores=torch.tensor([[0.1, float('nan'), 0, 0, 0, 0]])),
     'pred_relations.scores'),
    (lambda s: s['pred_relations'].update(scores=torch.tensor([[0.1, float('inf'), 0, 0, 0, 0]])),
     'pred_relations.scores'),
    (lambda s: s['pred_relations'].update(scores=torch.tensor([0.5])), 'pred_relations.labels'),
    (lambda s: s['pred_relations'].update(scores=torch.tensor([0.5]), labels=torch.tensor([9])),
     'pred_relations.labels'),
    (lambda s: s['pred_instances'].update(labels=torch.tensor([0, 4])), 'pred_instances.labels'),
    (lambda s: s['pred_instances'].update(scores=torch.tensor([0.9, float('nan')])), 'pred_instances.scores'),
    (lambda s: s['pred_instances'].update(bboxes=torch.tensor([[5., 0, 4, 9], [0, 0, 1, 1]])),
     'pred_instances.bboxes'),
    (lambda s: s['gt_instances'].update(bboxes=torch.tensor([[0., 9, 9, 0], [0, 0, 1, 1]])), 'gt_instances.bboxes'),
    (lambda s: s['gt_instances'].update(labels=torch.tensor([0, 10])), 'gt_instances.labels'),
    (lambda s: s['gt_relations'].update(pair_idxs=torch.tensor([[0, 2]])), 'gt_relations.pair_idxs'),
    (lambda s: s['gt_relations'].update(labels=torch.tensor([5])), 'gt_relations.labels'),
    (lambda s: s.pop('gt_relations'), 'gt_relations'),
    (lambda s: s.pop('pred_instances'), 'pred_instances'),
])
def test_bad_input_names_sample_and_field(mutate, field):
    check_error(mutate, field)


def test_predcls_with_wrong_object_count():
    def mutate(s):
        s['pred_instances']['bboxes'] = torch.zeros(3, 4)
    check_error(mutate, 'pred_instances.bboxes', mode='predcls', strict_counts=True)


def test_bad_arguments():
    with pytest.raises(ValueError, match='mode'):
        SGRecall(mode='detection')
    with pytest.raises(ValueError, match='mr_average'):
        SGRecall(mr_average='none')
    metric = SGRecall()
    with pytest.raises(ValueError, match='classes'):
        metric.process({}, [good_sample()])


def test_real_vg150_zeroshot_file(fixtures_dir):
    path = os.path.join(fixtures_dir, 'vg150', 'zeroshot_triplet.pytorch')
    if not os.path.exists(path):
        pytest.skip('zero-shot fixture absent')
    triplets = as_zeroshot_triplets(path)
    assert triplets.shape == (5971, 3) and triplets.dtype == torch.int64
    assert triplets.min() == 0
    assert int(triplets[:, 0].max()) <= 149 and int(triplets[:, 1].max()) <= 149 and int(triplets[:, 2].max()) <= 49
    raw = torch.load(path, weights_only=True)
    assert torch.equal(torch.as_tensor(raw).long() - 1, triplets)  # 1-based file, 0-based here
    assert len({tuple(t) for t in triplets.tolist()}) == 5971


def test_derive_zeroshot():
    ev = torch.tensor([[0, 1, 2], [0, 1, 2], [1, 1, 1], [2, 2, 2]])
    tr = torch.tensor([[1, 1, 1], [3, 3, 3]])
    assert derive_zeroshot(ev, tr).tolist() == [[0, 1, 2], [2, 2, 2]]


def test_import_without_compiled_mmcv_ops():
    code = ('import sys; sys.modules["mmcv._ext"] = None\n'
            'import mmsgg_eval, mmsgg_eval.metrics\n'
            'from mmsgg_eval.metrics import SGRecall, SGMeanRecall\n'
            'import importlib.util\n'
            'for name in ("mmsgg_eval.datasets",):\n'
            '    if importlib.util.find_spec(name): importlib.import_module(name)\n'
            'assert "mmdet.models" not in sys.modules and "mmcv.ops" not in sys.modules, sorted(sys.modules)\n'
            'print("ok")')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.returncode == 0 and 'ok' in out.stdout, out.stderr


def test_metric_mode_the_model_does_not_produce():
    sample = good_sample()
    sample['pred_mode'] = 'predcls'
    metric = SGRecall(mode='sgdet')
    metric.dataset_meta = META
    with pytest.raises(ValueError, match="produced predcls predictions.*'sgdet'"):
        metric.process({}, [sample])
        metric.flush()
    metric = SGRecall(mode='predcls')
    metric.dataset_meta = META
    metric.process({}, [sample])
    metric.flush()  # a stronger metric mode than produced is fine the other way round


BATCH_FIELDS = ('sample_idx', 'pred_boxes', 'pred_labels', 'pred_scores', 'gt_boxes', 'gt_labels', 'gt_pairs',
                'gt_predicates', 'gt_valid', 'rel_pairs', 'rel_valid', 'num_rel_preds', 'gc_prob')


@pytest.mark.parametrize('mode', ['predcls', 'sgcls', 'sgdet'])
@pytest.mark.parametrize('fixed_pairs', [None, 9])
def test_fieldwise_reader_equals_per_sample_reader(monkeypatch, mode, fixed_pairs):
    """Dict samples are read field by field (no per-sample reader); the batch equals the per-sample one."""
    from mmsgg_eval.structures import reader as structures
    from tests.sgg_samples import random_dataset
    samples, _ = random_dataset(3, 12, mode, fixed_pairs=fixed_pairs, num_classes=4, num_predicates=5)
    if mode == 'predcls':  # a PredCls model echoing the GT boxes (or none) stays on the field-wise reader
        for i, s in enumerate(samples):
            boxes = s['gt_instances']['bboxes'] if i % 2 else torch.zeros(0, 4)
            s['pred_instances'] = dict(bboxes=boxes, labels=s['gt_instances']['labels'],
                                       scores=torch.ones(len(boxes)))
    fast = structures.collate_scene_graphs(samples, mode, 4, 5)

    def refuse(*args, **kwargs):
        raise structures._NotFast

    calls = []
    monkeypatch.setattr(structures, 'read_scene_graph',
                        lambda *a, **k: calls.append(1) or READ_SCENE_GRAPH(*a, **k))
    structures.collate_scene_graphs(samples, mode, 4, 5)
    assert not calls  # the field-wise reader took the whole batch
    monkeypatch.setattr(structures, '_fast_padded', refuse)
    slow = structures.collate_scene_graphs(samples, mode, 4, 5)
    assert calls
    for name in BATCH_FIELDS:
        a, b = getattr(fast, name), getattr(slow, name)
        assert a.dtype == b.dtype and torch.equal(a, b), name
    assert (fast.scores.dense is not None) == (fixed_pairs is not None)


def test_fieldwise_reader_takes_mmdet_boxes_and_falls_back_on_other_containers():
    from mmengine.structures import InstanceData
    from mmsgg_eval.structures import collate_scene_graphs
    boxes_cls = pytest.importorskip('mmdet.structures.bbox').HorizontalBoxes
    plain = good_sample()
    boxed = good_sample()
    boxed['gt_instances']['bboxes'] = boxes_cls(boxed['gt_instances']['bboxes'])
    as_elements = good_sample()
    as_elements['pred_instances'] = InstanceData(**as_elements['pred_instances'])
    for other in (boxed, as_elements):
        other['pred_relations']['scores'] = plain['pred_relations']['scores']
    ref = collate_scene_graphs([plain], 'sgdet', 4, 5)
    for other in (boxed, as_elements):
        batch = collate_scene_graphs([other], 'sgdet', 4, 5)
        for name in BATCH_FIELDS:
            assert torch.equal(getattr(batch, name), getattr(ref, name)), name


def test_bad_value_in_a_large_fixed_size_batch_names_its_sample():
    from tests.sgg_samples import random_dataset
    samples, _ = random_dataset(0, 20, 'sgdet', fixed_pairs=6, num_classes=4, num_predicates=5)
    samples[13]['pred_relations']['scores'][2, 3] = float('nan')
    metric = SGRecall(mode='sgdet')
    metric.dataset_meta = META
    with pytest.raises(ValueError, match=r'sample_idx=13.*pred_relations\.scores'):
        metric.process({}, samples)
        metric.flush()
    samples, _ = random_dataset(0, 20, 'sgdet', fixed_pairs=6, num_classes=4, num_predicates=5)
    samples[7]['pred_relations']['pair_idxs'][0, 1] = 14  # 14 detections: indices 0..13
    with pytest.raises(ValueError, match=r'sample_idx=7.*pred_relations\.pair_idxs'):
        metric.process({}, samples)
        metric.flush()


def test_pooled_samples_raise_when_their_pool_is_processed():
    bad = good_sample()
    bad['gt_instances']['labels'] = torch.tensor([0, 10])
    metric = SGRecall(mode='sgdet', pool_samples=3)
    metric.dataset_meta = META
    metric.process({}, [good_sample()])
    metric.process({}, [dict(good_sample(), sample_idx=8)])
    with pytest.raises(ValueError, match=r'sample_idx=9.*gt_instances\.labels'):
        metric.process({}, [dict(bad, sample_idx=9)])  # the third sample completes the pool
    immediate = SGRecall(mode='sgdet', pool_samples=1)
    immediate.dataset_meta = META
    with pytest.raises(ValueError, match=r'gt_instances\.labels'):
        immediate.process({}, [bad])
    with pytest.raises(ValueError, match='pool_samples'):
        SGRecall(pool_samples=0)
