"""Tests of GroundingPr against the exact loop reference in tests/reference_grounding.py."""
import json
import os
import random
import shutil
import warnings
from fractions import Fraction
from typing import Any, Dict, List, Optional

import numpy as np
import pytest
import torch

from mmsgg_eval.offline import evaluate_grounding_predictions
from mmsgg_eval.metrics import GroundingPr
from mmsgg_eval.metrics.grounding import grounding_statistics
from mmsgg_eval.registry import METRICS
from tests.metric_tester import Case, check_metric
from tests.sgg_samples import GROUNDING_THRESHOLDS as THRESHOLDS
from tests.sgg_samples import boxes_at_iou_ratio, grounding_sample, random_grounding_case
from tests.reference_grounding import reference_grounding

KEYS = [f'Pr@{t}' for t in THRESHOLDS] + ['meanIoU', 'cumIoU']


def run_metric(cases: List[Dict[str, Any]], batch: int = 7, dtype=torch.float64,
               **kwargs) -> Dict[str, float]:
    metric = GroundingPr(**kwargs)
    samples = [grounding_sample(c, i, dtype) for i, c in enumerate(cases)]
    for start in range(0, len(samples), batch):
        metric.process(None, samples[start:start + batch])
    out = metric.evaluate(len(samples))
    prefix = metric.prefix + '/'
    return {k[len(prefix):]: v for k, v in out.items()}


def assert_matches_reference(got: Dict[str, float], ref: Dict[str, Any]) -> None:
    for t in THRESHOLDS:
        assert got[f'Pr@{t}'] == ref[f'Pr@{t}'], (t, got, ref)  # exact
    assert got['meanIoU'] == pytest.approx(ref['meanIoU'], rel=1e-12, abs=1e-15)
    assert got['cumIoU'] == pytest.approx(ref['cumIoU'], rel=1e-12, abs=1e-15)


# ---------------------------------------------------------------------------- exactness
@pytest.mark.parametrize('strict', [False, True])
def test_random_against_reference(strict):
    rng = random.Random(1234 + strict)
    for trial in range(6):
        cases = [random_grounding_case(rng) for _ in range(rng.randint(1, 120))]
        ref = reference_grounding(cases, THRESHOLDS, strict=strict)
        # float64 boxes give the exact values of every case; integer and dyadic ones also survive float32
        got = run_metric(cases, batch=rng.randint(1, 16), strict=strict)
        assert_matches_reference(got, ref)
    exact_cases = [c for c in (random_grounding_case(rng) for _ in range(300))
                   if all(float(v).is_integer() for b in [c['gt']] + c['pred'] for v in b)]
    got32 = run_metric(exact_cases, dtype=torch.float32, strict=strict)
    assert_matches_reference(got32, reference_grounding(exact_cases, THRESHOLDS, strict=strict))


@pytest.mark.parametrize('tau', THRESHOLDS)
def test_iou_exactly_on_each_threshold(tau):
    """IoU == τ exactly counts for Pr@τ (>=) and not with strict (>); float32 IoU would get 0.7 wrong."""
    t = Fraction(tau)
    q = t.denominator
    gt, pred = [0.0, 0.0, 10.0 * q, 10.0], [0.0, 0.0, 10.0 * t.numerator, 10.0]
    case = {'gt': gt, 'pred': [pred]}
    for dtype in (torch.float32, torch.float64):
        loose = run_metric([case], dtype=dtype)
        strict = run_metric([case], dtype=dtype, strict=True)
        assert loose[f'Pr@{tau}'] == 100.0 and strict[f'Pr@{tau}'] == 0.0
        for other in THRESHOLDS:
            expected = 100.0 if Fraction(other) < t else 0.0
            if Fraction(other) != t:
                assert loose[f'Pr@{other}'] == expected and strict[f'Pr@{other}'] == expected
    # the example of the brief: GT [0, 0, 10, 10] vs prediction [0, 0, 5, 10] is exactly 0.5
    out = run_metric([{'gt': [0, 0, 10, 10], 'pred': [[0, 0, 5, 10]]}])
    assert out['Pr@0.5'] == 100.0 and out['Pr@0.6'] == 0.0 and out['meanIoU'] == 0.5 and out['cumIoU'] == 0.5


