"""Differential tests of SGRecall / SGMeanRecall against the loop reference (SPEC 2)."""
import itertools

import numpy as np
import pytest
import torch

from mmsgg_eval.metrics import SGMeanRecall, SGRecall
from mmsgg_eval.structures import collate_scene_graphs
from tests.metric_tester import Case, check_metric, kernel_settings, kernels_as
from tests.reference_sgg import reference_metrics
from mmsgg_eval.testing.random_samples import add_box_shaped_masks
from tests.sgg_samples import (META, NUM_CLASSES, NUM_PREDICATES, feed_like_an_evaluator,  # noqa: F401
                               random_dataset, scene_graph_keys)

GROUPS = {'head': ['p0', 'p1'], 'body': ['p2'], 'tail': ['p3', 'p4']}
GROUP_IDX = {'head': [0, 1], 'body': [2], 'tail': [3, 4]}


def run_metrics(samples, batch_size=4, **kwargs):
    """Every key of SGRecall + SGMeanRecall (built with ``kwargs``) over ``samples``, prefix removed."""
    return scene_graph_keys(samples, batch_size, **kwargs)[0]


def assert_same(ours, ref):
    assert set(ref) <= set(ours), sorted(set(ref) - set(ours))
    for key, value in ref.items():
        assert ours[key] == pytest.approx(value, abs=1e-6, nan_ok=True), (key, ours[key], value)


CASES = list(itertools.product(['predcls', 'sgcls', 'sgdet', 'phrdet'], [True, False], ['bg', 'nobg', 'single']))


@pytest.mark.parametrize('mode,int_boxes,score_format', CASES)
def test_differential_default_protocol(mode, int_boxes, score_format):
    """SGRecall + SGMeanRecall against the loop reference, with the compiled kernels and without
    (tests/metric_tester.py); the compiled layout is the one read where the kernels are built."""
    cases = []
    for seed in range(3):
        samples, refs = random_dataset(seed * 101 + len(mode), 30, mode, int_boxes=int_boxes,
                                       score_format=score_format, num_classes=NUM_CLASSES,
                                       num_predicates=NUM_PREDICATES)
        for kernels in kernel_settings(('compiled', 'torch')):
            with kernels_as(kernels):
                layout = collate_scene_graphs(samples[:5], mode, NUM_CLASSES, NUM_PREDICATES).scores.layout
            assert (layout == 'compiled') == (kernels == 'compiled' and score_format != 'single'), layout
        plus_one = bool(seed % 2)
        zs = {(0, 1, 2), (1, 1, 0), (2, 3, 4), (0, 0, 1)}
        kwargs = dict(mode=mode, iou_plus_one=plus_one, topk=(1, 3, 20), ng_topk=7, zeroshot_triplets=sorted(zs),
                      predicate_groups=GROUPS)
        ref = reference_metrics(refs, NUM_PREDICATES, mode, ks=(1, 3, 20), plus_one=plus_one, ng_topk=7,
                                zeroshot=zs, groups=GROUP_IDX)
        cases.append(Case((SGRecall, SGMeanRecall), kwargs, samples, META, ref, name=f'seed {seed}',
                          batch_size=1 + seed * 3))
    check_metric(cases, world_sizes=(1,), pool_samples=(256,))


@pytest.mark.parametrize('option', [dict(skip_empty_predictions=False), dict(mr_average='present'),
                                    dict(recall_average='micro'), dict(rank='given'), dict(iou_thr=0.7),
                                    dict(recall_average='micro', mr_average='present')])
@pytest.mark.parametrize('mode', ['predcls', 'sgdet'])
def test_differential_options(option, mode):
    samples, refs = random_dataset(7, 40, mode, num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES,
                                   empty_pred_prob=0.3)
    kwargs = dict(mode=mode, topk=(2, 5, 50), iou_plus_one=True, predicate_groups=GROUPS, **option)
    ref = reference_metrics(refs, NUM_PREDICATES, mode, ks=(2, 5, 50), plus_one=True,
                            skip_empty=option.get('skip_empty_predictions', True),
                            mr_average=option.get('mr_average', 'all'),
                            recall_average=option.get('recall_average', 'image'),
                            rank=option.get('rank', 'score'), thr=option.get('iou_thr', 0.5), groups=GROUP_IDX)
    check_metric([Case((SGRecall, SGMeanRecall), kwargs, samples, META, ref, batch_size=4)], world_sizes=(1,),
                 pool_samples=(256,))


