"""OIv6Dataset against files written here in PySGG's format (``annotations/vrd-{split}-anno.json``,
``annotations/categories_dict.json``).

Reference followed: SHTUPLUS/PySGG, pysgg/data/datasets/open_image.py (commit a63942a): ``load_annotations``
drops records with an empty ``rel`` or ``bbox`` (every split), adds 1 to labels and predicates (0-based here);
``get_groundtruth(evaluation=True)`` builds a float32 ``BoxList``, clamps it to [0, W-1] x [0, H-1]
(``clip_to_image(remove_empty=False)``) and returns the file's relations, duplicates included (duplicates are
filtered only in training). The comparison with PySGG's own code on the sample files is in docs/protocols.md.
"""
import json
import os
import os.path as osp

import numpy as np
import pytest
import torch

from mmsgg_eval.datasets import DatasetFormatError, OIv6Dataset
from tests.sgg_samples import perfect_predcls

CLASSES = ['Man', 'Guitar', 'Table', 'Chair']
PREDICATES = ['at', 'holds', 'plays']


def rec(img_fn, boxes=((10, 10, 50, 60), (20, 30, 90, 70)), labels=(0, 1), rels=((0, 1, 2),), w=100, h=80):
    return dict(img_fn=img_fn, img_size=[w, h], bbox=[list(b) for b in boxes], det_labels=list(labels),
                rel=[list(r) for r in rels])


def write_oi(root, splits, cats=None):
    """``splits``: {split: list of records (or raw JSON)}; writes the annotation folder of PySGG's layout."""
    ann = osp.join(root, 'annotations')
    os.makedirs(ann, exist_ok=True)
    for split, records in splits.items():
        with open(osp.join(ann, f'vrd-{split}-anno.json'), 'w') as f:
            json.dump(records, f)
    with open(osp.join(ann, 'categories_dict.json'), 'w') as f:
        json.dump(cats if cats is not None else dict(obj=CLASSES, rel=PREDICATES), f)
    return root


def boxes_of(info):
    return np.array([x['bbox'] for x in info['instances']], np.float32).reshape(-1, 4)


def test_reading_filtering_and_paths(tmp_path):
    test = [rec('a1'), rec('norel', rels=()), rec('nobox', boxes=(), labels=(), rels=()), rec('b2', w=640, h=480)]
    root = write_oi(str(tmp_path / 'oi'), dict(test=test))
    ds = OIv6Dataset(data_root=root, split='test', train_file=None)
    assert ds.ann_file == osp.join(root, 'annotations', 'vrd-test-anno.json')
    assert [ds.get_data_info(i)['img_id'] for i in range(len(ds))] == ['a1', 'b2']  # empty rel / bbox dropped
    info = ds.get_data_info(1)
    assert info['img_path'] == osp.join(root, 'images', 'b2.jpg') and (info['width'], info['height']) == (640, 480)
    assert [x['bbox_label'] for x in info['instances']] == [0, 1]
    assert info['relations'].dtype == np.int64 and info['relations'].tolist() == [[0, 1, 2]]
    # val reads its own file
    write_oi(root, dict(val=[rec('v0'), rec('v1', rels=())]))
    val = OIv6Dataset(data_root=root, split='val', train_file=None)
    assert val.ann_file.endswith('vrd-val-anno.json') and len(val) == 1 and val.get_data_info(0)['img_id'] == 'v0'


def test_a_split_without_kept_images_is_empty(tmp_path):
    root = write_oi(str(tmp_path / 'oi'), dict(test=[rec('norel', rels=()), rec('nobox', boxes=(), rels=())]))
    ds = OIv6Dataset(data_root=root, split='test', train_file=None)
    assert len(ds) == 0 and ds.metainfo['dataset_name'] == 'OIv6'


