"""Helpers for multi-process (gloo, CPU) tests of metrics.

``run_distributed(worker, world_size, *args)`` starts ``world_size`` fresh processes with an initialised gloo
process group and returns the value each ``worker(rank, world_size, *args)`` returned, in rank order. The
processes are forked from a ``forkserver`` that imported torch, MMEngine and mmsgg_eval once per test session
(a spawned rank re-imports them: seconds per rank, against ~0.1 s for a fork); each rank still starts with a
fresh state: the caller's environment variables and working directory, torch's initial seed, fresh NumPy and
``random`` seeds, no process group until ``_entry`` creates one.
``padded_shard(n, world_size, rank)`` reproduces MMEngine's ``DefaultSampler(shuffle=False)``: the index
list is padded with its own first entries up to a multiple of the world size, then strided.
``fault_worker_main()`` is one rank of an evaluation in which one rank stops or dies (runner tests).
"""
import datetime
import multiprocessing
import os
import signal
import socket
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, Dict, List

import torch.distributed as torch_dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def padded_shard(n: int, world_size: int, rank: int) -> List[int]:
    total = -(-n // world_size) * world_size
    indices = list(range(n))
    indices += indices[:total - n]
    return indices[rank:total:world_size]


#: modules the forkserver imports once, so that a rank (or a tool run by tests.tool_runs) only forks: the slow
#: part of a new interpreter is importing them; a module that fails to import is skipped by the forkserver (the
#: forked process then imports it itself)
PRELOAD = ['torch', 'torch.distributed', 'numpy', 'mmengine', 'mmengine.evaluator', 'mmengine.logging',
           'mmengine.runner', 'mmdet.registry', 'mmdet.datasets', 'mmdet.models', 'mmdet.evaluation',
           'mmsgg_eval', 'mmsgg_eval.metrics', 'mmsgg_eval.runner', 'mmsgg_eval.eval', 'tests.dist_utils',
           'tests.metric_tester', 'tests.tool_runs']
#: a bound on one call: a rank that hangs outside a collective (inside one, gloo's timeout ends it) fails the test
CALL_TIMEOUT_S = 600


def forkserver_context():
    """The ``forkserver`` multiprocessing context, its server preloading :data:`PRELOAD` (started at first use)."""
    multiprocessing.set_forkserver_preload(PRELOAD)
    return multiprocessing.get_context('forkserver')


def _start_method() -> str:
    if 'forkserver' not in multiprocessing.get_all_start_methods():
        return 'spawn'
    forkserver_context()
    return 'forkserver'


def _entry(rank: int, world_size: int, port: int, outdir: str, job: bytes, environ: Dict[str, str],
           cwd: str) -> None:
    import pickle
    import random

    import numpy as np
    import torch
    # a forked rank inherits the forkserver's state, not the caller's: take the caller's environment and working
    # directory, and reseed what a fresh interpreter seeds (torch's default generator was never drawn from in the
    # forkserver; NumPy's global generator would otherwise be the same on every rank)
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    np.random.seed()
    random.seed()
    torch.manual_seed(torch.initial_seed())
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    # a bounded timeout: a rank that fails or hangs ends the test instead of blocking the others forever
    torch_dist.init_process_group('gloo', rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=300))
    try:
        worker, args = pickle.loads(job)
        result = ('ok', worker(rank, world_size, *args))
    except BaseException:  # noqa: BLE001 - reported to the parent
        result = ('error', traceback.format_exc())
    with open(os.path.join(outdir, f'{rank}.pkl'), 'wb') as f:
        pickle.dump(result, f)
    torch_dist.barrier()
    torch_dist.destroy_process_group()


def run_distributed(worker: Callable, world_size: int, *args: Any) -> List[Any]:
    """Run ``worker(rank, world_size, *args)`` on ``world_size`` gloo ranks; return results by rank. A worker's
    exception is raised here as ``RuntimeError`` with the rank's traceback; a rank that dies fails the call
    (``ProcessExitedException``), one that runs past :data:`CALL_TIMEOUT_S` is killed and fails it too."""
    import pickle
    # the job by value (plain pickle): torch's multiprocessing pickler would pass one file descriptor per tensor,
    # and a forkserver passes at most 256
    job = pickle.dumps((worker, args))
    with tempfile.TemporaryDirectory() as outdir:
        context = mp.start_processes(
            _entry, args=(world_size, free_port(), outdir, job, dict(os.environ), os.getcwd()),
            nprocs=world_size, join=False, start_method=_start_method())
        deadline = time.monotonic() + CALL_TIMEOUT_S
        try:
            while not context.join(timeout=1):
                if time.monotonic() > deadline:
                    raise RuntimeError(f'{getattr(worker, "__name__", worker)} on {world_size} ranks did not end '
                                       f'within {CALL_TIMEOUT_S} s')
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
                    process.join()
        results = []
        for rank in range(world_size):
            with open(os.path.join(outdir, f'{rank}.pkl'), 'rb') as f:
                status, value = pickle.load(f)
            if status != 'ok':
                raise RuntimeError(f'rank {rank} failed:\n{value}')
            results.append(value)
    return results


def fault_worker_main() -> None:
    """``python -c '...fault_worker_main()' RANK WORLD PORT TIMEOUT FAULTY_RANK FAULT`` (FAULT: stop | die).

    Evaluates SGRecall on a small workload through :func:`mmsgg_eval.runner.distributed_evaluation` with
    ``env_cfg.dist_cfg.timeout=TIMEOUT``; rank FAULTY_RANK stops itself (SIGSTOP, as ``kill -STOP``) or exits
    just before the metric's cross-rank reduce. Prints ``collective-start T`` before the reduce and
    ``failed-at T`` with the error on failure (exit code 1), ``ok`` on success.
    """
    rank, world, port, timeout, faulty = (int(a) for a in sys.argv[1:6])
    fault = sys.argv[6]
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    from mmengine.logging import MMLogger
    from mmsgg_eval.benchmarks.workloads import make_workload, meta
    from mmsgg_eval.metrics import SGRecall
    from mmsgg_eval.runner import distributed_evaluation
    MMLogger.get_instance('mmengine', log_level='WARNING')
    cfg = dict(env_cfg=dict(dist_cfg=dict(backend='gloo', timeout=timeout)))
    samples = make_workload('triplets', 6)
    try:
        with distributed_evaluation(cfg, 'pytorch'):
            metric = SGRecall(mode='sgdet')
            metric.dataset_meta = meta()
            metric.process({}, [samples[i] for i in padded_shard(len(samples), world, rank)])
            if rank == faulty:
                if fault == 'stop':
                    os.kill(os.getpid(), signal.SIGSTOP)
                else:
                    os._exit(3)
            print(f'collective-start {time.time()}', flush=True)
            metric.evaluate(len(samples))
    except Exception as err:  # noqa: BLE001 - reported to the test
        print(f'failed-at {time.time()}\n{type(err).__name__}: {err}', flush=True)
        sys.exit(1)
    assert not torch_dist.is_initialized(), 'the process group must be destroyed before exit'
    print('ok', flush=True)


def comparable(results: Any) -> Any:
    """``results`` (a dict of keys, or a list of them) with NaN (a key without a value: a subset or group without
    GT) as the string ``'nan'``, so that ``==`` compares two runs bit for bit."""
    if isinstance(results, dict):
        return {k: comparable(v) for k, v in results.items()}
    if isinstance(results, (list, tuple)):
        return [comparable(v) for v in results]
    return 'nan' if isinstance(results, float) and results != results else results