def test_batch_size_does_not_change_results():
    samples, _ = random_dataset(3, 25, 'sgdet')
    a = run_metrics(samples, batch_size=1, mode='sgdet')
    b = run_metrics(samples, batch_size=25, mode='sgdet')
    assert a == b


def test_keys_have_prefix_and_no_duplicates_between_metrics():
    samples, _ = random_dataset(0, 5, 'predcls')
    keys, extra = [], {}
    for cls in (SGRecall, SGMeanRecall):
        metric = cls(mode='predcls')
        metric.dataset_meta = META
        metric.process({}, samples)
        keys += list(metric.evaluate(5))
        extra.update(metric.extra_results())
    assert len(keys) == len(set(keys))
    assert 'predcls/R@50' in keys and 'predcls/mR@100' in keys and 'predcls/A@20' in keys
    # the per-predicate table reaches metrics.json through extra_results(), not the runner's log line
    assert 'predcls/F@50' in keys and 'predcls/AVG@20' in keys and 'predcls/per_predicate_recall' in extra
    assert 'predcls/per_predicate_recall' not in keys


def test_hand_computed_example():
    """Two images; legacy R@1 and mR@1 worked out by hand."""
    def sample(idx, gt_rels, pairs, scores):
        return dict(sample_idx=idx,
                    gt_instances=dict(bboxes=torch.tensor([[0., 0, 9, 9], [20, 20, 29, 29], [0, 20, 9, 29]]),
                                      labels=torch.tensor([0, 1, 2])),
                    gt_relations=dict(pair_idxs=torch.tensor([r[:2] for r in gt_rels]),
                                      labels=torch.tensor([r[2] for r in gt_rels])),
                    pred_relations=dict(pair_idxs=torch.tensor(pairs), scores=torch.tensor(scores)))
    # image 0: GT (0,1,p0), (1,2,p1); the best-scored prediction hits (0,1,p0) -> R@1 = 1/2
    s0 = sample(0, [(0, 1, 0), (1, 2, 1)], [[1, 2], [0, 1]], [[0., 0.1, 0.6, 0, 0, 0], [0., 0.9, 0.1, 0, 0, 0]])
    # image 1: GT (0,2,p1); the first prediction is wrong -> R@1 = 0, R@2 = 1
    s1 = sample(1, [(0, 2, 1)], [[0, 1], [0, 2]], [[0., 0.9, 0.1, 0, 0, 0], [0., 0.2, 0.8, 0, 0, 0]])
    res = run_metrics([s0, s1], mode='predcls', topk=(1, 2))
    assert res['R@1'] == pytest.approx(25.0)
    assert res['R@2'] == pytest.approx(100.0)
    # mR@1: p0 recall mean([1]) = 1; p1 recall mean([0, 0]) = 0; 5 predicates -> (1 + 0) / 5
    assert res['mR@1'] == pytest.approx(20.0)
    assert res['mR@2'] == pytest.approx(40.0)
    # A@1: GT-pair sub-lists are [(0,1,p0), (1,2,p1)] and [(0,2,p1)]: 2 hits of 3 GT relations
    assert res['A@1'] == pytest.approx(200.0 / 3)


def test_stable_ranking_keeps_given_order_among_ties():
    gt = dict(bboxes=torch.tensor([[0., 0, 9, 9], [20, 20, 29, 29]]), labels=torch.tensor([0, 1]))
    # two pairs with identical scores: the first given wins the single slot of K=1
    s = dict(sample_idx=0, gt_instances=gt,
             gt_relations=dict(pair_idxs=torch.tensor([[1, 0]]), labels=torch.tensor([2])),
             pred_relations=dict(pair_idxs=torch.tensor([[1, 0], [0, 1]]),
                                 scores=torch.tensor([[0., 0, 0, 0.5, 0, 0], [0., 0, 0, 0.5, 0, 0]])))
    assert run_metrics([s], mode='predcls', topk=(1,))['R@1'] == 100.0
    s['pred_relations']['pair_idxs'] = torch.tensor([[0, 1], [1, 0]])
    assert run_metrics([s], mode='predcls', topk=(1,))['R@1'] == 0.0


