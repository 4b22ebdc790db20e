"""One reading of a pool for SGRecall / SGMeanRecall and an OIRelationMetric placed after them in one evaluator
(``metrics.scene_graph_inputs.PoolReader``): the OI keys, summary and object-count warnings equal those of the OI
metric alone, bit for bit, in every mode, with and without overlapped pools; the read is taken only from the same
sample objects with the same settings, only while the offering metric's buffers still hold it, and it lives no
longer than that metric."""
import contextlib
import gc

import pytest
import torch

from mmsgg_eval.functional import compiled
from mmsgg_eval.metrics import OIRelationMetric, SGMeanRecall, SGRecall, scene_graph_inputs
from mmsgg_eval.metrics.scene_graph_inputs import PoolReader
from mmsgg_eval.structures import ObjectCounts
from tests.dist_utils import comparable
from tests.overlap_utils import compute_threads_fixed
from tests.sgg_samples import feed_like_an_evaluator, random_dataset

NUM_CLASSES, NUM_PREDICATES = 4, 5
META = dict(classes=[f'c{i}' for i in range(NUM_CLASSES)], predicates=[f'p{i}' for i in range(NUM_PREDICATES)],
            dataset_name='random', iou_plus_one=True)


@contextlib.contextmanager
def counting_reads():
    """A list of the pool sizes read by ``read_pool_stages`` (one entry per reading of a pool)."""
    reads, original = [], scene_graph_inputs.read_pool_stages

    def spy(samples, *args, **kwargs):
        reads.append(len(samples))
        return original(samples, *args, **kwargs)
    scene_graph_inputs.read_pool_stages = spy
    try:
        yield reads
    finally:
        scene_graph_inputs.read_pool_stages = original


@contextlib.contextmanager
def count_warnings():
    """A list of (mode, text) of every object-count warning given."""
    given, original = [], ObjectCounts.warn

    def spy(self, mode):
        given.append((mode, self.message(mode)))
        return original(self, mode)
    ObjectCounts.warn = spy
    try:
        yield given
    finally:
        ObjectCounts.warn = original


def samples_of(mode, count=30, seed=5):
    """Random samples with a missing prediction, a repeated ``sample_idx`` and (PredCls / SGCls) two images whose
    model lists one object fewer than the GT."""
    samples, _ = random_dataset(seed, count, mode, num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES,
                                max_objects=9)
    samples[3] = dict(samples[3], prediction_missing=True)
    samples[9] = dict(samples[8])  # a copy of sample 8 in the same pool: counted once
    if mode != 'sgdet':
        for i in (4, 13):
            gt = samples[i]['gt_instances']
            pred = samples[i].get('pred_instances') or dict(bboxes=gt['bboxes'], labels=gt['labels'],
                                                            scores=torch.ones(len(gt['labels'])))
            keep = gt['bboxes'].shape[0] - 1
            pairs = samples[i]['pred_relations']['pair_idxs']
            inside = (pairs < keep).all(1)
            samples[i] = dict(samples[i], pred_instances={k: v[:keep] for k, v in pred.items()},
                              pred_relations={k: v[inside] for k, v in samples[i]['pred_relations'].items()})
    return samples


def evaluate(metrics, samples, batch_size=4):
    """Every metric fed the same lists of samples in turn (as mmengine's Evaluator does), then evaluated."""
    feed_like_an_evaluator(metrics, samples, batch_size, META)
    return [metric.evaluate(len(samples)) for metric in metrics]


