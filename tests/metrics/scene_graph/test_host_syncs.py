"""Host-device synchronisations of a pool: bounded by a constant, whatever the pool size or the number of images.

On a GPU every ``.item()``, ``nonzero``, boolean-mask index, ``unique``, host copy, ... stops the host until the
device has caught up. :class:`mmsgg_eval.testing.host_syncs.HostSyncCounter` counts those operations on the CPU
(the torch path, as GPUs run it: the compiled CPU kernels off), per pool of SGRecall + SGMeanRecall.
"""
import contextlib

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mmsgg_eval.metrics import SGMeanRecall, SGRecall
from mmsgg_eval.functional.transfer import sync_free_paths
from mmsgg_eval.testing.host_syncs import HostSyncCounter, sync_kind
from tests.dist_utils import comparable
from tests.sgg_samples import random_dataset

NUM_CLASSES, NUM_PREDICATES = 4, 5
# the most host synchronisations one pool of SGRecall + SGMeanRecall makes in any mode on the accelerators' path
# (measured on the CPU under sync_free_paths: 1, the value rules' single decision, which must come before any
# index is used on the device; see docs/performance.md); it does not depend on the pool's size or the number of
# images
MAX_SYNCS_PER_POOL = 1
# once per metric, at its first pool: the zero-shot triplets checked and their codes moved to the device
FIRST_POOL_EXTRA = 8
# the CPU's own torch path (kernels off) reads sizes on the host where that is cheaper there (sparse matching,
# per-image score views): still a constant per pool (measured 4-26)
MAX_SYNCS_PER_POOL_CPU = 28


def _metrics(mode, pool, **kwargs):
    meta = dict(classes=[f'c{i}' for i in range(NUM_CLASSES)], predicates=[f'p{i}' for i in range(NUM_PREDICATES)])
    metrics = [cls(mode=mode, pool_samples=pool, zeroshot_triplets=[(0, 1, 2)], **kwargs)
               for cls in (SGRecall, SGMeanRecall)]
    for m in metrics:
        m.dataset_meta = meta
    return metrics


def pool_syncs(samples, mode, pool, metrics=None, **kwargs):
    """The host syncs of each pool (``process()`` of ``pool`` samples flushes one) and the metrics' keys."""
    metrics = metrics or _metrics(mode, pool, **kwargs)
    counts = []
    for start in range(0, len(samples), pool):
        with HostSyncCounter() as syncs:
            for m in metrics:
                m.process({}, samples[start:start + pool])
                m.flush()
        counts.append(syncs)
    keys = {}
    for m in metrics:
        keys.update(m.evaluate(len(samples)))
    return counts, keys


def _samples(mode, count, seed, fixed=False):
    samples, _ = random_dataset(seed, count, mode, num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES,
                                fixed_pairs=6 if fixed else None)
    return samples


def _check_bound(counts, bound, what):
    for i, syncs in enumerate(counts):
        limit = bound + (FIRST_POOL_EXTRA if i == 0 else 0)
        assert syncs.total <= limit, f'{what}, pool {i}: {syncs.total} > {limit}\n{syncs.report()}'


@pytest.mark.parametrize('mode', ['predcls', 'sgcls', 'sgdet', 'phrdet'])
@pytest.mark.parametrize('fixed', [False, True], ids=['variable', 'fixed'])
@pytest.mark.parametrize('path', ['sync-free', 'cpu'])
def test_syncs_per_pool_bounded(mode, fixed, path, torch_scores):
    """4, 48 and 5 x 12 images in pools of 4, 48 and 12: the same bound for every pool."""
    bound = MAX_SYNCS_PER_POOL if path == 'sync-free' else MAX_SYNCS_PER_POOL_CPU
    with sync_free_paths() if path == 'sync-free' else contextlib.nullcontext():
        for count, pool in ((4, 4), (48, 48), (60, 12)):
            counts, _ = pool_syncs(_samples(mode, count, count + pool, fixed), mode, pool)
            _check_bound(counts, bound, f'{mode} {path}, pools of {pool}')


