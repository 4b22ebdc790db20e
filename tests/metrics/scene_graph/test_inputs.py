"""Bad input gives a ValueError naming the sample and the field; zero-shot file; import hygiene."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from mmsgg_eval.metrics import SGRecall
from mmsgg_eval.structures.reader import collate_scene_graphs, read_scene_graph as READ_SCENE_GRAPH
from mmsgg_eval.zeroshot import as_zeroshot_triplets, derive_zeroshot
from tests.metrics.scene_graph.test_recall import META


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
                         cwd=os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..')))
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
    from mmsgg_eval.functional import compiled
    with compiled.disabled():  # the torch layouts: stacked for fixed sizes
        assert (structures.collate_scene_graphs(samples, mode, 4, 5).scores.dense is not None) == \
            (fixed_pairs is not None)
    assert fast.scores.layout == ('compiled' if compiled.kernels() is not None else
                                  'stacked' if fixed_pairs is not None else 'concatenated')

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


# ---------------------------------------------------------------------------------------------------------------
# Value rules: the same on every reader path (field-wise dict reader, per-sample reader) and every batch size.
def _as_elements(sample):
    """The same sample with data elements instead of dicts (the per-sample reader's path)."""
    from mmengine.structures import InstanceData
    out = dict(sample)
    for key in ('gt_instances', 'pred_instances'):
        if key in out:
            out[key] = InstanceData(**out[key])
    return out


def _batch_of(sample, count=6):
    """``sample`` among other good samples of other lengths (a pooled batch)."""
    others = []
    for i in range(count):
        other = good_sample()
        other['sample_idx'] = 100 + i
        if i % 2:  # three GT objects and two relations: other lengths than ``sample``
            other['gt_instances'] = dict(bboxes=torch.tensor([[0., 0, 9, 9], [20, 20, 29, 29], [5, 5, 30, 30]]),
                                         labels=torch.tensor([0, 1, 2]))
            other['gt_relations'] = dict(pair_idxs=torch.tensor([[0, 1], [2, 0]]), labels=torch.tensor([2, 1]))
        others.append(other)
    return others[:3] + [sample] + others[3:]


BAD_VALUES = [
    (lambda s: s['gt_instances'].update(labels=torch.tensor([0., 1.5])), 'gt_instances.labels', 'integers'),
    (lambda s: s['pred_instances'].update(labels=torch.tensor([0.5, 1.])), 'pred_instances.labels', 'integers'),
    (lambda s: s['pred_relations'].update(pair_idxs=torch.tensor([[0.9, 1.9]])), 'pred_relations.pair_idxs',
     'integers'),
    (lambda s: s['gt_relations'].update(pair_idxs=torch.tensor([[0., 1.2]])), 'gt_relations.pair_idxs', 'integers'),
    (lambda s: s['gt_relations'].update(labels=torch.tensor([float('nan')])), 'gt_relations.labels', 'integers'),
    (lambda s: s['pred_relations'].update(scores=torch.tensor([[0.1, float('-inf'), 0, 0, 0, 0]])),
     'pred_relations.scores', 'NaN or inf'),
    (lambda s: s['pred_relations'].update(scores=torch.tensor([[0.1, float('nan'), 0, 0, 0, 0]])),
     'pred_relations.scores', 'NaN or inf'),
    (lambda s: s['pred_relations'].update(scores=torch.tensor([[0.1, 0.2, -0.3, 0, 0, 0]])),
     'pred_relations.scores', 'negative'),
    (lambda s: s['pred_instances'].update(scores=torch.tensor([0.9, -0.1])), 'pred_instances.scores', 'negative'),
    (lambda s: s['pred_instances'].update(scores=torch.tensor([0.9, float('-inf')])), 'pred_instances.scores',
     'NaN or inf'),
]


@pytest.mark.parametrize('mutate,field,reason', BAD_VALUES)
@pytest.mark.parametrize('large', [False, True])
@pytest.mark.parametrize('elements', [False, True])
def test_value_rules_do_not_depend_on_reader_or_batch_size(monkeypatch, mutate, field, reason, large, elements):
    from mmsgg_eval.functional import scores as layouts
    from mmsgg_eval.structures import reader
    if large:
        monkeypatch.setattr(layouts, 'STACK_SCORE_ROWS', 0)  # per-image score views
    bad = good_sample()
    mutate(bad)
    for mode in ('predcls', 'sgcls', 'sgdet') if 'pred_instances' not in field else ('sgcls', 'sgdet'):
        for samples in ([bad], _batch_of(bad)):
            if elements:
                samples = [_as_elements(s) for s in samples]
            with pytest.raises(ValueError, match=rf'sample_idx=7, img_id=2343.*`{field}`.*{reason}'):
                reader.collate_scene_graphs(samples, mode, 4, 5)


def test_fractional_gt_labels_in_a_pooled_batch_of_other_lengths():
    """The pooled batch used to pad a float field into an integer tensor (fractions truncated)."""
    bad = good_sample()
    bad['gt_instances']['labels'] = torch.tensor([0., 1.5])
    metric = SGRecall(mode='sgdet', pool_samples=7)
    metric.dataset_meta = META
    with pytest.raises(ValueError, match=r'sample_idx=7.*gt_instances\.labels.*integers'):
        for sample in _batch_of(bad):
            metric.process({}, [sample])
        metric.flush()


def test_integer_valued_floats_and_large_scores_are_accepted():
    """3.0 is an index; scores above 1 rank as their products say (any non-negative scale)."""
    from mmsgg_eval.structures import collate_scene_graphs
    sample = good_sample()
    floats = good_sample()
    floats['gt_instances']['labels'] = torch.tensor([0., 1.])
    floats['pred_relations']['pair_idxs'] = torch.tensor([[0., 1.]])
    floats['pred_relations']['scores'] = sample['pred_relations']['scores']
    a, b = collate_scene_graphs([sample], 'sgdet', 4, 5), collate_scene_graphs([floats], 'sgdet', 4, 5)
    assert torch.equal(a.gt_labels, b.gt_labels) and torch.equal(a.rel_pairs, b.rel_pairs)
    assert b.gt_labels.dtype == torch.long
    scaled = good_sample()
    scaled['pred_relations']['scores'] = sample['pred_relations']['scores'] * 100
    scaled['pred_instances']['scores'] = sample['pred_instances']['scores'] * 100
    collate_scene_graphs([scaled], 'sgdet', 4, 5)


def test_self_pairs_are_evaluated_as_the_legacy_evaluator_does():
    """Self-pairs (s == o) in GT and predictions are neither refused nor filtered: the legacy evaluator
    matches them like any other pair."""
    from tests.reference_sgg import reference_metrics
    sample = good_sample()
    sample['gt_relations'] = dict(pair_idxs=torch.tensor([[0, 0], [0, 1]]), labels=torch.tensor([2, 2]))
    sample['pred_relations'] = dict(pair_idxs=torch.tensor([[0, 0], [1, 1]]),
                                    scores=torch.tensor([[0.1, 0, 0, 0.8, 0, 0], [0.1, 0, 0, 0.9, 0, 0]]))
    ref = dict(gt_boxes=sample['gt_instances']['bboxes'].tolist(), gt_labels=[0, 1], gt_rels=[(0, 0, 2), (0, 1, 2)],
               pred_boxes=sample['pred_instances']['bboxes'].tolist(), pred_labels=[0, 1], pred_scores=[0.9, 0.8],
               rel_pairs=[(0, 0), (1, 1)], rel_scores=sample['pred_relations']['scores'].tolist(), rel_labels=None)
    expected = reference_metrics([ref], 5, 'sgdet', ks=(1, 2))
    assert expected['R@2'] == 50.0
    metric = SGRecall(mode='sgdet', topk=(1, 2))
    metric.dataset_meta = META
    metric.process({}, [sample])
    got = metric.evaluate(1)
    assert got['sgdet/R@1'] == expected['R@1'] and got['sgdet/R@2'] == expected['R@2']


@pytest.mark.parametrize('idx,accepted', [(3, True), (np.int64(3), True), (torch.tensor(3), True),
                                          (3.0, False), ('3', False), (-1, False), (True, False),
                                          (np.float32(2), False)])
def test_sample_idx_must_be_a_non_negative_integer(idx, accepted):
    from mmsgg_eval.structures import collate_scene_graphs, sample_index
    sample = good_sample()
    sample['sample_idx'] = idx
    for candidate in (sample, _as_elements(sample)):
        if accepted:
            assert sample_index(candidate) == 3
            assert collate_scene_graphs([candidate], 'sgdet', 4, 5).sample_idx.tolist() == [3]
        else:
            with pytest.raises(ValueError, match=r'`sample_idx` must be a non-negative integer'):
                collate_scene_graphs([candidate], 'sgdet', 4, 5)


def test_sample_idx_repeated_within_one_batch():
    """The reader refuses a repeat within one batch; the metrics first keep the first occurrence of a
    ``sample_idx`` (sampler padding), so they never hand it one."""
    from mmsgg_eval.structures import collate_scene_graphs
    with pytest.raises(ValueError, match=r'sample_idx=7.*appears twice'):
        collate_scene_graphs([good_sample(), good_sample()], 'sgdet', 4, 5)
    metric = SGRecall(mode='sgdet')
    metric.dataset_meta = META
    metric.process({}, [good_sample(), good_sample()])
    assert metric.evaluate(1)['sgdet/R@20'] in (0.0, 100.0)


@pytest.mark.parametrize('field,mutate', [
    ('gt_instances.labels', lambda s: s['gt_instances'].update(labels=torch.tensor([0]))),
    ('gt_relations.labels', lambda s: s['gt_relations'].update(labels=torch.tensor([2, 1]))),
    ('pred_instances.labels', lambda s: s['pred_instances'].update(labels=torch.tensor([0]))),
])
def test_count_mismatch_shared_by_every_sample_of_a_batch_is_named(field, mutate):
    """A batch whose samples all have the same wrong count (no padding to tell them apart) is refused with the
    first sample and the field named, like a single sample."""
    samples = []
    for i in range(4):
        s = good_sample()
        s['sample_idx'] = 7 + i
        mutate(s)
        samples.append(s)
    with pytest.raises(ValueError, match=rf'sample_idx=7\b.*`{field}`'):
        collate_scene_graphs(samples, 'sgdet', 4, 5)


@pytest.mark.parametrize('mode,fixed_pairs', [('sgdet', None), ('sgdet', 10), ('predcls', 10)])
def test_gradient_tracking_outputs_read_detached(mode, fixed_pairs, score_kernels):
    """Model outputs that still require grad (evaluated outside no_grad) give the numbers of the same values
    without a gradient, through either reader and with the compiled kernels on or off (the stacked copy of
    the torch path used to raise 'cat(): functions with out=... don't support automatic differentiation')."""
    from tests.sgg_samples import random_dataset
    samples, _ = random_dataset(5, 12, mode, fixed_pairs=fixed_pairs)

    def tracking(sample):
        out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in sample.items()}
        for container in ('pred_relations', 'pred_instances', 'gt_instances'):
            for key, value in list(out.get(container, {}).items()):
                if isinstance(value, torch.Tensor) and value.is_floating_point():
                    out[container][key] = value.clone().requires_grad_(True) * 1  # a non-leaf, as model outputs
        return out

    results = []
    for batch in (samples, [tracking(s) for s in samples]):
        metric = SGRecall(mode=mode, pool_samples=6)
        metric.dataset_meta = META
        for start in range(0, len(batch), 6):
            metric.process({}, batch[start:start + 6])
        results.append(metric.evaluate(len(batch)))
    assert results[1] == results[0]
    assert any(v > 0 for k, v in results[0].items() if '@' in k)