def test_iou_exactly_at_threshold_counts_with_plus_one():
    # +1 convention: GT [0,0,9,9] has area 100, prediction [0,0,9,4] area 50, IoU exactly 0.5
    gt = dict(bboxes=torch.tensor([[0., 0, 9, 9], [20, 20, 29, 29]]), labels=torch.tensor([0, 1]))
    s = dict(sample_idx=0, gt_instances=gt, gt_relations=dict(pair_idxs=torch.tensor([[0, 1]]),
                                                              labels=torch.tensor([0])),
             pred_instances=dict(bboxes=torch.tensor([[0., 0, 9, 4], [20, 20, 29, 29]]),
                                 labels=torch.tensor([0, 1]), scores=torch.tensor([1., 1.])),
             pred_relations=dict(pair_idxs=torch.tensor([[0, 1]]), scores=torch.tensor([[0., 1., 0, 0, 0, 0]])))
    assert run_metrics([s], mode='sgdet', iou_plus_one=True)['R@20'] == 100.0
    # continuous convention: [0,0,9,4] vs [0,0,9,9] is 36/81 < 0.5
    assert run_metrics([s], mode='sgdet', iou_plus_one=False)['R@20'] == 0.0


def test_iou_convention_from_dataset_meta():
    samples, refs = random_dataset(11, 20, 'sgdet')
    for plus_one in (True, False):
        metric = SGRecall(mode='sgdet')
        metric.dataset_meta = dict(META, iou_plus_one=plus_one)
        metric.process({}, samples)
        res = {k.split('/')[1]: v for k, v in metric.evaluate(20).items()}
        ref = reference_metrics(refs, NUM_PREDICATES, 'sgdet', plus_one=plus_one)
        assert res['R@20'] == pytest.approx(ref['R@20'], abs=1e-6)


def test_zeroshot_derived_from_train_triplets():
    samples, refs = random_dataset(5, 30, 'predcls')
    train = np.array([[0, 1, 2], [1, 1, 0], [2, 3, 4], [3, 2, 1]])
    metric = SGRecall(mode='predcls')
    metric.dataset_meta = dict(META, train_triplets=train)
    metric.process({}, samples)
    res = {k.split('/')[1]: v for k, v in metric.evaluate(30).items()}
    evaluated = {(r['gt_labels'][s], r['gt_labels'][o], p) for r in refs for s, o, p in r['gt_rels']}
    zs = evaluated - {tuple(t) for t in train.tolist()}
    ref = reference_metrics(refs, NUM_PREDICATES, 'predcls', zeroshot=zs)
    assert res['zR@50'] == pytest.approx(ref['zR@50'], abs=1e-6)
    assert metric.last_report['zeroshot']['size'] == len(zs)


def test_mask_matching_equals_box_matching_for_box_shaped_masks():
    samples, refs = random_dataset(9, 12, 'sgdet', int_boxes=True, max_objects=4)
    add_box_shaped_masks(samples)
    box = run_metrics(samples, mode='sgdet', iou_plus_one=True)
    mask = run_metrics(samples, mode='sgdet', match='mask')
    for k in ('R@20', 'R@50', 'mR@50', 'ngR@50'):
        assert mask[k] == pytest.approx(box[k], abs=1e-6)


def test_shared_rows_between_metrics_of_one_evaluator():
    """One batch object given to both metrics (as mmengine's Evaluator does) gives the same numbers."""
    from mmengine.evaluator import Evaluator
    samples, _ = random_dataset(21, 16, 'sgcls')
    expected = run_metrics(samples, batch_size=4, mode='sgcls')
    from mmsgg_eval.registry import METRICS
    scope = METRICS.scope  # 'mmdet' when mmdet is installed
    evaluator = Evaluator([dict(type=f'{scope}.SGRecall', mode='sgcls'), dict(type=f'{scope}.SGMeanRecall', mode='sgcls')])
    evaluator.dataset_meta = META
    for start in range(0, 16, 4):
        evaluator.process(samples[start:start + 4])
    res = evaluator.evaluate(16)
    got = {k.split('/', 1)[1]: v for k, v in res.items() if not k.endswith('per_predicate_recall')}
    assert got == expected


