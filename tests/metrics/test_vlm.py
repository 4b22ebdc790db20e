"""VLM scene-graph parsing (mmsgg_eval.io.vlm) and VLMSceneGraphMetric (FailureRate, Recall, mRecall, AP@50)."""
import contextlib
import io
import json
import random
import time
import warnings

import numpy as np
import pytest
import torch

from mmsgg_eval.metrics.scene_graph import SGMeanRecall, SGRecall
from mmsgg_eval.metrics.vlm import K_ALL, VLMSceneGraphMetric, coco_ap50
from mmsgg_eval.io.vlm import (FAILURE_CODES, PLACEHOLDER_BOX, SEARCH_WORK_FACTOR, NameMapper, ParseResult,
                            build_mappers, class_from_id, failed_data_sample, gt_from_data_info, iter_vlm_jsonl,
                            normalize_name, parse_vlm_output, to_data_sample)

CLASSES = ['person', 'horse', 'hat', 'traffic light', 'street']
PREDICATES = ['riding', 'wearing', 'on', 'standing on']
META = dict(classes=CLASSES, predicates=PREDICATES, dataset_name='toy', predicate_counts=[30, 20, 10, 5])
W, H = 640, 480  # image (width, height); canvas 0-1000 -> x * 0.64, y * 0.48


def graph(objects, relationships):
    return json.dumps({'objects': objects, 'relationships': relationships})


PERSON = {'id': 'person.1', 'bbox': [100, 200, 500, 1000]}
HORSE = {'id': 'horse.2', 'bbox': [0, 0, 1000, 1000]}
HAT = {'id': 'hat.3', 'bbox': [150, 200, 250, 300]}
RIDING = {'subject': 'person.1', 'predicate': 'riding', 'object': 'horse.2'}
WEARING = {'subject': 'person.1', 'predicate': 'wearing', 'object': 'hat.3'}
VALID = graph([PERSON, HORSE, HAT], [RIDING, WEARING])

# GT of every corpus sample (boxes = the VALID graph rescaled to 640x480)
GT_BOXES = [[64., 96., 320., 480.], [0., 0., 640., 480.], [96., 96., 160., 144.]]
GT = dict(gt_instances=dict(bboxes=torch.tensor(GT_BOXES), labels=torch.tensor([0, 1, 2])),
          gt_relations=dict(pair_idxs=torch.tensor([[0, 1], [0, 2]]), labels=torch.tensor([0, 1])),
          ori_shape=(H, W))

