"""Malformed dataset files, each built in the real on-disk format: the error names the file, the record
(image id / position / entry), the field and what was expected; inputs outside the contract are rejected
when read, not later when a metric meets the sample."""
import json
import os
import os.path as osp

import h5py
import numpy as np
import pytest
from PIL import Image

from mmsgg_eval.datasets import (DatasetFormatError, GQA200Dataset, LoadSceneGraphAnnotations, PSGDataset,
                                 RSVGDDataset, VG150Dataset)
from mmsgg_eval.testing import rsvgd_xml
from tests.datasets.test_gqa200 import entry, write_gqa
from tests.datasets.test_psg import RECORDS, write_psg
from tests.datasets.test_vg150 import im, write_vg


# ---------------------------------------------------------------------------- VG150 (h5)
def test_vg150_garbage_and_truncated_h5_name_the_file(tmp_path):
    root = write_vg(str(tmp_path / 'vg'), [im(1, 2), im(2, 2)])
    path = osp.join(root, 'VG-SGG-with-attri.h5')
    with open(path, 'rb') as f:
        data = f.read()
    with open(path, 'wb') as f:
        f.write(b'this is not an HDF5 file\n' * 100)
    with pytest.raises(DatasetFormatError, match=r'VG-SGG-with-attri\.h5: not a readable HDF5 file'):
        VG150Dataset(data_root=root)
    with open(path, 'wb') as f:  # a copy cut short (e.g. an interrupted download)
        f.write(data[:len(data) // 2])
    with pytest.raises(DatasetFormatError, match=r'VG-SGG-with-attri\.h5: .*(not a readable HDF5 file|cannot be read)'):
        VG150Dataset(data_root=root)


def test_vg150_non_positive_box_size_names_image_and_row(tmp_path):
    # the legacy loader asserts w > 0 and h > 0 for every boxes_1024 row (cx, cy, w, h)
    images = [im(7, 2), im(8, 2, boxes=[[100, 120, 51, 40], [200, 120, -6, 40]])]
    root = write_vg(str(tmp_path / 'vg'), images)
    with pytest.raises(DatasetFormatError, match=r'image_id 8 \(h5 image row 1\), object row 4: boxes_1024 '
                                                 r'\(cx, cy, w, h\) = \[200, 120, -6, 40\], expected w > 0'):
        VG150Dataset(data_root=root, split='test')
    root = write_vg(str(tmp_path / 'vg0'), [im(7, 2, boxes=[[100, 120, 51, 0], [110, 120, 51, 40]])])
    with pytest.raises(DatasetFormatError, match='image_id 7.*object row 0.*expected w > 0 and h > 0'):
        VG150Dataset(data_root=root, split='test')


def test_vg150_zero_image_width_names_the_record(tmp_path):
    root = write_vg(str(tmp_path / 'vg'), [im(7, 2), im(8, 2, width=0)])
    with pytest.raises(DatasetFormatError, match=r'image_data\.json: record of image_id 8 \(position 1 .*width 0 '
                                                 r'x height 375, expected positive'):
        VG150Dataset(data_root=root, split='test')


# ---------------------------------------------------------------------------- GQA200 (json)
@pytest.mark.parametrize('bad, match', [
    (dict(boxes=((10, 10, 50, 60), (20, 30))), r"image 'b\.jpg' \(position 1\): gt_boxes_all\[1\] = \[20, 30\], "
                                               r"expected \[x1, y1, x2, y2\]"),
    (dict(boxes=((10, 10, 50), (20, 30, 90))), r"gt_boxes_all\[0\] = \[10, 10, 50\], expected \[x1, y1, x2, y2\]"),
    (dict(boxes=((10, 10, 50, 60), (90, 30, 20, 70))), r"gt_boxes_all\[1\] = \[90\.0, 30\.0, 20\.0, 70\.0\], "
                                                       r"expected x2 >= x1 and y2 >= y1"),
    (dict(rels=((0, 1, 2), (1, 0))), r"relationships_all\[1\] = \[1, 0\], expected \[subject, object, predicate\]"),
    (dict(rels=((0, 1, 2.5),)), r"relationships_all\[0\] = \[0\.0, 1\.0, 2\.5\], expected \[subject, object, "
                                r"predicate\] \(integers\)"),
])
def test_gqa200_malformed_rows_name_image_field_and_row(tmp_path, bad, match):
    root = write_gqa(str(tmp_path / 'gqa'), None, [entry('a.jpg'), entry('b.jpg', **bad)])
    with pytest.raises(DatasetFormatError, match=r'GQA_200_Test\.json: .*' + match):
        GQA200Dataset(data_root=root, split='test', train_file=None)


def test_gqa200_empty_box_is_kept(tmp_path):
    # x2 == x1 (an empty box) is legal, as in the legacy files; only inverted boxes are rejected
    root = write_gqa(str(tmp_path / 'gqa'), None, [entry('a.jpg', boxes=((10, 10, 10, 60), (20, 30, 90, 70)))])
    ds = GQA200Dataset(data_root=root, split='test', train_file=None)
    assert ds.get_data_info(0)['instances'][0]['bbox'] == [10.0, 10.0, 10.0, 60.0]


# ---------------------------------------------------------------------------- PSG (json + panoptic PNG)
def _psg_with(tmp_path, edit):
    root = write_psg(str(tmp_path / 'psg'), [RECORDS[0]], test_ids=['1'])
    path = osp.join(root, 'psg.json')
    with open(path) as f:
        data = json.load(f)
    edit(data['data'][0])
    with open(path, 'w') as f:
        json.dump(data, f)
    return root


@pytest.mark.parametrize('edit, match', [
    (lambda d: d['annotations'][1].pop('bbox'), r"annotations\[1\] lacks 'bbox'"),
    (lambda d: d['annotations'][2].update(bbox=[25, 15]), r"annotations\[2\]\.bbox = \[25, 15\], expected 4 numbers"),
    (lambda d: [a.update(bbox=a['bbox'][:2]) for a in d['annotations']], r"annotations\[0\]\.bbox = \[0, 0\]"),
    (lambda d: d['annotations'][0].update(bbox=[40, 0, 0, 12]), r"annotations\[0\]\.bbox = \[40, 0, 0, 12\] "
                                                               r"\(bbox_mode 0\), expected .*x2 >= x1"),
    (lambda d: d['annotations'][0].pop('category_id'), r"annotations\[0\] lacks 'category_id'"),
    (lambda d: d['segments_info'][2].pop('id'), r"segments_info\[2\] has no integer `id`"),
    (lambda d: d['relations'].append([0, 1]), r"relations\[5\] = \[0, 1\], expected \[subject, object, predicate\]"),
])
def test_psg_malformed_records_name_image_entry_and_field(tmp_path, edit, match):
    root = _psg_with(tmp_path, edit)
    with pytest.raises(DatasetFormatError, match=r"psg\.json: image_id '1' .*" + match):
        PSGDataset(data_root=root, split='test')


def _load_masks(root):
    info = PSGDataset(data_root=root, split='test').get_data_info(0)
    return info, LoadSceneGraphAnnotations(mask_format='bool')(dict(info))


def test_psg_corrupt_panoptic_png_names_the_file(tmp_path):
    root = write_psg(str(tmp_path / 'psg'), [RECORDS[0]], test_ids=['1'])
    png = osp.join(root, 'coco', 'panoptic_val2017', '000000000001.png')
    with open(png, 'wb') as f:
        f.write(b'\x89PNG garbage')
    with pytest.raises(DatasetFormatError, match=r"000000000001\.png \(image '1'\): not a readable panoptic PNG"):
        _load_masks(root)


def test_psg_segment_missing_from_png_and_png_size(tmp_path):
    root = _psg_with(tmp_path, lambda d: d['segments_info'][1].update(id=123456))
    with pytest.raises(DatasetFormatError, match=r"000000000001\.png \(image '1'\): segments_info\[1\] has id "
                                                 r"123456, which does not occur in the panoptic PNG"):
        _load_masks(root)
    root = write_psg(str(tmp_path / 'psg2'), [RECORDS[0]], test_ids=['1'])
    png = osp.join(root, 'coco', 'panoptic_val2017', '000000000001.png')
    Image.open(png).convert('RGB').resize((20, 15), Image.NEAREST).save(png)
    with pytest.raises(DatasetFormatError, match=r'the panoptic PNG is 20 x 15 \(width x height\) but the image is '
                                                 r'40 x 30'):
        _load_masks(root)
    info, results = _load_masks(write_psg(str(tmp_path / 'psg3'), [RECORDS[0]], test_ids=['1']))
    assert results['gt_masks'].shape == (3, 30, 40)  # the well-formed file still loads


# ---------------------------------------------------------------------------- RSVGD (xml)
def _rsvgd(tmp_path, xmin, ymin, xmax, ymax, size=(800, 800)):
    root = str(tmp_path / 'rsvgd')
    os.makedirs(osp.join(root, 'Annotations'), exist_ok=True)
    text = rsvgd_xml('00001.jpg', [dict(name='ship', bbox=[1, 2, 3, 4], description='the ship'),
                                   dict(name='ship', bbox=[11, 12, 13, 14], description='the other ship')],
                     width=size[0], height=size[1])
    text = text.replace('<xmin>11</xmin>', f'<xmin>{xmin}</xmin>').replace('<ymin>12</ymin>', f'<ymin>{ymin}</ymin>')
    text = text.replace('<xmax>13</xmax>', f'<xmax>{xmax}</xmax>').replace('<ymax>14</ymax>', f'<ymax>{ymax}</ymax>')
    with open(osp.join(root, 'Annotations', '00001.xml'), 'w') as f:
        f.write(text)
    with open(osp.join(root, 'test.txt'), 'w') as f:
        f.write('0\n1\n')
    return root


@pytest.mark.parametrize('box', [(30, 12, 13, 14), (11, 40, 13, 14), ('nan', 12, 13, 14), (11, 12, 'inf', 14)])
def test_rsvgd_inverted_or_non_finite_box_names_file_and_object(tmp_path, box):
    root = _rsvgd(tmp_path, *box)
    with pytest.raises(DatasetFormatError, match=r'00001\.xml: <object> #1: <bndbox> \(xmin, ymin, xmax, ymax\) = '
                                                 r'.*expected finite pixels with xmax >= xmin and ymax >= ymin'):
        RSVGDDataset(data_root=root, split='test')


def test_rsvgd_degenerate_box_kept_and_bad_size(tmp_path):
    ds = RSVGDDataset(data_root=_rsvgd(tmp_path, 13, 12, 13, 14), split='test')
    assert ds.get_data_info(1)['instances'][0]['bbox'] == [13.0, 12.0, 13.0, 14.0]
    root = _rsvgd(tmp_path, 11, 12, 13, 14, size=(0, 800))
    with pytest.raises(DatasetFormatError, match=r'00001\.xml: <size> is 0 x 800, expected positive'):
        RSVGDDataset(data_root=root, split='test')
