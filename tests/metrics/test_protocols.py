"""Protocol presets (mmsgg_eval.metrics.protocols, docs/protocols.md): resolution, hand-worked cases where the
presets give different numbers, the sgbench instance-matching rule against its loop reference, and
distributed equality for every preset."""
import json
import os.path as osp
import re

import numpy as np
import pytest
import torch

from mmsgg_eval.functional.instance_matching import (assign_detections, deduplicate_gt_triplets,
                                                     predicate_ranks, remapped_first_hits)
from mmsgg_eval.metrics import SGBenchMetric, SGMeanRecall, SGRecall, VLMSceneGraphMetric
from mmsgg_eval.metrics.protocols import PROTOCOLS, UNSET, resolve_protocol
from tests.metric_tester import Case, check_metric
from tests.reference_protocols import sgbench_reference
from tests.reference_sgg import reference_metrics
from tests.sgg_samples import random_dataset
from tests.tool_runs import ROOT

NUM_CLASSES, NUM_PREDICATES = 4, 5
META = dict(classes=[f'c{i}' for i in range(NUM_CLASSES)], predicates=[f'p{i}' for i in range(NUM_PREDICATES)],
            dataset_name='toy', iou_plus_one=True)  # a VG150-like dataset: sgb uses +1 pixel IoU


def evaluate(metric, samples, batch_size=2):
    metric.dataset_meta = META
    for start in range(0, len(samples), batch_size):
        metric.process({}, samples[start:start + batch_size])
    res = metric.evaluate(len(samples))
    prefix = metric.prefix + '/'
    return {k[len(prefix):]: v for k, v in res.items() if not k.endswith('per_predicate_recall')}


def both(samples, **kwargs):
    out = evaluate(SGRecall(**kwargs), samples)
    out.update(evaluate(SGMeanRecall(**kwargs), samples))
    return out


# ---------------------------------------------------------------------------------------------- resolution
def test_sgb_resolves_to_the_legacy_defaults():
    m = SGRecall()
    assert (m.iou_thr, m.iou_plus_one, m.ng_topk, m.rank, m.skip_empty_predictions, m.mr_average,
            m.recall_average, m.match) == (0.5, None, 100, 'score', True, 'all', 'image', 'box')
    v = VLMSceneGraphMetric()
    assert (v.rank, v.inner.iou_thr, v.inner.iou_plus_one, v.inner.mr_average, v.inner.recall_average) == \
        ('given', 0.5, None, 'all', 'image')


def test_sgb_is_bit_identical_to_explicit_legacy_arguments():
    samples, _ = random_dataset(5, 25, 'sgdet')
    legacy = dict(iou_thr=0.5, iou_plus_one=None, ng_topk=100, rank='score', skip_empty_predictions=True,
                  mr_average='all', recall_average='image', match='box')
    assert both(samples, mode='sgdet') == both(samples, mode='sgdet', protocol='sgb', **legacy)


def test_explicit_arguments_override_single_choices_and_are_listed():
    m = SGRecall(mode='sgdet', protocol='r1sgg', recall_average='image')
    assert m.recall_average == 'image' and m.mr_average == 'present' and m.iou_plus_one is False
    conv = m.conventions
    assert conv['protocol'] == 'r1sgg' and conv['overrides'] == {'recall_average': 'image'}
    assert conv['recall'].startswith('per image') and conv['mean_recall_denominator'].startswith('predicates')
    # an explicit value equal to the preset's is not an override
    assert SGRecall(protocol='openpsg', iou_plus_one=False).conventions['overrides'] == {}


def test_unknown_protocol_and_wrong_metric_raise():
    with pytest.raises(ValueError, match='unknown protocol'):
        SGRecall(protocol='nope')
    with pytest.raises(ValueError, match='SGBenchMetric'):
        SGRecall(protocol='sgbench')
    with pytest.raises(ValueError, match='instance matching only'):
        SGBenchMetric(protocol='sgb')
    with pytest.raises(ValueError, match='no conventions for vlm'):
        VLMSceneGraphMetric(protocol='openpsg')
    with pytest.raises(ValueError, match='not a convention argument'):
        resolve_protocol('sgb', {'canvas': 1})