def _as_numpy(sample, change=lambda path, array: array):
    """The sample with every tensor field as a numpy array (``change(path, array)`` may replace it)."""
    return {key: ({k: change(f'{key}.{k}', v.numpy()) if isinstance(v, torch.Tensor) else v for k, v in value.items()}
                  if isinstance(value, dict) else value) for key, value in sample.items()}


def _read_only(array):
    array = array.copy()
    array.flags.writeable = False
    return array


@pytest.mark.parametrize('mode', ['predcls', 'sgcls', 'sgdet'])
def test_numpy_samples_are_read_field_by_field_in_place(monkeypatch, recwarn, mode):
    """Samples whose fields are numpy arrays (what a legacy pipeline or a pickle of numpy outputs gives: read-only
    arrays, big-endian ones, reversed views among them) are read by the field-wise reader, their C-ordered score
    matrices in place (no copy), into the batch the same samples give as tensors; no warning about read-only
    arrays (nothing writes into them)."""
    from mmsgg_eval.functional import compiled
    from mmsgg_eval.structures import reader as structures
    from tests.sgg_samples import random_dataset
    samples, _ = random_dataset(5, 10, mode, num_classes=4, num_predicates=5)

    def odd(path, array):  # a few fields in the other forms a numpy reader meets
        if path == 'gt_instances.bboxes':
            return array.astype(array.dtype.newbyteorder('>'))
        if path == 'gt_relations.labels':
            return array[::-1].copy()[::-1]  # a reversed view of a reversed copy: negative strides
        return _read_only(array) if path.startswith('pred_') and 'scores' not in path else array

    as_arrays = [_as_numpy(s, odd) for s in samples]
    calls = []
    monkeypatch.setattr(structures, 'read_scene_graph', lambda *a, **k: calls.append(1) or READ_SCENE_GRAPH(*a, **k))
    got = structures.collate_scene_graphs(as_arrays, mode, 4, 5)
    assert not calls  # the field-wise reader took the whole batch
    want = structures.collate_scene_graphs(samples, mode, 4, 5)
    for name in BATCH_FIELDS:
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and torch.equal(a, b), name
    if compiled.kernels() is not None:
        assert got.scores.layout == 'compiled'
        for source, sample in zip(got.scores.sources, as_arrays):
            given = sample['pred_relations']['scores']
            assert np.shares_memory(source.numpy(), given) or given.size == 0
    assert not [w for w in recwarn if 'not writable' in str(w.message)]


