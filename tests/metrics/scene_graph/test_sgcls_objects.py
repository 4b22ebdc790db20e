"""SGCls and PredCls objects as the legacy Scene-Graph-Benchmark evaluator takes them.

SGCls matches the boxes the MODEL returned (in legacy runs: the GT boxes after the test-time resize and back,
so same-class boxes at IoU exactly 0.5 can fall just below), PredCls substitutes the GT boxes and labels; object
lists shorter or longer than the GT are evaluated as the legacy code does (one warning) or refused
(``strict_counts=True``). Live metrics and legacy dumps.
"""
import numpy as np
import pytest
import torch

from mmsgg_eval.io.legacy import LegacyBoxList, convert_legacy_results
from mmsgg_eval.metrics import SGMeanRecall, SGRecall
from tests.reference_sgg import iou, reference_metrics
from tests.sgg_samples import random_dataset
from tests.metrics.scene_graph.test_recall import GROUP_IDX, GROUPS, META, NUM_CLASSES, NUM_PREDICATES, assert_same


def legacy_resize(boxes: torch.Tensor, old_size, new_size) -> torch.Tensor:
    """``BoxList.resize`` of the legacy code on xyxy float32 boxes (sizes are (width, height))."""
    ratios = tuple(float(s) / float(s_orig) for s, s_orig in zip(new_size, old_size))
    if ratios[0] == ratios[1]:
        return boxes * ratios[0]
    x1, y1, x2, y2 = boxes.split(1, dim=-1)
    return torch.cat((x1 * ratios[0], y1 * ratios[1], x2 * ratios[0], y2 * ratios[1]), dim=-1)


def network_size(size, min_size=600, max_size=1000):
    """Test-time Resize of the legacy code: shorter side ``min_size``, longer side at most ``max_size``."""
    w, h = size
    scale = min_size / min(w, h)
    if max(w, h) * scale > max_size:
        scale = max_size / max(w, h)
    return int(round(w * scale)), int(round(h * scale))


def round_trip(boxes: torch.Tensor, size) -> torch.Tensor:
    """GT boxes as an SGCls model returns them: resized to the network frame and back."""
    net = network_size(size)
    return legacy_resize(legacy_resize(boxes.float(), size, net), net, size)


def capture_warnings(monkeypatch):
    import mmengine.logging
    messages = []
    monkeypatch.setattr(mmengine.logging, 'print_log', lambda msg, *a, **k: messages.append(str(msg)))
    return messages


def evaluate(samples, mode, batch_size=4, **kwargs):
    out = {}
    for cls in (SGRecall, SGMeanRecall):
        metric = cls(mode=mode, **kwargs)
        metric.dataset_meta = META
        for start in range(0, len(samples), batch_size):
            metric.process({}, samples[start:start + batch_size])
        res = metric.evaluate(len(samples))
        out.update({k.split('/', 1)[1]: v for k, v in res.items() if not k.endswith('per_predicate_recall')})
    return out


def sgcls_round_tripped(seed, count, **kwargs):
    """Random SGCls samples whose model boxes are the round-tripped GT boxes (as in legacy dumps)."""
    samples, refs = random_dataset(seed, count, 'sgcls', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES,
                                   **kwargs)
    rng = np.random.default_rng(seed)
    for sample, ref in zip(samples, refs):
        size = (int(rng.integers(90, 1400)), int(rng.integers(90, 1400)))
        boxes = round_trip(sample['gt_instances']['bboxes'], size)
        sample['pred_instances']['bboxes'] = boxes
        ref['pred_boxes'] = [list(map(float, b)) for b in boxes.tolist()]
    return samples, refs


def drop_last_object(sample, ref):
    """The model's object list loses its last box (a GT box on the last pixel column dropped from the
    proposals); pairs that used it go too (the legacy code could not have predicted them)."""
    pred = sample['pred_instances']
    n = pred['labels'].shape[0] - 1
    for key in ('bboxes', 'labels', 'scores'):
        pred[key] = pred[key][:n]
    rel = sample['pred_relations']
    keep = (rel['pair_idxs'] < n).all(1)
    for key in list(rel):
        rel[key] = rel[key][keep]
    ref['pred_boxes'], ref['pred_labels'], ref['pred_scores'] = (ref['pred_boxes'][:n], ref['pred_labels'][:n],
                                                                  ref['pred_scores'][:n])
    kept = keep.tolist()
    ref['rel_pairs'] = [p for p, k in zip(ref['rel_pairs'], kept) if k]
    ref['rel_scores'] = [s for s, k in zip(ref['rel_scores'], kept) if k]
    if ref['rel_labels'] is not None:
        ref['rel_labels'] = [s for s, k in zip(ref['rel_labels'], kept) if k]