def test_every_preset_documents_every_convention():
    keys = {'protocol', 'source', 'overrides', 'iou', 'iou_threshold', 'matching', 'gt_deduplication',
            'skipped_images', 'recall', 'mean_recall_denominator', 'ranking', 'ngc_list', 'notes'}
    for name, preset in PROTOCOLS.items():
        metric = SGBenchMetric() if preset.instance_matching else SGRecall(protocol=name, match='box')
        assert keys <= set(metric.conventions), name
        json.dumps(metric.conventions)
        if preset.vlm is not None:
            assert keys <= set(VLMSceneGraphMetric(protocol=name).conventions)
    assert UNSET is type(UNSET)()  # one sentinel, also after copying / unpickling


def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match='phrdet'):
        SGBenchMetric(mode='phrdet')
    with pytest.raises(ValueError, match='predicate_groups'):
        SGBenchMetric(predicate_groups={'head': ['p0']})
    with pytest.raises(ValueError, match="match='mask' is not defined for phrdet"):
        SGRecall(mode='phrdet', protocol='openpsg')
    # openpsg matches masks: a sample without them is named, with the missing field
    samples, _ = random_dataset(0, 3, 'sgdet')
    metric = SGRecall(mode='sgdet', protocol='openpsg')
    metric.dataset_meta = META
    with pytest.raises(ValueError, match='masks'):
        metric.process({}, samples)
        metric.evaluate(3)


# ---------------------------------------------------------------------------------------------- hand-worked
def _gt(boxes, labels, rels):
    return dict(gt_instances=dict(bboxes=torch.tensor(boxes, dtype=torch.float32), labels=torch.tensor(labels)),
                gt_relations=dict(pair_idxs=torch.tensor([r[:2] for r in rels], dtype=torch.long).reshape(-1, 2),
                                  labels=torch.tensor([r[2] for r in rels], dtype=torch.long)))


def hand_case():
    """Image 0: GT o0 [0,0,9,9] c0, o1 [20,20,29,29] c1, o2 [0,20,9,29] c2; GT relations (0,1,p0) twice and
    (1,2,p1). Detections d0 [0,0,9,4] c0 (IoU with o0: +1 pixel 50/100 = 0.5, plain 36/81 < 0.5), d1 = o1,
    d2 = o2, d3 = o1 (a second detection of o1). Pairs (d0,d1) p0 0.9, (d1,d2) p1 0.5, (d3,d2) p4 0.8.
    Image 1: GT (0,1,p2) and no predicted pair."""
    s0 = _gt([[0, 0, 9, 9], [20, 20, 29, 29], [0, 20, 9, 29]], [0, 1, 2], [(0, 1, 0), (0, 1, 0), (1, 2, 1)])
    s0.update(sample_idx=0, pred_instances=dict(
        bboxes=torch.tensor([[0., 0, 9, 4], [20, 20, 29, 29], [0, 20, 9, 29], [20, 20, 29, 29]]),
        labels=torch.tensor([0, 1, 2, 1]), scores=torch.ones(4)))
    s0['pred_relations'] = dict(pair_idxs=torch.tensor([[0, 1], [1, 2], [3, 2]]),
                                scores=torch.tensor([[0, .9, 0, 0, 0, 0], [0, 0, .5, 0, 0, 0],
                                                     [0, 0, 0, 0, 0, .8]]))
    s1 = _gt([[0, 0, 9, 9], [20, 20, 29, 29]], [0, 1], [(0, 1, 2)])
    s1.update(sample_idx=1, pred_instances=dict(bboxes=torch.zeros((0, 4)), labels=torch.zeros(0, dtype=torch.long),
                                                scores=torch.zeros(0)),
              pred_relations=dict(pair_idxs=torch.zeros((0, 2), dtype=torch.long), scores=torch.zeros((0, 6))))
    return [s0, s1]


def test_hand_case_sgb():
    res = both(hand_case(), mode='sgdet', topk=(20,))
    # +1 pixel: d0 matches o0, so both copies of (0,1,p0) and (1,2,p1) are hit; image 1 is skipped (no pair)
    assert res['R@20'] == pytest.approx(100 * 3 / 3)
    # per predicate over the images containing it: p0 2/2, p1 1/1; summed over all 5 predicates / 5
    assert res['mR@20'] == pytest.approx(100 * (1 + 1) / 5)