# (name, raw model output, expected code) -- the FailureRate contribution is 1 unless the code is 'ok'
CORPUS = [
    ('plain json', VALID, 'ok'),
    ('fenced json', f'Here is the scene graph:\n```json\n{VALID}\n```\nLet me know if you need more.', 'ok'),
    ('fence without language', f'```\n{VALID}\n```', 'ok'),
    ('answer tag (R1 style)', f'<think>The man sits on a horse {{maybe}}.</think>\n<answer>```json\n{VALID}\n```'
                              f'</answer>', 'ok'),
    ('answer tag, no fence', f'<answer>{VALID}</answer>', 'ok'),
    ('leading and trailing prose', f'Sure! {{Note}} The graph is {VALID} -- hope this helps.', 'ok'),
    ('pretty printed', json.dumps(json.loads(VALID), indent=2), 'ok'),
    ('relations alias', json.dumps({'objects': [PERSON, HORSE], 'relations': [RIDING]}), 'ok'),
    ('wrapped in another object', json.dumps({'scene_graph': json.loads(VALID)}), 'ok'),
    ('empty graph', graph([], []), 'ok'),
    ('objects without relationships', graph([PERSON, HORSE], []), 'ok'),
    ('case, underscores, hyphens', graph([{'id': 'Traffic_Light.1', 'bbox': [1, 2, 3, 4]},
                                          {'id': 'STREET-2', 'bbox': [0, 0, 1000, 1000]}],
                                         [{'subject': 'Traffic_Light.1', 'predicate': 'Standing-On',
                                           'object': 'STREET-2'}]), 'ok'),
    ('explicit label field', graph([{'id': 'o1', 'label': 'Person', 'bbox': [100, 200, 500, 1000]},
                                    {'id': 'o2', 'category': 'horse', 'bbox': [0, 0, 1000, 1000]}],
                                   [{'subject': 'o1', 'predicate': 'riding', 'object': 'o2'}]), 'ok'),
    ('integer ids', graph([{'id': 1, 'label': 'person', 'bbox': [100, 200, 500, 1000]},
                           {'id': 2, 'label': 'horse', 'bbox': [0, 0, 1000, 1000]}],
                          [{'subject': 1, 'predicate': 'riding', 'object': 2}]), 'ok'),
    ('scores given', graph([dict(PERSON, score=0.9), dict(HORSE, confidence=0.8)], [dict(RIDING, score=0.7)]), 'ok'),
    ('unknown class and predicate (valid, cannot match)',
     graph([PERSON, {'id': 'unicorn.1', 'bbox': [0, 0, 10, 10]}],
           [{'subject': 'person.1', 'predicate': 'admiring', 'object': 'unicorn.1'}]), 'ok'),
    ('box slightly outside the canvas (clipped)', graph([{'id': 'person.1', 'bbox': [-5, 200, 500, 1008]}, HORSE],
                                                        [RIDING]), 'ok'),
    ('zero-area box', graph([{'id': 'person.1', 'bbox': [10, 10, 10, 10]}, HORSE], [RIDING]), 'ok'),
    ('self relation', graph([PERSON], [{'subject': 'person.1', 'predicate': 'on', 'object': 'person.1'}]), 'ok'),
    # ---- failures
    ('no output', None, 'no_json'),
    ('prose only', 'I cannot see any objects in this image.', 'no_json'),
    ('empty string', '', 'no_json'),
    ('truncated json', VALID[:len(VALID) // 2], 'invalid_json'),
    ('truncated inside fence', f'```json\n{VALID[:-30]}', 'invalid_json'),
    ('unclosed think, no answer', f'<think>the graph could be {VALID}', 'no_json'),
    ('trailing comma', VALID[:-2] + ',]}', 'invalid_json'),
    ('single quotes (python repr)', str(json.loads(VALID)), 'invalid_json'),
    ('top-level list', json.dumps([PERSON, HORSE]), 'not_object'),
    ('no relationships key', json.dumps({'objects': [PERSON, HORSE]}), 'missing_field'),
    ('no objects key', json.dumps({'relationships': [RIDING]}), 'missing_field'),
    ('object without bbox', graph([{'id': 'person.1'}, HORSE], [RIDING]), 'missing_field'),
    ('object without id', graph([{'bbox': [1, 2, 3, 4]}, HORSE], []), 'missing_field'),
    ('relationship without predicate', graph([PERSON, HORSE], [{'subject': 'person.1', 'object': 'horse.2'}]),
     'missing_field'),
    ('objects is a dict', json.dumps({'objects': {'person.1': [1, 2, 3, 4]}, 'relationships': []}), 'wrong_type'),
    ('relationships is a string', json.dumps({'objects': [PERSON], 'relationships': 'none'}), 'wrong_type'),
    ('predicate is a number', graph([PERSON, HORSE], [dict(RIDING, predicate=3)]), 'wrong_type'),
    ('relationship is a list', graph([PERSON, HORSE], [['person.1', 'riding', 'horse.2']]), 'wrong_type'),
    ('score is a string', graph([dict(PERSON, score='high'), HORSE], [RIDING]), 'wrong_type'),
    ('label is a list', graph([dict(PERSON, label=['person']), HORSE], [RIDING]), 'wrong_type'),
    ('bbox as a string', graph([dict(PERSON, bbox='[100, 200, 500, 1000]'), HORSE], [RIDING]), 'bad_box'),
    ('bbox numeric strings', graph([dict(PERSON, bbox=['100', '200', '500', '1000']), HORSE], [RIDING]), 'bad_box'),
    ('bbox with 3 numbers', graph([dict(PERSON, bbox=[100, 200, 500]), HORSE], [RIDING]), 'bad_box'),
    ('bbox booleans', graph([dict(PERSON, bbox=[True, 0, 1, 1]), HORSE], [RIDING]), 'bad_box'),
    ('bbox x2 < x1', graph([dict(PERSON, bbox=[500, 200, 100, 1000]), HORSE], [RIDING]), 'bad_box'),
    ('bbox in pixels of a 1920 image', graph([dict(PERSON, bbox=[100, 200, 1500, 900]), HORSE], [RIDING]),
     'box_out_of_canvas'),
    ('negative coordinate', graph([dict(PERSON, bbox=[-50, 200, 500, 900]), HORSE], [RIDING]),
     'box_out_of_canvas'),
    ('duplicate id', graph([PERSON, dict(PERSON, bbox=[0, 0, 5, 5]), HORSE], [RIDING]), 'duplicate_id'),
    ('dangling subject', graph([HORSE], [RIDING]), 'dangling_id'),
    ('dangling object', graph([PERSON], [RIDING]), 'dangling_id'),
]


@pytest.mark.parametrize('name,text,code', CORPUS, ids=[c[0] for c in CORPUS])
def test_corpus_codes(name, text, code):
    result = parse_vlm_output(text, (W, H), CLASSES, PREDICATES)
    assert result.code == code, (name, result.reason)
    assert result.ok == (code == 'ok')
    assert code in FAILURE_CODES
    if not result.ok:
        assert result.reason and result.num_objects == 0 and result.num_relations == 0


def test_failure_rate_of_corpus():
    metric = VLMSceneGraphMetric()
    metric.dataset_meta = META
    samples = [dict(GT, sample_idx=i, pred_text=text) for i, (_, text, _) in enumerate(CORPUS)]
    for start in range(0, len(samples), 7):
        metric.process(None, samples[start:start + 7])
    out = metric.evaluate(len(samples))
    expected_failures = sum(code != 'ok' for _, _, code in CORPUS)
    assert out['vlm/FailureRate'] == pytest.approx(100.0 * expected_failures / len(CORPUS))
    report = metric.last_report
    assert report['num_failed'] == expected_failures
    assert report['num_samples'] == len(CORPUS)
    expected_reasons = {}
    for _, _, code in CORPUS:
        if code != 'ok':
            expected_reasons[code] = expected_reasons.get(code, 0) + 1
    assert report['failure_reasons'] == expected_reasons


def test_valid_graph_content():
    r = parse_vlm_output(VALID, (W, H), CLASSES, PREDICATES)
    assert r.ok and r.code == 'ok' and r.reason == ''
    np.testing.assert_allclose(r.bboxes, np.asarray(GT_BOXES, np.float32))
    assert r.labels.tolist() == [0, 1, 2] and r.scores.tolist() == [1, 1, 1]
    assert r.pair_idxs.tolist() == [[0, 1], [0, 2]] and r.rel_labels.tolist() == [0, 1]
    assert r.rel_scores.tolist() == [1, 1] and not r.has_scores
    assert r.ids == ['person.1', 'horse.2', 'hat.3']


def test_canvas_and_box_formats():
    g = graph([{'id': 'person.1', 'bbox': [0.1, 0.2, 0.5, 1.0]}], [])
    r = parse_vlm_output(g, (W, H), CLASSES, PREDICATES, canvas=1)
    np.testing.assert_allclose(r.bboxes[0], [64, 96, 320, 480], rtol=1e-6)
    g = graph([{'id': 'person.1', 'bbox': [10, 20, 30, 40]}], [])
    r = parse_vlm_output(g, (W, H), CLASSES, PREDICATES, canvas=None)  # pixels
    np.testing.assert_allclose(r.bboxes[0], [10, 20, 30, 40])
    r = parse_vlm_output(g, (W, H), CLASSES, PREDICATES, canvas=(100, 200))
    np.testing.assert_allclose(r.bboxes[0], [64, 48, 192, 96])
    r = parse_vlm_output(g, (W, H), CLASSES, PREDICATES, canvas=None, box_format='xywh')
    np.testing.assert_allclose(r.bboxes[0], [10, 20, 40, 60])
    # pixels beyond the image on a pixel canvas: outside the tolerance -> failure
    g = graph([{'id': 'person.1', 'bbox': [10, 20, 700, 40]}], [])
    assert parse_vlm_output(g, (W, H), CLASSES, PREDICATES, canvas=None).code == 'box_out_of_canvas'
    # tolerance: -5 and 1008 on the 1000 canvas are clipped to the image
    g = graph([{'id': 'person.1', 'bbox': [-5, 200, 500, 1008]}], [])
    r = parse_vlm_output(g, (W, H), CLASSES, PREDICATES)
    np.testing.assert_allclose(r.bboxes[0], [0, 96, 320, 480])
    assert parse_vlm_output(g, (W, H), CLASSES, PREDICATES, box_tolerance=0.0).code == 'box_out_of_canvas'


def test_names_and_synonyms():
    assert normalize_name('  Traffic_Light ') == 'traffic light'
    assert normalize_name('standing-on') == 'standing on'
    assert normalize_name('Standing   ON') == 'standing on'
    for oid, cls in [('person.1', 'person'), ('person_12', 'person'), ('person 3', 'person'), ('person#2', 'person'),
                     ('person7', 'person'), ('traffic_light.2', 'traffic_light'), ('horse', 'horse')]:
        assert class_from_id(oid) == cls
    text = graph([{'id': 'Man.1', 'bbox': [100, 200, 500, 1000]}, {'id': 'pony_2', 'bbox': [0, 0, 1000, 1000]},
                  {'id': 'cap.3', 'bbox': [150, 200, 250, 300]}],
                 [{'subject': 'Man.1', 'predicate': 'Rides', 'object': 'pony_2'},
                  {'subject': 'Man.1', 'predicate': 'has on', 'object': 'cap.3'}])
    plain = parse_vlm_output(text, (W, H), CLASSES, PREDICATES)
    assert plain.ok and plain.labels.tolist() == [-1, -1, -1] and plain.rel_labels.tolist() == [-1, -1]
    assert plain.num_unknown_relations == 2 and plain.warnings
    flat = {'man': 'person', 'Pony': 'horse', 'cap': 'hat', 'rides': 'riding', 'has_on': 'wearing'}
    split = {'objects': {'man': 'person', 'pony': 'horse', 'cap': 'hat'},
             'predicates': {'rides': 'riding', 'has on': 'wearing'}}
    for synonyms in (flat, split):
        r = parse_vlm_output(text, (W, H), CLASSES, PREDICATES, synonyms=synonyms)
        assert r.labels.tolist() == [0, 1, 2] and r.rel_labels.tolist() == [0, 1]
        assert r.num_unknown_relations == 0
    with pytest.raises(ValueError, match='neither classes nor predicates'):
        build_mappers(CLASSES, PREDICATES, {'man': 'human'})
    with pytest.raises(ValueError, match='not a dataset name'):
        NameMapper(CLASSES, {'man': 'human'})
    # a synonym never overrides an exact dataset name
    assert NameMapper(CLASSES, {'horse': 'person'})('horse') == 1


def score_recall(samples, metric_cls=SGRecall, ks=(K_ALL,), rank='given'):
    metric = metric_cls(mode='sgdet', topk=ks, rank=rank, skip_empty_predictions=False, iou_plus_one=False)
    metric.dataset_meta = META
    metric.process(None, samples)
    with contextlib.redirect_stdout(io.StringIO()):
        metric.evaluate(len(samples))
    return metric.last_report['metrics']


def test_to_data_sample_scored_by_sgrecall():
    good = to_data_sample(parse_vlm_output(VALID, (W, H), CLASSES, PREDICATES), GT, sample_idx=0)
    assert good['pred_relations']['scores'].dim() == 1 and good['pred_relations']['labels'].tolist() == [0, 1]
    assert good['pred_instances']['labels'].tolist() == [0, 1, 2]
    assert good['vlm']['ok'] and good['sample_idx'] == 0
    assert score_recall([good])[f'R@{K_ALL}'] == pytest.approx(100.0)
    # a failed sample is never dropped: empty prediction, recall 0
    bad = to_data_sample(parse_vlm_output(VALID[:40], (W, H), CLASSES, PREDICATES), GT, sample_idx=1)
    assert bad['pred_relations']['pair_idxs'].shape == (0, 2) and bad['pred_instances']['bboxes'].shape == (0, 4)
    assert not bad['vlm']['ok'] and bad['vlm']['code'] == 'invalid_json'
    assert score_recall([good, bad])[f'R@{K_ALL}'] == pytest.approx(50.0)
    assert score_recall([good, failed_data_sample(GT, 1)])[f'R@{K_ALL}'] == pytest.approx(50.0)
    mr = score_recall([good, bad], SGMeanRecall)
    # riding: images (1, 0) -> 0.5; wearing: 0.5; on / standing on absent -> 0; sum / 4
    assert mr[f'mR@{K_ALL}'] == pytest.approx(100.0 * (0.5 + 0.5) / 4)


def test_unknown_names_keep_their_rank_slot():
    text = graph([PERSON, HORSE, HAT, {'id': 'unicorn.9', 'bbox': [0, 0, 1000, 1000]}],
                 [{'subject': 'person.1', 'predicate': 'riding', 'object': 'unicorn.9'},  # unknown class
                  {'subject': 'person.1', 'predicate': 'gallops', 'object': 'horse.2'},   # unknown predicate
                  RIDING, WEARING])
    r = parse_vlm_output(text, (W, H), CLASSES, PREDICATES)
    assert r.ok and r.known_relations.tolist() == [False, False, True, True]
    ds = to_data_sample(r, GT, sample_idx=0)
    boxes = ds['pred_instances']['bboxes']
    assert boxes.shape == (4, 4) and boxes[-1].tolist() == list(PLACEHOLDER_BOX)  # unicorn dropped, placeholder
    assert ds['pred_relations']['pair_idxs'].tolist() == [[3, 3], [3, 3], [0, 1], [0, 2]]
    m = score_recall([ds], ks=(1, 2, 3, 4, K_ALL))
    assert [m[f'R@{k}'] for k in (1, 2, 3, 4)] == [0.0, 0.0, 50.0, 100.0]
    assert m[f'R@{K_ALL}'] == 100.0
    # the placeholder never matches, even with +1 IoU and union boxes
    for plus_one in (True, False):
        for mode in ('sgdet', 'phrdet'):
            metric = SGRecall(mode=mode, topk=(2,), rank='given', skip_empty_predictions=False,
                              iou_plus_one=plus_one)
            metric.dataset_meta = META
            metric.process(None, [ds])
            with contextlib.redirect_stdout(io.StringIO()):
                metric.evaluate(1)
            assert metric.last_report['metrics']['R@2'] == 0.0


def test_rank_by_score_with_given_scores():
    text = graph([dict(PERSON, score=0.5), HORSE, HAT],
                 [dict(WEARING, score=0.2), dict(RIDING, score=0.9)])
    r = parse_vlm_output(text, (W, H), CLASSES, PREDICATES)
    assert r.has_scores
    ds = to_data_sample(r, GT, sample_idx=0)
    assert score_recall([ds], ks=(1,), rank='given')['R@1'] == 50.0
    # riding first by score; R@1 hits riding only
    assert score_recall([ds], ks=(1,), rank='score')['R@1'] == 50.0
    metric = VLMSceneGraphMetric(topk=(1,), rank='score', iou_plus_one=False)
    metric.dataset_meta = META
    metric.process(None, [dict(GT, sample_idx=0, pred_text=text)])
    out = metric.evaluate(1)
    assert out['vlm/R@1'] == 50.0 and out['vlm/Recall'] == 100.0


def test_gt_from_data_info():
    info = {'img_id': 7, 'sample_idx': 3, 'width': W, 'height': H,
            'instances': [{'bbox': b, 'bbox_label': lab, 'ignore_flag': 0} for b, lab in zip(GT_BOXES, [0, 1, 2])],
            'relations': np.array([[0, 1, 0], [0, 2, 1]])}
    gt = gt_from_data_info(info)
    assert gt['ori_shape'] == (H, W) and gt['sample_idx'] == 3
    ds = to_data_sample(parse_vlm_output(VALID, (W, H), CLASSES, PREDICATES), info)
    assert ds['gt_relations']['labels'].tolist() == [0, 1] and ds['sample_idx'] == 3
    assert score_recall([ds])[f'R@{K_ALL}'] == 100.0


def test_iter_vlm_jsonl(tmp_path):
    path = tmp_path / 'out.jsonl'
    path.write_text(json.dumps({'sample_idx': 0, 'output': VALID}) + '\n\n'
                    + json.dumps({'image_id': 'a', 'response': None}) + '\n'
                    + json.dumps({'id': 2, 'text': json.loads(VALID)}) + '\n')
    rows = list(iter_vlm_jsonl(str(path)))
    assert [(k, v) for k, v, _ in rows] == [('sample_idx', 0), ('image_id', 'a'), ('id', 2)]
    assert rows[1][2] is None and isinstance(rows[2][2], dict)
    assert parse_vlm_output(rows[2][2], (W, H), CLASSES, PREDICATES).ok
    path.write_text('not json\n')
    with pytest.raises(ValueError, match=':1:'):
        list(iter_vlm_jsonl(str(path)))


# ---------------------------------------------------------------------------------------------- AP@50
def test_ap50_hand_computed():
    # one image, one class, 2 GT boxes; detections by score: TP, FP, TP
    gt = {'image': np.array([0, 0]), 'box': np.array([[0, 0, 10, 10], [20, 20, 30, 30]], np.float32),
          'label': np.array([0, 0])}
    pred = {'image': np.array([0, 0, 0]),
            'box': np.array([[0, 0, 10, 10], [50, 50, 60, 60], [20, 20, 30, 31]], np.float32),
            'label': np.array([0, 0, 0]), 'score': np.array([0.9, 0.8, 0.7], np.float32)}
    # precision envelope: 1 for recall <= 0.5 (51 of COCO's 101 recall points), 2/3 above (50 points)
    expected = (51 * 1.0 + 50 * (2 / 3)) / 101
    assert coco_ap50(gt, pred, [0], num_classes=1) == pytest.approx(expected)
    # the same through the metric (objects without scores get 1: ties keep the output order)
    objects = [{'id': 'person.1', 'bbox': [0, 0, 10, 10]}, {'id': 'person.2', 'bbox': [50, 50, 60, 60]},
               {'id': 'person.3', 'bbox': [20, 20, 30, 31]}]
    sample = dict(gt_instances=dict(bboxes=torch.tensor(gt['box']), labels=torch.tensor([0, 0])),
                  gt_relations=dict(pair_idxs=torch.zeros((0, 2), dtype=torch.long),
                                    labels=torch.zeros(0, dtype=torch.long)),
                  ori_shape=(100, 100), sample_idx=0, pred_text=graph(objects, []))
    metric = VLMSceneGraphMetric(canvas=None, iou_plus_one=False)
    metric.dataset_meta = META
    metric.process(None, [sample])
    assert metric.evaluate(1)['vlm/AP@50'] == pytest.approx(100 * expected)


def _random_case(seed, num_images=12):
    rng = random.Random(seed)
    samples, direct_gt, direct_dt = [], [], []
    for i in range(num_images):
        n = rng.randint(0, 5)
        boxes, labels = [], []
        for _ in range(n):
            x, y = rng.uniform(0, 500), rng.uniform(0, 350)
            boxes.append([x, y, x + rng.uniform(5, 130), y + rng.uniform(5, 120)])
            labels.append(rng.randrange(len(CLASSES)))
        objects = []
        for j, (b, lab) in enumerate(zip(boxes, labels)):
            if rng.random() < 0.8:  # a jittered detection of a GT object (sometimes the wrong class)
                jit = [c + rng.uniform(-12, 12) for c in b]
                jit = [min(max(jit[0], 0), W), min(max(jit[1], 0), H), min(max(jit[2], 0), W), min(max(jit[3], 0), H)]
                jit[2], jit[3] = max(jit[2], jit[0]), max(jit[3], jit[1])
                cls = lab if rng.random() < 0.85 else rng.randrange(len(CLASSES))
                objects.append({'id': f'{CLASSES[cls]}.{j}', 'bbox': [round(jit[0] / W * 1000, 1),
                                round(jit[1] / H * 1000, 1), round(jit[2] / W * 1000, 1), round(jit[3] / H * 1000, 1)],
                                'score': round(rng.random(), 3)})
        for j in range(rng.randint(0, 2)):  # false positives
            x, y = rng.uniform(0, 800), rng.uniform(0, 800)
            objects.append({'id': f'{rng.choice(CLASSES)}.{100 + j}', 'bbox': [x, y, x + 100, y + 150],
                            'score': round(rng.random(), 3)})
        text = f'```json\n{graph(objects, [])}\n```'
        samples.append(dict(gt_instances=dict(bboxes=torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4),
                                              labels=torch.tensor(labels, dtype=torch.long)),
                            gt_relations=dict(pair_idxs=torch.zeros((0, 2), dtype=torch.long),
                                              labels=torch.zeros(0, dtype=torch.long)),
                            ori_shape=(H, W), sample_idx=i, pred_text=text))
        for b, lab in zip(torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4).tolist(), labels):
            direct_gt.append((i, b, lab))
        parsed = parse_vlm_output(text, (W, H), CLASSES, PREDICATES)
        for b, lab, s in zip(parsed.bboxes.tolist(), parsed.labels.tolist(), parsed.scores.tolist()):
            direct_dt.append((i, b, lab, s))
    return samples, direct_gt, direct_dt