def test_boxes_clamped_in_float32_like_pysgg(tmp_path):
    boxes = ((-3, 5, 120.7, 79.5), (10.25, 20.1, 30, 40), (0, 0, 100, 80), (120, 5, 130, 10), (1 / 3, 2 / 3, 5.1, 7))
    test = [rec('a', boxes=boxes, labels=(3, 0, 2, 1, 1), rels=((2, 0, 1), (0, 1, 0)), w=100, h=80)]
    root = write_oi(str(tmp_path / 'oi'), dict(test=test))
    got = boxes_of(OIv6Dataset(data_root=root, split='test', train_file=None).get_data_info(0))
    legacy = torch.as_tensor(np.array(test[0]['bbox']), dtype=torch.float32)  # BoxList(..., 'xyxy')
    legacy[:, 0].clamp_(min=0, max=100 - 1)
    legacy[:, 1].clamp_(min=0, max=80 - 1)
    legacy[:, 2].clamp_(min=0, max=100 - 1)
    legacy[:, 3].clamp_(min=0, max=80 - 1)
    np.testing.assert_array_equal(got.view(np.int32), legacy.numpy().view(np.int32))
    assert got[0].tolist() == [0, 5, 99, 79] and got[2].tolist() == [0, 0, 99, 79]  # x2 = W, y2 = H -> W-1, H-1
    assert got[3].tolist() == [99, 5, 99, 10]  # made empty by the clamp: kept (remove_empty=False)
    assert got[4, 0] == np.float32(1 / 3)  # float32 of the file's number
    unclipped = OIv6Dataset(data_root=root, split='test', train_file=None, clip_boxes=False)
    np.testing.assert_array_equal(boxes_of(unclipped.get_data_info(0)), np.array(boxes, np.float32))


def test_duplicates_kept_at_test_one_per_pair_in_training(tmp_path):
    rels = ((0, 1, 2), (0, 1, 1), (0, 1, 2), (1, 0, 0))
    root = write_oi(str(tmp_path / 'oi'), dict(train=[rec('t', rels=rels)], val=[rec('v', rels=rels)],
                                                test=[rec('x', rels=rels)]))
    for split in ('val', 'test'):
        assert OIv6Dataset(data_root=root, split=split).get_data_info(0)['relations'].tolist() == \
            [list(r) for r in rels]
    train = OIv6Dataset(data_root=root, split='train')
    assert train.get_data_info(0)['relations'].tolist() == [[0, 1, 2], [1, 0, 0]]  # first predicate per pair
    keep = OIv6Dataset(data_root=root, split='train', duplicate_rels='keep')
    assert keep.get_data_info(0)['relations'].tolist() == [list(r) for r in rels]


def test_metainfo_and_training_statistics(tmp_path, monkeypatch):
    train = [rec('t0', labels=(0, 1), rels=((0, 1, 2), (0, 1, 2), (0, 1, 1), (1, 0, 2))),
             rec('t1', labels=(3, 3), rels=((1, 0, 0),)),
             rec('t2', rels=()),  # dropped: counts nothing
             rec('t3', boxes=((0, 0, 5, 5), (100, 100, 120, 120)), labels=(2, 0), rels=((0, 1, 2),))]  # no overlap
    root = write_oi(str(tmp_path / 'oi'), dict(train=train, test=[rec('x')]))
    meta = OIv6Dataset(data_root=root, split='test', lazy_init=True).metainfo
    assert meta['classes'] == tuple(CLASSES) and meta['predicates'] == tuple(PREDICATES)
    assert meta['dataset_name'] == 'OIv6' and meta['iou_plus_one'] is True
    # every training relation: duplicates included, no overlap filter (PySGG's OI statistics)
    assert meta['predicate_counts'] == [1, 1, 4]
    assert meta['train_triplets'].tolist() == [[0, 1, 1], [0, 1, 2], [1, 0, 2], [2, 0, 2], [3, 3, 0]]
    said = []
    monkeypatch.setattr('mmsgg_eval.datasets.base.print_log', lambda msg, **kw: said.append(msg))
    none = OIv6Dataset(data_root=root, split='test', train_file='annotations/absent.json', lazy_init=True).metainfo
    assert 'predicate_counts' not in none and 'train_triplets' not in none
    assert len(said) == 1 and said[0].startswith('OIv6Dataset: training file') and 'absent.json' in said[0]
    assert OIv6Dataset(data_root=root, split='train').metainfo['predicate_counts'] == [1, 1, 4]