def test_float32_pitfalls_and_float_thresholds():
    # float32(70) / float32(100) < 0.7 and float32(60) / float32(100) > 0.6: both decided exactly here
    cases = [{'gt': [0, 0, 10, 10], 'pred': [[0, 0, 7, 10]]}, {'gt': [0, 0, 10, 10], 'pred': [[0, 0, 6, 10]]}]
    out = run_metric(cases, dtype=torch.float32, thresholds=(0.6, 0.7))
    assert out == {'Pr@0.6': 100.0, 'Pr@0.7': 50.0, 'meanIoU': pytest.approx(0.65), 'cumIoU': pytest.approx(0.65)}
    out = run_metric(cases, dtype=torch.float32, thresholds=(0.6, 0.7), strict=True)
    assert out['Pr@0.6'] == 50.0 and out['Pr@0.7'] == 0.0
    # thresholds given as strings or Fractions are exact too; keys follow the float value
    out = run_metric(cases, thresholds=('0.6', Fraction(7, 10)))
    assert out['Pr@0.6'] == 100.0 and out['Pr@0.7'] == 50.0


def test_near_tie_float_boxes_are_decided_exactly():
    """Decimal offsets make float64 IoUs land within rounding of τ; the exact fallback decides them."""
    rng = random.Random(5)
    cases = []
    for _ in range(200):
        t = Fraction(rng.choice(THRESHOLDS))
        gt, pred = boxes_at_iou_ratio(t.numerator, t.denominator, rng)
        off = rng.choice((0.1, 0.2, 0.3, 1e-9, 123.456))
        cases.append({'gt': [v + off for v in gt], 'pred': [[v + off for v in pred]]})
    for strict in (False, True):
        assert_matches_reference(run_metric(cases, strict=strict),
                                 reference_grounding(cases, THRESHOLDS, strict=strict))


def test_statistics_function_and_degenerate_union():
    pred = torch.tensor([[0, 0, 5, 10], [3, 3, 3, 3], [0, 0, 1, 1], [0, 0, 0, 0]], dtype=torch.float64)
    gt = torch.tensor([[0, 0, 10, 10], [3, 3, 3, 3], [2, 2, 3, 3], [0, 0, 4, 4]], dtype=torch.float64)
    has = torch.tensor([True, True, True, False])
    s = grounding_statistics(pred, gt, has, [Fraction(1, 2), Fraction(0)])
    assert s['iou'].tolist() == [0.5, 0.0, 0.0, 0.0]
    assert s['inter'].tolist() == [50.0, 0.0, 0.0, 0.0] and s['union'].tolist() == [100.0, 0.0, 2.0, 16.0]
    assert s['hits'].tolist() == [[True, True], [False, True], [False, True], [False, True]]
    s = grounding_statistics(pred, gt, has, [Fraction(0)], strict=True)
    assert s['hits'].tolist() == [[True], [False], [False], [False]]


def test_selection_scores_ties_and_no_prediction():
    gt = [0.0, 0.0, 10.0, 10.0]
    good, bad = [0.0, 0.0, 10.0, 10.0], [20.0, 20.0, 30.0, 30.0]
    cases = [{'gt': gt, 'pred': [bad, good], 'scores': [0.2, 0.9]},   # highest score wins
             {'gt': gt, 'pred': [good, bad], 'scores': [0.5, 0.5]},   # tie: first
             {'gt': gt, 'pred': [bad, good], 'scores': None},         # no scores: first
             {'gt': gt, 'pred': []}]                                  # none: IoU 0, union = GT area
    out = run_metric(cases)
    assert out['Pr@0.5'] == 50.0 and out['meanIoU'] == 0.5
    assert out['cumIoU'] == 200.0 / (100 + 100 + 200 + 100)
    # a sample without the pred_instances field at all also counts as 0
    metric = GroundingPr()
    metric.process(None, [{'sample_idx': 0, 'gt_instances': {'bboxes': [gt]}}])
    assert metric.evaluate(1)['grounding/Pr@0.5'] == 0.0


