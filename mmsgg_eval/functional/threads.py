"""How many threads the metrics' own compute uses on the CPU (torch's intra-op threads and the compiled kernels').

A metric ranks a pool of samples in tens of milliseconds of many short parallel regions. On a machine whose
cores are all taken (dataloader workers, other jobs) splitting them over several threads is slower than one
thread, often several times: a region ends only when its slowest thread does, a thread that lost its core
waits for a scheduler time slice, and OpenMP's waiting threads spin (its wait policy is read once, when the
library loads, and cannot be changed by a running process). So, by default (``'auto'``), each pool is
computed with torch's thread count only while enough cores are idle, else with fewer (one on a fully busy
machine): the threads of other processes that keep being runnable are compared with the cores this process
may use. The numbers never depend on it.

Only sustained load counts. The kernel's count of runnable threads (``/proc/loadavg``, less this process's
running threads) is read at every pool, but a single reading often catches a passing task (a shell, a cron
job, a kernel thread) that takes a core for a moment; acting on it runs a pool on one thread of an idle
machine, about 10% slower. So each decision takes the smallest of a few readings (microseconds apart, this
process's own threads read before and after the machine's count; where they show other threads, the smallest
with a second reading 0.3 ms later: :data:`SETTLE_SECONDS`), and this process remembers its last decisions:
the thread count is lowered only when other threads were seen runnable in most of the last three decisions
(two readings under load), and raised back only after six quiet ones. A decision within
:data:`DECISION_SPACING` (10 ms) of the last reading reuses its decision: the metrics that share a pool decide a
fraction of a millisecond apart, and one passing task seen by both would otherwise count as two pools under load
(measured: pools of a quiet machine ran on one thread for three pools at a time); pools of SGDet with all pairs
follow each other every ~5 ms, and reading at most every 10 ms halves the readings' cost (1.1-1.2 -> 0.5 us per
image) while load is still seen within a few tens of milliseconds. The two mistakes differ in cost: one
thread on an idle machine is ~10% slower, two threads on busy cores two to five times slower, hence the quick
lowering and the slow raising. The process's first decision has no history and follows its reading alone
(once: a short evaluation started on a busy machine would otherwise run its first pool, ~4x slower, on
contended threads). A decision costs about ten microseconds on an idle machine, 20-150 us while a pass of this
process runs beside the caller (the machine's count includes it, so this process's threads are read too: ~2% of
an `sgdet-full` evaluation's time on the 2-core VM) and about 0.3 ms under load (files kept open, re-read after
the settle time), against pools of several milliseconds or more.

Work that a pool starts beside its caller (the compiled ranking pass: ``overlap.run_shared``) takes the granted
count less one, and until it has read its last image those threads count against every block's count
(:func:`busy_beside`): the caller's own torch work, and another metric's pool beside it, run on the rest (one
thread on two cores), so that the process never runs more compute threads than the policy granted. The caller
also reads a pool whose pass it is about to start on one thread (``overlap.beside_background``).

The setting: ``MMSGG_EVAL_NUM_THREADS`` in the environment (``auto``, or a positive integer: at most that
many threads, whatever the load; read at the first use, where anything else is a ValueError naming the
variable) or :func:`set_num_threads`; torch's own setting (``torch.set_num_threads``,
``OMP_NUM_THREADS``) stays the upper bound, and is restored after each pool. Where ``/proc`` cannot be read,
or the count misleads (a container limited to few cores of a big shared host sees the host's count), set an
integer.
"""
import collections
import contextlib
import os
import threading
import time
import weakref
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple, Union

import torch

Setting = Union[str, int]
#: The environment variable of the policy (read at the first use, not at import: a bad value is a ValueError
#: naming it when the policy is first needed, which the command lines report as a one-line error).
ENVIRONMENT_VARIABLE = 'MMSGG_EVAL_NUM_THREADS'
_setting: Optional[Setting] = None  # None: not read yet (see get_setting)
_open_files: Dict[str, int] = {}  # /proc path -> a descriptor kept open (see _pread)
_reading = threading.Lock()  # one reader of _open_files at a time


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
    """The policy in force: ``'auto'`` or an integer bound. The first call without :func:`set_num_threads` reads
    :data:`ENVIRONMENT_VARIABLE`; a bad value is a ValueError naming the variable (at every call until fixed).
    The command lines call it before any work (one-line error, exit status 1)."""
    global _setting
    if _setting is None:
        _setting = parse_setting(os.environ.get(ENVIRONMENT_VARIABLE), ENVIRONMENT_VARIABLE)
    return _setting


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; the machine's count where that is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _pread(path: str, size: int) -> bytes:
    """The first ``size`` bytes of ``path``, read again from a descriptor kept open (a read of a /proc file costs a
    few microseconds, an open several times that); a failing descriptor is closed (and reopened next time)."""
    fd = _open_files.get(path)
    if fd is None:
        fd = _open_files[path] = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, size, 0)
    except OSError:
        if _open_files.pop(path, None) == fd:
            os.close(fd)
        raise