def test_metainfo_lengths_checked_against_the_file(tmp_path):
    root = write_oi(str(tmp_path / 'oi'), dict(test=[rec('x')]))
    with pytest.raises(ValueError, match=r"metainfo\['predicates'\] has 2 entries but the annotation files "
                                         r'define 3'):
        OIv6Dataset(data_root=root, split='test', metainfo=dict(predicates=('a', 'b')))


@pytest.mark.parametrize('bad, match', [
    (dict(rels=((0, 2, 1),)), r'rel 0: object index 2 outside \[0, 1\]'),
    (dict(rels=((0, 1, 1), (-1, 1, 1))), r'rel 1: object index -1 outside \[0, 1\]'),
    (dict(rels=((0, 1, 3),)), r'rel 0: predicate 3 outside \[0, 2\]'),
    (dict(labels=(0, 4)), r'object 1: class 4 outside \[0, 3\]'),
    (dict(labels=(-1, 0)), r'object 0: class -1 outside \[0, 3\]'),
    (dict(boxes=((10, 10, 50, 60), (90, 30, 20, 70))), r'bbox\[1\] = \[90.0, 30.0, 20.0, 70.0\], expected x2 >= x1'),
    (dict(boxes=((10, 10, 50, 60), (20, 30, 90))), r'bbox\[1\] = \[20, 30, 90\], expected \[x1, y1, x2, y2\]'),
    (dict(labels=(0,)), r'2 boxes but 1 det_labels'),
    (dict(rels=((0, 1),)), r'rel\[0\] = \[0, 1\], expected \[subject, object, predicate\]'),
    (dict(rels=((0, 1, 1.5),)), r'rel\[0\] = \[0.0, 1.0, 1.5\], expected \[subject, object, predicate\]'),
    (dict(w=0), r'img_size = \[0, 80\], expected \[width, height\]'),
    (dict(labels=([0], [1])), r'det_labels\[0\] = \[0\], expected an integer class'),
    (dict(labels=(0, True)), r'det_labels\[1\] = True, expected an integer class'),
    (dict(labels=(0, 1.5)), r'det_labels holds non-integer classes'),
    (dict(boxes=((10, 10, 50, 60), (float('nan'), 30, 90, 70))),
     r'bbox\[1\] = \[nan, 30.0, 90.0, 70.0\] is not finite'),
])
def test_bad_record_names_file_index_and_img_fn(tmp_path, bad, match):
    root = write_oi(str(tmp_path / 'oi'), dict(test=[rec('good'), rec('rec_7f3a', **bad)]))
    with pytest.raises(DatasetFormatError, match=r"vrd-test-anno\.json: record 1 \(img_fn 'rec_7f3a'\).*" + match):
        OIv6Dataset(data_root=root, split='test', train_file=None)


@pytest.mark.parametrize('first, second', [(dict(labels=(0, 9)), dict(rels=((0, 5, 1),))),
                                           (dict(rels=((0, 5, 1),)), dict(labels=(0, 9))),
                                           (dict(boxes=((5, 5, 1, 9), (0, 0, 3, 3))), dict(labels=(0, 9)))])
def test_the_first_bad_record_in_file_order_is_named(tmp_path, first, second):
    records = [rec(f'ok{k}') for k in range(50)]
    records[20], records[31] = rec('first', **first), rec('second', **second)
    root = write_oi(str(tmp_path / 'oi'), dict(test=records))
    with pytest.raises(DatasetFormatError, match=r"record 20 \(img_fn 'first'\)"):
        OIv6Dataset(data_root=root, split='test', train_file=None)


def test_bad_training_record_is_named_when_reading_the_statistics(tmp_path):
    root = write_oi(str(tmp_path / 'oi'), dict(train=[rec('t0'), rec('t1'), rec('t2', labels=(0, 9))],
                                                test=[rec('x')]))
    with pytest.raises(DatasetFormatError, match=r"vrd-train-anno\.json: record 2 \(img_fn 't2'\), object 1: class 9"):
        OIv6Dataset(data_root=root, split='test')