@pytest.mark.parametrize('mode,score_format', [('predcls', 'bg'), ('sgdet', 'bg'), ('sgdet', 'nobg'),
                                               ('sgcls', 'single'), ('phrdet', 'bg')])
def test_differential_fixed_size_outputs(mode, score_format, torch_scores):
    """Every image with the same number of pairs and score columns: the stacked [B, R, P] path, whose
    no-graph-constraint list ranks all B x R x P entries at once (long rows: the float top-k fast path, or
    the exact key path when ties touch the top)."""
    for seed, (pairs, ng_topk, batch_size) in enumerate([(12, 7, 30), (30, 25, 8), (5, 100, 30), (20, 3, 1)]):
        samples, refs = random_dataset(seed + 1000, 30, mode, score_format=score_format, max_objects=6,
                                       fixed_pairs=pairs, tie_prob=0.5 if seed % 2 else 0.0,
                                       num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
        stacked = collate_scene_graphs(samples[:batch_size], mode, NUM_CLASSES, NUM_PREDICATES)
        assert stacked.scores.dense is not None and stacked.scores.dense.shape[:2] == (min(batch_size, 30), pairs)
        ours = run_metrics(samples, batch_size=batch_size, mode=mode, iou_plus_one=bool(seed % 2),
                           topk=(1, 5, 20), ng_topk=ng_topk, predicate_groups=GROUPS)
        ref = reference_metrics(refs, NUM_PREDICATES, mode, ks=(1, 5, 20), plus_one=bool(seed % 2),
                                ng_topk=ng_topk, groups=GROUP_IDX)
        assert_same(ours, ref)


def test_metrics_in_one_evaluator_share_work_and_equal_separate_runs():
    """SGRecall + SGMeanRecall fed the same batch objects (as mmengine's Evaluator does) compute each pool
    and the epoch summary once; the numbers equal separate runs."""
    samples, _ = random_dataset(5, 40, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    separate = run_metrics(samples, batch_size=6, mode='sgdet', predicate_groups=GROUPS)
    metrics = [cls(mode='sgdet', predicate_groups=GROUPS, pool_samples=8) for cls in (SGRecall, SGMeanRecall)]
    feed_like_an_evaluator(metrics, samples, 6)
    for m in metrics:  # the last pool's rows may still be in flight (overlapping pools): finish them
        m.flush()
    assert len(metrics[0].accumulator.sources) == 4  # pools of >= 8 samples (batches of 6) and the rest
    assert metrics[1].accumulator.holds_same_rows(metrics[0].accumulator.sources)
    together = {}
    for m in metrics:
        together.update({k[len('sgdet/'):]: v for k, v in m.evaluate(len(samples)).items()
                         if not k.endswith('per_predicate_recall')})
    assert together == separate
    # a metric with other summary settings in the same evaluator shares the rows, not the summary
    trio = [cls(mode='sgdet', predicate_groups=GROUPS, **kw)
            for cls, kw in ((SGRecall, {}), (SGMeanRecall, {}), (SGRecall, dict(recall_average='micro')))]
    feed_like_an_evaluator(trio, samples, 6)
    results = [m.evaluate(len(samples)) for m in trio]
    micro = run_metrics(samples, batch_size=6, mode='sgdet', recall_average='micro', predicate_groups=GROUPS)
    assert results[2]['sgdet/R@50'] == micro['R@50'] != results[0]['sgdet/R@50']


@pytest.mark.parametrize('mode,score_format,fixed_pairs', [('sgdet', 'bg', None), ('predcls', 'nobg', None),
                                                           ('sgcls', 'single', None), ('sgdet', 'bg', 15),
                                                           ('phrdet', 'bg', None)])
def test_differential_large_batches_keep_score_views(monkeypatch, mode, score_format, fixed_pairs, torch_scores):
    """Batches above STACK_SCORE_ROWS score rows (SGDet with all pairs) are not concatenated: per-image views,
    row maxima per image, pruned no-graph-constraint candidates. Forced here on small data."""
    from mmsgg_eval.functional import scores as layouts
    monkeypatch.setattr(layouts, 'STACK_SCORE_ROWS', 0)
    samples, refs = random_dataset(77, 40, mode, score_format=score_format, fixed_pairs=fixed_pairs,
                                   num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    batch = collate_scene_graphs(samples[:8], mode, NUM_CLASSES, NUM_PREDICATES)
    assert batch.scores.flat is None and batch.scores.dense is None and len(batch.scores.matrices) == 8
    for ng_topk in (3, 50):
        ours = run_metrics(samples, batch_size=8, mode=mode, iou_plus_one=True, topk=(1, 4, 20), ng_topk=ng_topk,
                           predicate_groups=GROUPS)
        ref = reference_metrics(refs, NUM_PREDICATES, mode, ks=(1, 4, 20), plus_one=True, ng_topk=ng_topk,
                                groups=GROUP_IDX)
        assert_same(ours, ref)


@pytest.mark.parametrize('bad', [float('nan'), float('inf')])
def test_large_batches_still_reject_nan_and_inf_scores(monkeypatch, bad, score_kernels):
    from mmsgg_eval.functional import scores as layouts
    monkeypatch.setattr(layouts, 'STACK_SCORE_ROWS', 0)
    samples, _ = random_dataset(78, 12, 'sgdet', fixed_pairs=6, num_classes=NUM_CLASSES,
                                num_predicates=NUM_PREDICATES)
    samples[9]['pred_relations']['scores'][4, 2] = bad
    metric = SGRecall(mode='sgdet')
    metric.dataset_meta = META
    with pytest.raises(ValueError, match=r'sample_idx=9.*pred_relations\.scores'):
        metric.process({}, samples)
        metric.flush()


def test_pooling_across_process_calls_does_not_change_results(monkeypatch):
    samples, refs = random_dataset(11, 30, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    ref = reference_metrics(refs, NUM_PREDICATES, 'sgdet', ks=(1, 5, 20), plus_one=True, ng_topk=9,
                            groups=GROUP_IDX)
    kwargs = dict(mode='sgdet', iou_plus_one=True, topk=(1, 5, 20), ng_topk=9, predicate_groups=GROUPS)
    check_metric([Case((SGRecall, SGMeanRecall), kwargs, samples, META, ref, batch_size=1)], world_sizes=(1,),
                 pool_samples=(1, 7, 256))  # every pooling, kernels on / off: one result, the reference's
    # a pool is also ranked once it holds POOL_SCORE_ROWS predicted pairs (bounded memory)
    from mmsgg_eval.metrics import scene_graph
    monkeypatch.setattr(scene_graph, 'POOL_SCORE_ROWS', 20)
    metric = SGRecall(mode='sgdet')
    metric.dataset_meta = META
    for sample in samples[:10]:
        metric.process({}, [sample])
        assert metric._pending_rows < 20
    assert len(metric.accumulator) > 0  # pools were ranked before evaluate()
    capped = {k[len('sgdet/'):]: v for k, v in metric.evaluate(10).items()}
    whole = run_metrics(samples[:10], mode='sgdet')
    assert capped == {k: whole[k] for k in capped}


def _to_device(sample, device):
    return {k: ({kk: vv.to(device) for kk, vv in v.items()} if isinstance(v, dict) else v)
            for k, v in sample.items()}


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA device')
@pytest.mark.parametrize('mode,score_format,fixed_pairs,large', [
    ('predcls', 'bg', None, False), ('sgcls', 'single', None, False), ('sgdet', 'bg', None, False),
    ('sgdet', 'nobg', 12, False), ('sgdet', 'bg', None, True), ('phrdet', 'bg', 12, False)])
def test_cuda_equals_reference(monkeypatch, mode, score_format, fixed_pairs, large):
    """On a GPU (dense same-class IoU, the device's max/topk/sort kernels) the numbers equal the reference."""
    from mmsgg_eval.functional import scores as layouts
    if large:
        monkeypatch.setattr(layouts, 'SMALL_BATCH_ROWS_GPU', 0)
    samples, refs = random_dataset(31, 40, mode, score_format=score_format, fixed_pairs=fixed_pairs,
                                   num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    on_gpu = [_to_device(s, 'cuda') for s in samples]
    ours = run_metrics(on_gpu, batch_size=8, mode=mode, iou_plus_one=True, topk=(1, 5, 20), ng_topk=9,
                       predicate_groups=GROUPS)
    ref = reference_metrics(refs, NUM_PREDICATES, mode, ks=(1, 5, 20), plus_one=True, ng_topk=9, groups=GROUP_IDX)
    assert_same(ours, ref)