def _machine_running(path: str, reads: int) -> int:
    """The smallest of ``reads`` readings of the runnable count in ``path`` (``/proc/loadavg``'s 4th field, before
    the slash): a task seen in one reading only was passing. OSError / ValueError / IndexError where unreadable."""
    return min(int(_pread(path, 256).split()[3].split(b'/')[0]) for _ in range(reads))


def _own_running(tasks: str) -> int:
    """This process's running threads (state ``R`` in ``tasks``/<tid>/stat), the calling one included; the
    descriptors of threads that ended are closed."""
    me = str(threading.get_native_id())
    listed = {f'{tasks}/{task}/stat' for task in os.listdir(tasks) if task != me}
    for ended in [path for path in _open_files if path.startswith(f'{tasks}/') and path not in listed]:
        os.close(_open_files.pop(ended))
    own = 1
    for path in listed:
        try:
            own += _pread(path, 128).rpartition(b')')[2].split()[0] == b'R'
        except OSError:  # the thread ended meanwhile
            continue
    return own


def _others_once(loadavg: str, tasks: str, reads: int) -> int:
    """One reading of :func:`runnable_now` (its arguments; raises where /proc is unreadable)."""
    with _reading:
        running = _machine_running(loadavg, reads)
        if running <= 1:
            return 0
        own = _own_running(tasks)
        if running <= own:  # the second readings can only lower the count (min) or raise own (max): none other
            return 0
        running = min(running, _machine_running(loadavg, reads))
        return max(running - max(own, _own_running(tasks)), 0)


#: How long (seconds) :func:`runnable_now` waits before it reads again a count that showed other threads.
SETTLE_SECONDS = 0.0003


def runnable_now(loadavg: str = '/proc/loadavg', tasks: str = '/proc/self/task', reads: int = 3,
                 settle: float = SETTLE_SECONDS) -> Optional[int]:
    """Threads of other processes that are runnable at this moment (running or waiting for a core), or None where
    the kernel does not tell (no ``/proc``): the machine's count (the smallest of ``reads`` readings) less this
    process's running threads, which are only listed when the machine counts more than the caller. The two
    counts are not read at one instant, and this process's own threads change state in between (a pass's
    threads sleep and wake at every image): the machine is read again after this process's threads and they
    again after it, and the smaller machine count less the larger own count is taken, so that an own thread that
    ran during one reading and slept during the other is not taken for another process's (where the first pair
    shows no other thread the second is not read: it could only lower the machine's count or raise the own one;
    while a pass runs beside the caller that is most decisions, ~100 us each on the 2-core VM). A count that shows
    other threads is read again ``settle`` seconds later and the smaller kept: on a quiet machine the count shows
    an extra runnable thread for well under a millisecond now and then (seen on the 2-core VM about once in 20
    pools, at two pools in a row often enough to lower the thread count for three pools)."""
    try:
        others = _others_once(loadavg, tasks, reads)
        if others and settle > 0:
            time.sleep(settle)
            others = min(others, _others_once(loadavg, tasks, reads))
        return others
    except (OSError, ValueError, IndexError, AttributeError):  # AttributeError: no os.pread (Windows)
        return None


class SustainedLoad:
    """Other processes' runnable threads that persist across decisions, from an instantaneous ``sampler`` (a
    count, or None where unknown) called once per :meth:`observe`.

    The level rises to the count reached in ``most`` of the last ``window`` readings, and falls only after
    ``quiet`` readings in a row below it (to the largest of them): a passing task seen once changes nothing,
    a busy process is counted from its ``most``-th decision on, and the level does not flap with a load that
    pauses for a moment. The first ``most - 1`` decisions of a tracker (no history yet) return the reading
    itself and leave the level alone: a process that starts on a busy machine does not run its first pool on
    contended threads (2-5x slower), and a passing task caught then costs that one pool only."""

    def __init__(self, sampler: Callable[[], Optional[int]] = runnable_now, window: int = 3, most: int = 2,
                 quiet: int = 6, spacing: float = 0.0, clock: Callable[[], float] = time.monotonic) -> None:
        if not 1 <= most <= window or quiet < 1 or spacing < 0:
            raise ValueError(f'SustainedLoad needs 1 <= most <= window, quiet >= 1 and spacing >= 0, got '
                             f'most={most}, window={window}, quiet={quiet}, spacing={spacing}')
        self._sampler = sampler
        self._window, self._most, self._quiet = window, most, quiet
        self._spacing, self._clock = spacing, clock
        self._seen: 'collections.deque[int]' = collections.deque(maxlen=max(window, quiet))
        self._last: Optional[Tuple[float, int]] = None  # (clock, decision) of the last reading, with a spacing
        self.level = 0

    def observe(self) -> Optional[int]:
        """Take one reading and return the sustained count (None, the history unchanged, where it is unknown).
        With a ``spacing`` (seconds), a decision less than that after the last reading is the same observation:
        it returns that reading's decision and takes none (the metrics that share a pool decide one after the
        other, a fraction of a millisecond apart: what one of them saw must not count twice)."""
        at = self._clock() if self._spacing > 0 else 0.0
        if self._last is not None and at - self._last[0] < self._spacing:
            return self._last[1]
        now = self._sampler()
        if now is None:
            return None
        decision = self._decide(now)
        if self._spacing > 0:
            self._last = (at, decision)
        return decision

    def _decide(self, now: int) -> int:
        self._seen.append(now)
        recent = list(self._seen)
        latest = sorted(recent[-self._window:], reverse=True)
        if len(latest) < self._most:  # too few readings for a level: this decision follows the reading alone
            return max(self.level, now)
        if latest[self._most - 1] > self.level:
            self.level = latest[self._most - 1]
        elif len(recent) >= self._quiet and max(recent[-self._quiet:]) < self.level:
            self.level = max(recent[-self._quiet:])
        return self.level