@pytest.mark.parametrize('threads', [1, 2])
@pytest.mark.parametrize('mode', ['predcls', 'sgcls', 'sgdet'])
def test_oi_after_the_scene_graph_metrics_takes_their_read_and_gives_its_own_results(mode, threads):
    samples = samples_of(mode)
    with compute_threads_fixed(threads):
        with counting_reads() as alone_reads, count_warnings() as alone_warnings:
            oi = OIRelationMetric(mode=mode, pool_samples=8)
            (alone,) = evaluate([oi], samples)
        alone_report = oi.last_report
        with counting_reads() as reads, count_warnings() as warnings:
            metrics = [SGRecall(mode=mode, pool_samples=8), SGMeanRecall(mode=mode, pool_samples=8),
                       OIRelationMetric(mode=mode, pool_samples=8)]
            *_, shared = evaluate(metrics, samples)
    assert len(alone_reads) == 4 and reads == alone_reads, 'the OI metric read the pools again'
    assert comparable(shared) == comparable(alone)
    assert comparable(metrics[2].last_report) == comparable(alone_report)
    oi_warnings = [w for w in warnings if w[1] is not None][-1:] if mode != 'sgdet' else []
    assert [w for w in alone_warnings if w[1] is not None] == oi_warnings
    if mode != 'sgdet':  # the scene-graph metrics and the OI metric each warn of the two short lists
        assert len([w for w in warnings if w[1] is not None]) == 2 and '2 image(s)' in oi_warnings[0][1]


@pytest.mark.parametrize('error_analysis', [False, True])
@pytest.mark.parametrize('mode', ['predcls', 'sgdet'])
def test_an_evaluator_with_oi_first_reads_the_first_pool_twice_then_once(mode, error_analysis):
    """The scene-graph metric after the OI metric finds its read of the first pool without its lists: it reads
    that pool itself and asks the OI metric's pass for its lists (and the error analysis' pair codes); it takes
    the next pools' reads. Every key as each metric alone."""
    samples = samples_of(mode, count=24)
    (oi_alone,) = evaluate([OIRelationMetric(mode=mode, pool_samples=8)], samples)
    (sg_alone,) = evaluate([SGRecall(mode=mode, pool_samples=8, error_analysis=error_analysis)], samples)
    with counting_reads() as reads:
        metrics = [OIRelationMetric(mode=mode, pool_samples=8),
                   SGRecall(mode=mode, pool_samples=8, error_analysis=error_analysis)]
        oi, sg = evaluate(metrics, samples)
    expected = [8, 8, 7, 8] if compiled.kernels() is not None else [8, 8, 7, 7, 8, 8]
    assert reads == expected  # (the repeated sample of the second pool read once)
    assert comparable(oi) == comparable(oi_alone) and comparable(sg) == comparable(sg_alone)
    assert comparable(metrics[1].last_report) == comparable(
        evaluate_report(SGRecall(mode=mode, pool_samples=8, error_analysis=error_analysis), samples))


def evaluate_report(metric, samples):
    evaluate([metric], samples)
    return metric.last_report


def test_different_settings_or_pools_are_not_shared():
    samples = samples_of('sgcls', count=16)
    with counting_reads() as reads:  # another mode: another read
        evaluate([SGRecall(mode='sgdet', pool_samples=8), OIRelationMetric(mode='sgcls', pool_samples=8)], samples)
    assert len(reads) == 4
    with counting_reads() as reads:  # other pools: other sample lists
        evaluate([SGRecall(mode='sgcls', pool_samples=4), OIRelationMetric(mode='sgcls', pool_samples=8)], samples)
    assert len(reads) == 6
    with counting_reads() as reads:  # another score layout
        evaluate([SGRecall(mode='sgcls', pool_samples=8, score_layout='background_first'),
                  OIRelationMetric(mode='sgcls', pool_samples=8)], samples)
    assert len(reads) == 4


def test_strict_counts_of_the_oi_metric_refuse_a_short_list_read_by_a_lenient_metric():
    samples = samples_of('predcls', count=16)[:8]
    sg, oi = SGRecall(mode='predcls', pool_samples=8), OIRelationMetric(mode='predcls', pool_samples=8,
                                                                          strict_counts=True)
    for metric in (sg, oi):
        metric.dataset_meta = META
    with counting_reads() as reads:
        sg.process({}, samples)
        with pytest.raises(ValueError, match=r'sample_idx=4\b.*strict_counts'):
            oi.process({}, samples)
            oi.flush()
    assert len(reads) == 1