@pytest.mark.parametrize('score_format', ['bg', 'nobg', 'single'])
@pytest.mark.parametrize('int_boxes', [True, False])
def test_differential_sgcls_round_tripped_boxes(score_format, int_boxes):
    for seed in range(3):
        samples, refs = sgcls_round_tripped(seed * 31 + 5, 30, int_boxes=int_boxes, score_format=score_format)
        plus_one = bool(seed % 2)
        ours = evaluate(samples, 'sgcls', batch_size=1 + 4 * seed, iou_plus_one=plus_one, topk=(1, 3, 20),
                        ng_topk=7, predicate_groups=GROUPS)
        ref = reference_metrics(refs, NUM_PREDICATES, 'sgcls', ks=(1, 3, 20), plus_one=plus_one, ng_topk=7,
                                groups=GROUP_IDX)
        assert_same(ours, ref)


def test_differential_shorter_model_lists(monkeypatch):
    """Some images lose their last model object: evaluated as the legacy rule says, one warning in all."""
    messages = capture_warnings(monkeypatch)
    samples, refs = sgcls_round_tripped(17, 40)
    dropped = [s['sample_idx'] for s, r in zip(samples, refs) if s['pred_instances']['labels'].shape[0] >= 3
               and s['sample_idx'] % 3 == 0]
    for sample, ref in zip(samples, refs):
        if sample['sample_idx'] in dropped:
            drop_last_object(sample, ref)
    ours = evaluate(samples, 'sgcls', batch_size=3, pool_samples=5, iou_plus_one=True, topk=(1, 5, 20),
                    predicate_groups=GROUPS)
    ref = reference_metrics(refs, NUM_PREDICATES, 'sgcls', ks=(1, 5, 20), plus_one=True, groups=GROUP_IDX)
    assert_same(ours, ref)
    counted = [m for m in messages if 'another length than the GT' in m]
    assert len(counted) == 2, messages  # once per metric (SGRecall and SGMeanRecall ranked their own pools)
    assert counted[0].startswith(f'{len(dropped)} image(s) in sgcls') and f'sample_idx={dropped[0]}' in counted[0]


def test_sgcls_matches_the_model_boxes_at_iou_exactly_half():
    """Same-class GT boxes at IoU exactly 0.5: the round-tripped model box falls just below it (miss, as the
    legacy evaluator), the GT box itself would not (hit). Both outcomes come from the legacy rule here."""
    size = (800, 599)
    chosen = None
    for x1 in range(0, 40, 3):
        for w in range(15, 90, 4):
            near = torch.tensor([[x1, 5., x1 + w - 1, 5 + w - 1]])
            tall = torch.tensor([[x1, 5., x1 + w - 1, 5 + 2 * w - 1]])  # +1 convention: IoU(near, tall) = 0.5
            moved = round_trip(near, size)
            if iou(near[0].tolist(), tall[0].tolist(), True) == 0.5 and \
                    iou(moved[0].tolist(), tall[0].tolist(), True) < 0.5:
                chosen = near, tall, moved
                break
        if chosen:
            break
    assert chosen is not None, 'no box whose round trip crosses IoU 0.5 (the test needs one)'
    near, tall, moved = chosen
    other = torch.tensor([[300., 300, 349, 349]])
    gt_boxes = torch.cat([near, tall, other])
    sample = dict(
        sample_idx=0, img_id='half',
        gt_instances=dict(bboxes=gt_boxes, labels=torch.tensor([1, 1, 2])),
        gt_relations=dict(pair_idxs=torch.tensor([[0, 2], [1, 2]]), labels=torch.tensor([3, 3])),
        pred_instances=dict(bboxes=round_trip(gt_boxes, size), labels=torch.tensor([1, 1, 2]),
                            scores=torch.tensor([0.9, 0.2, 0.8])),
        pred_relations=dict(pair_idxs=torch.tensor([[0, 2]]), scores=torch.tensor([[0.1, 0, 0, 0, 0.9, 0]])))
    ref = dict(gt_boxes=gt_boxes.tolist(), gt_labels=[1, 1, 2], gt_rels=[(0, 2, 3), (1, 2, 3)],
               pred_boxes=sample['pred_instances']['bboxes'].tolist(), pred_labels=[1, 1, 2],
               pred_scores=[0.9, 0.2, 0.8], rel_pairs=[(0, 2)], rel_scores=[[0.1, 0, 0, 0, 0.9, 0]], rel_labels=None)
    expected = reference_metrics([ref], NUM_PREDICATES, 'sgcls', ks=(1,), plus_one=True)
    assert expected['R@1'] == 50.0  # the model's box hits (near, other) only
    ours = evaluate([sample], 'sgcls', topk=(1,), iou_plus_one=True)
    assert ours['R@1'] == expected['R@1']
    # without model boxes the GT boxes are used: IoU exactly 0.5 hits the second GT relation too
    sample['pred_instances'].pop('bboxes')
    ref['pred_boxes'] = None
    on_gt = reference_metrics([ref], NUM_PREDICATES, 'sgcls', ks=(1,), plus_one=True)
    assert on_gt['R@1'] == 100.0 and evaluate([sample], 'sgcls', topk=(1,), iou_plus_one=True)['R@1'] == 100.0


