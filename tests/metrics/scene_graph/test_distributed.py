"""Multi-process (gloo) scene-graph metrics equal the single-process result (SPEC 2.6)."""
import pytest

from mmsgg_eval.metrics import SGMeanRecall, SGRecall
from tests.metric_tester import Case, check_metric
from tests.reference_sgg import reference_metrics
from tests.sgg_samples import random_dataset
from tests.metrics.scene_graph.test_recall import META, NUM_PREDICATES

LENGTH = 23  # not divisible by 2 or 3


@pytest.mark.parametrize('world_size,mode', [(2, 'sgdet'), (3, 'predcls')])
def test_distributed_equals_single_process(world_size, mode):
    """Every rank's keys equal one process's, bit for bit, and the loop reference, for pool_samples 1 and 4
    and the compiled kernels on / off (tests/metric_tester.py)."""
    samples, refs = random_dataset(42, LENGTH, mode)
    zeroshot = [(0, 1, 2), (1, 2, 3), (2, 0, 1)]
    ref = reference_metrics(refs, NUM_PREDICATES, mode, zeroshot=set(zeroshot))
    case = Case((SGRecall, SGMeanRecall), dict(mode=mode, zeroshot_triplets=zeroshot), samples, META, ref,
                name=mode, batch_size=3)
    single = check_metric([case], world_sizes=(1, world_size), pool_samples=(1, 4))[0]
    assert any(v > 0 for k, v in single.items() if k.endswith('R@50'))


def test_padding_duplicates_are_counted_once_in_one_process():
    samples, _ = random_dataset(1, 10, 'predcls')
    metric = SGRecall(mode='predcls')
    metric.dataset_meta = META
    metric.process({}, samples)
    once = metric.evaluate(10)
    metric.process({}, samples)
    metric.process({}, samples[:3])  # padding-style repeats
    assert metric.evaluate(10) == once


@pytest.mark.parametrize('world_size', [2, 3])
def test_distributed_one_evaluator_equals_single_process(world_size):
    """SGRecall + SGMeanRecall fed the same batch objects, as mmengine's Evaluator does (shared rows and
    shared epoch summary), on fixed-size outputs (the stacked batch path): every rank equals one process and
    the loop reference (tests/metric_tester.py)."""
    samples, refs = random_dataset(43, LENGTH, 'sgdet', fixed_pairs=10)
    zeroshot = [(0, 1, 2), (1, 2, 3)]
    ref = reference_metrics(refs, NUM_PREDICATES, 'sgdet', zeroshot=set(zeroshot))
    case = Case((SGRecall, SGMeanRecall), dict(mode='sgdet', zeroshot_triplets=zeroshot), samples, META, ref,
                name='sgdet fixed-size', batch_size=2)
    single = check_metric([case], world_sizes=(1, world_size), pool_samples=(4,))[0]
    assert single['R@100'] > 0 and single['mR@100'] > 0
