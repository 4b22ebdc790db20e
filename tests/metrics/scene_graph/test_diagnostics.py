"""Input-mistake diagnostics decided on evidence that is strong on small sets: 1-based object labels and a
background column read as a predicate are named on a dozen images, and correct models (random-ish, or with a
dominant first predicate) never are."""
import warnings

import numpy as np
import pytest
import torch

from mmsgg_eval.metrics import SGRecall
from tests.sgg_samples import random_dataset

NUM_CLASSES, NUM_PREDICATES = 10, 8
META = dict(classes=[f'c{i}' for i in range(NUM_CLASSES)], predicates=[f'p{i}' for i in range(NUM_PREDICATES)])


def run(samples, mode, **kwargs):
    metric = SGRecall(mode=mode, **kwargs)
    metric.dataset_meta = META
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        metric.process({}, samples)
        keys = metric.evaluate(len(samples))
    return keys, metric.last_report['input_warnings'], [str(w.message) for w in caught]


def detections(seed, count, mode='sgdet', label_offset=0, label_noise=0.1, gt_max_class=NUM_CLASSES - 1,
               objects=(3, 7), gt_predicates=NUM_PREDICATES):
    """A real-looking detector: boxes near the GT ones, the right class but for ``label_noise``, plus a few
    boxes on the background; labels shifted by ``label_offset`` (1-based: +1). Scores favour the GT predicate
    on half of the GT pairs."""
    rng = np.random.default_rng(seed)
    out = []
    for idx in range(count):
        m = int(rng.integers(*objects))
        xy = rng.uniform(0, 300, (m, 2))
        gt_boxes = np.concatenate([xy, xy + rng.uniform(20, 120, (m, 2))], 1).astype(np.float32)
        gt_labels = rng.integers(0, gt_max_class, m)
        rels = [(a, b, int(rng.integers(0, gt_predicates))) for a in range(m) for b in range(m)
                if a != b and rng.random() < 0.3] or [(0, 1, 0)]
        extra = int(rng.integers(0, 3))
        boxes = np.concatenate([gt_boxes + rng.uniform(-3, 3, gt_boxes.shape),
                                np.concatenate([xy[:extra] + 200, xy[:extra] + 260], 1)]).astype(np.float32)
        labels = np.concatenate([np.where(rng.random(m) < label_noise, rng.integers(0, gt_max_class, m), gt_labels),
                                 rng.integers(0, gt_max_class, extra)]) + label_offset
        n = len(boxes)
        pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
        scores = rng.random((len(pairs), NUM_PREDICATES + 1)).astype(np.float32)
        for s, o, p in rels:
            if rng.random() < 0.5:
                scores[pairs.index((s, o)), p + 1] += 1.0
        sample = dict(sample_idx=idx, img_id=idx, ori_shape=(480, 640),
                      gt_instances=dict(bboxes=torch.tensor(gt_boxes), labels=torch.tensor(gt_labels)),
                      gt_relations=dict(pair_idxs=torch.tensor([r[:2] for r in rels]),
                                        labels=torch.tensor([r[2] for r in rels])),
                      pred_instances=dict(bboxes=torch.tensor(boxes) if mode != 'sgcls' else torch.tensor(gt_boxes),
                                          labels=torch.tensor(labels[:n] if mode != 'sgcls' else labels[:m]),
                                          scores=torch.full((n if mode != 'sgcls' else m,), 0.9)),
                      pred_relations=dict(pair_idxs=torch.tensor(pairs), scores=torch.tensor(scores)))
        if mode in ('sgcls', 'predcls'):  # the model's pairs of the GT objects
            keep = [i for i, (a, b) in enumerate(pairs) if a < m and b < m]
            sample['pred_relations'] = dict(pair_idxs=torch.tensor(pairs)[keep], scores=torch.tensor(scores)[keep])
        out.append(sample)
    return out


# ---------------------------------------------------------------------------------------------- object labels

@pytest.mark.parametrize('mode', ['sgdet', 'sgcls', 'phrdet'])
@pytest.mark.parametrize('offset, looks', [(1, '1-based'), (-1, 'one below')])
def test_shifted_object_labels_are_named_on_few_images(mode, offset, looks):
    """1-based labels gave R@K = 0 with no warning."""
    samples = detections(0, 6, mode, label_offset=offset if offset > 0 else 0,
                         gt_max_class=NUM_CLASSES - 1)
    if offset < 0:  # labels one below the class: GT classes from 1, predictions label - 1
        for s in samples:
            s['gt_instances']['labels'] = s['gt_instances']['labels'] + 1
    keys, found, caught = run(samples, mode)
    assert any(looks in w for w in found), found
    assert any(looks in w for w in caught)
    assert keys[f'{mode}/R@50'] < 5