def test_numpy_and_tensor_samples_give_the_same_keys():
    """SGRecall / SGMeanRecall over numpy samples, tensor samples and a mix of both in one batch: the same keys."""
    from mmsgg_eval.metrics import SGMeanRecall
    from tests.sgg_samples import random_dataset
    samples, _ = random_dataset(11, 24, 'sgdet', num_classes=4, num_predicates=5)
    mixed = [_as_numpy(s) if i % 3 else s for i, s in enumerate(samples)]
    results = []
    for batch in (samples, [_as_numpy(s) for s in samples], mixed):
        keys = {}
        for cls in (SGRecall, SGMeanRecall):
            metric = cls(mode='sgdet')
            metric.dataset_meta = META
            for start in range(0, len(batch), 8):
                metric.process({}, batch[start:start + 8])
            keys.update(metric.evaluate(len(batch)))
        results.append(keys)
    assert results[0] == results[1] == results[2]


@pytest.mark.parametrize('form', ['big-endian', 'reversed', 'reversed-one', 'read-only', 'int32', 'bool', 'memmap'])
def test_every_numeric_numpy_array_is_a_tensor_of_its_values(form, tmp_path):
    """to_tensor and shared_tensors take the numpy arrays torch cannot share as they are (another byte order,
    negative strides: copied) and share the others' memory (memory-mapped ones too); strings and objects stay
    refused / left as they are."""
    from mmsgg_eval.structures.fields import shared_tensors, to_tensor
    values = np.arange(12, dtype=np.float32).reshape(4, 3)
    if form == 'memmap':
        np.save(tmp_path / 'values.npy', values)
    array = {'big-endian': values.astype('>f4'), 'reversed': values[::-1], 'reversed-one': values[:1, 0][::-1],
             'read-only': _read_only(values), 'int32': values.astype(np.int32), 'bool': values > 5,
             'memmap': np.load(tmp_path / 'values.npy', mmap_mode='r') if form == 'memmap' else None}[form]
    for tensor in (to_tensor(array), shared_tensors([array])[0]):
        assert isinstance(tensor, torch.Tensor) and np.array_equal(tensor.numpy(), array)
        if form in ('read-only', 'int32', 'bool', 'memmap'):
            assert np.shares_memory(tensor.numpy(), array)
    strings, wide = np.array(['a', 'b']), np.zeros(2, np.longdouble)  # (torch has no long double)
    assert shared_tensors([strings])[0] is strings and shared_tensors([wide])[0] is wide
    with pytest.raises(ValueError, match='field `labels` is not array-like'):
        to_tensor(strings, field='labels')
    plain = [torch.zeros(2), [1.0, 2.0]]
    assert shared_tensors(plain) is plain


