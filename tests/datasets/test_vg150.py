"""VG150Dataset against files written here in the real VG-SGG format.

Reference followed: KaihuaTang/Scene-Graph-Benchmark.pytorch, maskrcnn_benchmark/data/datasets/visual_genome.py:
``load_image_filenames`` removes the corrupted ids (1592, 1722, 4616, 4617) from image_data.json BEFORE the
records are aligned with the h5 rows (``self.img_info[i]`` for ``i in np.where(split_mask)``); ``load_graphs``
builds the split mask, slices val/train, decodes boxes in place on the int32 array and makes relationship rows
local; ``get_groundtruth(evaluation=True)`` scales by max(w, h) / 1024 and clips with ``clip_to_image(
remove_empty=False)`` (TO_REMOVE = 1). ``legacy_decode`` below re-implements that arithmetic independently
(numpy int32 in-place assignment + torch float32 clamp).
"""
import json
import os
import os.path as osp

import h5py
import numpy as np
import pytest
import torch

from mmsgg_eval.datasets import DatasetFormatError, VG150Dataset
from mmsgg_eval.datasets.vg150 import load_vg150_vocabulary

CLASSES = ['cat', 'dog', 'man', 'tree', 'car']
PREDICATES = ['on', 'has', 'near', 'riding']


def legacy_decode(boxes_1024: np.ndarray, w: int, h: int) -> np.ndarray:
    """Scene-Graph-Benchmark: in-place int32 cxcywh -> xyxy, / 1024 * max(w, h), BoxList float32, clamp."""
    all_boxes = np.array(boxes_1024, dtype=np.int32)
    all_boxes[:, :2] = all_boxes[:, :2] - all_boxes[:, 2:] / 2
    all_boxes[:, 2:] = all_boxes[:, :2] + all_boxes[:, 2:]
    box = torch.as_tensor(all_boxes / 1024 * max(w, h), dtype=torch.float32).reshape(-1, 4)
    box[:, 0].clamp_(min=0, max=w - 1)
    box[:, 1].clamp_(min=0, max=h - 1)
    box[:, 2].clamp_(min=0, max=w - 1)
    box[:, 3].clamp_(min=0, max=h - 1)
    return box.numpy()


