"""LoadSceneGraphAnnotations / PackSceneGraphInputs, alone and inside the mmdet 3.x evaluation pipeline."""
import os.path as osp

import numpy as np
import pytest
import torch

from mmsgg_eval.datasets import LoadSceneGraphAnnotations, PackSceneGraphInputs
from mmsgg_eval.registry import DATASETS, TRANSFORMS

REPO = osp.abspath(osp.join(osp.dirname(__file__), '..', '..'))


def vg_info():
    return dict(img_path='x/1.jpg', img_id=1, width=64, height=48, sample_idx=7,
                instances=[dict(bbox=[1.5, 2.0, 30.25, 40.0], bbox_label=3, ignore_flag=0),
                           dict(bbox=[0.0, 0.0, 63.0, 47.0], bbox_label=0, ignore_flag=0),
                           dict(bbox=[10.0, 10.0, 10.0, 10.0], bbox_label=149, ignore_flag=0)],
                relations=np.array([[0, 1, 5], [2, 0, 49], [0, 1, 5]], np.int64))


def test_registered():
    for name in ('LoadSceneGraphAnnotations', 'PackSceneGraphInputs'):
        assert TRANSFORMS.get(name) is not None
    for name in ('VG150Dataset', 'GQA200Dataset', 'PSGDataset', 'RSVGDDataset'):
        assert DATASETS.get(name) is not None


def test_load_annotations():
    results = LoadSceneGraphAnnotations()(vg_info())
    assert results['gt_bboxes'].dtype == np.float32 and results['gt_bboxes'].shape == (3, 4)
    np.testing.assert_array_equal(results['gt_bboxes'][0], np.float32([1.5, 2.0, 30.25, 40.0]))
    assert results['gt_bboxes_labels'].dtype == np.int64 and results['gt_bboxes_labels'].tolist() == [3, 0, 149]
    assert results['gt_ignore_flags'].dtype == bool and not results['gt_ignore_flags'].any()
    assert results['gt_relations'].dtype == np.int64 and results['gt_relations'].tolist() == [[0, 1, 5], [2, 0, 49],
                                                                                            [0, 1, 5]]
    assert 'gt_masks' not in results
    empty = LoadSceneGraphAnnotations()(dict(instances=[], relations=np.zeros((0, 3), np.int64)))
    assert empty['gt_bboxes'].shape == (0, 4) and empty['gt_relations'].shape == (0, 3)
    with pytest.raises(KeyError, match='relations'):
        LoadSceneGraphAnnotations(with_rel=True)(dict(instances=[]))


def test_pack_scene_graph():
    results = LoadSceneGraphAnnotations()(vg_info())
    img = np.random.default_rng(0).integers(0, 255, (24, 32, 3), dtype=np.uint8)
    results.update(img=img, ori_shape=(48, 64), img_shape=(24, 32), scale_factor=(0.5, 0.5))
    packed = PackSceneGraphInputs()(results)
    assert packed['inputs'].shape == (3, 24, 32) and packed['inputs'].dtype == torch.uint8
    assert torch.equal(packed['inputs'], torch.from_numpy(img).permute(2, 0, 1))
    sample = packed['data_samples']
    gt = sample.gt_instances
    assert gt.bboxes.dtype == torch.float32 and gt.labels.dtype == torch.int64
    assert gt.bboxes.tolist()[0] == [1.5, 2.0, 30.25, 40.0]  # original frame: not rescaled by 0.5
    assert sample.gt_relations.pair_idxs.dtype == torch.int64 and sample.gt_relations.labels.dtype == torch.int64
    assert sample.gt_relations.pair_idxs.tolist() == [[0, 1], [2, 0], [0, 1]]
    assert sample.gt_relations.labels.tolist() == [5, 49, 5]
    meta = sample.metainfo
    assert meta['sample_idx'] == 7 and meta['img_id'] == 1 and meta['img_path'] == 'x/1.jpg'
    assert meta['ori_shape'] == (48, 64) and meta['img_shape'] == (24, 32) and meta['scale_factor'] == (0.5, 0.5)
    assert 'text' not in meta


def test_pack_grounding_without_image():
    info = dict(img_path='J/00001.jpg', img_id='00001', width=800, height=600, sample_idx=3, text='the ship',
                instances=[dict(bbox=[133, 237, 684, 672], bbox_label=9, ignore_flag=0)])
    packed = PackSceneGraphInputs()(LoadSceneGraphAnnotations()(info))
    assert 'inputs' not in packed
    sample = packed['data_samples']
    assert sample.metainfo['text'] == 'the ship' and sample.metainfo['ori_shape'] == (600, 800)
    assert 'gt_relations' not in sample
    assert sample.gt_instances.bboxes.tolist() == [[133, 237, 684, 672]]


def test_mmdet_pipeline_from_configs(tmp_path):
    pytest.importorskip('mmdet.datasets')
    from mmdet.structures import DetDataSample
    from mmdet.structures.mask import BitmapMasks
    from mmengine.config import Config
    from mmengine.registry import init_default_scope

    import mmsgg_eval.datasets  # noqa: F401
    from mmsgg_eval.testing import VG150_SAMPLE_NUM_VAL, make_sample_data
    init_default_scope('mmdet')
    make_sample_data(str(tmp_path), datasets=['vg150', 'psg', 'rsvgd'])
    for name, extra in (('vg150', dict(num_val_images=VG150_SAMPLE_NUM_VAL)), ('psg', {}), ('rsvgd', {})):
        cfg = Config.fromfile(osp.join(REPO, 'configs', '_base_', 'datasets', f'{name}.py'))
        ds_cfg = cfg.test_dataloader.dataset
        ds_cfg.update(data_root=str(tmp_path / name), **extra)
        ds = DATASETS.build(ds_cfg)
        info = ds.get_data_info(0)
        packed = ds[0]
        sample = packed['data_samples']
        assert isinstance(sample, DetDataSample)
        h, w = info['height'], info['width']
        meta = sample.metainfo
        assert meta['ori_shape'] == (h, w) and meta['sample_idx'] == 0 and meta['img_id'] == info['img_id']
        scale = min(1333 / max(h, w), 800 / min(h, w))
        assert meta['img_shape'] == (int(h * scale + 0.5), int(w * scale + 0.5))
        assert tuple(packed['inputs'].shape) == (3,) + meta['img_shape']
        boxes = np.array([x['bbox'] for x in info['instances']], np.float32)
        np.testing.assert_array_equal(sample.gt_instances.bboxes.numpy(), boxes)  # original frame
        assert sample.gt_instances.labels.tolist() == [x['bbox_label'] for x in info['instances']]
        if name == 'rsvgd':
            assert meta['text'] == info['text'] and 'gt_relations' not in sample
        else:
            assert sample.gt_relations.pair_idxs.tolist() == info['relations'][:, :2].tolist()
            assert sample.gt_relations.labels.tolist() == info['relations'][:, 2].tolist()
        if name == 'psg':
            masks = sample.gt_instances.masks
            assert isinstance(masks, BitmapMasks) and (masks.height, masks.width) == (h, w)
            assert len(masks) == len(info['instances']) and masks.to_ndarray().any(axis=(1, 2)).all()