def test_registry_prefix_log_and_outfile(tmp_path):
    metric = METRICS.build(dict(type='GroundingPr', prefix='rsvgd', outfile_prefix=str(tmp_path / 'res')))
    metric.dataset_meta = {'dataset_name': 'DIOR-RSVG'}
    cases = [{'gt': [0, 0, 10, 10], 'pred': [[0, 0, 5, 10]]}, {'gt': [0, 0, 10, 10], 'pred': [[0, 0, 10, 10]]}]
    metric.process(None, [grounding_sample(c, i) for i, c in enumerate(cases)])
    out = metric.evaluate(2)
    assert set(out) == {f'rsvgd/{k}' for k in KEYS}
    assert out['rsvgd/Pr@0.5'] == 100.0 and out['rsvgd/Pr@0.9'] == 50.0 and out['rsvgd/meanIoU'] == 0.75
    text = metric.last_report['text']  # the block printed to the log
    assert 'DIOR-RSVG' in text and 'IoU >= threshold' in text and '0.9' in text
    dumped = json.load(open(tmp_path / 'res.rsvgd.json'))
    assert dumped['per_sample']['iou'] == [0.5, 1.0] and dumped['keys']['Pr@0.9'] == 50.0
    # a second epoch starts from scratch
    metric.process(None, [grounding_sample(cases[0], 0)])
    assert metric.evaluate(1)['rsvgd/Pr@0.9'] == 0.0


def test_mmengine_data_elements_and_sampler_padding_single_process():
    from mmengine.structures import BaseDataElement, InstanceData
    rng = random.Random(7)
    cases = [random_grounding_case(rng) for _ in range(9)]

    def element(i):
        c = cases[i]
        gt = InstanceData(bboxes=torch.tensor([c['gt']]))
        pred = InstanceData(bboxes=torch.tensor(c['pred'], dtype=torch.float32).reshape(-1, 4))
        if c.get('scores') is not None:
            pred.scores = torch.tensor(c['scores'])
        return BaseDataElement(metainfo=dict(sample_idx=i, img_id=i, ori_shape=(800, 800)),
                               gt_instances=gt, pred_instances=pred)

    metric = GroundingPr()
    order = list(range(9)) + [0, 1, 2]  # padded last round: repeats are counted once
    for start in range(0, len(order), 4):
        metric.process(None, [element(i) for i in order[start:start + 4]])
    out = metric.evaluate(9)
    as_float32 = [dict(c, pred=[[float(np.float32(v)) for v in b] for b in c['pred']],
                       gt=[float(np.float32(v)) for v in c['gt']]) for c in cases]
    ref = reference_grounding(as_float32, THRESHOLDS)
    assert_matches_reference({k.split('/')[1]: v for k, v in out.items()}, ref)


