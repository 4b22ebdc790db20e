"""OpenPSG's ``tools/test.py --out result.pkl`` (a pickled list of its ``Result`` objects), read with
``--format openpsg`` through the safe unpickler: nothing of OpenPSG is imported.

The files are written here with a stand-in ``Result`` class registered under OpenPSG's import path (the same
pickle bytes OpenPSG's ``mmcv.dump`` writes: protocol 2, the object's ``__dict__``). The numbers are checked
against a loop reference of OpenPSG's protocol written from its definition (box matching) and against the
metric fed the same predictions as data samples (mask matching). The check against OpenPSG's own
``sgg_evaluation`` is described in docs/protocols.md.
"""
import contextlib
import os.path as osp
import pickle
import sys

import numpy as np
import pytest
import torch

from mmsgg_eval.datasets import PSGDataset
from mmsgg_eval.eval import main
from mmsgg_eval.offline import evaluate_file
from mmsgg_eval.io.errors import InputFileError, UnsafePickleError
from mmsgg_eval.io.formats import open_predictions
from mmsgg_eval.io.openpsg import gt_masks, load_openpsg_results, openpsg_metric_defaults
from mmsgg_eval.io.samples import DatasetSamples
from mmsgg_eval.metrics import SGMeanRecall, SGRecall
from mmsgg_eval.testing.psg import write_psg_sample
from tests.reference_sgg import reference_metrics
from tests.sgg_samples import importable_as
from tests.tool_runs import ROOT

RESULT_MODULE = 'openpsg.models.relation_heads.approaches.relation_util'
CONFIG = osp.join(ROOT, 'configs', 'psg', 'sgg_predcls_psg.py')


@contextlib.contextmanager
def openpsg_result_class():
    """A ``Result`` with OpenPSG's import path and its constructor (every field a keyword, default None)."""
    class Result:
        def __init__(self, **fields):
            self.__dict__.update(fields)

    Result.__qualname__ = 'Result'
    with importable_as(Result, RESULT_MODULE):
        yield Result


def random_results(dataset, mode='sgdet', with_masks=False, seed=0, empty=(), background=False):
    """Per image a dict of Result fields as an OpenPSG model returns them (1-based labels, [N, 5] boxes with
    the score, [R, P+1] predicate probabilities in the model's order, bool masks [N, H, W])."""
    rng = np.random.default_rng(seed)
    index = DatasetSamples(dataset)
    num_pred = len(dataset.metainfo['predicates'])
    out = []
    for i in range(len(dataset)):
        info = dataset.get_data_info(i)
        gt_boxes = np.array([inst['bbox'] for inst in info['instances']], np.float32).reshape(-1, 4)
        gt_labels = np.array([inst['bbox_label'] for inst in info['instances']], np.int64)
        if i in empty:
            out.append({'refine_bboxes': None, 'labels': None, 'rel_pair_idxes': None, 'rel_dists': None})
            continue
        n = len(gt_labels)
        if mode == 'sgdet':  # GT objects shuffled, moved, some relabelled, plus one spurious object
            order = rng.permutation(n)
            boxes = gt_boxes[order] + rng.integers(-3, 4, size=(n, 4)).astype(np.float32)
            labels = gt_labels[order].copy()
            flip = rng.random(n) < 0.2
            labels[flip] = rng.integers(0, len(dataset.metainfo['classes']), flip.sum())
            boxes = np.concatenate([boxes, [[0, 0, 30, 30]]]).astype(np.float32)
            labels = np.concatenate([labels, [0]])
        else:
            order = np.arange(n)
            boxes, labels = gt_boxes.copy(), gt_labels.copy()
            if mode == 'sgcls':
                flip = rng.random(n) < 0.3
                labels[flip] = rng.integers(0, len(dataset.metainfo['classes']), flip.sum())
        m = len(labels)
        scores = rng.random(m).astype(np.float32)
        pairs = np.array([[a, b] for a in range(m) for b in range(m) if a != b], np.int64).reshape(-1, 2)
        pairs = pairs[rng.permutation(len(pairs))]
        logits = rng.normal(size=(len(pairs), num_pred + 1))
        inverse = np.argsort(order)
        for s, o, p in np.asarray(info['relations']).reshape(-1, 3).tolist():
            row = np.flatnonzero((pairs[:, 0] == inverse[s]) & (pairs[:, 1] == inverse[o]))
            if len(row) and rng.random() < 0.6:
                logits[row[0], p + 1] += 4.0
        dists = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
        labels_1 = labels + 1
        if background:
            labels_1[-1] = 0
        fields = {'refine_bboxes': np.concatenate([boxes, scores[:, None]], 1).astype(np.float32),
                  'labels': labels_1, 'rel_pair_idxes': pairs, 'rel_dists': dists.astype(np.float32),
                  'rel_labels': dists[:, 1:].argmax(1) + 1, 'pan_results': None}
        if with_masks:
            masks = gt_masks(index, i).numpy()[order]
            if mode == 'sgdet':
                masks = np.concatenate([masks, np.zeros((1,) + masks.shape[1:], bool)])
                masks[0] &= rng.random(masks.shape[1:]) < 0.3  # a mask worse than its box
            fields['masks'] = masks
        out.append(fields)
    return out


