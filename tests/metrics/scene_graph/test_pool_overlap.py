"""Overlapping pools: a pool's compiled ranking pass runs in the background thread while the previous pool's rows
are finished in the calling thread (``RowMetric.flush(overlap=True)``, two or more compute threads).

Nothing may change but the time: every key equals the one-stage run's, bit for bit; a value error the pass reads
(relation scores, predicted pair indices) is raised (naming the sample) by the next flush, any other by the call
that fills the pool; rows shared by SGRecall and SGMeanRecall are still computed once.
"""

import pytest
import torch

from mmsgg_eval.functional import compiled
from mmsgg_eval.functional import overlap as overlap_module
from mmsgg_eval.functional import threads
from mmsgg_eval.functional.overlap import Pending, Staged, beside_background, run_shared
from mmsgg_eval.metrics import SGMeanRecall, SGRecall
from tests.dist_utils import comparable
from tests.overlap_utils import check_deferred_value_error, compute_threads_fixed, counting_background_passes
from tests.sgg_samples import META, random_dataset, scene_graph_keys

pytestmark = pytest.mark.skipif(compiled.kernels() is None, reason='the compiled kernels are not built')


def keys_with_threads(count, samples, batch_size, **kwargs):
    with compute_threads_fixed(count):
        keys, _ = scene_graph_keys(samples, batch_size=batch_size, **kwargs)
    return comparable(keys)


@pytest.mark.parametrize('mode', ['predcls', 'sgcls', 'sgdet'])
@pytest.mark.parametrize('seed', [0, 1])
def test_overlapped_pools_give_the_keys_of_one_stage_pools(mode, seed):
    samples, _ = random_dataset(seed, 37, mode, max_objects=9)
    options = dict(mode=mode, zeroshot_triplets=[(0, 1, 2)], error_analysis=True, pool_samples=5)
    one_stage = keys_with_threads(1, samples, 5, **options)
    with counting_background_passes() as started:
        overlapped = keys_with_threads(2, samples, 5, **options)
    assert started, 'no pass ran in the background: the test would not test the overlap'
    assert overlapped == one_stage


def test_a_value_error_of_an_overlapped_pool_is_raised_by_the_next_flush_naming_the_sample():
    samples, _ = random_dataset(3, 12, 'sgdet', max_objects=6, empty_pred_prob=0.0)
    metric = SGRecall(mode='sgdet', pool_samples=4)
    metric.dataset_meta = META
    check_deferred_value_error(metric, samples)


def test_a_value_error_the_pass_does_not_read_is_raised_by_the_call_that_fills_the_pool():
    samples, _ = random_dataset(3, 12, 'sgdet', max_objects=6, empty_pred_prob=0.0)
    bad = samples[6]
    assert len(bad['gt_instances']['labels'])
    bad['gt_instances']['labels'] = bad['gt_instances']['labels'].clone()
    bad['gt_instances']['labels'][0] = 99
    metric = SGRecall(mode='sgdet', pool_samples=4)
    metric.dataset_meta = META
    with compute_threads_fixed(2), counting_background_passes() as started:
        metric.process({}, samples[:4])
        with pytest.raises(ValueError, match=r"(sample_idx=6|img6).*gt_instances\.labels"):
            metric.process({}, samples[4:8])
        assert started


def test_the_rows_of_a_pool_are_in_the_accumulator_after_a_flush_without_overlap():
    samples, _ = random_dataset(4, 20, 'sgdet', max_objects=6, empty_pred_prob=0.0)
    metric = SGRecall(mode='sgdet', pool_samples=5)
    metric.dataset_meta = META
    with compute_threads_fixed(2), counting_background_passes() as started:
        for start in range(0, 20, 5):
            metric.process({}, samples[start:start + 5])
        assert started and metric._in_flight is not None
        metric.flush()
    assert metric._in_flight is None
    images = metric.accumulator.local()['images']['sample_idx']
    assert sorted(images.tolist()) == list(range(20))


def test_a_shared_overlapped_pool_is_ranked_once_for_both_metrics():
    samples, _ = random_dataset(5, 24, 'sgdet', max_objects=7, empty_pred_prob=0.0)
    metrics = [cls(mode='sgdet', pool_samples=6) for cls in (SGRecall, SGMeanRecall)]
    for m in metrics:
        m.dataset_meta = META
    with compute_threads_fixed(2), counting_background_passes() as started:
        for start in range(0, 24, 6):
            for m in metrics:
                m.process({}, samples[start:start + 6])
        results = {}
        for m in metrics:
            results.update(m.evaluate(24))
    assert len(started) == 4  # one pass per pool, not one per metric
    single = {}
    with compute_threads_fixed(1):
        for cls in (SGRecall, SGMeanRecall):
            m = cls(mode='sgdet', pool_samples=6)
            m.dataset_meta = META
            for start in range(0, 24, 6):
                m.process({}, samples[start:start + 6])
            single.update(m.evaluate(24))
    assert comparable(results) == comparable(single)


