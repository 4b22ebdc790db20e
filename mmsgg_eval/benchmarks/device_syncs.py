"""One pool on a device: its time (CUDA events) and its host synchronisations (``tools/device_check.sh``).

    python -m mmsgg_eval.benchmarks.device_syncs [--workload sgdet-full] [--images 256] [--device cuda]
                                                 [--repeat 3]

SGRecall + SGMeanRecall (every key, as :mod:`.runners` measures them) rank one pool of ``images`` workload images
held on the device (``pool_samples`` = ``images``; a first pool warms the device up, untimed). Printed, one line
each: the pool's time (the best of ``repeat``, between two CUDA events on the current stream: the device's
time, host waits included) and its rate in images/s; the host synchronisations of the pool counted by
:class:`~mmsgg_eval.testing.host_syncs.HostSyncCounter` (by kind); and, where
``torch.cuda.set_sync_debug_mode`` exists, the number of synchronising CUDA calls it warns about during one
pool. ``--device cpu`` runs the same on the CPU (no events, wall clock; no debug mode): a dry run of the script
(``--sync-free-paths``: the ways an accelerator takes, :func:`mmsgg_eval.functional.transfer.sync_free_paths`).
Every figure is of a steady pool: the metrics ranked one pool before (their one-time work left out).
"""
import argparse
import sys
import time
import warnings
from typing import Any, Dict, List, Optional, Sequence

from .workloads import WORKLOADS, ZEROSHOT_TRIPLETS, make_workload, meta, workload_mode


def _metrics(workload: str, pool: int) -> List[Any]:
    from ..metrics import SGMeanRecall, SGRecall
    metrics = [cls(mode=workload_mode(workload), zeroshot_triplets=ZEROSHOT_TRIPLETS, pool_samples=pool)
               for cls in (SGRecall, SGMeanRecall)]
    dataset_meta = meta()
    for m in metrics:
        m.dataset_meta = dataset_meta
    return metrics


def _one_pool(metrics: List[Any], data: List[Any]) -> None:
    for m in metrics:
        m.process({}, data)
        m.flush()


def _close(metrics: List[Any], images: int) -> None:
    """Evaluate (untimed): ends the metrics' epoch, so that the next metrics rank the same samples afresh
    instead of reusing their compute group's rows."""
    for m in metrics:
        m.evaluate(images)


def _warm_metrics(workload: str, data: List[Any]) -> List[Any]:
    """New metrics that have ranked one pool already (copies of the samples: its rows are not reused), so that
    the next pool is a steady one (the one-time work of a metric's first pool, e.g. moving its zero-shot codes to
    the device, left out)."""
    metrics = _metrics(workload, len(data))
    _one_pool(metrics, [dict(s) for s in data])
    return metrics


def pool_report(workload: str, images: int, device: str, repeat: int = 3) -> Dict[str, Any]:
    """``seconds`` (best pool), ``images_per_s``, ``syncs`` (count), ``sync_kinds``, ``sync_sites`` (the most
    frequent places) and ``debug_mode_syncs`` (None where the debug mode is not available, or off CUDA), of a
    steady pool (:func:`_warm_metrics`)."""
    import torch

    from ..testing.host_syncs import HostSyncCounter
    data = make_workload(workload, images, device=device)
    cuda = torch.device(device).type == 'cuda'
    best = float('inf')
    for _ in range(repeat):
        metrics = _warm_metrics(workload, data)
        if cuda:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            _one_pool(metrics, data)
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) / 1000.0)
        else:
            begin = time.perf_counter()
            _one_pool(metrics, data)
            best = min(best, time.perf_counter() - begin)
        _close(metrics, images)
    metrics = _warm_metrics(workload, data)
    with HostSyncCounter() as syncs:
        _one_pool(metrics, data)
    _close(metrics, images)
    debug = None
    if cuda and hasattr(torch.cuda, 'set_sync_debug_mode'):
        metrics = _warm_metrics(workload, data)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            torch.cuda.set_sync_debug_mode('warn')
            try:
                _one_pool(metrics, data)
            finally:
                torch.cuda.set_sync_debug_mode('default')
        _close(metrics, images)
        debug = sum('synchroniz' in str(w.message) for w in caught)
    return dict(seconds=best, images_per_s=images / best, syncs=syncs.total, sync_kinds=dict(syncs.kinds),
                sync_sites=[f'{n} {kind} {site}' for (kind, site), n in syncs.sites.most_common(8)],
                debug_mode_syncs=debug)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--workload', default='sgdet-full', choices=list(WORKLOADS))
    parser.add_argument('--images', type=int, default=256)
    parser.add_argument('--device', default='cuda')
    parser.add_argument('--repeat', type=int, default=3)
    parser.add_argument('--sync-free-paths', action='store_true',
                        help='on the CPU, take the ways an accelerator takes (mmsgg_eval.functional.transfer)')
    args = parser.parse_args(argv)
    import contextlib
    from mmengine.logging import MMLogger

    from ..functional.transfer import sync_free_paths
    MMLogger.get_instance('mmengine', log_level='WARNING')
    with sync_free_paths() if args.sync_free_paths else contextlib.nullcontext():
        res = pool_report(args.workload, args.images, args.device, args.repeat)
    clock = 'CUDA events' if args.device.startswith('cuda') else 'wall clock'
    print(f'{args.workload}, one pool of {args.images} images on {args.device}: {res["seconds"] * 1000:.1f} ms '
          f'({clock}), {res["images_per_s"]:,.0f} images/s')
    print(f'host syncs per pool (HostSyncCounter): {res["syncs"]} {res["sync_kinds"]}')
    for site in res['sync_sites']:
        print(f'    {site}')
    if res['debug_mode_syncs'] is not None:
        print(f'torch.cuda.set_sync_debug_mode("warn"): {res["debug_mode_syncs"]} synchronising calls in one pool')
    else:
        print('torch.cuda.set_sync_debug_mode: not run (not a CUDA device, or not in this torch)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
