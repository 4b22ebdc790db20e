"""The multi-process harness (tests/dist_utils.py): ranks forked from the preloading forkserver start as a fresh
rank would (the caller's environment and working directory, this checkout's package, default torch seed, own
NumPy seed), and a failing, dying or hanging rank fails the call."""
import os
import sys
import time

import pytest

from tests import dist_utils
from tests.dist_utils import run_distributed


def _probe(rank, world_size):
    import numpy as np
    import torch
    import torch.distributed as torch_dist

    import mmsgg_eval
    return dict(env=os.environ.get('MMSGG_HARNESS_PROBE'), cwd=os.getcwd(), package=mmsgg_eval.__file__,
                rank=torch_dist.get_rank(), world=torch_dist.get_world_size(), seed=torch.initial_seed(),
                torch_draw=torch.rand(3).tolist(), numpy_draw=np.random.randint(0, 2 ** 62), tests=sys.modules[
                    'tests'].__file__, reduced=_sum_of_ranks(torch, torch_dist))


def _sum_of_ranks(torch, torch_dist):
    value = torch.tensor([torch_dist.get_rank() + 1])
    torch_dist.all_reduce(value)
    return int(value)


def test_ranks_start_fresh_with_the_callers_environment(tmp_path, monkeypatch):
    import mmsgg_eval
    import tests
    monkeypatch.setenv('MMSGG_HARNESS_PROBE', 'set-by-the-test')
    monkeypatch.chdir(tmp_path)
    for world_size in (2, 3):
        results = run_distributed(_probe, world_size)
        assert [r['rank'] for r in results] == list(range(world_size))
        for r in results:
            assert r['env'] == 'set-by-the-test' and r['cwd'] == str(tmp_path), r
            assert r['package'] == mmsgg_eval.__file__ and r['tests'] == tests.__file__, r
            assert r['world'] == world_size and r['reduced'] == world_size * (world_size + 1) // 2
        # torch: the default seed of a fresh interpreter on every rank; NumPy: seeded per rank (not a forked copy)
        fresh = __import__('torch').Generator().manual_seed(results[0]['seed'])
        expected = __import__('torch').rand(3, generator=fresh).tolist()
        assert all(r['seed'] == results[0]['seed'] and r['torch_draw'] == expected for r in results)
        assert len({r['numpy_draw'] for r in results}) == world_size
    # the next call starts from the same state again (nothing carried over from the previous ranks)
    assert run_distributed(_probe, 2)[0]['torch_draw'] == expected


def _fail_on_rank_one(rank, world_size):
    if rank == 1:
        raise ValueError('the worker of rank 1 refuses')
    return rank


def test_a_worker_exception_is_raised_with_the_rank_traceback():
    with pytest.raises(RuntimeError, match=r'rank 1 failed:[\s\S]*ValueError: the worker of rank 1 refuses'):
        run_distributed(_fail_on_rank_one, 2)
    assert run_distributed(_rank_only, 2) == [0, 1]


def _rank_only(rank, world_size):
    return rank


def _die_on_rank_one(rank, world_size):
    if rank == 1:
        os._exit(7)
    return rank


def test_a_dying_rank_fails_the_call():
    with pytest.raises(Exception, match='exit'):
        run_distributed(_die_on_rank_one, 2)


def _hang_on_rank_one(rank, world_size):
    if rank == 1:
        time.sleep(120)
    return rank


def test_a_hanging_rank_is_killed_after_the_call_timeout(monkeypatch):
    monkeypatch.setattr(dist_utils, 'CALL_TIMEOUT_S', 3)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match='did not end within 3 s'):
        run_distributed(_hang_on_rank_one, 2)
    assert time.monotonic() - start < 60
    assert run_distributed(_rank_only, 3) == [0, 1, 2]


def _sum_tensors(rank, world_size, tensors):
    return float(sum(t.sum() for t in tensors))


def test_many_tensors_travel_by_value():
    """A forkserver passes at most 256 file descriptors: the job (here 600 tensors) is pickled by value."""
    import torch
    tensors = [torch.full((3,), float(i)) for i in range(600)]
    assert run_distributed(_sum_tensors, 2, tensors) == [3.0 * sum(range(600))] * 2