@pytest.mark.parametrize('mode', ['predcls', 'sgcls', 'sgdet'])
def test_syncs_per_pool_with_error_analysis(mode, torch_scores):
    """error_analysis=True (the causes of the misses, the stage-wise ranks) adds no host synchronisation on the
    accelerators' path, and gives the same keys there as on the CPU's."""
    samples = _samples(mode, 60, 9, False)
    _, plain = pool_syncs(samples, mode, 12, error_analysis=True)
    with sync_free_paths():
        counts, free = pool_syncs(samples, mode, 12, error_analysis=True)
    _check_bound(counts, MAX_SYNCS_PER_POOL, f'{mode} error analysis')
    assert any('/miss@' in key for key in free) and any('/stage_' in key for key in free), sorted(free)
    assert _same(free, plain)


@pytest.mark.parametrize('path', ['sync-free', 'cpu'])
def test_syncs_per_pool_bounded_vg_like(path, torch_scores):
    """SGDet with all pairs of 80 detections on VG-like images (the benchmark's sgdet-full), and variable sizes."""
    from mmsgg_eval.benchmarks.workloads import make_workload, meta
    bound = MAX_SYNCS_PER_POOL if path == 'sync-free' else MAX_SYNCS_PER_POOL_CPU
    with sync_free_paths() if path == 'sync-free' else contextlib.nullcontext():
        for workload in ('sgdet-full', 'sgdet-variable', 'variable'):
            metrics = [cls(mode='sgdet', pool_samples=12, zeroshot_triplets=[(0, 1, 2)])
                       for cls in (SGRecall, SGMeanRecall)]
            for m in metrics:
                m.dataset_meta = meta()
            counts, _ = pool_syncs(make_workload(workload, 24), 'sgdet', 12, metrics)
            _check_bound(counts, bound, workload)


@pytest.mark.parametrize('mode', ['predcls', 'sgcls', 'sgdet', 'phrdet'])
def test_sync_free_paths_give_the_same_numbers(mode, torch_scores):
    """The accelerators' ways (dense matching and first hits, whole-batch layouts, arg-max of every listed row)
    give every key bit for bit as the CPU's ways, on random images with ties, empty images and duplicates."""
    for seed, fixed in ((1, False), (2, True), (3, False)):
        samples = _samples(mode, 40, seed, fixed)
        _, plain = pool_syncs(samples, mode, 16)
        with sync_free_paths():
            _, free = pool_syncs(samples, mode, 16)
        assert free == plain or _same(free, plain)


def test_sync_free_paths_same_numbers_vg_like(torch_scores):
    from mmsgg_eval.benchmarks.workloads import make_workload, meta
    for workload in ('sgdet-variable', 'variable'):
        samples = make_workload(workload, 40)
        keys = []
        for free in (False, True):
            metrics = [cls(mode='sgdet', pool_samples=16, zeroshot_triplets=[(0, 1, 2)])
                       for cls in (SGRecall, SGMeanRecall)]
            for m in metrics:
                m.dataset_meta = meta()
            with sync_free_paths() if free else contextlib.nullcontext():
                keys.append(pool_syncs(samples, 'sgdet', 16, metrics)[1])
        assert _same(*keys)


def _same(a, b):
    return a.keys() == b.keys() and all(a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]) for k in a)


class _OpsSeen(TorchDispatchMode):
    """Every ATen operator (overload) dispatched inside the block."""

    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(func)
        return func(*args, **(kwargs or {}))


def test_every_operator_of_the_accelerators_path_has_a_cuda_kernel(torch_scores):
    """The pools of SGRecall + SGMeanRecall on the accelerators' path, every mode, with and without the error
    analysis, dispatch only operators that a CUDA device runs (a kernel of its own or a composite one): a GPU
    cannot be lent to every test run, so an operator without one would first fail on a user's GPU."""
    seen = _OpsSeen()
    for mode in ('predcls', 'sgcls', 'sgdet', 'phrdet'):
        for analysis in (False, True) if mode != 'phrdet' else (False,):
            samples = _samples(mode, 24, 5, fixed=analysis)
            metrics = _metrics(mode, 12, error_analysis=analysis)
            with sync_free_paths():
                for start in range(0, 24, 12):
                    with seen:
                        for m in metrics:
                            m.process({}, samples[start:start + 12])
                            m.flush()
    runnable = ('CUDA', 'CompositeExplicitAutograd', 'CompositeExplicitAutogradNonFunctional',
                'CompositeImplicitAutograd')
    missing = sorted(str(op) for op in seen.ops
                     if not any(torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), key) for key in runnable))
    assert len(seen.ops) > 40 and {'aten.topk.default', 'aten.nonzero_static.default'} <= {str(o) for o in seen.ops}
    assert not missing, missing