def test_a_list_field_is_not_handed_to_the_compiled_padding(monkeypatch):
    """One sample's labels given as a list: the kernels never see that field (an argument they refuse costs the
    text of every argument in their error), the general padding reads it, and the batch is the tensors' one."""
    from mmsgg_eval.functional import compiled
    from mmsgg_eval.structures import reader as structures
    from tests.sgg_samples import random_dataset
    kernels = compiled.kernels()
    if kernels is None:
        pytest.skip('the compiled kernels (mmsgg_eval._ext) are not built')
    samples, _ = random_dataset(2, 9, 'sgdet', num_classes=4, num_predicates=5)
    listed = [dict(s, gt_relations=dict(s['gt_relations'], labels=s['gt_relations']['labels'].tolist()))
              if i == 4 else s for i, s in enumerate(samples)]
    seen = []

    class Spy:
        def __getattr__(self, name):
            kernel = getattr(kernels, name)
            if not name.startswith('pad_'):
                return kernel

            def call(values, *args, **kwargs):
                seen.append(all(isinstance(v, torch.Tensor) for v in values))
                return kernel(values, *args, **kwargs)
            return call

    monkeypatch.setattr(compiled, 'kernels', lambda: Spy())
    got = structures.collate_scene_graphs(listed, 'sgdet', 4, 5)
    assert seen and all(seen)
    want = structures.collate_scene_graphs(samples, 'sgdet', 4, 5)
    for name in BATCH_FIELDS:
        assert torch.equal(getattr(got, name), getattr(want, name)), name