@pytest.mark.parametrize('content, match', [
    (dict(img_fn='a'), r"record 0 \(img_fn 'a'\): missing \['img_size', 'bbox', 'det_labels', 'rel'\]"),
    ('not a dict', r'record 0 \(img_fn None\): missing'),
    (dict(rec('a'), img_fn=7), r'record 0 \(img_fn 7\): img_fn must be a string'),
    (dict(rec('a'), rel='0 1 2'), r"record 0 \(img_fn 'a'\): rel must be a list"),
])
def test_malformed_records(tmp_path, content, match):
    root = write_oi(str(tmp_path / 'oi'), dict(test=[content]))
    with pytest.raises(DatasetFormatError, match=r'vrd-test-anno\.json: ' + match):
        OIv6Dataset(data_root=root, split='test', train_file=None)


def test_malformed_files(tmp_path):
    root = write_oi(str(tmp_path / 'a'), dict(test=dict(images=[])))
    with pytest.raises(DatasetFormatError, match=r'vrd-test-anno\.json: expected a list of image records'):
        OIv6Dataset(data_root=root, split='test', train_file=None)
    root = write_oi(str(tmp_path / 'b'), dict(test=[rec('x')]), cats=dict(obj=CLASSES))
    with pytest.raises(DatasetFormatError, match=r"categories_dict\.json: 'rel' must be a non-empty list"):
        OIv6Dataset(data_root=root, split='test', train_file=None)
    root = write_oi(str(tmp_path / 'c'), dict(test=[rec('x')]),
                    cats=dict(obj=['__background__'] + CLASSES, rel=PREDICATES))
    with pytest.raises(DatasetFormatError, match='__background__'):
        OIv6Dataset(data_root=root, split='test', train_file=None)
    root = write_oi(str(tmp_path / 'd'), dict(test=[rec('x')]))
    with pytest.raises(FileNotFoundError, match=r'OIv6 annotation file not found.*vrd-val-anno\.json'):
        OIv6Dataset(data_root=root, split='val', train_file=None)
    with open(osp.join(root, 'annotations', 'vrd-test-anno.json'), 'w') as f:
        f.write('[{"img_fn": ')  # truncated download
    with pytest.raises(DatasetFormatError, match=r'vrd-test-anno\.json: not valid JSON'):
        OIv6Dataset(data_root=root, split='test', train_file=None)
    with pytest.raises(ValueError, match='split must be one of'):
        OIv6Dataset(data_root=root, split='minival')


# ---------------------------------------------------------------------------- the sample (mmsgg_eval.testing)
@pytest.fixture(scope='module')
def sample(tmp_path_factory):
    from mmsgg_eval.testing import write_oiv6_sample
    return write_oiv6_sample(str(tmp_path_factory.mktemp('sample')))['root']


def raw_records(root, split):
    with open(osp.join(root, 'annotations', f'vrd-{split}-anno.json')) as f:
        return json.load(f)