def write_vg(root, images, corrupted_at=None, drop_keys=(), dict_info=None):
    """Write the three VG150 files. ``images``: dicts with width, height, image_id, split, boxes (cxcywh at
    1024, or None for no boxes), labels (1-based), rels (LOCAL [s, o] or None), preds (1-based)."""
    os.makedirs(root, exist_ok=True)
    labels, boxes, rels, preds = [], [], [], []
    first_box, last_box, first_rel, last_rel = [], [], [], []
    n_obj = n_rel = 0
    for spec in images:
        k = 0 if spec.get('boxes') is None else len(spec['boxes'])
        first_box.append(n_obj if k else -1)
        last_box.append(n_obj + k - 1 if k else -1)
        if k:
            boxes.extend(spec['boxes'])
            labels.extend(spec['labels'])
        r = 0 if spec.get('rels') is None else len(spec['rels'])
        first_rel.append(n_rel if r else -1)
        last_rel.append(n_rel + r - 1 if r else -1)
        if r:
            rels.extend([[s + n_obj, o + n_obj] for s, o in spec['rels']])  # GLOBAL object rows
            preds.extend(spec['preds'])
        n_obj, n_rel = n_obj + k, n_rel + r
    arrays = dict(
        split=np.array([im['split'] for im in images], np.int32),
        img_to_first_box=np.array(first_box, np.int32), img_to_last_box=np.array(last_box, np.int32),
        img_to_first_rel=np.array(first_rel, np.int32), img_to_last_rel=np.array(last_rel, np.int32),
        labels=np.array(labels, np.int64).reshape(-1, 1), boxes_1024=np.array(boxes, np.int32).reshape(-1, 4),
        boxes_512=(np.array(boxes, np.int32).reshape(-1, 4) // 2),
        relationships=np.array(rels, np.int32).reshape(-1, 2), predicates=np.array(preds, np.int64).reshape(-1, 1),
        attributes=np.zeros((len(labels), 10), np.int64), active_object_mask=np.ones((len(labels), 1), bool))
    with h5py.File(osp.join(root, 'VG-SGG-with-attri.h5'), 'w') as f:
        for k, v in arrays.items():
            if k not in drop_keys:
                f[k] = v
    records = [dict(width=spec['width'], height=spec['height'], image_id=spec['image_id'], url='', coco_id=None,
                    flickr_id=None) for spec in images]
    if corrupted_at is not None:
        records.insert(corrupted_at, dict(width=800, height=600, image_id=1592, url='', coco_id=None, flickr_id=None))
    with open(osp.join(root, 'image_data.json'), 'w') as f:
        json.dump(records, f)
    info = dict_info or dict(idx_to_label={str(i + 1): c for i, c in enumerate(CLASSES)},
                             label_to_idx={c: i + 1 for i, c in enumerate(CLASSES)},
                             idx_to_predicate={str(i + 1): p for i, p in enumerate(PREDICATES)},
                             predicate_to_idx={p: i + 1 for i, p in enumerate(PREDICATES)})
    with open(osp.join(root, 'VG-SGG-dicts-with-attri.json'), 'w') as f:
        json.dump(info, f)
    return root


def im(image_id, split, n_obj=3, rels=((0, 1),), preds=None, width=500, height=375, boxes=None, labels=None):
    boxes = boxes if boxes is not None else [[100 + 10 * k, 120, 51, 40] for k in range(n_obj)]
    rels = None if rels is None else [list(r) for r in rels]
    return dict(image_id=image_id, split=split, width=width, height=height, boxes=boxes,
                labels=labels or [(k % len(CLASSES)) + 1 for k in range(len(boxes))], rels=rels,
                preds=preds or ([1] * len(rels) if rels else None))


@pytest.fixture
def split_files(tmp_path):
    """12 h5 rows: split-0 rows 0,1,2,4,6,7,9 (row 3 without boxes, row 7 without relations), test rows 5, 8,
    10, 11 (row 10 without relations); corrupted id 1592 inserted in image_data.json before row 2."""
    images = [im(100, 0), im(101, 0), im(102, 0), dict(im(103, 0), boxes=None, rels=None), im(104, 0),
              im(105, 2), im(106, 0), im(107, 0, rels=None), im(108, 2), im(109, 0), im(110, 2, rels=None),
              im(111, 2)]
    return write_vg(str(tmp_path / 'vg'), images, corrupted_at=2), images


def ids(ds):
    return [ds.get_data_info(i)['img_id'] for i in range(len(ds))]


def test_split_membership_and_dropped_images(split_files):
    root, _ = split_files
    assert ids(VG150Dataset(data_root=root, split='val', num_val_images=2)) == [100, 101]
    assert ids(VG150Dataset(data_root=root, split='train', num_val_images=2)) == [102, 104, 106, 109]
    assert ids(VG150Dataset(data_root=root, split='test', num_val_images=2)) == [105, 108, 111]
    # default num_val_images=5000 > number of split-0 images: everything is val, train is empty
    assert ids(VG150Dataset(data_root=root, split='val')) == [100, 101, 102, 104, 106, 109]
    assert len(VG150Dataset(data_root=root, split='train')) == 0


def test_corrupted_ids_removed_before_alignment(tmp_path):
    # 1592 sits in image_data.json between h5 rows 0 and 1: row 1 must get the NEXT record's size and id
    images = [im(10, 2, width=640, height=480), im(11, 2, width=333, height=999), im(12, 2)]
    records_root = write_vg(str(tmp_path / 'vg'), images, corrupted_at=1)
    ds = VG150Dataset(data_root=records_root, split='test')
    infos = [ds.get_data_info(i) for i in range(len(ds))]
    assert [(d['img_id'], d['width'], d['height']) for d in infos] == [(10, 640, 480), (11, 333, 999), (12, 500, 375)]
    assert infos[1]['img_path'] == osp.join(records_root, 'VG_100K', '11.jpg')
    # a corrupted id is skipped wherever it is, also when the record count then no longer matches the h5
    with open(osp.join(records_root, 'image_data.json')) as f:
        records = json.load(f)
    records.insert(0, dict(width=1, height=1, image_id=4617))
    with open(osp.join(records_root, 'image_data.json'), 'w') as f:
        json.dump(records, f)
    assert [d['img_id'] for d in map(VG150Dataset(data_root=records_root).get_data_info, range(3))] == [10, 11, 12]
    records.append(dict(width=1, height=1, image_id=99))
    with open(osp.join(records_root, 'image_data.json'), 'w') as f:
        json.dump(records, f)
    with pytest.raises(DatasetFormatError, match=r'image_data\.json.*4 records.*3 images'):
        VG150Dataset(data_root=records_root)


def test_box_decoding_bit_exact(tmp_path):
    rng = np.random.default_rng(0)
    sizes = [(500, 375), (375, 500), (1024, 768), (333, 999), (800, 800), (641, 479)]
    images = []
    for k, (w, h) in enumerate(sizes):
        n = 40
        cxcy = rng.integers(0, 1100, (n, 2))
        wh = rng.integers(1, 700, (n, 2))
        boxes = np.concatenate([cxcy, wh], 1)
        # hand-picked quirks: odd widths around 0 (truncation toward 0 differs from floor), boxes beyond the
        # image (clipped), a box entirely right of the image (clipped to an empty box, kept)
        boxes[:4] = [[5, 5, 11, 11], [0, 0, 3, 1], [1, 2, 5, 7], [1023, 1023, 1, 1]]
        boxes[4] = [1500, 20, 10, 10]
        images.append(im(200 + k, 2, boxes=boxes.tolist(), labels=[1] * n, rels=[(0, 1)], width=w, height=h))
    root = write_vg(str(tmp_path / 'vg'), images)
    ds = VG150Dataset(data_root=root, split='test')
    assert len(ds) == len(images)
    for i, spec in enumerate(images):
        got = np.array([inst['bbox'] for inst in ds.get_data_info(i)['instances']], dtype=np.float32)
        want = legacy_decode(np.array(spec['boxes']), spec['width'], spec['height'])
        assert got.dtype == want.dtype == np.float32
        np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))  # bit for bit
    first = np.array([inst['bbox'] for inst in ds.get_data_info(0)['instances']], np.float32)
    # cx=5, w=11: 5 - 5.5 = -0.5 -> 0 (toward zero; floor would give -1); x2 = 0 + 11
    np.testing.assert_array_equal(first[0], np.float32([0, 0, 11, 11]) / 1024 * 500)
    assert first[4, 0] == first[4, 2] == 499  # beyond the right edge: clipped to W - 1, kept although empty
    assert len(ds.get_data_info(0)['instances']) == 40