def pycocotools_ap50(gt_rows, pred_rows, image_ids, num_classes, plus_one=False, max_dets=100):
    """Reference: COCO AP at IoU 0.5 by pycocotools ``COCOeval`` (``stats[1]``) of the rows of ``coco_ap50``;
    category id = label + 1, annotation ids from 1, NaN without GT rows, 0 without predictions."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval
    extra = 1.0 if plus_one else 0.0

    def xywh(box):
        return [box[0], box[1], box[2] - box[0] + extra, box[3] - box[1] + extra]
    anns = [{'id': i + 1, 'image_id': int(img), 'category_id': int(lab) + 1, 'bbox': xywh(box),
             'area': xywh(box)[2] * xywh(box)[3], 'iscrowd': 0}
            for i, (img, box, lab) in enumerate(zip(gt_rows['image'].tolist(), gt_rows['box'].tolist(),
                                                    gt_rows['label'].tolist()))]
    if not anns:
        return float('nan')
    dets = [{'image_id': int(img), 'category_id': int(lab) + 1, 'bbox': xywh(box), 'score': float(score)}
            for img, box, lab, score in zip(pred_rows['image'].tolist(), pred_rows['box'].tolist(),
                                            pred_rows['label'].tolist(), pred_rows['score'].tolist())]
    if not dets:
        return 0.0
    gt = COCO()
    gt.dataset = {'images': [{'id': int(i)} for i in image_ids], 'annotations': anns,
                  'categories': [{'id': c + 1, 'name': str(c)} for c in range(num_classes)]}
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
        ev = COCOeval(gt, gt.loadRes(dets), 'bbox')
        ev.params.imgIds = [int(i) for i in image_ids]
        ev.params.maxDets = [1, 10, int(max_dets)]
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    ap = float(ev.stats[1])
    return float('nan') if ap < 0 else ap


def _random_rows(rng, num_images, num_classes):
    """Rows of ``coco_ap50`` on a random case: images without GT, without predictions or without either,
    duplicate boxes (IoU ties), scores from a few values (score ties), image ids neither contiguous nor in
    order, rows of the images interleaved."""
    image_ids = rng.permutation(np.arange(num_images) * 3 + 7)
    gt, pred = {k: [] for k in ('image', 'box', 'label')}, {k: [] for k in ('image', 'box', 'label', 'score')}
    for img in image_ids.tolist():
        kind = rng.integers(0, 4)  # 0: GT and predictions, 1: GT only, 2: predictions only, 3: nothing
        num_gt = int(rng.integers(1, 7)) if kind in (0, 1) else 0
        xy = rng.uniform(0, 300, (num_gt, 2))
        boxes = np.concatenate([xy, xy + rng.uniform(1, 30, (num_gt, 2))], 1)  # small: +1 widths matter
        if num_gt > 1 and rng.random() < 0.5:
            boxes[1] = boxes[0]  # a duplicate GT box: IoU ties
        labels = rng.integers(0, num_classes, num_gt)
        gt['image'] += [img] * num_gt
        gt['box'] += boxes.tolist()
        gt['label'] += labels.tolist()
        if kind in (0, 2):
            num_det = int(rng.integers(1, 9 if rng.random() < 0.7 else 40))  # some past max_dets
            src = rng.integers(0, max(num_gt, 1), num_det)
            det = boxes[src] + rng.normal(0, 3, (num_det, 4)) if num_gt else \
                np.concatenate([xy := rng.uniform(0, 300, (num_det, 2)), xy + 40], 1)
            det[:, 2:] = np.maximum(det[:, 2:], det[:, :2])
            det_labels = labels[src] if num_gt else rng.integers(0, num_classes, num_det)
            flip = rng.random(num_det) < 0.2
            det_labels = np.where(flip, rng.integers(0, num_classes, num_det), det_labels)
            pred['image'] += [img] * num_det
            pred['box'] += det.tolist()
            pred['label'] += det_labels.tolist()
            pred['score'] += rng.choice([0.25, 0.5, 0.75, 1.0], num_det).tolist()
    order_gt, order_pred = rng.permutation(len(gt['image'])), rng.permutation(len(pred['image']))
    gt = {'image': np.asarray(gt['image'], np.int64)[order_gt],
          'box': np.asarray(gt['box'], np.float32).reshape(-1, 4)[order_gt],
          'label': np.asarray(gt['label'], np.int64)[order_gt]}
    pred = {'image': np.asarray(pred['image'], np.int64)[order_pred],
            'box': np.asarray(pred['box'], np.float32).reshape(-1, 4)[order_pred],
            'label': np.asarray(pred['label'], np.int64)[order_pred],
            'score': np.asarray(pred['score'], np.float32)[order_pred]}
    return gt, pred, image_ids.tolist()


@pytest.mark.parametrize('seed', range(8))
def test_ap50_equals_pycocotools_on_random_rows(seed, monkeypatch):
    from mmsgg_eval.functional import detection_rows
    rng = np.random.default_rng(seed)
    gt, pred, image_ids = _random_rows(rng, int(rng.integers(1, 15)), num_classes=4)
    for plus_one in (False, True):
        for max_dets in (100, 11, 3):  # below 10 acts as 10 (COCOeval sorts [1, 10, max_dets])
            expected = pycocotools_ap50(gt, pred, image_ids, 4, plus_one, max_dets)
            for chunk in (1 << 22, 40):  # all images in one matching call, or a few at a time
                monkeypatch.setattr(detection_rows, 'AP_CHUNK_ENTRIES', chunk)
                got = coco_ap50(gt, pred, image_ids, 4, plus_one, max_dets)
                assert got == expected or (np.isnan(got) and np.isnan(expected)), (seed, plus_one, max_dets, chunk)


def test_ap50_edge_cases_equal_pycocotools():
    empty_gt = {'image': np.zeros(0, np.int64), 'box': np.zeros((0, 4), np.float32), 'label': np.zeros(0, np.int64)}
    empty_pred = dict(empty_gt, score=np.zeros(0, np.float32))
    one_gt = {'image': np.array([5]), 'box': np.array([[0, 0, 10, 10]], np.float32), 'label': np.array([1])}
    one_pred = dict(one_gt, score=np.array([0.5], np.float32))
    cases = [(empty_gt, one_pred, [5]), (one_gt, empty_pred, [5]), (empty_gt, empty_pred, [5]),
             (one_gt, one_pred, [5, 9]), (one_gt, dict(one_pred, label=np.array([0])), [5])]
    for gt, pred, ids in cases:
        expected, got = pycocotools_ap50(gt, pred, ids, 3), coco_ap50(gt, pred, ids, 3)
        assert got == expected or (np.isnan(got) and np.isnan(expected))
    assert np.isnan(coco_ap50(empty_gt, one_pred, [5], 3)) and coco_ap50(one_gt, empty_pred, [5], 3) == 0.0
    assert coco_ap50(one_gt, one_pred, [5, 9], 3) == pytest.approx(1.0)  # tp / (tp + fp + eps), as COCOeval
    assert coco_ap50(one_gt, dict(one_pred, label=np.array([0])), [5], 3) == 0.0


def test_ap50_equals_pycocotools_directly():
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval
    samples, direct_gt, direct_dt = _random_case(3)
    coco = COCO()
    coco.dataset = {'images': [{'id': i} for i in range(len(samples))],
                    'categories': [{'id': c + 1, 'name': n} for c, n in enumerate(CLASSES)],
                    'annotations': [{'id': k + 1, 'image_id': i, 'category_id': lab + 1, 'iscrowd': 0,
                                     'bbox': [b[0], b[1], b[2] - b[0], b[3] - b[1]],
                                     'area': (b[2] - b[0]) * (b[3] - b[1])}
                                    for k, (i, b, lab) in enumerate(direct_gt)]}
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
        dets = coco.loadRes([{'image_id': i, 'category_id': lab + 1, 'score': s,
                              'bbox': [b[0], b[1], b[2] - b[0], b[3] - b[1]]} for i, b, lab, s in direct_dt])
        ev = COCOeval(coco, dets, 'bbox')
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    expected = 100 * ev.stats[1]
    assert 5 < expected < 95  # a non-trivial case
    metric = VLMSceneGraphMetric(iou_plus_one=False)
    metric.dataset_meta = META
    for start in range(0, len(samples), 5):
        metric.process(None, samples[start:start + 5])
    assert metric.evaluate(len(samples))['vlm/AP@50'] == pytest.approx(expected, abs=1e-9)


def test_metric_keys_groups_and_missing_shape():
    metric = VLMSceneGraphMetric(topk=(20,), iou_plus_one=False)
    metric.dataset_meta = META
    metric.process(None, [dict(GT, sample_idx=0, pred_text=VALID), dict(GT, sample_idx=1, pred_text='oops')])
    out = metric.evaluate(2)
    for key in ('FailureRate', 'Recall', 'mRecall', 'AP@50', 'R@20', 'mR@20', 'mRecall_head', 'mRecall_tail'):
        assert f'vlm/{key}' in out
    assert out['vlm/FailureRate'] == 50.0 and out['vlm/Recall'] == 50.0
    rep = metric.last_report
    assert list(rep['per_predicate']) == PREDICATES  # training-frequency order
    assert rep['per_predicate']['riding'] == {'Recall': 50.0, 'R@20': 50.0, 'num_gt': 2}
    assert rep['ks'] == ['all', 20]
    sample = dict(GT, sample_idx=0, pred_text=VALID)
    del sample['ori_shape']
    with pytest.raises(ValueError, match='ori_shape'):
        metric.process(None, [sample])


def test_metric_accepts_parse_results_and_graphs():
    metric = VLMSceneGraphMetric(iou_plus_one=False)
    metric.dataset_meta = META
    parsed = parse_vlm_output(VALID, (W, H), CLASSES, PREDICATES)
    metric.process(None, [dict(GT, sample_idx=0, vlm_result=parsed),
                          dict(GT, sample_idx=1, pred_graph=json.loads(VALID)),
                          dict(GT, sample_idx=2, vlm_result=ParseResult.failure('invalid_json', 'x'))])
    out = metric.evaluate(3)
    assert out['vlm/Recall'] == pytest.approx(200 / 3) and out['vlm/FailureRate'] == pytest.approx(100 / 3)


def test_metric_writes_reports(tmp_path):
    metric = VLMSceneGraphMetric(report_dir=str(tmp_path), iou_plus_one=False)
    metric.dataset_meta = META
    metric.process(None, [dict(GT, sample_idx=0, pred_text=VALID)])
    metric.evaluate(1)
    files = metric.last_report['report_files']
    saved = json.loads(open(files['json']).read())
    assert saved['metrics']['Recall'] == 100.0 and saved['ks'] == ['all']


def test_distributed_equals_single_process():
    """1 and 2 ranks (11 samples: padding on 2 ranks) give the same keys and failure reasons bit for bit; the
    failure rate is the corpus' share of answers without a graph."""
    from tests.metric_tester import Case, check_metric
    corpus = CORPUS[:9] + [CORPUS[-1], CORPUS[-5]]  # 11 samples, padding on 2 ranks
    samples = [dict(GT, sample_idx=i, pred_text=text) for i, (_, text, _) in enumerate(corpus)]
    failures = 100.0 * sum(code != 'ok' for _, _, code in corpus) / len(corpus)
    case = Case((VLMSceneGraphMetric,), dict(topk=(1,), iou_plus_one=False), samples, META,
                {'FailureRate': failures}, name='vlm', batch_size=2, report_fields=('failure_reasons',))
    check_metric([case], world_sizes=(1, 2), pool_samples=(None,), kernels=('torch',))