#: Decisions of the policy closer than this (seconds) to its last reading reuse that reading's decision: the metrics
#: sharing a pool (SGRecall + SGMeanRecall) decide within a millisecond, pools follow each other every few
#: milliseconds or more (a reading takes ~100 us while a pass runs beside the caller).
DECISION_SPACING = 0.01


_load = SustainedLoad(spacing=DECISION_SPACING)


def _after_fork_in_child() -> None:
    """A forked child (a dataloader worker) gets a free lock; its parent's thread files are closed at its first
    reading, as those of ended threads."""
    global _reading
    _reading = threading.Lock()


if hasattr(os, 'register_at_fork'):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def runnable_elsewhere() -> Optional[int]:
    """Threads of other processes that keep being runnable (:class:`SustainedLoad` over :func:`runnable_now`,
    this process's history; each call is one decision), or None where the kernel does not tell."""
    return _load.observe()


def choose_threads(setting: Optional[Setting] = None, configured: Optional[int] = None) -> int:
    """The thread count for the next pool: torch's count (or ``configured``), bounded by an integer setting; with
    ``'auto'`` also by the cores that other processes' sustained runnable threads leave (at least one thread)."""
    setting = get_setting() if setting is None else parse_setting(setting)
    configured = torch.get_num_threads() if configured is None else configured
    if setting != 'auto':
        return max(1, min(configured, setting))
    if configured <= 1:
        return 1
    others = runnable_elsewhere()
    if others is None:
        return configured
    return max(1, min(configured, usable_cores() - others))


_granted = threading.local()  # .count: the count compute_threads granted the block this thread runs
_background: list = []  # (weak reference to shared work started beside its caller, its threads)
_background_lock = threading.Lock()


def started_beside(work: Any, threads: int) -> None:
    """Note work started on ``threads`` threads of this process beside its caller (an object whose
    ``finished()`` says when it no longer needs them): until then they count against :func:`compute_threads`."""
    with _background_lock:
        _background.append((weakref.ref(work), threads))


def busy_beside() -> int:
    """Threads of this process taken by work started beside its callers and not finished yet."""
    with _background_lock:
        _background[:] = [(ref, n) for ref, n in _background if (work := ref()) is not None and not work.finished()]
        return sum(n for _, n in _background)


def granted_threads() -> int:
    """The thread count :func:`compute_threads` granted the block this thread runs (torch's count outside one):
    what work started beside the caller may take, whatever the caller's own count is lowered to."""
    return getattr(_granted, 'count', None) or torch.get_num_threads()


@contextlib.contextmanager
def compute_threads(setting: Optional[Setting] = None) -> Iterator[int]:
    """Run the block with :func:`choose_threads` intra-op threads, less those of work started beside a caller and
    still running (:func:`busy_beside`; at least one), yielded, and restore torch's count after. The count before
    that subtraction is the block's :func:`granted_threads`."""
    saved, outer = torch.get_num_threads(), getattr(_granted, 'count', None)
    granted = choose_threads(setting, outer)  # (within a block: what that block was granted)
    chosen = max(1, granted - busy_beside())
    _granted.count = granted
    try:
        if chosen == saved:
            yield chosen
            return
        torch.set_num_threads(chosen)
        try:
            yield chosen
        finally:
            torch.set_num_threads(saved)
    finally:
        _granted.count = outer


__all__: Sequence[str] = ('compute_threads', 'choose_threads', 'set_num_threads', 'get_setting', 'parse_setting',
                          'runnable_elsewhere', 'runnable_now', 'SustainedLoad', 'usable_cores', 'started_beside',
                          'busy_beside', 'granted_threads')