# ---------------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize('sample, match', [
    ({'sample_idx': 7, 'pred_instances': {'bboxes': [[0, 0, 1, 1]]}}, 'sample_idx=7.*gt_instances.bboxes'),
    ({'sample_idx': 7, 'gt_instances': {'bboxes': np.zeros((0, 4))}}, 'sample_idx=7.*empty'),
    ({'sample_idx': 7, 'gt_instances': {'bboxes': [[0, 0, 5, 5], [1, 1, 2, 2]]}}, 'sample_idx=7.*2 boxes'),
    ({'sample_idx': 7, 'gt_instances': {'bboxes': [[5, 0, 1, 5]]}}, 'sample_idx=7.*x2 < x1'),
    ({'sample_idx': 7, 'gt_instances': {'bboxes': [[0, 0, 5, 5]]},
      'pred_instances': {'bboxes': [[0, float('nan'), 1, 1]]}}, 'sample_idx=7.*pred_instances.bboxes.*NaN'),
    ({'sample_idx': 7, 'gt_instances': {'bboxes': [[0, 0, 5, 5]]},
      'pred_instances': {'bboxes': [[0, 0, 1, 1]], 'scores': [0.1, 0.2]}}, 'sample_idx=7.*scores'),
    ({'sample_idx': 7, 'gt_instances': {'bboxes': [[0, 0, 5]]}}, 'sample_idx=7.*shape'),
])
def test_bad_inputs_name_the_sample(sample, match):
    metric = GroundingPr()
    with pytest.raises(ValueError, match=match):
        metric.process(None, [sample])


def test_multiple_gt_option_and_argument_checks():
    metric = GroundingPr(multiple_gt='first')
    metric.process(None, [{'sample_idx': 0, 'gt_instances': {'bboxes': [[0, 0, 10, 10], [50, 50, 60, 60]]},
                           'pred_instances': {'bboxes': [[0, 0, 10, 10]]}}])
    assert metric.evaluate(1)['grounding/Pr@0.9'] == 100.0
    with pytest.raises(ValueError):
        GroundingPr(multiple_gt='max')
    with pytest.raises(ValueError):
        GroundingPr(thresholds=(0.5, 1.5))
    with pytest.raises(ValueError):
        GroundingPr(thresholds=(0.5, '0.5'))


# ---------------------------------------------------------------------------- normalised-box guard
def test_normalised_boxes_warn_once():
    rng = random.Random(3)
    metric = GroundingPr()
    for b in range(3):
        samples = []
        for i in range(4):
            x, y = rng.random() * 0.5, rng.random() * 0.5
            samples.append({'sample_idx': 4 * b + i, 'ori_shape': (800, 600),
                            'gt_instances': {'bboxes': [[100, 100, 300, 300]]},
                            'pred_instances': {'bboxes': [[x, y, x + 0.4, y + 0.4]]}})
        metric.process(None, samples)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        metric.evaluate(12)
    msgs = [str(w.message) for w in caught if 'NORMALISED' in str(w.message)]
    assert len(msgs) == 1 and 'original image pixels' in msgs[0]
    # pixel boxes, or an image that really is 1x1, do not warn
    for shape, box in (((800, 600), [10, 10, 300, 300]), ((1, 1), [0, 0, 0.5, 0.5])):
        metric.process(None, [{'sample_idx': 0, 'ori_shape': shape, 'gt_instances': {'bboxes': [[0, 0, 1, 1]]},
                               'pred_instances': {'bboxes': [box]}}])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            metric.evaluate(1)
        assert not [w for w in caught if 'NORMALISED' in str(w.message)]


# ---------------------------------------------------------------------------- distributed
@pytest.mark.parametrize('world', [2, 3])
def test_distributed_equals_single_process(world):
    """1 and ``world`` ranks (31 samples: uneven shards) give the same keys bit for bit on every rank, the
    reference's values (strict and not)."""
    rng = random.Random(99)
    cases = [random_grounding_case(rng) for _ in range(31)]  # 31 is divisible by neither 2 nor 3
    samples = [grounding_sample(case, i, torch.float64) for i, case in enumerate(cases)]
    refs = [reference_grounding(cases, THRESHOLDS, strict=strict) for strict in (False, True)]
    runs = [Case((GroundingPr,), dict(strict=strict), samples, {}, {k: ref[k] for k in KEYS}, name=f'strict={strict}')
            for strict, ref in zip((False, True), refs)]
    results = check_metric(runs, world_sizes=(1, world), pool_samples=(None,), kernels=('torch',))
    for got, ref in zip(results, refs):
        assert_matches_reference(got, ref)