def test_a_read_whose_buffers_were_reused_is_read_again():
    """The OI metric takes the read of pool A in flight; the scene-graph metric then reads two more pools, its pass
    writing A's buffer again: the OI metric reads A itself (its keys those of the metric alone)."""
    if compiled.kernels() is None:
        pytest.skip('the compiled kernels are not built')
    samples = samples_of('sgdet', count=12)
    a, b, c = samples[:4], samples[4:8], samples[8:]
    (alone,) = evaluate([OIRelationMetric(mode='sgdet', pool_samples=4)], samples)
    with compute_threads_fixed(2), counting_reads() as reads:
        sg, oi = SGRecall(mode='sgdet', pool_samples=4), OIRelationMetric(mode='sgdet', pool_samples=4)
        for metric in (sg, oi):
            metric.dataset_meta = META
        sg.process({}, a)
        oi.process({}, a)  # takes the offered read of A, left in flight
        assert reads == [4]
        sg.process({}, b)
        sg.process({}, c)  # A's pass buffer written again
        oi.process({}, b)  # A read again, then B (no longer offered); the OI metric's reads are offered in turn
        oi.process({}, c)  # (the latest offer is the OI metric's own read of B: C is read again)
        out = oi.evaluate(12)
    assert reads == [4, 4, 3, 4, 4, 3]  # A, B, C by SGRecall (C: a repeat read once); A, B, C by the OI metric
    assert comparable(out) == comparable(alone)


def test_the_offered_read_lives_as_long_as_its_metric():
    predicates = NUM_PREDICATES + 2  # a reading setting of this test only
    meta = dict(META, predicates=[f'p{i}' for i in range(predicates)])
    samples, _ = random_dataset(2, 4, 'sgdet', num_classes=NUM_CLASSES, num_predicates=predicates)
    sg = SGRecall(mode='sgdet', pool_samples=4)
    sg.dataset_meta = meta
    sg.process({}, samples)
    sg.flush()

    def offered():
        return [key for key in PoolReader._offered.keys() if key[2] == predicates]
    assert len(offered()) == 1
    del sg
    gc.collect()
    assert offered() == []


def test_samples_changed_in_place_after_an_evaluation_are_read_anew():
    """The OI metric evaluates the same sample objects again, changed in place, without the scene-graph metric
    (whose last read is still offered): it reads them itself."""
    samples = samples_of('sgdet', count=16)[:8]
    sg, oi = SGRecall(mode='sgdet', pool_samples=8), OIRelationMetric(mode='sgdet', pool_samples=8)
    evaluate([sg, oi], samples)
    for sample in samples:
        sample['pred_relations']['scores'] = sample['pred_relations']['scores'].flip(0).contiguous()
    (alone,) = evaluate([OIRelationMetric(mode='sgdet', pool_samples=8)], samples)
    with counting_reads() as reads:
        (again,) = evaluate([oi], samples)
    assert reads == [8] and comparable(again) == comparable(alone)


def test_an_mmengine_evaluator_of_the_oiv6_recipe_reads_each_pool_once():
    from mmengine.evaluator import Evaluator
    from mmsgg_eval.registry import METRICS
    samples = samples_of('sgdet', count=24)
    metrics = [dict(type='SGMeanRecall', mode='sgdet'), dict(type='OIRelationMetric', mode='sgdet'),
               dict(type='DetectionAP')]
    evaluator = Evaluator([dict(m, type=f'{METRICS.scope}.{m["type"]}', pool_samples=8) for m in metrics])
    evaluator.dataset_meta = META
    with counting_reads() as reads:
        for start in range(0, 24, 4):
            evaluator.process(samples[start:start + 4], {})
        out = evaluator.evaluate(24)
    assert reads == [8, 7, 8]  # (the second pool's repeated sample read once)
    (alone,) = evaluate([OIRelationMetric(mode='sgdet', pool_samples=8)], samples)
    assert {k: v for k, v in comparable(out).items() if k in alone} == comparable(alone)


