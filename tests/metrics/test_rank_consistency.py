"""Ranks whose metrics were built differently refuse to reduce each other's rows: the length exchange of the
reduce carries a fingerprint of what the rows depend on (settings, protocol, dataset_meta, row schema), and
every rank raises the same error naming the difference and the ranks; equal ranks still exchange twice only."""
import pytest

from mmsgg_eval.metrics import SGMeanRecall, SGRecall
from tests.dist_utils import padded_shard, run_distributed
from tests.sgg_samples import random_dataset

LENGTH = 11


def meta(num_predicates):
    return dict(classes=[f'c{i}' for i in range(4)], predicates=[f'p{i}' for i in range(num_predicates)],
                dataset_name='random')


def evaluate_rank(rank, world_size, cls_name, per_rank_kwargs, per_rank_predicates, count_exchanges=False):
    """One rank: the metric built with this rank's arguments and dataset_meta; returns ('ok', keys,
    exchanges) or ('error', type name, message)."""
    from mmengine import dist
    samples, _ = random_dataset(7, LENGTH, 'predcls', num_predicates=3)
    mine = [samples[i] for i in padded_shard(LENGTH, world_size, rank)]
    cls = {'SGRecall': SGRecall, 'SGMeanRecall': SGMeanRecall}[cls_name]
    metric = cls(mode='predcls', **per_rank_kwargs[rank])
    metric.dataset_meta = meta(per_rank_predicates[rank])
    calls = []
    if count_exchanges:
        original = dist.all_gather

        def counted(*args, **kwargs):
            calls.append(1)
            return original(*args, **kwargs)
        dist.all_gather = counted
    for start in range(0, len(mine), 3):
        metric.process({}, mine[start:start + 3])
    try:
        keys = metric.evaluate(LENGTH)
    except ValueError as err:
        return ('error', type(err).__name__, str(err))
    return ('ok', keys, len(calls))


def test_different_topk_on_one_rank_is_refused_by_every_rank():
    kwargs = [dict(topk=(20, 50)), dict(topk=(50, 100)), dict(topk=(20, 50))]
    results = run_distributed(evaluate_rank, 3, 'SGRecall', kwargs, [3, 3, 3])
    assert all(r[0] == 'error' and r[1] == 'RankMismatchError' for r in results), results
    message = results[0][2]
    assert all(r[2] == message for r in results)  # the same error on every rank
    assert 'SGRecall (predcls)' in message and 'different settings' in message, message
    assert 'topk: [20, 50] on rank 0 vs [50, 100] on rank 1' in message, message
    assert 'ranks 0, 2 vs ranks 1' in message, message


def test_different_dataset_meta_is_refused_by_every_rank():
    results = run_distributed(evaluate_rank, 2, 'SGMeanRecall', [{}, {}], [3, 4])
    assert all(r[0] == 'error' and r[1] == 'RankMismatchError' for r in results), results
    assert results[0][2] == results[1][2]
    message = results[0][2]
    assert 'different dataset_meta (predicates: 3 entries on rank 0 vs 4 entries on rank 1' in message, message
    assert 'ranks 0 vs ranks 1' in message, message


def test_equal_ranks_reduce_in_two_exchanges_as_one_process():
    single = evaluate_rank(0, 1, 'SGMeanRecall', [dict(topk=(20, 50))], [3])
    results = run_distributed(evaluate_rank, 2, 'SGMeanRecall', [dict(topk=(20, 50))] * 2, [3, 3], True)
    for status, keys, exchanges in results:
        assert status == 'ok' and keys == single[1]
        assert exchanges == 2  # lengths + fingerprint, then the rows: no extra collective
    assert single[1]['predcls/mR@50'] > 0