def test_counter_sees_every_kind():
    """The counter records each kind of synchronising operation once per call, and nothing for the others."""
    x = torch.arange(10.0)
    mask = x > 3
    with HostSyncCounter() as syncs:
        x.sum().item()
        int(x[1])
        bool(mask.any())
        x.nonzero()
        torch.where(mask)
        x[mask]
        x.masked_select(mask)
        torch.unique(x)
        torch.repeat_interleave(torch.arange(3), torch.tensor([1, 2, 3]))
        x.tolist()
        x.numpy()
        torch.bincount(torch.zeros(3, dtype=torch.long))
    assert syncs.kinds == {'item': 3, 'nonzero': 2, 'boolean index': 1, 'masked_select': 1, 'unique': 1,
                           'repeat_interleave': 1, 'to host': 2, 'to device': 1, 'bincount': 1}, syncs.report()
    with HostSyncCounter() as quiet:  # no synchronisation: sizes known, masks kept as masks
        y = torch.where(mask, x, 0.0)
        torch.repeat_interleave(torch.arange(3), torch.full((3,), 2), output_size=6)
        y.topk(3)
        y.masked_fill(~mask, 1.0)
        torch.isin(x, x[:2])
        x.index_select(0, torch.arange(3))
    assert quiet.total == 0, quiet.report()


def test_sync_kind_of_boolean_index_put():
    x = torch.zeros(4)
    with HostSyncCounter() as syncs:
        x[x == 0] = 1.0
        x[torch.arange(2)] = 2.0
    assert syncs.kinds == {'boolean index': 1}, syncs.report()
    assert sync_kind(torch.ops.aten.add.Tensor, (x, x), {}) is None


def test_counting_keeps_the_numbers(torch_scores):
    """The counter only watches: the keys are those of a run without it."""
    samples = _samples('sgdet', 30, 5)
    _, counted = pool_syncs(samples, 'sgdet', 10)
    metrics = _metrics('sgdet', 10)
    plain = {}
    for m in metrics:
        m.process({}, samples)
    for m in metrics:
        plain.update(m.evaluate(len(samples)))
    assert comparable(counted) == comparable(plain)  # keys without a value (NaN) compare as equal
    assert not np.isinf(list(counted.values())).any()  # NaN only for keys without a value (no zero-shot GT)
    assert np.isfinite([v for k, v in counted.items() if '/R@' in k or '/mR@' in k]).all()


def test_device_check_script_dry_run(capsys, torch_scores):
    """tools/device_check.sh is valid bash, and its pool report runs on the CPU (its --dry-run)."""
    import subprocess
    from mmsgg_eval.benchmarks import device_syncs
    assert subprocess.run(['bash', '-n', 'tools/device_check.sh']).returncode == 0
    assert device_syncs.main(['--workload', 'sgdet-variable', '--images', '6', '--device', 'cpu', '--repeat', '1']) == 0
    out = capsys.readouterr().out
    assert 'one pool of 6 images on cpu' in out and 'host syncs per pool (HostSyncCounter): ' in out
    assert 'set_sync_debug_mode: not run' in out


@pytest.mark.parametrize('equal', [True, False], ids=['stacked', 'concatenated'])
def test_score_check_without_a_wait_flags_the_same_images(equal, torch_scores):
    """The accelerators' per-row score check flags exactly the images the whole-copy check flags: NaN, +-inf and
    negative entries (background column included), not -0.0."""
    from mmsgg_eval.functional.scores import build_relation_scores
    gen = torch.Generator().manual_seed(0)
    bad_values = [None, float('nan'), -0.0, float('inf'), -1e-6, float('-inf'), None, -0.0]
    raw = []
    for b, value in enumerate(bad_values):
        matrix = torch.rand((6 if equal else 3 + b, NUM_PREDICATES + 1), generator=gen)
        if value is not None:
            matrix[b % matrix.shape[0], b % matrix.shape[1]] = value
        raw.append(matrix)
    args = (raw, [1] * len(raw), [m.shape[0] for m in raw], NUM_PREDICATES, [False] * len(raw), [], 'stacked',
            torch.device('cpu'))
    plain = build_relation_scores(*args).bad_images
    with sync_free_paths(), HostSyncCounter() as syncs:
        free = build_relation_scores(*args).bad_images
    assert plain.tolist() == free.tolist() == [False, True, False, True, True, True, False, False]
    assert syncs.total == 0, syncs.report()
