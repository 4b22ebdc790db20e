"""Running a pool's compiled ranking pass beside the calling thread, and computations in two stages.

The compiled ranking pass of a pool (``_ext.RankedPass``) releases the GIL. Started beside the calling thread
(:func:`run_shared`: on the process' own C++ threads, the caller's granted thread count less one, joined by the
caller when it needs the lists), it runs while the calling thread finishes the previous pool's Python work
(reading the lists into rows): on a machine with idle cores the two overlap instead of taking turns. A metric
writes its pool computation as a generator that yields once, after its first stage (reading the samples and
starting the pass), and :class:`Staged` runs the two stages at different times: the second stage of pool n runs
after the first stage of pool n + 1. Nothing is computed differently: the same calls, in another order in time.
Only worth it when the thread policy grants two or more threads (:func:`overlap_wanted`): on a busy machine a
further runnable thread costs more than it hides.
"""
import contextlib
from typing import Any, Callable, Generator, Generic, Iterator, Optional, TypeVar

import torch

from . import compiled
from .threads import granted_threads, started_beside

T = TypeVar('T')


def overlap_wanted() -> bool:
    """Whether to run a pass beside the calling thread: only with two or more compute threads granted (the
    thread policy lowers them to one on a busy machine, and it is called around each pool) and the compiled
    kernels (without them there is no pass: a pool runs in one stage on the policy's threads, which the torch
    layouts use; measured: `variable` on the torch layouts ~25% slower when its reading and summary ran on one
    thread)."""
    return granted_threads() >= 2 and compiled.kernels() is not None


@contextlib.contextmanager
def beside_background(running: bool) -> Iterator[None]:
    """While a pass runs beside the caller or is about to (``running``: the reading of a pool whose pass is then
    started, the previous pool's rows finished while it runs), the calling thread's torch operations use one
    thread: the pass has the other threads, a parallel region of the caller would wait for a thread that has no
    core to run on, and OpenMP's worker, which spins for a while after each region, would take the core the pass
    starts on (measured: `variable` +10-20% images/s, process CPU 48-54 -> 43-46 us per image, when the reading
    too runs on one thread). ``evaluate()``'s reduce and summary too, for the metrics whose pools run their pass
    beside the caller (many short operations: as fast on one thread, and no worker left spinning; `sgdet-full`
    process CPU -10 to -15 us per image). The thread count is restored after."""
    threads = torch.get_num_threads()
    if not running or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class Pending(Generic[T]):
    """The result of a call, done already, or work shared with the caller (``join``: ``join()`` takes the
    caller's share, waits for the rest and gives the value)."""

    def __init__(self, value: Optional[T] = None, join: Optional[Callable[[], T]] = None) -> None:
        self._value, self._join = value, join

    @property
    def in_background(self) -> bool:
        return self._join is not None

    def result(self) -> T:
        """The call's value (waiting for it); its exception is raised here (again at every call)."""
        if self._join is not None:
            self._value = self._join()
            self._join = None
        return self._value


def run_shared(work: Any, join: Callable[[], T]) -> Pending[T]:
    """Work shared between background threads and the caller: ``work.start(n)`` starts it on ``n`` threads, the
    caller's granted thread count less one (at least one; they count against every pool's compute threads until
    ``work.finished()``: :func:`~.threads.busy_beside`), and the caller joins it when it asks for the value
    (``join()``: its share, then the value). While the caller runs its own code beside it, the two never use more
    threads than the caller's count."""
    threads = max(1, granted_threads() - 1)
    work.start(threads)
    started_beside(work, threads)
    return Pending(join=join)


class Staged(Generic[T]):
    """A computation written as a generator that yields once, between its two stages, and returns its value.

    Building it runs the first stage; :meth:`result` runs the second (once: the value, or the exception, is
    kept). ``in_background``: what the generator yielded (True when its first stage left work running in the
    background thread, so that running the second stage later pays)."""

    def __init__(self, stages: Generator[bool, None, T]) -> None:
        self._stages: Optional[Generator[bool, None, T]] = stages
        self._value: Optional[T] = None
        self._error: Optional[BaseException] = None
        try:
            self.in_background = bool(next(stages))
        except StopIteration as stop:  # (a generator that returned before its yield: done)
            self._stages, self._value, self.in_background = None, stop.value, False

    @classmethod
    def done(cls, value: T) -> 'Staged[T]':
        """A computation done already, of value ``value``."""
        def stages() -> Generator[bool, None, T]:
            yield False
            return value
        return cls(stages())

    def result(self) -> T:
        if self._stages is not None:
            stages, self._stages = self._stages, None
            try:
                next(stages)
            except StopIteration as stop:
                self._value = stop.value
            except BaseException as error:
                self._error = error
                raise
            else:
                stages.close()
                raise RuntimeError('a staged computation yielded more than once')
        if self._error is not None:
            raise self._error
        return self._value


__all__ = ('Pending', 'Staged', 'beside_background', 'overlap_wanted', 'run_shared')
