"""Multi-process (gloo) scene-graph metrics equal the single-process result (SPEC 2.6)."""
import pytest

from mmsgg_eval.metrics import SGMeanRecall, SGRecall
from tests.dist_utils import padded_shard, run_distributed
from tests.sgg_samples import random_dataset
from tests.test_scene_graph_metrics import META, feed_like_an_evaluator

LENGTH = 23  # not divisible by 2 or 3


def evaluate_shard(rank, world_size, mode, batch_size):
    samples, _ = random_dataset(42, LENGTH, mode)
    mine = [samples[i] for i in padded_shard(LENGTH, world_size, rank)]
    out = {}
    for cls in (SGRecall, SGMeanRecall):
        metric = cls(mode=mode, zeroshot_triplets=[(0, 1, 2), (1, 2, 3), (2, 0, 1)])
        metric.dataset_meta = META
        for start in range(0, len(mine), batch_size):
            metric.process({}, mine[start:start + batch_size])
        out.update(metric.evaluate(LENGTH))
    return out


@pytest.mark.parametrize('world_size,mode', [(2, 'sgdet'), (3, 'predcls')])
def test_distributed_equals_single_process(world_size, mode):
    single = evaluate_shard(0, 1, mode, 4)
    results = run_distributed(evaluate_shard, world_size, mode, 3)
    for res in results:
        assert res == single  # exact, every rank
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


def evaluate_shard_in_one_evaluator(rank, world_size, mode, batch_size):
    """SGRecall + SGMeanRecall fed the same batch objects, as mmengine's Evaluator does (shared rows and
    shared epoch summary), on fixed-size outputs (the stacked batch path)."""
    samples, _ = random_dataset(43, LENGTH, mode, fixed_pairs=10)
    mine = [samples[i] for i in padded_shard(LENGTH, world_size, rank)]
    metrics = [cls(mode=mode, zeroshot_triplets=[(0, 1, 2), (1, 2, 3)], pool_samples=4)
               for cls in (SGRecall, SGMeanRecall)]
    feed_like_an_evaluator(metrics, mine, batch_size)
    out = {}
    for metric in metrics:
        out.update(metric.evaluate(LENGTH))
    return out


@pytest.mark.parametrize('world_size', [2, 3])
def test_distributed_one_evaluator_equals_single_process(world_size):
    single = evaluate_shard_in_one_evaluator(0, 1, 'sgdet', 5)
    for res in run_distributed(evaluate_shard_in_one_evaluator, world_size, 'sgdet', 2):
        assert res == single
    assert single['sgdet/R@100'] > 0 and single['sgdet/mR@100'] > 0
