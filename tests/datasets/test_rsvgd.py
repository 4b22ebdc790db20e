"""RSVGDDataset (DIOR-RSVG) against XML / split files written here and the real fixture files.

Reference followed: ZhanYang-nwpu/RSVG-pytorch data_loader.py: one global counter over the ``<object>``s of
the XML files (sorted by numeric stem), ``if count in Index`` -> sample (image, box, description); so samples come
in enumeration order and the split files hold GLOBAL object indices.
"""
import os
import os.path as osp
import shutil

import numpy as np
import pytest

from mmsgg_eval.datasets import DIOR_CLASSES, DatasetFormatError, RSVGDDataset
from mmsgg_eval.datasets.rsvgd import parse_rsvgd_xml, read_split_indices
from mmsgg_eval.testing import rsvgd_xml

# file stem -> objects; written in a scrambled order so that only sorting gives the right enumeration
FILES = {
    '00002': [('ship', (10, 20, 30, 40), 'the ship on the left'), ('bridge', (0, 0, 799, 100), 'a long bridge'),
              ('ship', (50, 60, 70, 80), 'the ship on the right')],
    '00010': [('windmill', (1, 2, 3, 4), 'the windmill')],
    '00001': [('golffield', (133, 237, 684, 672), 'A green and brown golf field'),
              ('vehicle', (5, 5, 15, 25), 'the white vehicle')],
    '00003': [('Expressway-Service-area', (100, 100, 300, 300), 'the service area'),
              ('storagetank', (400, 400, 420, 430), 'the gray storage tank'),
              ('dam', (600, 10, 790, 200), 'the dam at the top right'),
              ('tenniscourt', (300, 500, 350, 560), 'a tennis court')],
}
# global enumeration: 00001 -> 0, 1; 00002 -> 2, 3, 4; 00003 -> 5, 6, 7, 8; 00010 -> 9
ENUMERATION = [('00001', 0), ('00001', 1), ('00002', 0), ('00002', 1), ('00002', 2), ('00003', 0), ('00003', 1),
               ('00003', 2), ('00003', 3), ('00010', 0)]


def write_rsvgd(root, files=FILES, splits=None):
    os.makedirs(osp.join(root, 'Annotations'), exist_ok=True)
    for stem in ['00010', '00002', '00003', '00001']:
        if stem in files:
            objs = [dict(name=n, bbox=b, description=t) for n, b, t in files[stem]]
            with open(osp.join(root, 'Annotations', f'{stem}.xml'), 'w') as f:
                f.write(rsvgd_xml(f'{stem}.jpg', objs))
    splits = splits or dict(train=[9, 0, 3, 5, 7], val=[2, 8], test=[6, 1, 4])  # unsorted on purpose
    for name, idx in splits.items():
        with open(osp.join(root, f'{name}.txt'), 'w') as f:
            f.write(''.join(f'{i}\n' for i in idx))
    return root


def test_enumeration_across_files(tmp_path):
    root = write_rsvgd(str(tmp_path / 'rsvgd'))
    for split, idx in dict(train=[0, 3, 5, 7, 9], val=[2, 8], test=[1, 4, 6]).items():
        ds = RSVGDDataset(data_root=root, split=split)
        assert len(ds) == len(idx)
        for i, g in enumerate(idx):  # enumeration order, whatever the order in the split file
            stem, k = ENUMERATION[g]
            name, box, text = FILES[stem][k]
            info = ds.get_data_info(i)
            assert info['ann_id'] == g and info['img_id'] == stem
            assert info['img_path'] == osp.join(root, 'JPEGImages', f'{stem}.jpg')
            assert (info['width'], info['height']) == (800, 800)
            assert info['text'] == text
            assert info['instances'] == [dict(bbox=[float(v) for v in box], bbox_label=DIOR_CLASSES.index(name),
                                              ignore_flag=0)]
            assert 'relations' not in info
    meta = ds.metainfo
    assert meta['classes'] == DIOR_CLASSES and len(meta['classes']) == 20
    assert meta['dataset_name'] == 'RSVGD' and meta['iou_plus_one'] is False


