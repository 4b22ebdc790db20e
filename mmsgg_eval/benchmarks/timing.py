"""The one timing helper of the benchmarks: the best of repeated runs."""
import time
from typing import Any, Callable, Dict, Optional, Sequence


def best_of(run: Callable[..., Any], repeat: int, setup: Optional[Callable[[], Any]] = None, cuda: bool = False,
            reported: Sequence[str] = ()) -> Dict[str, Any]:
    """Time ``repeat`` runs and keep the best, so that a busy phase of a shared machine spoils one run at most.

    Each repeat calls ``setup()`` untimed when given, then ``run(<its value>)`` (``run()`` without ``setup``)
    between two readings of the wall clock (``time.perf_counter``) and of this process's CPU clock
    (``time.process_time``: user + system seconds of all its threads); with ``cuda``,
    ``torch.cuda.synchronize()`` before both readings so that queued kernels count.

    Returns ``seconds`` and ``cpu_seconds`` (the smallest of each over the repeats, taken separately),
    ``runs_seconds`` (every repeat's wall seconds, in order: the spread behind the best),
    ``result`` (the last run's return value) and, for each key of ``reported``, the smallest ``result[key]``
    over the repeats: timings a run measures itself (e.g. inside a subprocess it starts).
    """
    if repeat < 1:
        raise ValueError(f'best_of: repeat must be >= 1, got {repeat}')
    sync = _cuda_sync if cuda else _no_sync
    best: Dict[str, Any] = {}
    for _ in range(repeat):
        args = (setup(),) if setup is not None else ()
        sync()
        start, start_cpu = time.perf_counter(), time.process_time()
        result = run(*args)
        sync()
        times = dict(seconds=time.perf_counter() - start, cpu_seconds=time.process_time() - start_cpu)
        times.update((key, result[key]) for key in reported)
        for key, value in times.items():
            best[key] = value if key not in best else min(best[key], value)
        best.setdefault('runs_seconds', []).append(times['seconds'])
        best['result'] = result
    return best


def _cuda_sync() -> None:
    import torch
    torch.cuda.synchronize()


def _no_sync() -> None:
    pass


__all__: Sequence[str] = ('best_of',)