def test_sample_in_pysgg_format(sample):
    from mmsgg_eval.testing import OIV6_PREDICATES, OIV6_SAMPLE_SIZES
    sets = {s: OIv6Dataset(data_root=sample, split=s) for s in ('train', 'val', 'test')}
    assert {s: len(d) for s, d in sets.items()} == OIV6_SAMPLE_SIZES
    meta = sets['test'].metainfo
    assert len(meta['classes']) == 601 and meta['predicates'] == OIV6_PREDICATES
    raw = {s: raw_records(sample, s) for s in sets}
    for s, records in raw.items():  # one image without relations and one without boxes per split, dropped
        assert len(records) == OIV6_SAMPLE_SIZES[s] + 2
        assert sum(not r['rel'] for r in records) == 2 and sum(not r['bbox'] for r in records) == 1
    # every training relation counts, duplicates included; the training split keeps one relation per pair
    assert sum(meta['predicate_counts']) == sum(len(r['rel']) for r in raw['train'])
    assert sum(len(sets['train'].get_data_info(i)['relations']) for i in range(len(sets['train']))) < \
        sum(meta['predicate_counts'])
    clamped = duplicates = 0
    for split in ('val', 'test'):
        kept = [r for r in raw[split] if r['rel'] and r['bbox']]
        for i, record in enumerate(kept):
            info = sets[split].get_data_info(i)
            assert info['img_id'] == record['img_fn'] and [info['width'], info['height']] == record['img_size']
            rels = info['relations'].tolist()
            assert rels == record['rel']  # duplicates kept
            duplicates += len(rels) - len({tuple(r) for r in rels})
            w, h = record['img_size']
            raw_boxes = np.array(record['bbox'], np.float32)
            assert np.array_equal(boxes_of(info), np.minimum(np.maximum(raw_boxes, 0), [w - 1, h - 1, w - 1, h - 1]))
            clamped += int((raw_boxes[:, 2] >= w).sum() + (raw_boxes[:, 3] >= h).sum())
            from PIL import Image
            with Image.open(info['img_path']) as img:
                assert img.format == 'JPEG' and img.size == (w, h)
    assert clamped >= 3 and duplicates >= 2  # border boxes and duplicate GT triplets in the evaluation splits


def test_sample_deterministic(sample, tmp_path):
    from mmsgg_eval.testing import write_oiv6_sample
    again = write_oiv6_sample(str(tmp_path), with_images=False)['root']
    for split in ('train', 'val', 'test'):
        assert raw_records(sample, split) == raw_records(again, split)


def test_metric_contract_and_predicate_groups_on_sample(sample):
    """Packed samples satisfy the metrics' data contract: perfect PredCls predictions hit every GT relation;
    mR's head / body / tail groups are the training-frequency thirds, as for the other non-VG150 datasets."""
    from mmsgg_eval.datasets import LoadSceneGraphAnnotations, PackSceneGraphInputs
    from mmsgg_eval.metrics import OIRelationMetric, SGMeanRecall
    from mmsgg_eval.metrics.predicate_groups import frequency_thirds
    ds = OIv6Dataset(data_root=sample, split='test', pipeline=[LoadSceneGraphAnnotations(), PackSceneGraphInputs()])
    assert len(ds.metainfo['predicates']) == 30
    samples = perfect_predcls(ds)
    result = {}
    oi = OIRelationMetric(mode='predcls')
    for metric in (SGMeanRecall(mode='predcls', topk=(50,)), oi):
        metric.dataset_meta = ds.metainfo
        metric.process({}, samples)
        result.update(metric.evaluate(len(ds)))
    present = {int(p) for s in samples for p in s.gt_relations.labels}
    assert result['predcls/R@50'] == pytest.approx(100)
    # AP: every entry is a TP except the second entry of a duplicated GT triplet (PySGG's greedy claim goes to
    # the first of equally overlapping GT relations; a claimed one makes the entry a false positive)
    duplicated = set()
    for s in samples:
        triplets = torch.cat([s.gt_relations.pair_idxs, s.gt_relations.labels[:, None]], 1).tolist()
        duplicated |= {t[2] for k, t in enumerate(triplets) if t in triplets[:k]}
    assert duplicated  # the sample has duplicate GT triplets
    for i, row in enumerate(oi.extra_results()['predcls/per_predicate_ap'].values()):
        if i in duplicated:
            assert row['AP_rel'] < 100 and row['AP_phr'] < 100
        else:
            assert row['AP_rel'] == row['AP_phr'] == (100 if i in present else 0)
    assert result['predcls/mR@50'] == pytest.approx(100 * len(present) / 30)  # mean over all 30 predicates
    thirds = frequency_thirds(ds.metainfo['predicates'], ds.metainfo['predicate_counts'])
    for group, names in thirds.items():
        hit = [n for n in names if ds.metainfo['predicates'].index(n) in present]
        assert result[f'predcls/mR@50_{group}'] == pytest.approx(100 * len(hit) / len(names))