@pytest.mark.parametrize('form', ['half', 'bfloat16', 'float64', 'column-view', 'transposed'])
def test_score_matrices_in_other_dtypes_and_layouts_give_the_float32_keys(form):
    """Score matrices in half, bfloat16 or float64 precision, or strided views of float32 ones, are read as their
    float32 values (copied, C-contiguous, into the reader's reused memory: the compiled layout where the kernels
    are built): SGRecall / SGMeanRecall give the keys of the same values given as contiguous float32 matrices,
    over many pools (each pool's copies stay intact while the pools after it are read)."""
    from mmsgg_eval.functional import compiled
    from mmsgg_eval.metrics import SGMeanRecall
    from mmsgg_eval.structures import reader as structures
    from tests.sgg_samples import random_dataset
    samples, _ = random_dataset(17, 40, 'sgdet', num_classes=4, num_predicates=5)
    dtype = {'half': torch.float16, 'bfloat16': torch.bfloat16}.get(form, torch.float32)

    def given(scores):  # the matrix in the form under test, and the float32 values it holds
        exact = scores.to(dtype).float()
        if form in ('half', 'bfloat16'):
            return exact.to(dtype), exact
        if form == 'float64':
            return exact.double(), exact
        if form == 'column-view':
            return torch.cat([exact, exact[:, :1]], 1)[:, :exact.shape[1]], exact
        return exact.t().contiguous().t(), exact

    def with_scores(sample, scores):
        return {**sample, 'pred_relations': {**sample['pred_relations'], 'scores': scores}}
    pairs = [given(s['pred_relations']['scores']) for s in samples]
    odd = [with_scores(s, p[0]) for s, p in zip(samples, pairs)]
    plain = [with_scores(s, p[1]) for s, p in zip(samples, pairs)]
    assert not odd[0]['pred_relations']['scores'].is_contiguous() or form in ('half', 'bfloat16', 'float64')
    results = []
    for batch in (plain, odd):
        keys = {}
        for cls in (SGRecall, SGMeanRecall):
            metric = cls(mode='sgdet', pool_samples=4)
            metric.dataset_meta = META
            for start in range(0, len(batch), 4):
                metric.process({}, batch[start:start + 4])
            keys.update(metric.evaluate(len(batch)))
        results.append(keys)
    assert results[1] == results[0]
    if compiled.kernels() is not None:  # the copies are C-contiguous float32: the kernels read them
        read = structures.collate_scene_graphs(odd[:6], 'sgdet', 4, 5)
        assert read.scores.layout == 'compiled'


