"""Helpers of the tests of overlapped pools (a pool's compiled reader pass in the background thread while the previous
pool's rows are finished: ``RowMetric.flush(overlap=True)``): a fixed thread count, a count of the passes started
in the background, and the check that a value error of a pool left in flight is raised by the next flush."""
import contextlib

import pytest
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
    started, original = [], reader_module.compiled_ranked_lists_beside

    def spy(*args):
        started.append(args)
        return original(*args)
    reader_module.compiled_ranked_lists_beside = spy
    try:
        yield started
    finally:
        reader_module.compiled_ranked_lists_beside = original


def check_deferred_value_error(metric, samples) -> None:
    """``metric`` (``pool_samples=4``, dataset_meta set) given ``samples`` (12 SGDet samples with predicted pairs)
    in three calls of 4, sample 5's first relation score set to NaN: the second call's pool is left in flight
    (its pass in the background), and the third call raises the error, naming sample 5 and the field."""
    bad = samples[5]
    bad['pred_relations']['scores'] = bad['pred_relations']['scores'].clone()
    bad['pred_relations']['scores'][0, 1] = float('nan')
    with compute_threads_fixed(2), counting_background_passes() as started:
        metric.process({}, samples[:4])
        metric.process({}, samples[4:8])  # holds the bad sample: its rows are finished by the next flush
        assert started
        with pytest.raises(ValueError, match=r"sample_idx=5|img5") as error:
            metric.process({}, samples[8:])
        assert 'pred_relations.scores' in str(error.value)