def test_relations_local_zero_based_and_duplicates(tmp_path):
    images = [im(1, 0, n_obj=4, rels=[(0, 1), (2, 3), (0, 1)], preds=[2, 4, 2]),  # val
              im(2, 0, n_obj=5, rels=[(4, 0), (4, 0), (1, 2), (4, 0)], preds=[1, 3, 4, 1],
                 labels=[5, 4, 3, 2, 1]),  # train
              im(3, 2, n_obj=3, rels=[(2, 1), (2, 1), (0, 2)], preds=[3, 3, 1], labels=[1, 2, 3])]  # test
    root = write_vg(str(tmp_path / 'vg'), images)
    test = VG150Dataset(data_root=root, split='test', num_val_images=1).get_data_info(0)
    assert test['relations'].dtype == np.int64 and test['relations'].shape == (3, 3)
    assert test['relations'].tolist() == [[2, 1, 2], [2, 1, 2], [0, 2, 0]]  # local rows, duplicates kept
    assert [x['bbox_label'] for x in test['instances']] == [0, 1, 2]
    assert all(x['ignore_flag'] == 0 and len(x['bbox']) == 4 for x in test['instances'])
    val = VG150Dataset(data_root=root, split='val', num_val_images=1).get_data_info(0)
    assert val['relations'].tolist() == [[0, 1, 1], [2, 3, 3], [0, 1, 1]]  # val keeps duplicates too
    train_ds = VG150Dataset(data_root=root, split='train', num_val_images=1)
    # training split: one relation per (subject, object) pair, the first in file order
    assert train_ds.get_data_info(0)['relations'].tolist() == [[4, 0, 0], [1, 2, 3]]
    keep = VG150Dataset(data_root=root, split='train', num_val_images=1, duplicate_rels='keep')
    assert len(keep.get_data_info(0)['relations']) == 4


def test_metainfo_and_training_statistics(tmp_path):
    images = [im(1, 0, n_obj=2, rels=[(0, 1)], preds=[4], labels=[1, 2]),  # val: not in the statistics
              im(2, 0, n_obj=3, rels=[(0, 1), (0, 1), (2, 0)], preds=[1, 1, 3], labels=[3, 4, 5]),
              im(3, 0, n_obj=2, rels=[(1, 0)], preds=[2], labels=[3, 3]),
              im(4, 2, n_obj=2, rels=[(0, 1)], preds=[4], labels=[1, 1])]  # test: not in the statistics
    root = write_vg(str(tmp_path / 'vg'), images)
    for split in ('train', 'val', 'test'):
        meta = VG150Dataset(data_root=root, split=split, num_val_images=1, lazy_init=True).metainfo
        assert meta['classes'] == tuple(CLASSES) and meta['predicates'] == tuple(PREDICATES)
        assert meta['dataset_name'] == 'VG150' and meta['iou_plus_one'] is True
        assert meta['predicate_counts'] == [2, 1, 1, 0]  # all training relations, duplicates included
        assert meta['train_triplets'].dtype == np.int64
        assert meta['train_triplets'].tolist() == [[2, 2, 1], [2, 3, 0], [4, 2, 2]]
        assert 'zeroshot_triplets' not in meta


