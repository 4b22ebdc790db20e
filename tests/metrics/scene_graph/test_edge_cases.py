"""The scene-graph metrics on edge inputs: huge K, zero-shot index checks, and the diagnostics of the most common
input mistakes (boxes in the resized / normalised frame, shifted predicate score columns)."""
import warnings

import pytest
import torch

from mmsgg_eval.metrics import SGBenchMetric, SGMeanRecall, SGRecall
from tests.sgg_samples import random_dataset
from tests.metrics.scene_graph.test_recall import META, NUM_CLASSES, NUM_PREDICATES, run_metrics


def two_relation_image(idx, hit_both=False, predicate=2, width=NUM_PREDICATES + 1, background='first'):
    """PredCls image with GT relations 0->1 and 1->0 (``predicate``); the model predicts both pairs, the
    second with ``predicate`` only when ``hit_both`` (else predicate 0)."""
    scores = torch.zeros((2, width))
    offset = 1 if (width == NUM_PREDICATES + 1 and background == 'first') else 0
    scores[0, predicate + offset] = 0.9
    scores[1, (predicate if hit_both else 0) + offset] = 0.8
    if width == NUM_PREDICATES + 1 and background == 'last':
        scores[:, -1] = 0.05
    elif width == NUM_PREDICATES + 1:
        scores[:, 0] = 0.05
    return dict(sample_idx=idx, img_id=f'img{idx}',
                gt_instances=dict(bboxes=torch.tensor([[0., 0, 9, 9], [20, 20, 29, 29]]), labels=torch.tensor([0, 1])),
                gt_relations=dict(pair_idxs=torch.tensor([[0, 1], [1, 0]]), labels=torch.tensor([predicate, predicate])),
                pred_relations=dict(pair_idxs=torch.tensor([[0, 1], [1, 0]]), scores=scores))


def evaluate(metric, batches, size=None, meta=META):
    metric.dataset_meta = meta
    count = 0
    for batch in batches:
        metric.process({}, batch)
        count += len(batch)
    return metric.evaluate(size or count)


# ---------------------------------------------------------------------------- any K is correct
@pytest.mark.parametrize('big', [10 ** 6, 2 ** 30 - 1, 2 ** 30, 2 ** 30 + 1, 10 ** 10, 2 ** 62])
def test_huge_k_counts_misses_as_misses(big):
    """Regression: with K above the miss marker (2**30) every miss counted as a hit (R@1e10 = 100)."""
    res = evaluate(SGRecall(mode='predcls', topk=(1, big)), [[two_relation_image(0)]])
    assert res['predcls/R@1'] == 50.0
    assert res[f'predcls/R@{big}'] == 50.0
    assert res[f'predcls/ngR@{big}'] == 100.0  # the NGC list holds both predicates of the second pair
    assert res[f'predcls/A@{big}'] == 50.0
    mean = evaluate(SGMeanRecall(mode='predcls', topk=(big,)), [[two_relation_image(0)]])
    assert mean[f'predcls/mR@{big}'] == pytest.approx(50.0 / NUM_PREDICATES)


def test_huge_k_sgbench():
    res = evaluate(SGBenchMetric(mode='predcls', topk=(10 ** 10,)), [[two_relation_image(0)]])
    assert res['predcls/R@10000000000'] == 50.0