# ---------------------------------------------------------------------------------------------- one answer parser
def test_both_vlm_metrics_hold_one_answer_parser(tmp_path):
    from mmsgg_eval.io.vlm import VLMAnswerParser
    from mmsgg_eval.metrics import RelCLIPScore
    from tests.metrics.test_relclip import StubEncoder
    synonyms = tmp_path / 'syn.json'
    synonyms.write_text(json.dumps({'man': 'person'}))
    vlm = VLMSceneGraphMetric(canvas=None, synonyms=str(synonyms))
    relclip = RelCLIPScore(encoder=StubEncoder(), vlm=dict(canvas=None, synonyms=str(synonyms)))
    assert isinstance(vlm.parser, VLMAnswerParser) and isinstance(relclip.vlm_parser, VLMAnswerParser)
    assert vlm.parser.synonyms == relclip.vlm_parser.synonyms == {'man': 'person'}
    text = graph([{'id': 'man.1', 'bbox': [1, 2, 30, 40]}, {'id': 'horse.2', 'bbox': [0, 0, 600, 400]}],
                 [{'subject': 'man.1', 'predicate': 'riding', 'object': 'horse.2'}])
    sample = dict(ori_shape=(H, W), pred_text=text)
    direct = parse_vlm_output(text, (W, H), CLASSES, PREDICATES, canvas=None, synonyms={'man': 'person'})
    for parser in (vlm.parser, relclip.vlm_parser):
        got = parser.result_of(sample, CLASSES, PREDICATES)
        assert got.ok and got.labels.tolist() == direct.labels.tolist() == [0, 1]
        assert np.array_equal(got.bboxes, direct.bboxes) and got.rel_labels.tolist() == [0]
        assert parser.result_of(dict(sample, vlm_result=direct), CLASSES, PREDICATES) is direct
        assert parser.mappers(CLASSES, PREDICATES) is parser.mappers(list(CLASSES), list(PREDICATES))  # cached
    assert relclip.vlm_parser.holds_answer(sample) and not relclip.vlm_parser.holds_answer(
        dict(sample, pred_relations={}))
    with pytest.raises(ValueError, match=r'RelCLIPScore: a sample needs `ori_shape`'):
        relclip.vlm_parser.result_of(dict(pred_text=text), CLASSES, PREDICATES)
    with pytest.raises(ValueError, match="box_format must be 'xyxy' or 'xywh'"):
        RelCLIPScore(encoder=StubEncoder(), vlm=dict(box_format='cxcywh'))
    with pytest.raises(TypeError, match='topk'):
        RelCLIPScore(encoder=StubEncoder(), vlm=dict(topk=(5,)))  # not an answer-reading option


