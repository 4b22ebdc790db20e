"""One harness for metric tests (in the spirit of torchmetrics' ``MetricTester``): a metric, or metrics fed
together as mmengine's ``Evaluator`` feeds them, against a loop reference written from the definition, over
world sizes (gloo ranks on the padded, strided shards of MMEngine's ``DefaultSampler``: uneven lengths and
repeated samples), ``pool_samples`` values and the compiled score kernels on / off.

``check_metric(cases, ...)`` runs every case under every combination and asserts that

* every combination gives the very same keys, bit for bit (world size, pooling and kernels never change a
  number), on every rank;
* the keys equal the case's reference keys (``abs_tol``, the references sum in another order).

A case is :class:`Case` (metric classes, constructor arguments, samples, ``dataset_meta``, reference keys). All
cases of one call share one process group per world size (ranks start once per world size, not per case).
Returns the single-process keys of each case.
"""
import contextlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pytest

from tests.dist_utils import comparable, padded_shard, run_distributed


@dataclass
class Case:
    """Metrics evaluated together (e.g. ``(SGRecall, SGMeanRecall)``) with ``kwargs``, on ``samples``;
    ``reference``: the expected unprefixed keys (a subset of the metrics' keys); ``name`` for messages."""

    metrics: Tuple[type, ...]
    kwargs: Dict[str, Any]
    samples: List[Any]
    meta: Dict[str, Any]
    reference: Dict[str, float]
    name: str = ''
    batch_size: int = 3
    extra: Dict[str, Any] = field(default_factory=dict)
    #: entries of each metric's ``last_report`` compared across the settings too (as ``report:Class.field``)
    report_fields: Tuple[str, ...] = ()


def kernel_settings(kernels: Sequence[str]) -> List[str]:
    """``kernels`` without 'compiled' where the compiled kernels are not built (CI builds them)."""
    from mmsgg_eval.functional import compiled
    return [k for k in kernels if k != 'compiled' or compiled.built()]


@contextlib.contextmanager
def kernels_as(name: str):
    from mmsgg_eval.functional import compiled
    if name == 'torch':
        with compiled.disabled():
            yield
    else:
        yield


def evaluate_case(case: Case, pool_samples: Optional[int], rank: int = 0, world_size: int = 1) -> Dict[str, float]:
    """The unprefixed keys of ``case.metrics`` fed ``rank``'s shard in batches of ``case.batch_size`` (every
    metric the same batch objects, as mmengine's ``Evaluator``); ``pool_samples=None``: the metrics take no
    ``pool_samples`` (they keep no pool: GroundingPr, the VLM metric, RelCLIPScore)."""
    length = len(case.samples)
    mine = [case.samples[i] for i in padded_shard(length, world_size, rank)]
    metrics = []
    for cls in case.metrics:
        pool = {} if pool_samples is None else {'pool_samples': pool_samples}
        metric = cls(**{**case.kwargs, **pool})
        metric.dataset_meta = case.meta
        metrics.append(metric)
    for start in range(0, len(mine), case.batch_size):
        batch = mine[start:start + case.batch_size]
        for metric in metrics:
            metric.process({}, batch)
    out: Dict[str, float] = {}
    for metric in metrics:
        prefix = metric.prefix + '/'
        out.update({k[len(prefix):]: v for k, v in metric.evaluate(length).items()})
        for name in case.report_fields:
            out[f'report:{type(metric).__name__}.{name}'] = metric.last_report[name]
    return out


def _all_settings(cases: Sequence[Case], pools: Sequence[Optional[int]], kernels: Sequence[str], rank: int,
                  world_size: int) -> Dict[Tuple[int, str, int], Dict[str, float]]:
    out = {}
    for kernel in kernels:
        with kernels_as(kernel):
            for pool in pools:
                for i, case in enumerate(cases):
                    out[(i, kernel, pool)] = evaluate_case(case, pool, rank, world_size)
    return out


def _rank_worker(rank: int, world_size: int, cases, pools, kernels):
    return _all_settings(cases, pools, kernels, rank, world_size)


def check_metric(cases: Sequence[Case], world_sizes: Sequence[int] = (1, 2, 3),
                 pool_samples: Sequence[Optional[int]] = (1, 4),
                 kernels: Sequence[str] = ('compiled', 'torch'), abs_tol: float = 1e-6) -> List[Dict[str, float]]:
    """Run every case x world size x ``pool_samples`` x kernels; assert equality across them and with the
    references (see the module docs). ``pool_samples=(None,)`` for metrics without the option; ``kernels=('torch',)``
    for metrics that read no relation scores (one setting instead of two identical ones). Returns the keys of each
    case (one process)."""
    kernels = kernel_settings(kernels)
    assert kernels, 'no kernel setting to run'
    runs: Dict[int, List[Dict[Tuple[int, str, int], Dict[str, float]]]] = {}
    for world_size in world_sizes:
        if world_size == 1:
            runs[1] = [_all_settings(cases, pool_samples, kernels, 0, 1)]
        else:
            runs[world_size] = run_distributed(_rank_worker, world_size, list(cases), list(pool_samples),
                                               list(kernels))
    first = runs[world_sizes[0]][0]
    results = []
    for i, case in enumerate(cases):
        expected = first[(i, kernels[0], pool_samples[0])]
        for world_size, by_rank in runs.items():
            for rank, settings in enumerate(by_rank):
                for kernel in kernels:
                    for pool in pool_samples:
                        got = settings[(i, kernel, pool)]
                        assert comparable(got) == comparable(expected), (f'{case.name}: world size {world_size} rank {rank}, kernels '
                                                 f'{kernel}, pool_samples={pool} differ from world size '
                                                 f'{world_sizes[0]}, {kernels[0]}, pool_samples={pool_samples[0]}: '
                                                 f'{_difference(got, expected)}')
        missing = sorted(set(case.reference) - set(expected))
        assert not missing, f'{case.name}: reference keys not computed: {missing}'
        for key, value in case.reference.items():
            assert expected[key] == pytest.approx(value, abs=abs_tol, nan_ok=True), (case.name, key, expected[key], value)
        results.append(expected)
    return results


def _difference(got: Dict[str, float], expected: Dict[str, float]) -> Optional[str]:
    for key in sorted(set(got) | set(expected)):
        if comparable(got.get(key)) != comparable(expected.get(key)):  # NaN: a key without a value
            return f'{key}: {got.get(key)} != {expected.get(key)}'
    return None
