"""GQA200Dataset against files written here in the SHA-GCL format.

Reference followed: dongxingning/SHA-GCL-for-SGG, maskrcnn_benchmark/data/datasets/gqa.py: ``load_graphs``
counts every entry of the file (``items += 1``) and, for val/test, skips ``items == 5580`` (raw 0-based
position 5579) BEFORE dropping entries without boxes or relations; val = the first 5000 kept test entries;
boxes go through ``BoxList`` (float32) and ``clip_to_image(remove_empty=False)`` (clamp to [0, W-1] x [0, H-1]).
"""
import json
import os
import os.path as osp

import numpy as np
import pytest
import torch

from mmsgg_eval.datasets import DatasetFormatError, GQA200Dataset

CLASSES = ['man', 'shirt', 'table', 'window']
PREDICATES = ['on', 'wearing', 'near']


def entry(name, boxes=((10, 10, 50, 60), (20, 30, 90, 70)), classes=(1, 2), rels=((0, 1, 2),), w=100, h=80):
    return dict(name=name, boxes=[list(b) for b in boxes], classes=list(classes), rels=[list(r) for r in rels],
                w=w, h=h)


def write_gqa(root, train, test, info=None):
    os.makedirs(root, exist_ok=True)
    for fname, entries in (('GQA_200_Train.json', train), ('GQA_200_Test.json', test)):
        if entries is None:
            continue
        with open(osp.join(root, fname), 'w') as f:
            json.dump(dict(filenames_all=[e['name'] for e in entries],
                           img_info_all=[dict(width=e['w'], height=e['h']) for e in entries],
                           gt_boxes_all=[e['boxes'] for e in entries],
                           gt_classes_all=[e['classes'] for e in entries],
                           relationships_all=[e['rels'] for e in entries]), f)
    info = info or dict(ind_to_classes=['__background__'] + CLASSES, ind_to_predicates=['__background__'] + PREDICATES,
                        rel_count={}, rel_name_to_id={p: i + 1 for i, p in enumerate(PREDICATES)})
    with open(osp.join(root, 'GQA_200_ID_Info.json'), 'w') as f:
        json.dump(info, f)
    return root


def names(ds):
    return [osp.basename(ds.get_data_info(i)['img_path']) for i in range(len(ds))]


@pytest.fixture(scope='module')
def big_root(tmp_path_factory):
    """A test file with 5,600 entries (position 5579 is the legacy bad image) and a train file with 5,600."""
    test = [entry(f'{k}.jpg') for k in range(5600)]
    test[0] = entry('norel.jpg', rels=())
    test[1] = entry('nobox.jpg', boxes=(), classes=(), rels=())
    train = [entry(f't{k}.jpg', rels=((1, 0, 1 + k % 3),)) for k in range(5600)]
    return write_gqa(str(tmp_path_factory.mktemp('gqa')), train, test)


def test_legacy_bad_image_and_val_selection(big_root):
    test = GQA200Dataset(data_root=big_root, split='test', train_file=None)
    kept = names(test)
    assert '5579.jpg' not in kept and 'norel.jpg' not in kept and 'nobox.jpg' not in kept
    assert len(kept) == 5600 - 3 and kept[:2] == ['2.jpg', '3.jpg'] and kept[-1] == '5599.jpg'
    val = GQA200Dataset(data_root=big_root, split='val', train_file=None)
    assert names(val) == kept[:5000]  # first 5000 AFTER dropping empty images
    val3 = GQA200Dataset(data_root=big_root, split='val', num_val_images=3, train_file=None)
    assert names(val3) == ['2.jpg', '3.jpg', '4.jpg']
    no_skip = names(GQA200Dataset(data_root=big_root, split='test', skip_legacy_bad_image=False, train_file=None))
    assert '5579.jpg' in no_skip and len(no_skip) == 5600 - 2
    train = GQA200Dataset(data_root=big_root, split='train')  # the train file never skips position 5579
    assert len(train) == 5600 and 't5579.jpg' in names(train)
    assert train.ann_file.endswith('GQA_200_Train.json') and test.ann_file.endswith('GQA_200_Test.json')