# ------------------------------------------------------- the graph search, missing answers, pixel boxes on the canvas
def parse(text, size=(W, H), **kwargs):
    return parse_vlm_output(text, size, CLASSES, PREDICATES, **kwargs)


@pytest.mark.parametrize('count', [70, 1000])
def test_graph_after_many_one_line_objects_is_found(count):
    # a model that logs its steps as one-line JSON objects before the graph: the first graph object is used
    lines = [json.dumps({'step': i, 'thought': {'look': 'left', 'n': i}}) for i in range(count)]
    result = parse('\n'.join(lines + [VALID, json.dumps({'done': True})]))
    assert result.ok, result.reason
    assert result.ids == ['person.1', 'horse.2', 'hat.3'] and result.num_relations == 2


def test_graph_search_is_linear_in_a_one_megabyte_answer():
    filler = json.dumps({'objects_seen': 'none', 'detail': {'a': [1, 2, 3], 'b': {'c': 'x' * 40}}})
    text = '\n'.join([filler] * (1_000_000 // len(filler))) + '\n' + VALID
    assert len(text) > 1_000_000
    start = time.perf_counter()
    result = parse(text)
    assert result.ok and result.num_relations == 2
    assert time.perf_counter() - start < 3.0  # about 0.1 s; a search restarting inside every value is quadratic


def test_graph_nested_in_a_decoded_value_after_many_objects():
    lines = [json.dumps({'i': i}) for i in range(200)]
    result = parse('\n'.join(lines + [json.dumps({'answer': {'scene_graph': json.loads(VALID)}})]))
    assert result.ok and result.num_objects == 3


def test_deeply_nested_truncated_json_hits_the_documented_limit_quickly():
    pad = '"p": [' + ','.join(['1'] * 100) + '], '
    text = ''.join('{' + pad + '"a": ' for _ in range(900))  # truncated: no object ever closes
    start = time.perf_counter()
    result = parse(text)
    assert result.code == 'search_limit' and f'{SEARCH_WORK_FACTOR}x' in result.reason
    assert time.perf_counter() - start < 2.0  # unbounded, every start scans to the end: about 5 s


def test_json_nested_deeper_than_the_decoder_is_a_failure_not_a_crash():
    assert parse('[' * 100_000).code == 'no_json'  # no object at all
    assert parse('[{"a": ' * 50_000).code in ('invalid_json', 'search_limit')
    assert parse('[' * 100_000 + ']' * 100_000 + VALID).ok  # still found after the too-deep value


def test_missing_answers_have_their_own_failure_code():
    metric = VLMSceneGraphMetric(iou_plus_one=False)
    metric.dataset_meta = META
    samples = [dict(GT, sample_idx=0, pred_text=VALID), dict(GT, sample_idx=1, pred_text='no graph here')]
    # as the offline reader feeds a sample without any record in the answers file (--allow-missing)
    samples += [dict(GT, sample_idx=i, pred_text=None, prediction_missing=True) for i in range(2, 10)]
    metric.process(None, samples)
    with contextlib.redirect_stdout(io.StringIO()):
        metric.evaluate(10)
    report = metric.last_report
    assert report['failure_reasons'] == {'no_json': 1, 'missing': 8}
    assert report['num_missing_predictions'] == 8 and report['num_failed'] == 9
    assert 'missing=8' in report['text'] and 'no_json=1' in report['text']


def test_a_null_answer_in_a_record_is_still_no_json():
    metric = VLMSceneGraphMetric(iou_plus_one=False)
    metric.dataset_meta = META
    metric.process(None, [dict(GT, sample_idx=0, pred_text=None)])
    with contextlib.redirect_stdout(io.StringIO()):
        metric.evaluate(1)
    assert metric.last_report['failure_reasons'] == {'no_json': 1}


OBJECT_IDS = ['person.1', 'horse.2', 'hat.3']


def scene_text(boxes):
    return graph([{'id': i, 'bbox': [round(v, 1) for v in b]} for i, b in zip(OBJECT_IDS, boxes)],
                 [{'subject': 'person.1', 'predicate': 'riding', 'object': 'horse.2'},
                  {'subject': 'person.1', 'predicate': 'wearing', 'object': 'hat.3'}])


def on_canvas(boxes):
    return [[b[0] / W * 1000, b[1] / H * 1000, b[2] / W * 1000, b[3] / H * 1000] for b in boxes]


def evaluate_vlm(texts):
    metric = VLMSceneGraphMetric(iou_plus_one=False)
    metric.dataset_meta = META
    metric.process(None, [dict(GT, sample_idx=i, pred_text=t) for i, t in enumerate(texts)])
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter('always')
        out = metric.evaluate(len(texts))
    return out, [str(w.message) for w in caught if 'PIXEL' in str(w.message)]


def test_pixel_boxes_read_on_the_canvas_are_named():
    out, warned = evaluate_vlm([scene_text(GT_BOXES)] * 3)  # the GT boxes, written in pixels of 640x480
    assert out['vlm/Recall'] < 100
    assert len(warned) == 1 and '3 of 3 answers' in warned[0] and 'canvas=None' in warned[0]


def test_genuine_canvas_boxes_do_not_warn():
    out, warned = evaluate_vlm([scene_text(on_canvas(GT_BOXES))] * 3)
    assert out['vlm/Recall'] == 100.0 and warned == []
    # canvas answers whose objects all lie in the top-left part of some images: most answers still reach out
    small = [[10, 10, 300, 200], [0, 0, 400, 300], [20, 20, 60, 60]]  # canvas units, inside 640x480 as pixels
    texts = [scene_text(small)] * 7 + [scene_text(on_canvas(GT_BOXES))] * 3
    assert evaluate_vlm(texts)[1] == []


def test_pixel_like_flag_of_the_parser():
    assert parse(scene_text(GT_BOXES)).pixel_like is True
    assert parse(scene_text(on_canvas(GT_BOXES))).pixel_like is False
    assert parse(scene_text(GT_BOXES), canvas=None).pixel_like is None           # boxes already in pixels
    assert parse(scene_text(GT_BOXES), size=(1000, 1000)).pixel_like is None     # readings cannot be told apart
    assert parse(graph([], [])).pixel_like is None                               # no box
    assert parse('not json').pixel_like is None
