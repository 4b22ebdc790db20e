"""Helpers of the tests of overlapped pools (a pool's compiled reader pass in the background thread while the previous
pool's rows are finished: ``RowMetric.flush(overlap=True)``): a fixed thread count and a count of the passes started
in the background."""
import contextlib

import torch

from mmsgg_eval.functional import threads
from mmsgg_eval.structures import reader as reader_module


@contextlib.contextmanager
def compute_threads_fixed(count: int):
    """The metrics' thread policy and torch's thread count set to ``count`` (restored after)."""
    before_policy, before_torch = threads.get_setting(), torch.get_num_threads()
    threads.set_num_threads(count)
    torch.set_num_threads(max(count, before_torch))
    try:
        yield
    finally:
        threads.set_num_threads(before_policy)
        torch.set_num_threads(before_torch)


@contextlib.contextmanager
def counting_background_passes():
    """A list that gets one entry per pass started in the background thread."""
    started, original = [], reader_module.run_beside

    def spy(call, *args, background=True):
        started.extend([call] if background else [])
        return original(call, *args, background=background)
    reader_module.run_beside = spy
    try:
        yield started
    finally:
        reader_module.run_beside = original