def short_predcls(seed=4, count=24):
    """PredCls samples whose model lists one object fewer than the GT for every third image."""
    samples, refs = random_dataset(seed, count, 'predcls', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    short = []
    for s in samples:
        m = s['gt_instances']['bboxes'].shape[0]
        n = m - 1 if s['sample_idx'] % 3 == 0 and m >= 2 else m
        if n != m:
            short.append(s['sample_idx'])
        s['pred_instances'] = dict(bboxes=s['gt_instances']['bboxes'][:n].clone(),
                                   labels=s['gt_instances']['labels'][:n].clone(), scores=torch.ones(n))
    return samples, refs, short


def test_predcls_shorter_model_list_is_evaluated_on_the_gt(monkeypatch):
    messages = capture_warnings(monkeypatch)
    samples, refs, short = short_predcls()
    assert short
    ours = evaluate(samples, 'predcls', topk=(1, 5, 20), iou_plus_one=True, predicate_groups=GROUPS)
    assert_same(ours, reference_metrics(refs, NUM_PREDICATES, 'predcls', ks=(1, 5, 20), plus_one=True,
                                        groups=GROUP_IDX))
    counted = [m for m in messages if 'another length than the GT' in m]
    assert len(counted) == 2 and counted[0].startswith(f'{len(short)} image(s) in predcls'), messages
    metric = SGRecall(mode='predcls', strict_counts=True)
    metric.dataset_meta = META
    with pytest.raises(ValueError, match=rf'sample_idx={short[0]}\b.*pred_instances\.bboxes.*strict_counts'):
        metric.process({}, samples)
        metric.flush()


def test_pair_index_past_the_evaluated_list_names_the_sample():
    samples, _, _ = short_predcls(count=6)
    sample = samples[1]
    m = sample['gt_instances']['bboxes'].shape[0]
    # PredCls: a longer model list (m + 1 objects) with a pair on its extra object: legacy IndexError
    sample['pred_instances']['bboxes'] = torch.cat([sample['gt_instances']['bboxes'], torch.zeros(1, 4)])
    sample['pred_relations']['pair_idxs'] = torch.tensor([[0, m]])
    sample['pred_relations']['scores'] = torch.rand(1, NUM_PREDICATES + 1)
    metric = SGRecall(mode='predcls')
    metric.dataset_meta = META
    with pytest.raises(ValueError, match=r'sample_idx=1\b.*pred_relations\.pair_idxs.*PredCls evaluates the GT'):
        metric.process({}, samples)
        metric.flush()
    # SGCls: the model's list is the one indexed
    samples, _ = sgcls_round_tripped(3, 6)
    n = samples[2]['pred_instances']['labels'].shape[0]
    samples[2]['pred_relations']['pair_idxs'] = torch.tensor([[n, 0]])
    samples[2]['pred_relations']['scores'] = torch.rand(1, NUM_PREDICATES + 1)
    metric = SGRecall(mode='sgcls')
    metric.dataset_meta = META
    with pytest.raises(ValueError, match=r'sample_idx=2\b.*pred_relations\.pair_idxs.*SGCls evaluates the model'):
        metric.process({}, samples)
        metric.flush()


def legacy_dump(size=(800, 599)):
    """A legacy SGCls dump: GT boxes in the original frame, the model's boxes round-tripped; image 1's GT box on
    the last pixel column is missing from the model's list."""
    gts, preds = [], []
    half = torch.tensor([[3., 5, 22, 24], [3, 5, 22, 44], [300, 300, 349, 349]])
    for i, (gt_boxes, labels, rels) in enumerate([
            (half, [2, 2, 3], [[0, 2, 4], [1, 2, 4]]),
            (torch.tensor([[10., 10, 60, 60], [100, 20, 150, 90], [700, 0, 799, 50]]), [1, 3, 4],
             [[0, 1, 2], [1, 0, 1], [0, 2, 3]])]):
        g = LegacyBoxList(gt_boxes, size)
        g.extra_fields.update(labels=torch.tensor(labels), relation_tuple=torch.tensor(rels))
        kept = gt_boxes if i == 0 else gt_boxes[:2]
        p = LegacyBoxList(round_trip(kept, size), size)
        n = kept.shape[0]
        p.extra_fields.update(labels=torch.tensor(labels[:n]), pred_labels=torch.tensor(labels[:n]),
                              pred_scores=torch.tensor([0.9, 0.5, 0.8][:n]),
                              rel_pair_idxs=torch.tensor([[0, 2], [1, 0]][:n - 1] if i == 0 else [[0, 1], [1, 0]]))
        scores = torch.full((p.extra_fields['rel_pair_idxs'].shape[0], NUM_PREDICATES + 1), 0.02)
        scores[0, 4] = 0.7
        if scores.shape[0] > 1:
            scores[1, 1] = 0.6
        p.extra_fields['pred_rel_scores'] = scores
        gts.append(g)
        preds.append(p)
    return {'groundtruths': gts, 'predictions': preds}


def test_legacy_dump_sgcls_uses_the_dumped_boxes_and_keeps_short_lists(monkeypatch):
    messages = capture_warnings(monkeypatch)
    dump = legacy_dump()
    samples = convert_legacy_results(dump, mode='sgcls')
    assert torch.equal(samples[0]['pred_instances']['bboxes'], dump['predictions'][0].bbox)
    refs = []
    for s in samples:
        refs.append(dict(
            gt_boxes=s['gt_instances']['bboxes'].tolist(), gt_labels=s['gt_instances']['labels'].tolist(),
            gt_rels=[tuple(p) + (int(q),) for p, q in zip(s['gt_relations']['pair_idxs'].tolist(),
                                                           s['gt_relations']['labels'])],
            pred_boxes=s['pred_instances']['bboxes'].tolist(), pred_labels=s['pred_instances']['labels'].tolist(),
            pred_scores=s['pred_instances']['scores'].tolist(),
            rel_pairs=[tuple(p) for p in s['pred_relations']['pair_idxs'].tolist()],
            rel_scores=s['pred_relations']['scores'].tolist(), rel_labels=None))
    ours = evaluate(samples, 'sgcls', topk=(1, 2), iou_plus_one=True)
    expected = reference_metrics(refs, NUM_PREDICATES, 'sgcls', ks=(1, 2), plus_one=True)
    assert_same(ours, expected)
    # image 0: the GT relation on the box at IoU 0.5 is missed; image 1 (short list): its hit is second
    assert expected['R@1'] == 25.0 and expected['R@2'] == pytest.approx((50.0 + 100 / 3) / 2)
    counted = [m for m in messages if 'another length than the GT' in m]
    assert len(counted) == 2 and counted[0].startswith('1 image(s) in sgcls') and 'sample_idx=1' in counted[0]
    metric = SGRecall(mode='sgcls', strict_counts=True)
    metric.dataset_meta = META
    with pytest.raises(ValueError, match=r'sample_idx=1\b.*strict_counts'):
        metric.process({}, samples)
        metric.flush()
