"""``tools/benchmark.py --load N``: N CPU-bound busy processes competing with the measured jobs.

In a validation run the evaluator shares the CPU with the data pipeline (dataloader workers); these processes
stand in for them. Each one spins in pure Python (no threads, no I/O) and exits by itself once its parent is
gone, so a benchmark killed hard leaves no busy process behind; :func:`busy_processes` stops them when its
block ends, normally, on an error or on Ctrl-C.
"""
import contextlib
import os
import subprocess
import sys
from typing import Iterator, List, Optional, Sequence

BUSY_LOOP = ('import os, sys\n'
             'parent = int(sys.argv[1])\n'
             'while os.getppid() == parent:\n'
             '    for _ in range(200000):\n'
             '        pass\n')
"""The program of one busy process: spin, and look every few milliseconds whether the parent still lives."""


def start_busy(count: int, procs: Optional[List[subprocess.Popen]] = None) -> List[subprocess.Popen]:
    """Start ``count`` busy processes (children of this process), appended to ``procs`` one by one (so that a
    failed start leaves the ones already started in the list, to be stopped)."""
    procs = [] if procs is None else procs
    cmd = [sys.executable, '-c', BUSY_LOOP, str(os.getpid())]
    for _ in range(count):
        procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
    return procs


def stop_busy(procs: Sequence[subprocess.Popen], timeout: float = 5.0) -> None:
    """Terminate the given busy processes and wait for them (killed if they outlive ``timeout`` seconds)."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def busy_processes(count: int) -> Iterator[List[subprocess.Popen]]:
    """``count`` busy processes for the duration of the block (none for 0), stopped however the block ends."""
    if count < 0:
        raise ValueError(f'busy_processes: count must be >= 0, got {count}')
    procs: List[subprocess.Popen] = []
    try:
        yield start_busy(count, procs)
    finally:
        stop_busy(procs)


def load_average() -> str:
    """The 1, 5 and 15 minute load averages of the machine as text ('-' where the platform has none)."""
    try:
        return ' '.join(f'{x:.2f}' for x in os.getloadavg())
    except OSError:
        return '-'


__all__: Sequence[str] = ('busy_processes', 'start_busy', 'stop_busy', 'load_average')