@pytest.mark.parametrize('mode', ['sgdet', 'sgcls'])
@pytest.mark.parametrize('seed', range(4))
def test_correct_labels_never_warn(mode, seed):
    for noise in (0.1, 0.5):  # a good and a weak detector with 0-based labels
        _, found, _ = run(detections(seed, 12, mode, label_noise=noise), mode)
        assert not [w for w in found if 'object labels look' in w]
    samples, _ = random_dataset(seed, 40, mode, num_classes=4, num_predicates=5)  # random-ish models
    metric = SGRecall(mode=mode)
    metric.dataset_meta = dict(classes=['a', 'b', 'c', 'd'], predicates=[f'p{i}' for i in range(5)])
    metric.process({}, samples)
    metric.evaluate(len(samples))
    assert not [w for w in metric.last_report['input_warnings'] if 'object labels look' in w]


def test_label_offset_counts_by_definition():
    from mmsgg_eval.functional.diagnostics import label_offset_counts, label_shift_warnings
    iou = torch.tensor([[[0.9, 0.0], [0.6, 0.7], [0.1, 0.2]]])
    counts = label_offset_counts(iou, torch.tensor([[3, 5, 1]]), torch.tensor([[2, 5]]))
    # object 0 overlaps GT 0 (class 2 = 3 - 1); object 1 overlaps both (class 5 own, 2 neither); object 2 none
    assert counts.tolist() == [[2, 1, 1, 0]]
    assert label_shift_warnings(torch.tensor([[4, 0, 4, 0], [3, 0, 3, 0]]), 10)
    assert not label_shift_warnings(torch.tensor([[4, 0, 4, 0]]), 10)  # one image: no consistency shown
    assert not label_shift_warnings(torch.tensor([[4, 2, 3, 0], [3, 1, 2, 0]]), 10)  # own class matches too


# ---------------------------------------------------------------------------------------------- score columns

def background_last(samples, bg=4.0):
    """The model's scores with its background column LAST (and winning every pair), read as column 0."""
    out = []
    for s in samples:
        scores = s['pred_relations']['scores']
        moved = torch.cat([scores[:, 1:], torch.full_like(scores[:, :1], bg)], 1)
        out.append(dict(s, pred_relations=dict(s['pred_relations'], scores=moved)))
    return out


def test_background_column_last_is_named_on_thirteen_images():
    """A 13-image run with the background column last gave R@K = 0 and no warning (the rules needed 50
    images, or ngR >= 15 on 10)."""
    samples = detections(1, 13, 'predcls', objects=(10, 14), gt_predicates=NUM_PREDICATES - 1)  # the last is rare
    for s in samples:
        s.pop('pred_instances')
    keys, found, _ = run(background_last(samples), 'predcls')
    assert keys['predcls/R@50'] < 5
    assert any("'p7' (column 7 of the predicates)" in w and 'background_last' in w for w in found), found
    _, fixed, _ = run(background_last(samples), 'predcls', score_layout='background_last')
    assert not fixed


@pytest.mark.parametrize('seed', range(5))
def test_correct_models_do_not_look_shifted(seed):
    samples, _ = random_dataset(seed, 13, 'predcls', num_classes=4, num_predicates=5)  # random-ish scores
    metric = SGRecall(mode='predcls')
    metric.dataset_meta = dict(classes=['a', 'b', 'c', 'd'], predicates=[f'p{i}' for i in range(5)])
    metric.process({}, samples)
    metric.evaluate(13)
    assert not metric.last_report['input_warnings']
    # a model whose favourite predicate is the first one, recalled where the GT has it
    favourite = detections(seed, 13, 'predcls')
    for s in favourite:
        s.pop('pred_instances')
        s['gt_relations']['labels'] = torch.where(torch.rand(len(s['gt_relations']['labels']),
                                                             generator=torch.Generator().manual_seed(seed)) < 0.6,
                                                  0, s['gt_relations']['labels'])
        s['pred_relations']['scores'][:, 1] += 3.0
    keys, found, _ = run(favourite, 'predcls')
    assert keys['predcls/R@50'] > 5 and not found
    for s in favourite:  # a weak model: the same favourite (common in the GT), never on a GT pair (R@K = 0)
        gt_pairs = {tuple(p) for p in s['gt_relations']['pair_idxs'].tolist()}
        keep = [i for i, p in enumerate(s['pred_relations']['pair_idxs'].tolist()) if tuple(p) not in gt_pairs]
        s['pred_relations'] = {k: v[keep] for k, v in s['pred_relations'].items()}
    keys, found, _ = run(favourite, 'predcls')
    assert keys['predcls/R@50'] < 5 and not found


def test_detection_ap_names_one_based_labels():
    """DetectionAP gave mAP = 0 for 1-based labels with no word."""
    pytest.importorskip('pycocotools')
    from mmsgg_eval.metrics import DetectionAP

    def ap(samples):
        metric = DetectionAP()
        metric.dataset_meta = META
        metric.process({}, samples)
        return metric.evaluate(len(samples)), metric.last_report['input_warnings']
    keys, found = ap(detections(2, 6, label_offset=1))
    assert keys['sgdet/AP@50'] < 5 and any('1-based' in w for w in found)
    keys, found = ap(detections(2, 6))
    assert keys['sgdet/AP@50'] > 50 and not found