def test_hand_case_openpsg_boxes():
    res = both(hand_case(), mode='sgdet', topk=(20,), protocol='openpsg', match='box')
    # plain IoU: d0 misses o0, only (1,2,p1) of the 3 GT relations of image 0; image 1 skipped
    assert res['R@20'] == pytest.approx(100 * 1 / 3)
    assert res['mR@20'] == pytest.approx(100 * (0 + 1) / 5)


def test_hand_case_r1sgg():
    res = both(hand_case(), mode='sgdet', topk=(20,), protocol='r1sgg')
    # pooled over all 4 GT relations (image 1 counts, no prediction): 1 hit
    assert res['R@20'] == pytest.approx(100 * 1 / 4)
    # predicates present: p0 0/2, p1 1/1, p2 0/1 -> mean over 3
    assert res['mR@20'] == pytest.approx(100 * (0 + 1 + 0) / 3)


def test_hand_case_sgbench():
    res = evaluate(SGBenchMetric(mode='sgdet', topk=(1, 20)), hand_case())
    # image 0: GT de-duplicated to {(0,1,p0), (1,2,p1)}; d0 unassigned, d1 and d3 -> o1, d2 -> o2.
    # GC list by score: (d0,d1,p0) 0.9 -> (-1,1,p0); (d3,d2,p4) 0.8 -> (1,2,p4); (d1,d2,p1) 0.5 -> (1,2,p1)
    # R@1: nothing; R@20: 1 of 2. Image 1: 0 of 1 (no prediction counts 0).
    assert res['R@1'] == 0.0
    assert res['R@20'] == pytest.approx(100 * (1 / 2 + 0) / 2)
    assert res['R@inf'] == res['R@20']
    # mR over the predicates present: p0 [0] -> 0, p1 [1] -> 1, p2 [0] -> 0
    assert res['mR@20'] == pytest.approx(100 * 1 / 3)
    # PairR@1: the first triplet's pair (-1,1) hits nothing; @20: (1,2) of {(0,1),(1,2)} in image 0, 0 in image 1
    assert res['PairR@1'] == 0.0
    assert res['PairR@20'] == pytest.approx(100 * (1 / 2 + 0) / 2)
    # InstR: image 0 o1, o2 of 3 GT objects; image 1 none of 2
    assert res['InstR'] == pytest.approx(100 * (2 / 3 + 0) / 2)
    # PRank: NGC list (d0,d1,p0), (d3,d2,p4), (d1,d2,p1), ...: for GT pair (1,2) p4 is listed before p1
    assert res['PRank'] == pytest.approx(1.0)