def test_the_caller_reads_an_overlapped_pool_on_one_thread_and_its_pass_takes_the_other(monkeypatch):
    """Two threads granted: the caller reads each overlapped pool (and finishes the previous one) with one torch
    thread, while the pass is started on the granted count less one: the caller never opens a parallel region whose
    OpenMP worker, spinning after it, would take the core the pass starts on; evaluate()'s summary runs on one
    thread too."""
    from mmsgg_eval.structures import reader as reader_module
    samples, _ = random_dataset(8, 24, 'sgdet', max_objects=7, empty_pred_prob=0.0)
    seen, original = [], reader_module.compiled_ranked_lists_beside

    def spy(*args):
        seen.append((torch.get_num_threads(), threads.granted_threads()))
        return original(*args)
    monkeypatch.setattr(reader_module, 'compiled_ranked_lists_beside', spy)
    metrics = [cls(mode='sgdet', pool_samples=6) for cls in (SGRecall, SGMeanRecall)]
    for m in metrics:
        m.dataset_meta = META
    summaries = []
    compute_metrics = SGRecall.compute_metrics
    monkeypatch.setattr(SGRecall, 'compute_metrics',
                        lambda self, tables: summaries.append(torch.get_num_threads()) or compute_metrics(self, tables))
    with compute_threads_fixed(2):
        for start in range(0, 24, 6):
            for m in metrics:
                m.process({}, samples[start:start + 6])
        assert torch.get_num_threads() == 2  # (restored after each flush)
        for m in metrics:
            m.evaluate(24)
        assert torch.get_num_threads() == 2
    assert len(seen) == 4 and set(seen) == {(1, 2)}
    assert summaries == [1]  # evaluate()'s reduce and summary: many short operations, on one thread too
    from mmsgg_eval.metrics import DetectionAP
    detection = DetectionAP()
    detection.dataset_meta = META
    detection.process({}, samples[:6])
    compute_detection = DetectionAP.compute_metrics
    monkeypatch.setattr(DetectionAP, 'compute_metrics', lambda self, tables: summaries.append(
        torch.get_num_threads()) or compute_detection(self, tables))
    with compute_threads_fixed(2):
        detection.evaluate(6)
    assert summaries == [1, 2]  # (a metric whose pools run in one stage keeps the policy's threads)


def test_one_thread_runs_every_pool_in_the_calling_thread():
    samples, _ = random_dataset(6, 12, 'sgdet', max_objects=6)
    with counting_background_passes() as started:
        keys_with_threads(1, samples, 3, mode='sgdet', pool_samples=3)
    assert not started


# ---------------------------------------------------------------------------- the two-stage helpers
def test_staged_runs_its_second_stage_once_and_keeps_its_value():
    log = []

    def stages():
        log.append('first')
        yield True
        log.append('second')
        return 42
    staged = Staged(stages())
    assert staged.in_background and log == ['first']
    assert staged.result() == 42 and staged.result() == 42
    assert log == ['first', 'second']
    assert Staged.done('x').result() == 'x' and not Staged.done('x').in_background


def test_staged_keeps_the_exception_of_its_second_stage():
    def stages():
        yield False
        raise ValueError('sample 3: bad')
    staged = Staged(stages())
    for _ in range(2):
        with pytest.raises(ValueError, match='sample 3'):
            staged.result()


def test_staged_refuses_a_generator_that_yields_twice():
    def stages():
        yield True
        yield True
    with pytest.raises(RuntimeError, match='more than once'):
        Staged(stages()).result()


def test_shared_work_runs_on_the_granted_threads_but_one_and_counts_against_the_pools_until_finished():
    """run_shared: the work starts on the granted thread count less one (at least one); result() is the caller's
    join(); until the work says it is finished its threads count against compute_threads (the caller's own count
    is lowered, the granted count is not: a further pool may still start beside it)."""
    class Work:
        def __init__(self):
            self.started, self.done = [], False

        def start(self, threads):
            self.started.append(threads)

        def finished(self):
            return self.done

    with compute_threads_fixed(3):
        torch.set_num_threads(3)
        work = Work()
        with threads.compute_threads() as chosen:
            assert chosen == 3 and threads.granted_threads() == 3
            pending = run_shared(work, lambda: 'value')
        assert work.started == [2] and pending.in_background
        with threads.compute_threads() as chosen:
            assert chosen == 1 and threads.granted_threads() == 3 and overlap_module.overlap_wanted()
        work.done = True
        with threads.compute_threads() as chosen:
            assert chosen == 3
        assert pending.result() == 'value' and not pending.in_background
        with compute_threads_fixed(1):
            torch.set_num_threads(1)
            one = Work()
            run_shared(one, lambda: None)
            assert one.started == [1]
            one.done = True


def test_a_pending_value_raises_its_error_at_every_call():
    def failing():
        raise ValueError('the pass failed')
    pending = Pending(join=failing)
    assert pending.in_background and not Pending(4.0).in_background and Pending(4.0).result() == 4.0
    for _ in range(2):
        with pytest.raises(ValueError, match='the pass failed'):
            pending.result()


def test_beside_background_uses_one_thread_only_while_a_pass_runs():
    with compute_threads_fixed(2):
        with beside_background(True):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with beside_background(False):
            assert torch.get_num_threads() == 2
    assert overlap_module.overlap_wanted() == (torch.get_num_threads() >= 2)
    with compute_threads_fixed(2), compiled.disabled():  # no kernels, no pass beside: pools in one stage
        assert not overlap_module.overlap_wanted()