# ---------------------------------------------------------------------------- offline predictions file
class ToyDataset:
    def __init__(self, cases: List[Dict[str, Any]], img_ids: Optional[List[Any]] = None):
        self.cases = cases
        self.img_ids = img_ids or [f'{i:05d}' for i in range(len(cases))]
        self.metainfo = {'dataset_name': 'toy'}

    def __len__(self) -> int:
        return len(self.cases)

    def get_data_info(self, i: int) -> Dict[str, Any]:
        return {'img_id': self.img_ids[i], 'width': 800, 'height': 600, 'text': f'query {i}',
                'instances': [{'bbox': list(self.cases[i]['gt']), 'bbox_label': 0, 'ignore_flag': 0}]}


def test_offline_predictions_file(tmp_path):
    rng = random.Random(11)
    cases = [random_grounding_case(rng) for _ in range(40)]
    dataset = ToyDataset(cases)
    entries = []
    for i, c in enumerate(cases):
        for j, box in enumerate(c['pred']):
            e = {'bbox': box}
            e.update({'sample_idx': i} if i % 2 else {'img_id': dataset.img_ids[i]})
            if c.get('scores') is not None:
                e['score'] = c['scores'][j]
            entries.append((i, j, e))
    rng.shuffle(entries)  # the order across samples is irrelevant; within a sample it decides ties
    entries = [e for _, _, e in sorted(entries, key=lambda t: t[:2])]
    path = tmp_path / 'preds.json'
    path.write_text(json.dumps(entries))
    for strict in (False, True):
        out = evaluate_grounding_predictions(str(path), dataset, strict=strict, batch_size=8)
        assert_matches_reference({k.split('/')[1]: v for k, v in out.items()},
                                 reference_grounding(cases, THRESHOLDS, strict=strict))
    # xywh and a 0-1000 canvas
    gt_case = {'gt': [80.0, 60.0, 400.0, 300.0], 'pred': []}
    ds = ToyDataset([gt_case])
    assert evaluate_grounding_predictions([{'sample_idx': 0, 'bbox': [80, 60, 320, 240]}], ds,
                                          bbox_format='xywh')['grounding/Pr@0.9'] == 100.0
    assert evaluate_grounding_predictions({'predictions': [{'img_id': '00000', 'bbox': [100, 100, 500, 500]}]},
                                          ds, coord_scale=1000)['grounding/meanIoU'] == 1.0
    # missing predictions count as IoU 0
    assert evaluate_grounding_predictions([], ds)['grounding/Pr@0.5'] == 0.0


def test_offline_identification_errors():
    ds = ToyDataset([{'gt': [0, 0, 5, 5]}, {'gt': [1, 1, 5, 5]}], img_ids=['a', 'a'])
    with pytest.raises(ValueError, match='sample_idx'):
        evaluate_grounding_predictions([{'img_id': 'a', 'bbox': [0, 0, 5, 5]}], ds)
    out = evaluate_grounding_predictions([{'img_id': 'a', 'text': 'query 1', 'bbox': [1, 1, 5, 5]}], ds)
    assert out['grounding/Pr@0.5'] == 50.0
    with pytest.raises(ValueError, match='not an index'):
        evaluate_grounding_predictions([{'sample_idx': 2, 'bbox': [0, 0, 5, 5]}], ds)
    with pytest.raises(ValueError, match='not in the dataset'):
        evaluate_grounding_predictions([{'img_id': 'b', 'bbox': [0, 0, 5, 5]}], ds)
    with pytest.raises(ValueError, match='bbox'):
        evaluate_grounding_predictions([{'sample_idx': 0}], ds)