def _masks(boxes, keep, size=32):
    out = torch.zeros((len(boxes), size, size), dtype=torch.bool)
    for i, (x1, y1, x2, y2) in enumerate(boxes):
        out[i, int(y1):int(y2), int(x1):int(x2)] = True
        if keep[i] == 'left':
            out[i, :, int((x1 + x2) // 2):] = False
        elif keep[i] == 'right':
            out[i, :, :int((x1 + x2) // 2)] = False
    return out


def test_hand_case_openpsg_masks():
    """Same boxes, different segments: the subject's predicted mask is the right half of the GT box while the
    GT mask is the left half (mask IoU 0), so box matching hits and mask matching misses."""
    boxes = [[0., 0, 10, 10], [20, 20, 30, 30]]
    s = _gt(boxes, [0, 1], [(0, 1, 0)])
    s['gt_instances']['masks'] = _masks(boxes, ['left', 'all'])
    s.update(sample_idx=0, pred_instances=dict(bboxes=torch.tensor(boxes), labels=torch.tensor([0, 1]),
                                               scores=torch.ones(2), masks=_masks(boxes, ['right', 'all'])),
             pred_relations=dict(pair_idxs=torch.tensor([[0, 1]]), scores=torch.tensor([[0, 1., 0, 0, 0, 0]])))
    assert both([s], mode='sgdet', topk=(20,), protocol='openpsg', match='box')['R@20'] == 100.0
    res = both([s], mode='sgdet', topk=(20,), protocol='openpsg')
    assert res['R@20'] == 0.0
    metric = SGRecall(mode='sgdet', protocol='openpsg')
    assert metric.conventions['iou'].startswith('mask IoU')
    assert any('no no-graph-constraint' in n for n in metric.conventions['notes'])


def test_hand_case_openpsg_keeps_the_given_order():
    """OpenPSG takes the predicted relations in the order the model returns them: a lower-scored first
    pair takes the only slot of K=1 (the legacy protocol re-sorts by triplet score)."""
    boxes = [[0., 0, 10, 10], [20, 20, 30, 30]]
    s = _gt(boxes, [0, 1], [(0, 1, 0)])
    s.update(sample_idx=0, pred_instances=dict(bboxes=torch.tensor(boxes), labels=torch.tensor([0, 1]),
                                               scores=torch.ones(2)),
             pred_relations=dict(pair_idxs=torch.tensor([[1, 0], [0, 1]]),
                                 scores=torch.tensor([[0, .2, 0, 0, 0, 0], [0, .9, 0, 0, 0, 0]])))
    assert both([s], mode='sgdet', topk=(1,))['R@1'] == 100.0
    assert both([s], mode='sgdet', topk=(1,), protocol='openpsg', match='box')['R@1'] == 0.0


W, H = 1000, 1000


def _vlm_sample(idx, text, gt_boxes, gt_labels, rels):
    s = _gt(gt_boxes, gt_labels, rels)
    s.update(sample_idx=idx, ori_shape=(H, W), pred_text=text)
    return s


def test_hand_case_vlm_sgb_vs_r1sgg():
    """Three samples: a valid answer hitting 1 of 2 GT relations, invalid JSON, no answer (GT 1 relation each).
    FailureRate: 2 of 3 samples under both presets (a missing answer is a failure; R1-SGG itself would
    print 1 of 2). Recall: sgb averages per image (1/2, 0, 0); r1sgg pools (1 of 4)."""
    boxes, labels = [[100., 100, 300, 300], [500, 500, 900, 900]], [0, 1]
    answer = json.dumps({'objects': [{'id': 'c0.1', 'bbox': [100, 100, 300, 300]},
                                     {'id': 'c1.2', 'bbox': [500, 500, 900, 900]}],
                         'relationships': [{'subject': 'c0.1', 'predicate': 'p0', 'object': 'c1.2'}]})
    samples = [_vlm_sample(0, answer, boxes, labels, [(0, 1, 0), (1, 0, 1)]),
               _vlm_sample(1, '{"objects": [', boxes, labels, [(0, 1, 2)]),
               _vlm_sample(2, None, boxes, labels, [(0, 1, 0)])]
    sgb = evaluate(VLMSceneGraphMetric(), samples)
    r1 = evaluate(VLMSceneGraphMetric(protocol='r1sgg'), samples)
    assert sgb['FailureRate'] == r1['FailureRate'] == pytest.approx(100 * 2 / 3)
    assert sgb['Recall'] == pytest.approx(100 * (1 / 2 + 0 + 0) / 3)
    assert r1['Recall'] == pytest.approx(100 * 1 / 4)
    # mRecall: sgb per predicate over images, / all 5 predicates: p0 mean(1, 0) = 1/2, p1 0, p2 0
    assert sgb['mRecall'] == pytest.approx(100 * (1 / 2) / 5)
    # r1sgg pooled per predicate over the present ones: p0 1/2, p1 0/1, p2 0/1
    assert r1['mRecall'] == pytest.approx(100 * (1 / 2) / 3)
    # AP@50: classes c0 and c1 have one GT object in each of the 3 images; image 0 has one exact detection of
    # each (score 1): precision 1 up to recall 1/3, i.e. on recall points 0, 0.01, ..., 0.33 of COCO's 101.
    # R1-SGG's ids-from-0 defect would turn the match of the very first GT object into a false positive.
    assert r1['AP@50'] == pytest.approx(100 * 34 / 101)
    assert VLMSceneGraphMetric(protocol='r1sgg').conventions['ap50'].endswith('plain widths/heights')


def test_r1sgg_multi_space_predicate_is_its_own_name():
    """Deliberate difference from R1-SGG: "in  front  of" (double spaces) is the predicate "in front of" here;
    R1-SGG's word-split synonym fallback turns it into "in"."""
    meta = dict(classes=['man', 'car'], predicates=['in', 'in front of'], dataset_name='toy')
    boxes = [[100., 100, 300, 300], [500, 500, 900, 900]]
    text = json.dumps({'objects': [{'id': 'man.1', 'bbox': [100, 100, 300, 300]},
                                   {'id': 'car.2', 'bbox': [500, 500, 900, 900]}],
                       'relationships': [{'subject': 'man.1', 'predicate': 'in  front  of', 'object': 'car.2'}]})
    results = {}
    for gt_pred in (0, 1):
        s = _vlm_sample(0, text, boxes, [0, 1], [(0, 1, gt_pred)])
        metric = VLMSceneGraphMetric(protocol='r1sgg')
        metric.dataset_meta = meta
        metric.process({}, [s])
        results[gt_pred] = metric.evaluate(1)['vlm/Recall']
    assert results == {0: 0.0, 1: 100.0}


# ---------------------------------------------------------------------------------------------- randomized
@pytest.mark.parametrize('mode', ['predcls', 'sgcls', 'sgdet'])
@pytest.mark.parametrize('preset', ['openpsg', 'r1sgg'])
def test_box_presets_equal_the_loop_reference(mode, preset):
    """openpsg (boxes) and r1sgg are combinations of existing conventions: the legacy loop reference with
    the preset's settings gives the same numbers."""
    settings = PROTOCOLS[preset].scene_graph
    for seed in range(2):
        samples, refs = random_dataset(seed + 17, 30, mode, int_boxes=bool(seed), empty_pred_prob=0.3)
        ours = both(samples, mode=mode, topk=(1, 5, 50), protocol=preset, match='box')
        ref = reference_metrics(refs, NUM_PREDICATES, mode, ks=(1, 5, 50), plus_one=False,
                                ng_topk=settings['ng_topk'], rank=settings['rank'],
                                skip_empty=settings['skip_empty_predictions'], mr_average=settings['mr_average'],
                                recall_average=settings['recall_average'])
        for key, value in ref.items():
            if key in ours:
                assert ours[key] == pytest.approx(value, abs=1e-9), (key, ours[key], value)


@pytest.mark.parametrize('mode', ['predcls', 'sgcls', 'sgdet'])
@pytest.mark.parametrize('int_boxes', [True, False])
def test_sgbench_equals_the_loop_reference(mode, int_boxes):
    for seed in range(3):
        samples, refs = random_dataset(seed * 7 + 3, 30, mode, int_boxes=int_boxes, empty_pred_prob=0.2)
        ours = evaluate(SGBenchMetric(mode=mode, topk=(1, 3, 20), ng_topk=7), samples, batch_size=1 + seed * 4)
        ref = sgbench_reference(refs, NUM_PREDICATES, mode, ks=(1, 3, 20), ng_topk=7)
        assert set(ref) == set(ours), sorted(set(ref) ^ set(ours))
        for key, value in ref.items():
            assert ours[key] == pytest.approx(value, abs=1e-9, nan_ok=True), (key, ours[key], value)


def test_sgbench_rank_given_and_mr_all():
    samples, refs = random_dataset(11, 30, 'sgdet')
    ours = evaluate(SGBenchMetric(topk=(2, 10), rank='given', mr_average='all'), samples)
    ref = sgbench_reference(refs, NUM_PREDICATES, 'sgdet', ks=(2, 10), rank='given', mr_average='all')
    for key, value in ref.items():
        assert ours[key] == pytest.approx(value, abs=1e-9, nan_ok=True), key


def test_instance_matching_functions_on_edge_cases():
    # no GT objects, no detections: everything unassigned / empty without errors
    iou = torch.zeros((1, 2, 0))
    assigned = assign_detections(iou, torch.tensor([[0, 1]]), torch.ones(1, 2, dtype=torch.bool),
                                 torch.zeros((1, 0), dtype=torch.long), torch.zeros((1, 0), dtype=torch.bool))
    assert assigned.tolist() == [[-1, -1]]
    # ties go to the first GT; labels must agree; padding never wins
    iou = torch.tensor([[[0.7, 0.7, 0.9]]])
    assigned = assign_detections(iou, torch.tensor([[3]]), torch.ones(1, 1, dtype=torch.bool),
                                 torch.tensor([[3, 3, 3]]), torch.tensor([[True, True, False]]))
    assert assigned.tolist() == [[0]]
    # duplicate GT triplets are switched off, first kept
    valid = deduplicate_gt_triplets(torch.tensor([[0, 0, 1]]), torch.tensor([[1, 1, 0]]), torch.tensor([[2, 2, 2]]),
                                    torch.ones(1, 3, dtype=torch.bool), 4)
    assert valid.tolist() == [[True, False, True]]
    # repeated predicted triplets are dropped before counting positions
    assigned = torch.tensor([[0, 1, 1]])
    sub, obj, pred = torch.tensor([[0, 0, 0]]), torch.tensor([[1, 1, 2]]), torch.tensor([[3, 3, 3]])
    rank, pair_rank, kept = remapped_first_hits(assigned, sub, obj, pred, torch.ones(1, 3, dtype=torch.bool),
                                                torch.tensor([[0]]), torch.tensor([[1]]), torch.tensor([[3]]),
                                                torch.ones(1, 1, dtype=torch.bool), 4)
    assert kept.tolist() == [[True, False, True]] and rank.tolist() == [[0]] and pair_rank.tolist() == [[0]]
    # PRank: (0,1,p2) listed before (0,1,p3) twice (the second via another detection of object 1)
    prank = predicate_ranks(assigned, torch.tensor([[0, 0, 0]]), torch.tensor([[1, 2, 1]]),
                            torch.tensor([[2, 3, 3]]), torch.ones(1, 3, dtype=torch.bool), torch.tensor([[0]]),
                            torch.tensor([[1]]), torch.tensor([[3]]), torch.ones(1, 1, dtype=torch.bool), 4)
    assert prank.tolist() == [[1]]


# ---------------------------------------------------------------------------------------------- distributed
LENGTH = 23


def _masked(samples):
    """Rasterised box masks (32 x 32 grid scaled from the 0-100 boxes), with a pixel hole pattern."""
    for s in samples:
        for field in ('gt_instances', 'pred_instances'):
            if field not in s:
                continue
            boxes = s[field]['bboxes'] * 0.32
            masks = torch.zeros((boxes.shape[0], 32, 32), dtype=torch.bool)
            for i, (x1, y1, x2, y2) in enumerate(boxes.round().long().tolist()):
                masks[i, y1:max(y2, y1 + 1), x1:max(x2, x1 + 1)] = True
                masks[i, ::3, ::2] = False
            s[field]['masks'] = masks
    return samples


PRESET_CASES = [('sgb', 'sgdet'), ('openpsg', 'sgdet'), ('openpsg', 'predcls'), ('r1sgg', 'predcls'),
                ('r1sgg', 'sgdet'), ('sgbench', 'sgdet'), ('sgbench', 'sgcls')]
VLM_TEXTS = []
_rng = np.random.default_rng(0)
for _i in range(11):
    _rels = [{'subject': 'c0.1', 'predicate': f'p{int(_rng.integers(0, 3))}', 'object': 'c1.2'}]
    VLM_TEXTS.append(None if _i % 5 == 4 else json.dumps({
        'objects': [{'id': 'c0.1', 'bbox': [100, 100, 300, int(_rng.integers(250, 350))]},
                    {'id': 'c1.2', 'bbox': [500, 500, 900, 900]}], 'relationships': _rels}))


def _preset_case(preset, mode):
    """The preset's metrics on uneven shards (23 samples); sgbench against its loop reference."""
    samples, refs = random_dataset(99, LENGTH, mode, empty_pred_prob=0.3)
    if preset == 'openpsg':
        samples = _masked(samples)
    classes = (SGBenchMetric,) if preset == 'sgbench' else (SGRecall, SGMeanRecall)
    reference = sgbench_reference(refs, NUM_PREDICATES, mode) if preset == 'sgbench' else {}
    return Case(classes, dict(mode=mode, protocol=preset), samples, META, reference, name=f'{preset}/{mode}',
                batch_size=2)


def _vlm_case(texts):
    gt = dict(bboxes=torch.tensor([[100., 100, 300, 300], [500, 500, 900, 900]]), labels=torch.tensor([0, 1]))
    samples = [dict(sample_idx=i, ori_shape=(H, W), pred_text=t, gt_instances=gt,
                    gt_relations=dict(pair_idxs=torch.tensor([[0, 1], [1, 0]]), labels=torch.tensor([i % 3, 1])))
               for i, t in enumerate(texts)]  # 11 samples
    return Case((VLMSceneGraphMetric,), dict(protocol='r1sgg'), samples, META, {}, name='r1sgg/vlm', batch_size=2)


@pytest.mark.parametrize('world_size', [2, 3])
def test_distributed_equals_single_process_for_every_preset(world_size):
    """Every preset on 1 and 2 or 3 ranks (uneven shards), pool_samples 3 / 1 and the score kernels on / off: the
    same keys bit for bit (sgbench: its loop reference's)."""
    cases = [_preset_case(preset, mode) for preset, mode in PRESET_CASES]
    singles = check_metric(cases, world_sizes=(1, world_size), pool_samples=(3, 1), abs_tol=1e-9)
    singles += check_metric([_vlm_case(VLM_TEXTS)], world_sizes=(1, world_size), pool_samples=(None,),
                            kernels=('torch',))
    for case, values in zip(cases + [_vlm_case(VLM_TEXTS)], singles):
        assert any(v > 0 for k, v in values.items() if k.startswith(('R@', 'Recall'))), case.name


# ---------------------------------------------------------------------------------------------- offline CLI
def test_offline_cli_protocol(tmp_path):
    from mmsgg_eval.eval import main
    from tests.offline.test_eval_cli import CONFIG, direct, predictions_for
    from mmsgg_eval.datasets import VG150Dataset
    from mmsgg_eval.testing import make_sample_data
    make_sample_data(str(tmp_path / 'data'), datasets=['vg150'])
    root = str(tmp_path / 'data' / 'vg150') + '/'
    dataset = VG150Dataset(data_root=root, split='test', num_val_images=8, pipeline=[])
    records = predictions_for(dataset)
    path = tmp_path / 'preds.jsonl'
    path.write_text('\n'.join(json.dumps(r) for r in records))
    res = main([CONFIG, str(path), '--metrics', 'SGRecall', 'SGMeanRecall', '--mode', 'sgdet', '--protocol', 'r1sgg',
                '--work-dir', str(tmp_path / 'o'), '--no-progress',
                '--cfg-options', f'test_dataloader.dataset.data_root={root}'])
    expected = direct(dataset, records, protocol='r1sgg')
    assert {k: res[k] for k in expected} == expected
    assert expected != direct(dataset, records)  # the legacy protocol gives other numbers here
    report = json.loads((tmp_path / 'o' / 'sgdet.metrics.json').read_text())
    assert report['conventions']['protocol'] == 'r1sgg'
    assert report['conventions']['recall'].startswith('pooled')


# ---------------------------------------------------------------------------------------------- shared work
def test_metrics_with_different_protocols_share_no_rows_or_summaries():
    """Two metrics of one evaluator whose protocols differ only by name (the openpsg preset overridden back to
    the sgb settings) join no common compute group and keep their own conventions; the numbers agree."""
    samples, _ = random_dataset(21, 12, 'sgdet')
    legacy = SGRecall(mode='sgdet')
    renamed = SGRecall(mode='sgdet', protocol='openpsg', rank='score', iou_plus_one=None, match='box')
    metrics = [legacy, renamed]
    for m in metrics:
        m.dataset_meta = META
    for start in range(0, len(samples), 3):
        batch = samples[start:start + 3]  # the same objects for both, as mmengine's Evaluator passes them
        for m in metrics:
            m.process({}, batch)
    assert legacy.compute_key() != renamed.compute_key() and legacy.summary_key() != renamed.summary_key()
    results = [m.evaluate(len(samples)) for m in metrics]
    assert results[0] == results[1]
    assert legacy.last_report['conventions']['protocol'] == 'sgb'
    assert renamed.last_report['conventions']['protocol'] == 'openpsg'
    assert renamed.last_report['conventions']['overrides'] == {'rank': 'score', 'iou_plus_one': None, 'match': 'box'}
    assert 'protocol=openpsg' in renamed.last_report['text'] and 'protocol=sgb' in legacy.last_report['text']


def test_sgbench_missing_predictions_are_never_skipped_and_have_no_detection():
    """An image flagged ``prediction_missing`` counts as an image predicted with nothing at all (R 0, InstR 0),
    also when images without predictions are otherwise skipped."""
    samples, _ = random_dataset(22, 20, 'sgdet', empty_pred_prob=0.0)
    # keep the images that the two runs below treat alike: no GT relation, or predicted pairs
    samples = [s for s in samples if not len(s['gt_relations']['labels']) or len(s['pred_relations']['pair_idxs'])]
    samples = [dict(s, sample_idx=i) for i, s in enumerate(samples)]
    missing = [i for i, s in enumerate(samples) if len(s['gt_relations']['labels'])][:4]
    empty = [dict(s) for s in samples]
    for i in missing:
        empty[i]['pred_instances'] = dict(bboxes=torch.zeros((0, 4)), labels=torch.zeros(0, dtype=torch.long),
                                          scores=torch.zeros(0))
        empty[i]['pred_relations'] = dict(pair_idxs=torch.zeros((0, 2), dtype=torch.long),
                                          scores=torch.zeros((0, NUM_PREDICATES + 1)))
        samples[i] = {k: v for k, v in samples[i].items() if k not in ('pred_instances', 'pred_relations')}
        samples[i]['prediction_missing'] = True
    flagged = SGBenchMetric(mode='sgdet', skip_empty_predictions=True)
    res = evaluate(flagged, samples)
    expected = evaluate(SGBenchMetric(mode='sgdet', skip_empty_predictions=False), empty)
    assert res == expected and res['InstR'] > 0
    assert flagged.last_report['num_missing_predictions'] == len(missing)
    assert res != evaluate(SGBenchMetric(mode='sgdet', skip_empty_predictions=True), empty)  # those are skipped


def test_protocols_doc_cites_existing_files_and_the_vlm_protocols():
    text = open(osp.join(ROOT, 'docs', 'protocols.md')).read()
    cited = set(re.findall(r'`(mmsgg_eval/[\w/]+\.py)`', text))
    assert cited and [c for c in cited if not osp.isfile(osp.join(ROOT, c))] == []
    assert 'applies to SGRecall, SGMeanRecall and\nVLMSceneGraphMetric' not in text
    assert '`VLMSceneGraphMetric` | `sgb`, `r1sgg`' in text


def test_openpsg_zero_shot_note_says_what_is_reported():
    """Before: the note said zR appears only with a given zero-shot set; it is derived from train_triplets."""
    import torch
    from mmsgg_eval.metrics import SGRecall
    from tests.sgg_samples import random_dataset
    samples, _ = random_dataset(3, 12, 'predcls')
    metric = SGRecall(mode='predcls', protocol='openpsg', match='box')
    metric.dataset_meta = dict(classes=[f'c{i}' for i in range(4)], predicates=[f'p{i}' for i in range(5)],
                               dataset_name='toy', train_triplets=torch.tensor([[0, 1, 2]]))
    metric.process({}, samples)
    keys = metric.evaluate(len(samples))
    assert 'predcls/zR@20' in keys  # no zero-shot set given, zR reported
    notes = ' '.join(metric.last_report['conventions']['notes'])
    assert 'train_triplets' in notes and 'only when a zero-shot set is given' not in notes


@pytest.mark.parametrize('mode', ['predcls', 'sgdet'])
def test_openpsg_on_box_only_data_says_to_use_match_box(mode):
    from mmsgg_eval.metrics import SGRecall
    from tests.sgg_samples import random_dataset
    samples, _ = random_dataset(1, 4, mode, max_objects=4)
    metric = SGRecall(mode=mode, protocol='openpsg')
    metric.dataset_meta = dict(classes=[f'c{i}' for i in range(4)], predicates=[f'p{i}' for i in range(5)])
    with pytest.raises(ValueError, match=r"missing field `gt_instances.masks`.*match='box'"):
        metric.process({}, samples)
        metric.evaluate(len(samples))