def test_zeroshot_file_metainfo(tmp_path, fixtures_dir):
    from mmsgg_eval.zeroshot import as_zeroshot_triplets
    root = write_vg(str(tmp_path / 'vg'), [im(1, 2)])
    path = osp.join(fixtures_dir, 'vg150', 'zeroshot_triplet.pytorch')
    meta = VG150Dataset(data_root=root, zeroshot_file=path).metainfo
    assert meta['zeroshot_triplets'] == path
    assert as_zeroshot_triplets(meta['zeroshot_triplets']).shape == (5971, 3)
    with pytest.raises(FileNotFoundError, match='zero-shot'):
        VG150Dataset(data_root=root, zeroshot_file='missing.pytorch')


def test_images_are_never_opened(tmp_path):
    root = write_vg(str(tmp_path / 'vg'), [im(1, 2)])
    ds = VG150Dataset(data_root=root, data_prefix=dict(img='no/such/folder/'))
    assert not osp.exists(ds.get_data_info(0)['img_path'])
    assert ds.get_data_info(0)['sample_idx'] == 0


@pytest.mark.parametrize('key', ['img_to_first_rel', 'predicates', 'boxes_1024'])
def test_missing_h5_key(tmp_path, key):
    root = write_vg(str(tmp_path / 'vg'), [im(1, 2)], drop_keys=(key,))
    with pytest.raises(DatasetFormatError, match=f"VG-SGG-with-attri.h5.*'{key}'"):
        VG150Dataset(data_root=root)


def test_relation_index_out_of_range(tmp_path):
    # image 7 has 2 boxes (global rows 3, 4); its relation points at row 5, which belongs to image 8
    images = [im(6, 2, n_obj=3), im(7, 2, n_obj=2, rels=[(0, 2)]), im(8, 2, n_obj=2)]
    root = write_vg(str(tmp_path / 'vg'), images)
    with pytest.raises(DatasetFormatError, match=r'VG-SGG-with-attri\.h5: image_id 7 \(h5 image row 1\).*'
                                                 r'relationship row 1.*\[3, 4\]'):
        VG150Dataset(data_root=root, split='test')


def test_bad_labels_and_missing_files(tmp_path):
    root = write_vg(str(tmp_path / 'vg'), [im(1, 2, labels=[1, 9, 1])])
    with pytest.raises(DatasetFormatError, match='image_id 1.*label 9 outside'):
        VG150Dataset(data_root=root)
    with pytest.raises(FileNotFoundError, match=r'not found: looked for .*nowhere.*data_root'):
        VG150Dataset(data_root=str(tmp_path / 'nowhere'))
    with pytest.raises(FileNotFoundError, match=r'VG150 h5 file not found: looked for .*other\.h5'):
        VG150Dataset(data_root=root, ann_file='other.h5')
    os.remove(osp.join(root, 'image_data.json'))
    with pytest.raises(FileNotFoundError, match=r'image_data\.json'):
        VG150Dataset(data_root=root)


def test_real_vocabulary(fixtures_dir):
    from mmsgg_eval.testing import VG150_CLASSES, VG150_PREDICATES
    classes, predicates = load_vg150_vocabulary(osp.join(fixtures_dir, 'vg150', 'VG-SGG-dicts-with-attri.json'))
    assert len(classes) == 150 and len(predicates) == 50
    with open(osp.join(fixtures_dir, 'vg150', 'VG-SGG-dicts-with-attri.json')) as f:
        info = json.load(f)
    assert classes == [info['idx_to_label'][str(i)] for i in range(1, 151)]
    assert classes == sorted(info['label_to_idx'], key=info['label_to_idx'].get)  # legacy load_info order
    assert predicates == sorted(info['predicate_to_idx'], key=info['predicate_to_idx'].get)
    assert (classes[0], classes[-1], predicates[0], predicates[-1]) == ('airplane', 'zebra', 'above', 'with')
    assert tuple(classes) == VG150_CLASSES and tuple(predicates) == VG150_PREDICATES  # the sample's lists


def test_real_dictionary_with_dataset(tmp_path, fixtures_dir):
    with open(osp.join(fixtures_dir, 'vg150', 'VG-SGG-dicts-with-attri.json')) as f:
        info = json.load(f)
    root = write_vg(str(tmp_path / 'vg'), [im(1, 2, labels=[150, 1, 78], preds=[50])], dict_info=info)
    ds = VG150Dataset(data_root=root)
    meta = ds.metainfo
    assert len(meta['classes']) == 150 and len(meta['predicates']) == 50
    data = ds.get_data_info(0)
    assert [meta['classes'][x['bbox_label']] for x in data['instances']] == ['zebra', 'airplane', 'man']
    assert meta['predicates'][data['relations'][0, 2]] == 'with'