def write_openpsg_results(dataset, path, mode='sgdet', with_masks=False, seed=0, **kwargs):
    """``result.pkl`` as OpenPSG's ``mmcv.dump`` writes it (pickle protocol 2); returns the field dicts."""
    fields = random_results(dataset, mode, with_masks, seed, **kwargs)
    with openpsg_result_class() as Result:
        with open(path, 'wb') as f:
            pickle.dump([Result(**r) for r in fields], f, protocol=2)
    return fields


@pytest.fixture(scope='module')
def psg(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('openpsg')
    info = write_psg_sample(str(tmp), num_test=10)
    return dict(tmp=tmp, root=info['root'] + '/', dataset=PSGDataset(data_root=info['root'] + '/', split='test'))


def reference_keys(dataset, fields, mode):
    """OpenPSG's protocol (given order, plain IoU, per-image recall, mR over all predicates) by the loop
    reference, read from the Result fields with the conversion written out here (1-based -> 0-based)."""
    samples = []
    for i, r in enumerate(fields):
        info = dataset.get_data_info(i)
        s = dict(gt_boxes=[inst['bbox'] for inst in info['instances']],
                 gt_labels=[inst['bbox_label'] for inst in info['instances']],
                 gt_rels=[tuple(x) for x in np.asarray(info['relations']).reshape(-1, 3).tolist()])
        if r['refine_bboxes'] is None:
            s.update(rel_pairs=[], rel_scores=[], pred_boxes=[], pred_labels=[], pred_scores=[])
        else:
            s.update(pred_boxes=r['refine_bboxes'][:, :4].tolist(), pred_labels=(r['labels'] - 1).tolist(),
                     pred_scores=r['refine_bboxes'][:, 4].tolist(), rel_pairs=r['rel_pair_idxes'].tolist(),
                     rel_scores=r['rel_dists'])
        samples.append(s)
    return reference_metrics(samples, len(dataset.metainfo['predicates']), mode=mode, rank='given',
                             plus_one=False)


def ours(psg, path, mode, match):
    keys = {}
    for cls in (SGRecall, SGMeanRecall):
        metric = cls(mode=mode, protocol='openpsg', match=match)
        metric.dataset_meta = psg['dataset'].metainfo
        metric.process({}, list(open_predictions('openpsg', path, psg['dataset'], mode=mode)))
        keys.update(metric.evaluate(len(psg['dataset'])))
    return keys


@pytest.mark.parametrize('mode', ['predcls', 'sgcls', 'sgdet'])
def test_box_results_equal_the_loop_reference(psg, tmp_path, mode):
    path = str(tmp_path / 'result.pkl')
    fields = write_openpsg_results(psg['dataset'], path, mode=mode, seed=3, empty={2})
    got = ours(psg, path, mode, 'box')
    expected = reference_keys(psg['dataset'], fields, mode)
    keys = ['R', 'mR', 'ngR', 'ngmR'] + (['A'] if mode != 'sgdet' else [])
    for name in keys:
        for k in (20, 50, 100):
            assert got[f'{mode}/{name}@{k}'] == pytest.approx(expected[f'{name}@{k}'], abs=1e-9), (name, k)
    assert 5 < got[f'{mode}/R@50'] < 100


def test_mask_results_equal_the_metric_on_data_samples(psg, tmp_path):
    """Masks: the reader gives the metric the results' masks and the GT masks of the panoptic PNG; the numbers
    equal the metric fed the same predictions built by hand as data samples."""
    dataset = psg['dataset']
    path = str(tmp_path / 'result.pkl')
    fields = write_openpsg_results(dataset, path, mode='sgdet', with_masks=True, seed=5, empty={2})
    got = ours(psg, path, 'sgdet', 'mask')
    index = DatasetSamples(dataset)
    samples = []
    for i, r in enumerate(fields):
        s = index.gt(i)
        s['gt_instances']['masks'] = gt_masks(index, i)
        if r['refine_bboxes'] is None:  # nothing predicted
            size = tuple(s['gt_instances']['masks'].shape[1:])
            s['pred_instances'] = dict(bboxes=torch.zeros(0, 4), labels=torch.zeros(0, dtype=torch.long),
                                       scores=torch.zeros(0), masks=torch.zeros((0,) + size, dtype=torch.bool))
            s['pred_relations'] = dict(pair_idxs=torch.zeros(0, 2, dtype=torch.long), scores=torch.zeros(0, 57))
            samples.append(s)
            continue
        s['pred_instances'] = dict(bboxes=torch.from_numpy(r['refine_bboxes'][:, :4]),
                                   labels=torch.from_numpy(r['labels'] - 1),
                                   scores=torch.from_numpy(r['refine_bboxes'][:, 4]),
                                   masks=torch.from_numpy(r['masks']))
        s['pred_relations'] = dict(pair_idxs=torch.from_numpy(r['rel_pair_idxes']),
                                   scores=torch.from_numpy(r['rel_dists']))
        samples.append(s)
    expected = {}
    for cls in (SGRecall, SGMeanRecall):
        metric = cls(mode='sgdet', protocol='openpsg')
        metric.dataset_meta = dataset.metainfo
        metric.process({}, samples)
        expected.update(metric.evaluate(len(dataset)))
    assert got == expected
    assert 5 < got['sgdet/R@50'] < 100
    box = ours(psg, path, 'sgdet', 'box')  # one mask per image is worse than its box: the numbers differ
    assert box['sgdet/R@100'] != got['sgdet/R@100'] or box['sgdet/R@20'] != got['sgdet/R@20']


def test_cli_format_openpsg_defaults_to_its_protocol(psg, tmp_path, capsys):
    path = str(tmp_path / 'result.pkl')
    write_openpsg_results(psg['dataset'], path, mode='sgdet', seed=3)
    opts = ['--cfg-options', f'test_dataloader.dataset.data_root={psg["root"]}']
    res = main([CONFIG, path, '--format', 'openpsg', '--mode', 'sgdet', '--no-progress',
                '--work-dir', str(tmp_path / 'o'), *opts])
    out = capsys.readouterr().out
    assert 'SGRecall: protocol=openpsg' in out  # the config's metrics set match='box' themselves
    cfgs = [dict(type='SGRecall'), dict(type='SGMeanRecall', protocol='sgb', match='mask'), dict(type='DetectionAP')]
    notes = openpsg_metric_defaults(path, cfgs, None, {})
    assert cfgs == [dict(type='SGRecall', protocol='openpsg', match='box'),
                    dict(type='SGMeanRecall', protocol='sgb', match='mask'), dict(type='DetectionAP')]
    assert notes == ["SGRecall: protocol=openpsg (OpenPSG's conventions; --protocol sets another)",
                     'SGRecall: match=box (the results carry no masks)']
    assert res['sgdet/R@50'] == pytest.approx(ours(psg, path, 'sgdet', 'box')['sgdet/R@50'])
    sgb = evaluate_file(CONFIG, path, fmt='openpsg', mode='sgdet', protocol='sgb', progress=False,
                        work_dir=str(tmp_path / 'o2'), cfg_options={'test_dataloader.dataset.data_root': psg['root']})
    assert set(sgb) == set(res)  # another protocol is taken as given


def test_nothing_of_openpsg_is_imported_and_code_is_refused(psg, tmp_path):
    path = str(tmp_path / 'result.pkl')
    write_openpsg_results(psg['dataset'], path, mode='predcls')
    assert not any(m.startswith('openpsg') for m in sys.modules)
    records = load_openpsg_results(path)
    assert type(records[0]).__name__ == 'PickledRecord' and records[0].labels is not None
    assert records[0].points is None  # an absent field reads as None, as Result's defaults

    class Payload:
        def __reduce__(self):
            return (print, ('pwned',))

    bad = tmp_path / 'bad.pkl'
    bad.write_bytes(pickle.dumps([Payload()], protocol=2))
    with pytest.raises(UnsafePickleError, match='print'):
        load_openpsg_results(str(bad))


def test_bad_results_are_named(psg, tmp_path):
    dataset = psg['dataset']
    path = tmp_path / 'result.pkl'
    fields = random_results(dataset, 'sgdet', seed=1)
    fields[1]['rel_dists'] = fields[1]['rel_dists'][:-1]  # one row short
    with openpsg_result_class() as Result:
        path.write_bytes(pickle.dumps([Result(**r) for r in fields], protocol=2))
    with pytest.raises(ValueError, match=r'result #1: .rel_dists. has shape'):
        list(open_predictions('openpsg', str(path), dataset, mode='sgdet'))
    too_many = tmp_path / 'long.pkl'
    with openpsg_result_class() as Result:
        too_many.write_bytes(pickle.dumps([Result(**fields[0])] * (len(dataset) + 1), protocol=2))
    with pytest.raises(InputFileError, match='holds 11 results'):
        list(open_predictions('openpsg', str(too_many), dataset, mode='sgdet'))
    not_list = tmp_path / 'dict.pkl'
    not_list.write_bytes(pickle.dumps({'a': 1}))
    with pytest.raises(InputFileError, match='list of Result'):
        load_openpsg_results(str(not_list))
    stream = tmp_path / 'as_stream.pkl'
    stream.write_bytes(path.read_bytes())
    with pytest.raises(InputFileError, match='--format openpsg'):
        list(open_predictions('dump', str(stream), dataset, mode='sgdet'))


def test_background_objects_never_match_and_missing_results(psg, tmp_path):
    dataset = psg['dataset']
    path = str(tmp_path / 'result.pkl')
    write_openpsg_results(dataset, path, mode='sgdet', seed=2, background=True)
    samples = list(open_predictions('openpsg', path, dataset, mode='sgdet'))
    assert samples[0]['pred_instances']['bboxes'][-1].tolist() == [-1.0e5] * 4
    short = str(tmp_path / 'short.pkl')
    fields = random_results(dataset, 'sgdet', seed=2)[:-2]
    with openpsg_result_class() as Result:
        with open(short, 'wb') as f:
            pickle.dump([Result(**r) for r in fields], f, protocol=2)
    with pytest.raises(Exception, match='2 of the 10'):
        evaluate_file(CONFIG, short, fmt='openpsg', mode='sgdet', progress=False, work_dir=str(tmp_path / 'o'),
                      cfg_options={'test_dataloader.dataset.data_root': psg['root']})
