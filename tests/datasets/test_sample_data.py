"""The generated sample: determinism, real formats readable by the wrappers, demo-worthy statistics."""
import hashlib
import json
import os
import os.path as osp
import subprocess
import sys

import h5py
import numpy as np
import pytest
from PIL import Image

from mmsgg_eval.datasets import GQA200Dataset, LoadSceneGraphAnnotations, PSGDataset, RSVGDDataset, VG150Dataset
from mmsgg_eval.testing import VG150_SAMPLE_NUM_VAL, make_sample_data
from tests.sgg_samples import perfect_predcls

REPO = osp.abspath(osp.join(osp.dirname(__file__), '..', '..'))


def digest(root):
    out = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = osp.join(folder, name)
            with open(path, 'rb') as f:
                out[osp.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.fixture(scope='module')
def sample(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('sample'))
    make_sample_data(root, seed=0)
    return root


def test_deterministic(sample, tmp_path):
    make_sample_data(str(tmp_path), seed=0)
    first, second = digest(sample), digest(str(tmp_path))
    assert first == second and len(first) > 100
    expected = {'vg150/VG-SGG-with-attri.h5', 'vg150/VG-SGG-dicts-with-attri.json', 'vg150/image_data.json',
                'gqa200/GQA_200_ID_Info.json', 'gqa200/GQA_200_Train.json', 'gqa200/GQA_200_Test.json',
                'psg/psg.json', 'rsvgd/train.txt', 'rsvgd/val.txt', 'rsvgd/test.txt',
                'oiv6/annotations/categories_dict.json', 'oiv6/annotations/vrd-train-anno.json',
                'oiv6/annotations/vrd-val-anno.json', 'oiv6/annotations/vrd-test-anno.json'}
    assert expected <= set(first)
    assert any(k.startswith('vg150/VG_100K/') and k.endswith('.jpg') for k in first)
    assert any(k.startswith('psg/coco/panoptic_val2017/') and k.endswith('.png') for k in first)
    assert any(k.startswith('rsvgd/Annotations/') and k.endswith('.xml') for k in first)
    assert any(k.startswith('oiv6/images/') and k.endswith('.jpg') for k in first)


def test_vg150_sample(sample):
    root = osp.join(sample, 'vg150')
    sets = {s: VG150Dataset(data_root=root, split=s, num_val_images=VG150_SAMPLE_NUM_VAL)
            for s in ('train', 'val', 'test')}
    assert {s: len(d) for s, d in sets.items()} == dict(train=40, val=VG150_SAMPLE_NUM_VAL, test=13)
    # every training relation (the legacy default counts only those between overlapping boxes: fewer here)
    meta = VG150Dataset(data_root=root, split='test', num_val_images=VG150_SAMPLE_NUM_VAL, train_statistics='all',
                        lazy_init=True).metainfo
    assert 0 < sum(sets['test'].metainfo['predicate_counts']) < sum(meta['predicate_counts'])
    assert len(meta['classes']) == 150 and len(meta['predicates']) == 50 and meta['classes'][-1] == 'zebra'
    counts = np.array(meta['predicate_counts'])
    assert counts.sum() > 150 and counts.max() >= 5 * max(np.median(counts), 1)  # long tail
    assert len(meta['train_triplets']) > 50
    with h5py.File(osp.join(root, 'VG-SGG-with-attri.h5')) as f:
        n_h5 = len(f['split'])
        assert f['boxes_1024'].dtype == np.int32 and f['labels'].shape[1] == 1
        assert (f['img_to_first_rel'][:] < 0).sum() >= 2 and (f['img_to_first_box'][:] < 0).sum() >= 1
    with open(osp.join(root, 'image_data.json')) as f:
        records = json.load(f)
    assert len(records) == n_h5 + 1 and any(r['image_id'] == 1592 for r in records)  # corrupted id skipped
    has_dup = False
    for ds in sets.values():
        for i in range(len(ds)):
            info = ds.get_data_info(i)
            assert 300 <= info['width'] <= 700 and 300 <= info['height'] <= 700
            assert 3 <= len(info['instances']) <= 10 and 1 <= len(info['relations']) <= 9
            with Image.open(info['img_path']) as img:
                assert img.format == 'JPEG' and img.size == (info['width'], info['height'])
            rels = info['relations'].tolist()
            has_dup |= ds is sets['test'] and len({tuple(r) for r in rels}) < len(rels)
    assert has_dup  # duplicate GT triplets in the test split


def test_other_samples(sample):
    gqa = {s: GQA200Dataset(data_root=osp.join(sample, 'gqa200'), split=s) for s in ('train', 'test')}
    assert len(gqa['train']) == 20 and len(gqa['test']) == 12  # 2 test images without boxes/relations dropped
    assert len(gqa['test'].metainfo['classes']) == 200 and len(gqa['test'].metainfo['predicates']) == 100
    assert sum(gqa['test'].metainfo['predicate_counts']) > 0
    assert osp.isfile(gqa['test'].get_data_info(0)['img_path'])
    psg = PSGDataset(data_root=osp.join(sample, 'psg'), split='test')
    assert len(psg) == 4 and len(PSGDataset(data_root=osp.join(sample, 'psg'), split='train')) == 8
    assert len(psg.metainfo['classes']) == 133 and len(psg.metainfo['predicates']) == 56
    for i in range(len(psg)):
        info = psg.get_data_info(i)
        masks = LoadSceneGraphAnnotations(mask_format='bool')(dict(info))['gt_masks']
        assert masks.shape == (len(info['instances']), info['height'], info['width'])
        for mask, inst in zip(masks, info['instances']):  # every segment visible, its box = its mask extent
            ys, xs = np.nonzero(mask)
            assert inst['bbox'] == [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
    rsvgd = {s: RSVGDDataset(data_root=osp.join(sample, 'rsvgd'), split=s) for s in ('train', 'val', 'test')}
    ann = [{rsvgd[s].get_data_info(i)['ann_id'] for i in range(len(rsvgd[s]))} for s in rsvgd]
    assert sum(map(len, ann)) == len(set.union(*ann)) and min(map(len, ann)) >= 1  # disjoint, non-empty
    info = rsvgd['test'].get_data_info(0)
    assert info['text'] and osp.isfile(info['img_path'])
    with Image.open(info['img_path']) as img:
        assert img.size == (800, 800)


def test_metric_on_sample(sample):
    """Packed samples satisfy the metric's data contract: perfect PredCls predictions give R@K = 100."""
    from mmsgg_eval.datasets import PackSceneGraphInputs
    from mmsgg_eval.metrics import SGRecall
    ds = VG150Dataset(data_root=osp.join(sample, 'vg150'), split='test', num_val_images=VG150_SAMPLE_NUM_VAL,
                      pipeline=[LoadSceneGraphAnnotations(), PackSceneGraphInputs()])
    metric = SGRecall(mode='predcls', topk=(20,))
    metric.dataset_meta = ds.metainfo
    metric.process({}, perfect_predcls(ds))
    result = metric.evaluate(len(ds))
    assert result['predcls/R@20'] == pytest.approx(100.0)


def test_cli(tmp_path):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get('PYTHONPATH', ''))
    out = subprocess.run([sys.executable, osp.join(REPO, 'tools', 'make_sample_data.py'), '--out', str(tmp_path),
                          '--datasets', 'rsvgd'], env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)['rsvgd']['num_objects'] > 0
    assert sorted(os.listdir(tmp_path / 'rsvgd')) == ['Annotations', 'JPEGImages', 'test.txt', 'train.txt', 'val.txt']