def test_malformed(tmp_path):
    root = write_rsvgd(str(tmp_path / 'a'), splits=dict(test=[0, 10]))
    with pytest.raises(DatasetFormatError, match=r'test\.txt: line 2 holds object index 10.*10 objects'):
        RSVGDDataset(data_root=root, split='test')
    root = write_rsvgd(str(tmp_path / 'b'))
    path = osp.join(root, 'Annotations', '00002.xml')
    with open(path) as f:
        text = f.read()
    start = text.index('<bndbox>', text.index('<name>bridge</name>'))
    with open(path, 'w') as f:
        f.write(text[:start] + text[text.index('</bndbox>', start) + len('</bndbox>'):])
    with pytest.raises(DatasetFormatError, match=r'00002\.xml: <object> #1 has no <bndbox>'):
        RSVGDDataset(data_root=root, split='test')
    root = write_rsvgd(str(tmp_path / 'c'), files=dict(FILES, **{'00010': [('castle', (1, 2, 3, 4), 'a castle')]}))
    with pytest.raises(DatasetFormatError, match=r"00010\.xml: <object> #0 \(global index 9\).*'castle'"):
        RSVGDDataset(data_root=root, split='train')
    with pytest.raises(FileNotFoundError, match=r'split file not found.*nothing\.txt'):
        RSVGDDataset(data_root=root, split_file='nothing.txt')
    with pytest.raises(FileNotFoundError, match='annotation folder not found'):
        RSVGDDataset(data_root=str(tmp_path / 'empty'))


def test_real_xml(tmp_path, fixtures_dir):
    src = osp.join(fixtures_dir, 'rsvgd')
    parsed = parse_rsvgd_xml(osp.join(src, '00001.xml'))
    assert parsed['filename'] == '00001.jpg' and (parsed['width'], parsed['height']) == (800, 800)
    assert len(parsed['objects']) == 1
    obj = parsed['objects'][0]
    assert obj['name'] == 'golffield' and tuple(obj['bbox']) == (133, 237, 684, 672)
    assert obj['text'] == 'A green and brown golf field'
    root = str(tmp_path / 'real')
    os.makedirs(osp.join(root, 'Annotations'))
    os.makedirs(osp.join(root, 'JPEGImages'))
    shutil.copy(osp.join(src, '00001.xml'), osp.join(root, 'Annotations'))
    shutil.copy(osp.join(src, '00001.jpg'), osp.join(root, 'JPEGImages'))
    with open(osp.join(root, 'test.txt'), 'w') as f:
        f.write('0\n')
    info = RSVGDDataset(data_root=root, split='test').get_data_info(0)
    assert info['instances'][0]['bbox'] == [133, 237, 684, 672]
    assert DIOR_CLASSES[info['instances'][0]['bbox_label']] == 'golffield'
    assert info['text'] == 'A green and brown golf field' and osp.isfile(info['img_path'])


def test_real_split_files(fixtures_dir):
    splits = {k: read_split_indices(osp.join(fixtures_dir, 'rsvgd', f'{k}.txt')) for k in ('train', 'val', 'test')}
    assert {k: len(v) for k, v in splits.items()} == dict(train=26991, val=3829, test=7500)
    union = np.concatenate(list(splits.values()))
    assert len(np.unique(union)) == len(union) == 38320  # disjoint
    np.testing.assert_array_equal(np.sort(union), np.arange(38320))  # together: every object of DIOR-RSVG
    with pytest.raises(DatasetFormatError, match=r'val\.txt: line \d+ holds object index 380\d\d.*38000 objects'):
        read_split_indices(osp.join(fixtures_dir, 'rsvgd', 'val.txt'), num_objects=38000)