# ---------------------------------------------------------------------------- real DIOR-RSVG sample
def test_real_rsvgd_sample(fixtures_dir, tmp_path):
    try:
        from mmsgg_eval.datasets.rsvgd import RSVGDDataset
    except ImportError as err:
        pytest.skip(f'mmsgg_eval.datasets.rsvgd.RSVGDDataset is not available yet ({err})')
    src = os.path.join(fixtures_dir, 'rsvgd')
    if not os.path.isfile(os.path.join(src, '00001.xml')):
        pytest.skip(f'DIOR-RSVG fixture not found in {src}')
    root = tmp_path / 'rsvgd'
    (root / 'Annotations').mkdir(parents=True)
    (root / 'JPEGImages').mkdir()
    shutil.copy(os.path.join(src, '00001.xml'), root / 'Annotations' / '00001.xml')
    shutil.copy(os.path.join(src, '00001.jpg'), root / 'JPEGImages' / '00001.jpg')
    for split in ('train', 'val', 'test'):
        (root / f'{split}.txt').write_text('0\n')  # the fixture's real split files index the full dataset
    dataset = RSVGDDataset(data_root=str(root), split='test')
    assert len(dataset) == 1
    info = dataset.get_data_info(0)
    box = [float(v) for v in info['instances'][0]['bbox']]
    assert box == [133.0, 237.0, 684.0, 672.0]
    out = evaluate_grounding_predictions([{'sample_idx': 0, 'bbox': box}], dataset)
    assert out == {f'grounding/{k}': (1.0 if 'IoU' in k else 100.0) for k in KEYS}
    out = evaluate_grounding_predictions([{'img_id': info['img_id'], 'bbox': box}], dataset, strict=True)
    assert out['grounding/Pr@0.9'] == 100.0 and out['grounding/cumIoU'] == 1.0


# ---------------------------------------------------------------------------- protocol='mgvlf'
def mgvlf_box_by_rule(box, width, height, size=640):
    """The original RSVG test loop's GT box, written scalar by scalar from its code path (Python floats for
    the letterbox, int() for the integer array, numpy float32 for the way back, Python round for the clamp)."""
    ratio = float(size) / max(width, height)
    new_w, new_h = round(width * ratio), round(height * ratio)
    dw, dh = (size - new_w) / 2, (size - new_h) / 2
    pads = (dw, dh, dw, dh)
    letterboxed = [min(max(int(v * ratio + d), 0), size - 1) for v, d in zip(box, pads)]
    r32 = np.float32(ratio)
    back = [float((np.float32(q) - np.float32(d)) / r32) for q, d in zip(letterboxed, pads)]
    clamp_w, clamp_h = round(new_w / float(r32)), round(new_h / float(r32))
    return [max(back[0], 0.0), max(back[1], 0.0), min(back[2], clamp_w), min(back[3], clamp_h)]


def test_mgvlf_gt_boxes_follow_the_original_rule():
    from mmsgg_eval.functional.grounding import mgvlf_gt_boxes
    rng = random.Random(19)
    sizes = [(800, 800), (800, 533), (801, 600), (333, 777), (1000, 999)]
    boxes, widths, heights, expected = [], [], [], []
    for _ in range(400):
        w, h = rng.choice(sizes)
        x1, y1 = rng.randint(0, w - 2), rng.randint(0, h - 2)
        box = [x1, y1, rng.randint(x1 + 1, w), rng.randint(y1 + 1, h)]
        boxes.append(box), widths.append(w), heights.append(h)
        expected.append(mgvlf_box_by_rule(box, w, h))
    got = mgvlf_gt_boxes(torch.tensor(boxes, dtype=torch.float64), torch.tensor(widths), torch.tensor(heights))
    assert got.dtype == torch.float64
    assert got.tolist() == expected  # bit for bit
    moved = (got != torch.tensor(boxes, dtype=torch.float64)).any(1).float().mean()
    assert moved > 0.5  # most boxes move
    # the rule by hand: 800 x 800 (ratio 0.8): floor(0.8 x) / 0.8, the edge 800 -> 639 / 0.8 = 798.75
    assert mgvlf_box_by_rule([11, 13, 101, 800], 800, 800) == [10.0, 12.5, 100.0, 798.75]
    # 800 x 533: dh = 107, y 533 -> trunc(533.4) = 533 -> 532.5, clamped at round(426 / 0.8f) = 532
    assert mgvlf_box_by_rule([100, 500, 200, 533], 800, 533) == [100.0, 500.0, 200.0, 532.0]


