"""How many threads the metrics' own compute uses on the CPU (torch's intra-op threads and the compiled kernels').

A metric ranks a pool of samples in tens of milliseconds of many short parallel regions. On a machine whose
cores are all taken (dataloader workers, other jobs) splitting them over several threads is slower than one
thread, often several times: a region ends only when its slowest thread does, a thread that lost its core
waits for a scheduler time slice, and OpenMP's waiting threads spin (its wait policy is read once, when the
library loads, and cannot be changed by a running process). So, by default (``'auto'``), each pool is
computed with torch's thread count only while enough cores are idle, else with fewer (one on a fully busy
machine): the number of threads of other processes that are runnable right now (``/proc/loadavg``, less this
process's running threads) is compared with the cores this process may use. The numbers never depend on it.

The setting: ``MMSGG_EVAL_NUM_THREADS`` in the environment (``auto``, or a positive integer: at most that
many threads, whatever the load) or :func:`set_num_threads`; torch's own setting (``torch.set_num_threads``,
``OMP_NUM_THREADS``) stays the upper bound, and is restored after each pool. Where ``/proc`` cannot be read,
or the count misleads (a container limited to few cores of a big shared host sees the host's count), set an
integer.
"""
import contextlib
import os
from typing import Iterator, Optional, Sequence, Union

import torch

Setting = Union[str, int]
_setting: Setting = 'auto'


def parse_setting(value: Union[str, int, None], source: str = 'num_threads') -> Setting:
    """``'auto'`` (also for None / ''), or an integer >= 1; anything else is a ValueError naming ``source``."""
    if value is None or value == '' or value == 'auto':
        return 'auto'
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < 1 or isinstance(value, bool) or (isinstance(value, float) and value != number):
        raise ValueError(f"{source} must be 'auto' or a positive integer, got {value!r}")
    return number


def set_num_threads(value: Setting) -> None:
    """Set the policy for this process: ``'auto'`` or at most ``value`` threads per pool."""
    global _setting
    _setting = parse_setting(value)


def get_setting() -> Setting:
    """The policy in force: ``'auto'`` or an integer bound."""
    return _setting


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; the machine's count where that is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def runnable_elsewhere() -> Optional[int]:
    """Threads of other processes that are runnable now (running or waiting for a core), or None where the
    kernel does not tell (no ``/proc``): the machine's running count less this process's running threads."""
    try:
        with open('/proc/loadavg') as f:
            running = int(f.read().split()[3].split('/')[0])
        own = 0
        for task in os.listdir('/proc/self/task'):
            try:
                with open(f'/proc/self/task/{task}/stat') as f:
                    own += f.read().rpartition(')')[2].split()[0] == 'R'
            except OSError:  # the thread ended meanwhile
                continue
    except (OSError, ValueError, IndexError):
        return None
    return max(running - max(own, 1), 0)


def choose_threads(setting: Optional[Setting] = None) -> int:
    """The thread count for the next pool: torch's count, bounded by an integer setting; with ``'auto'`` also
    by the cores that other processes' runnable threads leave (at least one thread)."""
    setting = _setting if setting is None else parse_setting(setting)
    configured = torch.get_num_threads()
    if setting != 'auto':
        return max(1, min(configured, setting))
    if configured <= 1:
        return 1
    others = runnable_elsewhere()
    if others is None:
        return configured
    return max(1, min(configured, usable_cores() - others))


@contextlib.contextmanager
def compute_threads(setting: Optional[Setting] = None) -> Iterator[int]:
    """Run the block with :func:`choose_threads` intra-op threads (yielded) and restore torch's count after."""
    saved = torch.get_num_threads()
    chosen = choose_threads(setting)
    if chosen == saved:
        yield chosen
        return
    torch.set_num_threads(chosen)
    try:
        yield chosen
    finally:
        torch.set_num_threads(saved)


_setting = parse_setting(os.environ.get('MMSGG_EVAL_NUM_THREADS'), 'MMSGG_EVAL_NUM_THREADS')

__all__: Sequence[str] = ('compute_threads', 'choose_threads', 'set_num_threads', 'get_setting', 'parse_setting',
                          'runnable_elsewhere', 'usable_cores')