def test_boxes_labels_relations(tmp_path):
    test = [entry('a.jpg', boxes=((-3, 5, 120.7, 79.5), (10.25, 20.1, 30, 40), (0, 0, 0, 0)), classes=(4, 1, 3),
                  rels=((2, 0, 3), (0, 1, 1), (2, 0, 3)), w=100, h=80)]
    root = write_gqa(str(tmp_path / 'gqa'), None, test)
    ds = GQA200Dataset(data_root=root, split='test', train_file=None)
    info = ds.get_data_info(0)
    assert info['img_id'] == 'a' and (info['width'], info['height']) == (100, 80)
    assert info['img_path'] == osp.join(root, 'images', 'a.jpg')
    boxes = np.array([x['bbox'] for x in info['instances']], np.float32)
    legacy = torch.as_tensor(np.array(test[0]['boxes']), dtype=torch.float32)
    legacy[:, 0::2] = legacy[:, 0::2].clamp(min=0, max=99)
    legacy[:, 1::2] = legacy[:, 1::2].clamp(min=0, max=79)
    np.testing.assert_array_equal(boxes.view(np.int32), legacy.numpy().view(np.int32))
    assert boxes[0].tolist() == [0, 5, 99, 79] and boxes[2].tolist() == [0, 0, 0, 0]  # empty box kept
    assert [x['bbox_label'] for x in info['instances']] == [3, 0, 2]
    assert info['relations'].dtype == np.int64
    assert info['relations'].tolist() == [[2, 0, 2], [0, 1, 0], [2, 0, 2]]  # duplicates kept in test
    meta = ds.metainfo
    assert meta['classes'] == tuple(CLASSES) and meta['predicates'] == tuple(PREDICATES)
    assert meta['dataset_name'] == 'GQA200' and meta['iou_plus_one'] is True
    assert 'predicate_counts' not in meta and 'train_triplets' not in meta


def test_training_statistics_and_train_duplicates(tmp_path, monkeypatch):
    train = [entry('t0.jpg', classes=(1, 2), rels=((0, 1, 2), (0, 1, 3), (1, 0, 2))),
             entry('t1.jpg', classes=(3, 3), rels=((1, 0, 1),)),
             entry('t2.jpg', rels=())]
    root = write_gqa(str(tmp_path / 'gqa'), train, [entry('x.jpg')])
    meta = GQA200Dataset(data_root=root, split='test', lazy_init=True).metainfo
    assert meta['predicate_counts'] == [1, 2, 1]
    assert meta['train_triplets'].tolist() == [[0, 1, 1], [0, 1, 2], [1, 0, 1], [2, 2, 0]]
    said = []
    monkeypatch.setattr('mmsgg_eval.datasets.base.print_log', lambda msg, **kw: said.append(msg))
    none = GQA200Dataset(data_root=root, split='test', train_file='absent.json', lazy_init=True).metainfo
    assert 'predicate_counts' not in none and 'train_triplets' not in none
    assert len(said) == 1 and said[0].startswith('GQA200Dataset: training file') and 'absent.json' in said[0]
    tr = GQA200Dataset(data_root=root, split='train')
    assert len(tr) == 2
    assert tr.get_data_info(0)['relations'].tolist() == [[0, 1, 1], [1, 0, 1]]  # one relation per pair


def test_malformed_files(tmp_path):
    root = write_gqa(str(tmp_path / 'a'), None, [entry('ok.jpg'), entry('bad.jpg', rels=((0, 2, 1),))])
    with pytest.raises(DatasetFormatError, match=r"GQA_200_Test\.json: image 'bad\.jpg' \(position 1\).*object "
                                                 r'index 2 outside \[0, 1\]'):
        GQA200Dataset(data_root=root, split='test')
    root = write_gqa(str(tmp_path / 'b'), None, [entry('p.jpg', rels=((0, 1, 4),))])
    with pytest.raises(DatasetFormatError, match="'p.jpg'.*predicate 4 outside"):
        GQA200Dataset(data_root=root, split='test')
    root = write_gqa(str(tmp_path / 'c'), None, [entry('x.jpg')],
                     info=dict(ind_to_classes=CLASSES, ind_to_predicates=['__background__'] + PREDICATES))
    with pytest.raises(DatasetFormatError, match='__background__'):
        GQA200Dataset(data_root=root, split='test')
    root = str(tmp_path / 'b')
    with pytest.raises(FileNotFoundError, match=r'GQA200 annotation file not found.*missing/GQA_200_Test\.json'):
        GQA200Dataset(data_root=root, ann_file='missing/GQA_200_Test.json')
    with open(osp.join(root, 'GQA_200_Test.json')) as f:
        data = json.load(f)
    del data['relationships_all']
    with open(osp.join(root, 'GQA_200_Test.json'), 'w') as f:
        json.dump(data, f)
    with pytest.raises(DatasetFormatError, match=r"GQA_200_Test\.json: missing key 'relationships_all'"):
        GQA200Dataset(data_root=root, split='test')