def test_score_workspaces_take_the_memory_of_workspaces_gone_and_never_of_live_ones(monkeypatch):
    """ScoreWorkspace: its buffer is one of the process' own, held while the workspace lives (handed out to it
    again and again), free for a workspace built later once neither the workspace nor a tensor in it is left."""
    from mmsgg_eval.functional import scores
    if scores._STORAGE_USE_COUNT is None:
        pytest.skip('this torch does not tell a storage\'s use count: every workspace takes new memory')
    monkeypatch.setattr(scores, '_process_buffers', [])
    cpu = torch.device('cpu')
    first = scores.ScoreWorkspace()
    batch = first.take((3, 4, 10), cpu).fill_(7.0)
    address = batch.data_ptr()
    assert first.take((3, 4, 8), cpu).data_ptr() == address and first.handed == 2  # its own, again
    assert first.take((3, 4, 10), cpu).data_ptr() == address  # (within the 25% it was given beyond its first)
    second = scores.ScoreWorkspace()
    other = second.take((3, 4, 10), cpu)
    assert other.data_ptr() != address  # the first workspace lives
    del first
    third = scores.ScoreWorkspace()
    assert third.take((2, 4, 10), cpu).data_ptr() != address  # a batch built in it is still used
    assert torch.all(batch == 7.0)
    del batch
    fourth = scores.ScoreWorkspace()
    assert fourth.take((3, 4, 10), cpu).data_ptr() == address  # gone with all its tensors: taken again
    outgrown = other.data_ptr()
    grown = second.take((3, 40, 10), cpu)  # outgrown: new memory, the old buffer free for others
    assert grown.data_ptr() not in (address, outgrown)
    del other
    assert scores.ScoreWorkspace().take((3, 4, 10), cpu).data_ptr() == outgrown
    large = scores.ScoreWorkspace()
    large_address = large.take((3, 400, 100), cpu).data_ptr()
    del large
    small = scores.ScoreWorkspace().take((20, 100), cpu)  # a large free buffer is left for a large use
    assert small.data_ptr() != large_address
    assert scores.ScoreWorkspace().take((3, 300, 100), cpu).data_ptr() == large_address
    tiny = scores.ScoreWorkspace()
    tiny.take((10,), cpu)
    del tiny, small, fourth, third
    sizes = sorted(b.numel() for b in scores._process_buffers)
    assert 150_000 in sizes
    wider = scores.ScoreWorkspace().take((3, 700, 100), cpu)  # a miss: the free one it outgrew is let go
    assert wider.numel() == 210_000 and sorted(b.numel() for b in scores._process_buffers) == \
        [n for n in sizes if n != 150_000] + [262_500]  # (the smaller ones stay for smaller uses)
    assert scores.ScoreWorkspace().take((2, 2), torch.device('meta')) is None  # other devices: none


def test_float32_copies_reuse_a_buffer_only_once_nothing_views_it(monkeypatch):
    """float32_copies: C-contiguous float32 copies of the marked CPU tensors (the others as they are), side by side
    in one buffer; that buffer is handed out again only once no copy of it is left (a pass or a shared read may
    still hold a pool's copies), and never more than KEPT_PROCESS_BUFFERS are kept."""
    from mmsgg_eval.functional import scores
    if scores._STORAGE_USE_COUNT is None:
        pytest.skip('this torch does not tell a storage\'s use count: every copy takes new memory')
    monkeypatch.setattr(scores, '_process_buffers', [])
    halves = [torch.rand(6, 5).half(), torch.rand(3, 5).half()]
    kept = torch.rand(4, 5)
    first = scores.float32_copies(halves + [kept], [True, True, False])
    assert first[2] is kept
    for copy, source in zip(first, halves):
        assert copy.dtype == torch.float32 and copy.is_contiguous() and torch.equal(copy, source.float())
    assert first[1].data_ptr() == first[0].data_ptr() + first[0].numel() * 4  # one buffer, side by side
    second = scores.float32_copies(halves, [True, True])  # the first copies live: other memory
    assert second[0].data_ptr() != first[0].data_ptr() and torch.equal(first[0], halves[0].float())
    address = first[0].data_ptr()
    del first, copy  # (the loop's last copy too)
    third = scores.float32_copies([h * 2 for h in halves], [True, True])  # the first buffer is free again
    assert third[0].data_ptr() == address and torch.equal(third[1], (halves[1] * 2).float())
    assert torch.equal(second[0], halves[0].float())  # the live copies were not touched
    held = [scores.float32_copies(halves, [True, True]) for _ in range(scores.KEPT_PROCESS_BUFFERS + 2)]
    assert len(scores._process_buffers) <= scores.KEPT_PROCESS_BUFFERS and all(len(h) == 2 for h in held)
    del held, second, third
    again = scores.float32_copies(halves, [True, True])
    assert any(again[0].data_ptr() == b.data_ptr() for b in scores._process_buffers)
    empty = scores.float32_copies([torch.zeros(0, 5).half(), torch.zeros(0, 6).double()], [True, True])
    assert [(t.shape, t.dtype) for t in empty] == [((0, 5), torch.float32), ((0, 6), torch.float32)]
