"""PSGDataset and panoptic mask decoding against a psg.json and panoptic PNGs written here.

Reference followed: Jingkang50/OpenPSG, openpsg/datasets/psg.py (``PanopticSceneGraphDataset``, all_bboxes=True):
images without relations are dropped; ``test_image_ids`` selects test; test drops exact duplicate triplets but
keeps several predicates per pair; masks = ``rgb2id(png) == segment id`` with id = R + 256 G + 65536 B.
"""
import json
import os
import os.path as osp

import numpy as np
import pytest
from PIL import Image

from mmsgg_eval.datasets import DatasetFormatError, LoadSceneGraphAnnotations, PSGDataset
from mmsgg_eval.datasets.transforms import panoptic_png_to_ids

THINGS, STUFF, PREDICATES = ['person', 'dog', 'car'], ['grass', 'sky'], ['on', 'beside', 'holding']


def segment_id(r, g, b):
    return r + 256 * g + 65536 * b


def write_psg(root, records, test_ids):
    """records: dicts with image_id, size (w, h), segments [(id, category, rect x1 y1 x2 y2)], relations."""
    os.makedirs(root, exist_ok=True)
    data = []
    for rec in records:
        w, h = rec['size']
        ids = np.zeros((h, w), np.int64)
        segments, annotations = [], []
        for sid, cat, (x1, y1, x2, y2) in rec['segments']:
            ids[y1:y2, x1:x2] = sid
            segments.append(dict(id=sid, category_id=cat, iscrowd=0, isthing=int(cat < len(THINGS)),
                                 area=(x2 - x1) * (y2 - y1)))
            annotations.append(dict(bbox=[x1, y1, x2, y2], bbox_mode=0, category_id=cat))
        png = np.stack([ids % 256, ids // 256 % 256, ids // 65536], -1).astype(np.uint8)
        stem = f'{int(rec["image_id"]):012d}'
        os.makedirs(osp.join(root, 'coco', 'panoptic_val2017'), exist_ok=True)
        Image.fromarray(png).save(osp.join(root, 'coco', 'panoptic_val2017', f'{stem}.png'))
        data.append(dict(file_name=f'val2017/{stem}.jpg', height=h, width=w, image_id=rec['image_id'],
                         pan_seg_file_name=f'panoptic_val2017/{stem}.png', segments_info=segments,
                         annotations=annotations, relations=[list(r) for r in rec['relations']]))
    with open(osp.join(root, 'psg.json'), 'w') as f:
        json.dump(dict(data=data, thing_classes=THINGS, stuff_classes=STUFF, predicate_classes=PREDICATES,
                       test_image_ids=test_ids), f)
    return root


A = segment_id(3, 5, 7)          # uses all three channels
B = segment_id(200, 0, 0)
C = segment_id(0, 0, 1)          # 65536
RECORDS = [
    dict(image_id='1', size=(40, 30),
         segments=[(A, 3, (0, 0, 40, 12)), (B, 0, (5, 10, 20, 30)), (C, 1, (25, 15, 35, 25))],
         relations=[(1, 0, 0), (1, 2, 2), (1, 2, 1), (1, 2, 2), (2, 0, 0)]),
    dict(image_id='2', size=(20, 20), segments=[(A, 4, (0, 0, 20, 20)), (B, 2, (2, 2, 8, 8))], relations=[]),
    dict(image_id='3', size=(30, 20), segments=[(A, 0, (0, 0, 10, 10)), (B, 1, (10, 0, 30, 20))],
         relations=[(0, 1, 2), (0, 1, 2), (0, 1, 1)]),
    dict(image_id='4', size=(30, 20), segments=[(A, 2, (0, 0, 10, 10)), (B, 3, (10, 0, 30, 20))],
         relations=[(0, 1, 0)]),
]


@pytest.fixture
def psg_root(tmp_path):
    return write_psg(str(tmp_path / 'psg'), RECORDS, test_ids=['1', '2'])


def test_splits_vocabulary_and_relations(psg_root):
    test = PSGDataset(data_root=psg_root, split='test')
    assert len(test) == 1  # image 2 has no relation: dropped
    info = test.get_data_info(0)
    assert info['img_id'] == '1' and (info['width'], info['height']) == (40, 30)
    assert info['img_path'] == osp.join(psg_root, 'coco', 'val2017', '000000000001.jpg')
    assert info['seg_map_path'] == osp.join(psg_root, 'coco', 'panoptic_val2017', '000000000001.png')
    assert [x['bbox'] for x in info['instances']] == [[0, 0, 40, 12], [5, 10, 20, 30], [25, 15, 35, 25]]
    assert [x['bbox_label'] for x in info['instances']] == [3, 0, 1]  # things then stuff, 0-based
    # test: exact duplicate triplet (1, 2, 2) dropped, two predicates for pair (1, 2) kept, order kept
    assert info['relations'].dtype == np.int64
    assert info['relations'].tolist() == [[1, 0, 0], [1, 2, 2], [1, 2, 1], [2, 0, 0]]
    meta = test.metainfo
    assert meta['classes'] == tuple(THINGS + STUFF) and meta['predicates'] == tuple(PREDICATES)
    assert meta['thing_classes'] == tuple(THINGS) and meta['stuff_classes'] == tuple(STUFF)
    assert meta['dataset_name'] == 'PSG' and meta['iou_plus_one'] is False
    # training statistics: images 3 and 4, all relations (duplicates included)
    assert meta['predicate_counts'] == [1, 1, 2]
    assert meta['train_triplets'].tolist() == [[0, 1, 1], [0, 1, 2], [2, 3, 0]]
    train = PSGDataset(data_root=psg_root, split='train')
    assert [train.get_data_info(i)['img_id'] for i in range(len(train))] == ['3', '4']
    assert train.get_data_info(0)['relations'].tolist() == [[0, 1, 2]]  # train: one relation per pair
    with pytest.raises(ValueError, match='split'):
        PSGDataset(data_root=psg_root, split='val')


def test_masks_from_panoptic_png(psg_root):
    info = PSGDataset(data_root=psg_root, split='test').get_data_info(0)
    results = LoadSceneGraphAnnotations(mask_format='bool')(dict(info))
    masks = results['gt_masks']
    assert masks.dtype == bool and masks.shape == (3, 30, 40)
    expected = np.zeros((3, 30, 40), bool)
    expected[0, 0:12, 0:40] = True
    expected[1, 10:30, 5:20] = True
    expected[0, 10:12, 5:20] = False  # painted over by segment B
    expected[2, 15:25, 25:35] = True
    expected[0, 15:25, 25:35] = False
    np.testing.assert_array_equal(masks, expected)
    assert results['gt_relations'].tolist() == info['relations'].tolist()
    # the id formula itself, on a PNG read back from disk
    png = np.asarray(Image.open(info['seg_map_path']).convert('RGB'))
    ids = panoptic_png_to_ids(png)
    assert ids[0, 0] == 3 + 256 * 5 + 65536 * 7 and ids[20, 30] == 65536 and ids[29, 39] == 0


def test_without_masks(psg_root):
    info = PSGDataset(data_root=psg_root, split='test', with_masks=False).get_data_info(0)
    assert 'seg_map_path' not in info
    results = LoadSceneGraphAnnotations()(dict(info))
    assert 'gt_masks' not in results and results['gt_bboxes'].shape == (3, 4)
    with pytest.raises(KeyError, match='seg_map_path'):
        LoadSceneGraphAnnotations(with_mask=True)(dict(info))


def test_malformed(tmp_path):
    bad = [dict(RECORDS[0], relations=[(0, 3, 0)])]
    root = write_psg(str(tmp_path / 'a'), bad, test_ids=['1'])
    with pytest.raises(DatasetFormatError, match=r"psg\.json: image_id '1'.*relation 0.*object index 3 outside"):
        PSGDataset(data_root=root)
    bad = [dict(RECORDS[0], relations=[(0, 1, 3)])]
    root = write_psg(str(tmp_path / 'b'), bad, test_ids=['1'])
    with pytest.raises(DatasetFormatError, match="image_id '1'.*predicate 3 outside"):
        PSGDataset(data_root=root)
    with pytest.raises(FileNotFoundError, match=r'PSG annotation file not found.*nothing\.json'):
        PSGDataset(data_root=root, ann_file='nothing.json')