def test_huge_k_equals_k_larger_than_every_list_on_random_data():
    samples, _ = random_dataset(3, 25, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    big = run_metrics(samples, mode='sgdet', topk=(10 ** 10,), ng_topk=10 ** 10)
    plain = run_metrics(samples, mode='sgdet', topk=(5000,), ng_topk=5000)
    for key, value in plain.items():
        assert big[key.replace('5000', str(10 ** 10))] == value, key


# ---------------------------------------------------------------------------- zero-shot indices
def test_zeroshot_triplet_out_of_range_is_refused():
    """Regression: predicate 5 of P = 5 (a 1-based list given as 0-based) aliased a real triplet code."""
    metric = SGRecall(mode='predcls', zeroshot_triplets=[(0, 1, 2), (0, 1, 5)])
    with pytest.raises(ValueError, match=r'zeroshot_triplets argument\): row 1 .*\[0, 1, 5\].*5 predicates'):
        evaluate(metric, [[two_relation_image(0)]])
    with pytest.raises(ValueError, match=r'row 0 .*4 classes'):
        evaluate(SGRecall(mode='predcls', zeroshot_triplets=[(4, 0, 0)]), [[two_relation_image(0)]])


def test_zeroshot_file_out_of_range_names_the_file(tmp_path):
    path = str(tmp_path / 'zs.pytorch')
    torch.save(torch.tensor([[1, 2, 3], [1, 2, NUM_PREDICATES + 1]]), path)  # 1-based: predicate 6 of 5
    with pytest.raises(ValueError, match=r'file .*zs\.pytorch\): row 1'):
        evaluate(SGRecall(mode='predcls', zeroshot_triplets=path), [[two_relation_image(0)]])
    meta = dict(META, zeroshot_triplets=path)
    with pytest.raises(ValueError, match=r"dataset_meta\['zeroshot_triplets'\] = .*zs\.pytorch\): row 1"):
        evaluate(SGRecall(mode='predcls'), [[two_relation_image(0)]], meta=meta)


def test_zeroshot_in_range_still_works():
    res = evaluate(SGRecall(mode='predcls', zeroshot_triplets=[(0, 1, 2)]), [[two_relation_image(0)]])
    assert res['predcls/zR@20'] == 100.0  # GT (0, 1, 2) is zero-shot and hit; (1, 0, 2) is not zero-shot


# ---------------------------------------------------------------------------- boxes in the wrong frame
def _sgdet_image(idx, factor=1.0, ori=(100, 100), img_shape=None, normalise=False):
    """SGDet image with two GT objects predicted exactly, the predicted boxes multiplied by ``factor`` (or
    divided by the image size with ``normalise``)."""
    gt = torch.tensor([[5., 5, 60, 70], [40, 30, 95, 98]])
    sample = two_relation_image(idx, hit_both=True)
    boxes = gt * factor
    if normalise:
        boxes = gt / torch.tensor([ori[1], ori[0], ori[1], ori[0]], dtype=torch.float32)
    sample['gt_instances']['bboxes'] = gt
    sample['pred_instances'] = dict(bboxes=boxes, labels=torch.tensor([0, 1]), scores=torch.ones(2))
    sample['ori_shape'] = ori
    if img_shape is not None:
        sample['img_shape'] = img_shape
        sample['scale_factor'] = (img_shape[1] / ori[1], img_shape[0] / ori[0])
    return sample


def _input_warnings(metric, samples):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        res = evaluate(metric, [samples])
    return res, [str(w.message) for w in caught]


def test_boxes_in_the_upscaled_resized_frame_are_reported():
    samples = [_sgdet_image(i, factor=2.0, img_shape=(200, 200)) for i in range(6)]
    res, caught = _input_warnings(SGRecall(mode='sgdet'), samples)
    assert res['sgdet/R@50'] == 0.0
    assert any('reach outside the original image' in w and 'in 6 of 6 images' in w for w in caught), caught


def test_boxes_in_the_downscaled_resized_frame_are_reported():
    samples = [_sgdet_image(i, factor=0.5, img_shape=(50, 50)) for i in range(4)]
    _, caught = _input_warnings(SGRecall(mode='sgdet'), samples)
    assert any('in all 4 images the test pipeline shrank' in w for w in caught), caught


def test_normalised_boxes_are_reported():
    samples = [_sgdet_image(i, normalise=True) for i in range(3)]
    _, caught = _input_warnings(SGMeanRecall(mode='sgcls'), samples)
    assert any('lie in [0, 1]: normalised coordinates' in w for w in caught), caught


def test_correct_boxes_give_no_frame_warning():
    samples = [_sgdet_image(i, img_shape=(200, 200)) for i in range(6)] + \
        [_sgdet_image(i + 6, img_shape=(50, 50)) for i in range(4)]
    res, caught = _input_warnings(SGRecall(mode='sgdet'), samples)
    assert res['sgdet/R@50'] == 100.0
    assert not any('frame' in w or 'normalised' in w for w in caught), caught


# ---------------------------------------------------------------------------- score columns
def test_background_last_layout_equals_background_first():
    first = [two_relation_image(i, hit_both=i % 2 == 0) for i in range(6)]
    last = [two_relation_image(i, hit_both=i % 2 == 0, background='last') for i in range(6)]
    ref = evaluate(SGRecall(mode='predcls'), [first])
    got = evaluate(SGRecall(mode='predcls', score_layout='background_last'), [last])
    assert got == ref
    auto_last = evaluate(SGRecall(mode='predcls'), [last])  # read as background first: shifted
    assert auto_last['predcls/R@20'] != ref['predcls/R@20']


def test_explicit_layout_refuses_other_widths_naming_the_sample():
    sample = two_relation_image(3, width=NUM_PREDICATES)
    with pytest.raises(ValueError, match=r"sample_idx=3.*\[2, 5\].*score_layout='background_first'"):
        evaluate(SGRecall(mode='predcls', score_layout='background_first'), [[sample]])
    with pytest.raises(ValueError, match=r"score_layout='no_background'"):
        evaluate(SGRecall(mode='predcls', score_layout='no_background'), [[two_relation_image(0)]])


def test_background_last_column_is_validated():
    sample = two_relation_image(4, background='last')
    sample['pred_relations']['scores'][1, -1] = float('nan')
    with pytest.raises(ValueError, match=r'sample_idx=4.*pred_relations.scores\[:, 5\]'):
        evaluate(SGRecall(mode='predcls', score_layout='background_last'), [[sample]])


def test_report_says_how_the_scores_were_read():
    metric = SGRecall(mode='predcls')
    evaluate(metric, [[two_relation_image(0), two_relation_image(1, width=NUM_PREDICATES)]])
    text = metric.last_report['text']
    assert f'[R, {NUM_PREDICATES + 1}]: column 0 = no relation' in text
    assert f'[R, {NUM_PREDICATES}]: no background column' in text


def _shifted_image(idx, rng):
    """A model whose background column is LAST (probability ~0.9), read with the default layout."""
    sample = two_relation_image(idx, hit_both=True, background='last')
    scores = torch.tensor(rng.random((2, NUM_PREDICATES + 1)), dtype=torch.float32) * 0.05
    scores[:, -1] = 0.9
    scores[0, 2], scores[1, 2] = 0.06, 0.07  # the true predicate (2) is the best real predicate
    sample['pred_relations']['scores'] = scores
    return sample


def test_shifted_score_columns_are_reported():
    import numpy as np
    rng = np.random.default_rng(0)
    samples = [_shifted_image(i, rng) for i in range(60)]
    res, caught = _input_warnings(SGRecall(mode='predcls'), samples)
    assert res['predcls/R@50'] == 0.0 and res['predcls/ngR@50'] > 0
    shift = [w for w in caught if 'background_last' in w]
    assert any('graph-constrained R@100 is 0 while ngR@100' in w for w in shift), caught
    assert any('100% of 60 images has the same predicate' in w for w in shift), caught
    fixed, caught = _input_warnings(SGRecall(mode='predcls', score_layout='background_last'), samples)
    assert fixed['predcls/R@50'] == 100.0
    assert not any('background_last' in w for w in caught), caught


def test_random_models_give_no_score_column_warning():
    samples, _ = random_dataset(11, 80, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        run_metrics(samples, mode='sgdet')
    assert not any('score_layout' in str(w.message) for w in caught)