def test_mgvlf_protocol_differs_from_exact():
    cases = [
        # IoU exactly 0.5 against an unmoved GT (multiples of 5 survive the 0.8 scale): a hit for >=, not for >
        {'gt': [0, 0, 100, 100], 'pred': [[0, 0, 50, 100]], 'scores': None},
        # a 10 px box: GT [1, 1, 11, 11] becomes [0, 0, 10, 10]; the XML box as prediction scores 81 / 119
        {'gt': [1, 1, 11, 11], 'pred': [[1, 1, 11, 11]], 'scores': None},
        # a box on the right edge: x2 = 800 becomes 798.75
        {'gt': [700, 0, 800, 100], 'pred': [[700, 0, 800, 100]], 'scores': None},
    ]
    exact = run_metric(cases)
    mgvlf = run_metric(cases, protocol='mgvlf')
    assert exact == run_metric(cases, protocol='exact', strict=False)
    ious = [Fraction(1, 2), Fraction(81, 119), Fraction(9875, 10000)]
    assert exact['Pr@0.5'] == 100.0 and exact['Pr@0.9'] == pytest.approx(200 / 3)
    assert exact['meanIoU'] == pytest.approx((0.5 + 1 + 1) / 3, abs=1e-15)
    # mgvlf: IoU 1/2 is no hit (strict), 81/119 = 0.68 hits 0.5 and 0.6, 0.9875 hits every threshold
    assert mgvlf['Pr@0.5'] == pytest.approx(200 / 3) and mgvlf['Pr@0.6'] == pytest.approx(200 / 3)
    assert mgvlf['Pr@0.7'] == pytest.approx(100 / 3) and mgvlf['Pr@0.9'] == pytest.approx(100 / 3)
    assert mgvlf['meanIoU'] == pytest.approx(float(sum(ious) / 3), rel=1e-12)
    # strict can still be chosen explicitly: the quantised GT with >=
    loose = run_metric(cases, protocol='mgvlf', strict=False)
    assert loose['Pr@0.5'] == 100.0 and loose['meanIoU'] == mgvlf['meanIoU']


def test_mgvlf_protocol_clamps_and_needs_the_image_size():
    # 800 x 533: GT y2 533 -> 532 and the prediction's y2 is clamped at 532 too (IoU 31 / 32)
    metric = GroundingPr(protocol='mgvlf')
    sample = {'sample_idx': 0, 'ori_shape': (533, 800),
              'gt_instances': {'bboxes': torch.tensor([[100., 500, 200, 533]])},
              'pred_instances': {'bboxes': torch.tensor([[100., 501, 200, 540]])}}
    metric.process(None, [sample])
    out = metric.evaluate(1)
    assert out['grounding/meanIoU'] == 31 / 32
    exact = GroundingPr()
    exact.process(None, [sample])
    assert exact.evaluate(1)['grounding/meanIoU'] == 32 / 40
    with pytest.raises(ValueError, match="protocol='mgvlf'.*image size"):
        GroundingPr(protocol='mgvlf').process(None, [{'sample_idx': 0, 'gt_instances': sample['gt_instances'],
                                                       'pred_instances': sample['pred_instances']}])
    with pytest.raises(ValueError, match='protocol must be one of'):
        GroundingPr(protocol='MGVLF')
    with pytest.raises(ValueError, match='mgvlf_size'):
        GroundingPr(protocol='mgvlf', mgvlf_size=0)