@pytest.mark.parametrize('mode', ['predcls', 'sgdet'])
def test_the_scene_graph_pass_builds_the_oi_lists_once_asked(mode):
    """The OI metric that finds the scene-graph metric's offer asks its pass for the OI lists: from that metric's
    next pool on they are built while each matrix is read (the first pool is listed by the OI kernel); the
    scene-graph keys stay those of the scene-graph metrics alone, the OI keys those of the OI metric alone; the
    request ends with the epoch."""
    if compiled.kernels() is None:
        pytest.skip('the compiled kernels are not built')
    from mmsgg_eval.functional import oi as oi_functional
    samples = samples_of(mode, count=32)
    (sg_alone,) = evaluate([SGMeanRecall(mode=mode, pool_samples=8)], samples)
    (oi_alone,) = evaluate([OIRelationMetric(mode=mode, pool_samples=8)], samples)
    sources, original = [], oi_functional._compiled_ranked_lists

    def spy(batch, *args):
        ranked = batch.ranked_lists
        sources.append('pass' if ranked is not None and ranked.oi_lists is not None else 'kernel')
        return original(batch, *args)
    oi_functional._compiled_ranked_lists = spy
    try:
        metrics = [SGMeanRecall(mode=mode, pool_samples=8), OIRelationMetric(mode=mode, pool_samples=8)]
        sg, oi = evaluate(metrics, samples)
    finally:
        oi_functional._compiled_ranked_lists = original
    assert sources == ['kernel', 'pass', 'pass', 'pass']
    assert comparable(sg) == comparable(sg_alone) and comparable(oi) == comparable(oi_alone)
    assert metrics[0]._reader.requested is None  # (until the OI metric finds an offer in the next epoch)


@pytest.mark.parametrize('oi_first', [True, False])
def test_a_scene_graph_metric_ranking_by_the_given_order_shares_the_reads(oi_first):
    """``rank='given'`` asks no lists of the pass: it takes the OI metric's reads from the first pool on (OI first),
    or its reads, made without a pass, are taken by the OI metric (which lists them itself). Keys as each alone."""
    samples = samples_of('sgdet', count=24)
    (oi_alone,) = evaluate([OIRelationMetric(mode='sgdet', pool_samples=8)], samples)
    (sg_alone,) = evaluate([SGRecall(mode='sgdet', pool_samples=8, rank='given')], samples)
    with counting_reads() as reads:
        metrics = [OIRelationMetric(mode='sgdet', pool_samples=8), SGRecall(mode='sgdet', pool_samples=8,
                                                                           rank='given')]
        oi, sg = evaluate(metrics if oi_first else metrics[::-1], samples)[::1 if oi_first else -1]
    assert reads == [8, 7, 8]
    assert comparable(oi) == comparable(oi_alone) and comparable(sg) == comparable(sg_alone)


def test_a_bad_value_in_a_shared_read_is_raised_by_each_metric_naming_the_sample():
    """A NaN relation score in a pool read once: the scene-graph metric raises the error naming the sample and
    the field, and so does the OI metric that takes the same read."""
    samples = samples_of('sgdet', count=16)[:8]
    bad = samples[5]
    bad['pred_relations'] = dict(bad['pred_relations'], scores=bad['pred_relations']['scores'].clone())
    bad['pred_relations']['scores'][0, 1] = float('nan')
    sg, oi = SGRecall(mode='sgdet', pool_samples=8), OIRelationMetric(mode='sgdet', pool_samples=8)
    for metric in (sg, oi):
        metric.dataset_meta = META
    with counting_reads() as reads:
        for metric in (sg, oi):
            with pytest.raises(ValueError, match=r'(sample_idx=5|img5).*pred_relations\.scores'):
                metric.process({}, samples)
                metric.flush()
    assert reads == [8]
