"""The 'auto' thread policy of mmsgg_eval.functional.threads acts on sustained load only: a passing task seen at
one pool keeps every thread, a busy process lowers the count within two pools and its end raises it back after
six quiet ones, a first decision (no history yet) follows its reading; integer settings bound it; where /proc
cannot be read torch's count is used. The load is fed by an injected sampler (a scripted sequence of
instantaneous counts), so the tests do not depend on the machine."""
import os
import random
import time
from typing import Iterable, List, Optional

import pytest
import torch

from mmsgg_eval.functional import threads


class Script:
    """An instantaneous sampler replaying ``counts`` (None = unreadable), counting its calls."""

    def __init__(self, counts: Iterable[Optional[int]]) -> None:
        self.counts, self.calls = list(counts), 0

    def __call__(self) -> Optional[int]:
        self.calls += 1
        return self.counts[self.calls - 1]


@pytest.fixture
def policy(monkeypatch):
    """torch at 4 threads on 4 usable cores, 'auto', and a function installing a scripted sustained-load
    tracker as the policy's source; torch's count and the setting are restored after."""
    saved_threads, saved_setting = torch.get_num_threads(), threads.get_setting()
    torch.set_num_threads(4)
    threads.set_num_threads('auto')
    monkeypatch.setattr(threads, 'usable_cores', lambda: 4)

    def install(counts: Iterable[Optional[int]]) -> Script:
        script = Script(counts)
        monkeypatch.setattr(threads, 'runnable_elsewhere', threads.SustainedLoad(script).observe)
        return script
    yield install
    torch.set_num_threads(saved_threads)
    threads.set_num_threads(saved_setting)


@pytest.fixture
def fresh_files(monkeypatch):
    """The policy's kept-open /proc descriptors start empty here and are closed after the test."""
    monkeypatch.setattr(threads, '_open_files', {})
    yield
    for fd in threads._open_files.values():
        os.close(fd)


def chosen_per_pool(pools: int) -> List[int]:
    """The thread count each of ``pools`` pools runs with (torch's count checked inside, restored after)."""
    out = []
    for _ in range(pools):
        with threads.compute_threads() as chosen:
            assert torch.get_num_threads() == chosen
            out.append(chosen)
        assert torch.get_num_threads() == 4
    return out


def test_the_first_decision_follows_its_reading_and_a_blip_then_costs_one_pool(policy):
    """No history yet: a process starting on a busy machine runs its first pool on the free cores; a passing
    task caught by the very first reading lowers that pool only."""
    policy([2, 2, 2])
    assert chosen_per_pool(3) == [2, 2, 2]
    policy([3, 0, 0, 0])
    assert chosen_per_pool(4) == [1, 4, 4, 4]


def test_a_quiet_machine_with_one_off_blips_keeps_every_thread(policy):
    """Passing tasks (a shell, a cron job) seen at single pools, two quiet ones apart, even three at once, change
    nothing."""
    counts = [0, 0, 1, 0, 0, 3, 0, 0, 1, 0, 0, 1, 0, 0, 2, 0, 0, 0, 1, 0]
    script = policy(counts)
    assert chosen_per_pool(len(counts)) == [4] * len(counts)
    assert script.calls == len(counts)  # one reading per pool


def test_sustained_load_lowers_the_count_within_two_pools_and_its_end_raises_it_after_six_quiet_ones(policy):
    """One busy process from pool 3 on: one thread fewer from its second pool, kept through a pause of one pool;
    two more busy processes: one thread; the load ends: the count comes back after six quiet pools."""
    counts = [0, 0, 1, 1, 1, 0, 1, 1, 3, 3, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0]
    policy(counts)
    assert chosen_per_pool(len(counts)) == [4, 4, 4, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4, 4, 4]


def test_the_count_falls_back_step_by_step_as_load_ends(policy):
    """From three busy processes to one: back to one thread fewer only after six pools below three; then all."""
    counts = [3, 3] + [1] * 7 + [0] * 6
    policy(counts)
    assert chosen_per_pool(len(counts)) == [1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 4]


def test_integer_settings_bound_the_count_whatever_the_load_and_take_no_reading(policy):
    script = policy([3] * 10)
    for setting, expected in ((1, 1), (2, 2), (4, 4), (16, 4)):
        assert threads.choose_threads(setting) == expected
    threads.set_num_threads(3)
    assert chosen_per_pool(2) == [3, 3]
    assert script.calls == 0
    threads.set_num_threads('auto')
    assert chosen_per_pool(3) == [1, 1, 1]  # the first 'auto' decision (no history) follows its reading
    torch.set_num_threads(1)
    assert threads.choose_threads() == 1 and script.calls == 3  # one thread: nothing to decide


def test_unreadable_proc_gives_torchs_count_and_leaves_the_history_alone(policy, fresh_files, tmp_path):
    """None readings (no /proc) run the pool with torch's count and are not remembered."""
    script = policy([1, None, 1, None, None, 0])
    assert chosen_per_pool(6) == [3, 4, 3, 4, 4, 3]  # the first reading alone; the two 1s count as consecutive
    assert script.calls == 6
    assert threads.runnable_now(loadavg=str(tmp_path / 'missing')) is None
    (tmp_path / 'loadavg').write_text('garbage\n')
    assert threads.runnable_now(loadavg=str(tmp_path / 'loadavg')) is None


def test_runnable_now_reads_the_machines_count_less_this_processs_running_threads(fresh_files, tmp_path):
    """The 4th field of loadavg (before the slash) less the caller and this process's other R threads, re-read at
    each call from the file's current content; files of ended threads are closed."""
    loadavg, tasks = tmp_path / 'loadavg', tmp_path / 'task'
    tasks.mkdir()
    for tid, state in (('101', 'R'), ('102', 'S'), ('103', 'R')):
        (tasks / tid).mkdir()
        (tasks / tid / 'stat').write_text(f'{tid} (pt_thread) x)) {state} 1 2 3 4\n')
    read = lambda: threads.runnable_now(loadavg=str(loadavg), tasks=str(tasks))  # noqa: E731
    loadavg.write_text('0.50 0.40 0.30 1/90 12345\n')
    assert read() == 0  # the caller alone: no thread is listed
    loadavg.write_text('1.50 0.40 0.30 6/90 12345\n')
    assert read() == 3  # 6 running, of which 3 here: the caller and two R threads
    (tasks / '103' / 'stat').unlink()
    (tasks / '103').rmdir()
    assert read() == 4 and not any('/103/' in path for path in threads._open_files)
    (tasks / '102' / 'stat').write_text('102 (pt_thread) R 1 2 3 4\n')
    loadavg.write_text('1.50 0.40 0.30 2/90 12345\n')
    assert read() == 0  # 2 running, 3 here: never negative


def test_runnable_now_brackets_its_own_threads_and_reads_a_busy_count_again(monkeypatch):
    """This process's threads change state between the machine's count and its own (a pass's threads sleep and
    wake at every image): the machine is read before and after its own threads, they before and after it, and
    the smaller machine count less the larger own count is taken (the first pair alone where it shows none); a
    count that still shows other threads is read again after ``settle`` seconds and the smaller kept (a thread
    runnable for a moment is not load)."""
    def scripted(machine, own):
        machine, own, slept = list(machine), list(own), []
        monkeypatch.setattr(threads, '_machine_running', lambda path, reads: machine.pop(0))
        monkeypatch.setattr(threads, '_own_running', lambda tasks: own.pop(0))
        monkeypatch.setattr(threads.time, 'sleep', slept.append)
        return machine, own, slept

    # an own thread counted by the machine, asleep when this process's threads are read: not another's
    machine, own, slept = scripted([4, 3], [2, 3])
    assert threads.runnable_now(settle=0.0) == 0 and not machine and not own
    # ... and one that woke between the two machine readings
    scripted([3, 4], [2, 3])
    assert threads.runnable_now(settle=0.0) == 0
    # another process's thread seen in both readings: counted, then read again after the settle time
    machine, own, slept = scripted([4, 4, 3, 3], [3, 3, 3, 3])
    assert threads.runnable_now(settle=0.0005) == 0 and slept == [0.0005] and machine == [3] and own == [3]
    # a first pair of readings that shows no other thread is final (more readings could only lower the machine's
    # count or raise the own one): the second pair is not read
    machine, own, slept = scripted([3, 9], [3, 0])
    assert threads.runnable_now(settle=0.0005) == 0 and slept == [] and machine == [9] and own == [0]
    machine, own, slept = scripted([5, 5, 5, 5], [3, 3, 3, 3])
    assert threads.runnable_now(settle=0.0005) == 2 and slept == [0.0005]
    machine, own, slept = scripted([5, 5], [3, 3])
    assert threads.runnable_now(settle=0.0) == 2 and slept == []  # no settle: one reading
    machine, own, slept = scripted([1], [])
    assert threads.runnable_now() == 0 and slept == []  # the caller alone: nothing else is read


def reference_levels(counts: List[int], window: int = 3, most: int = 2, quiet: int = 6) -> List[int]:
    """The rule in words, as loops: the level rises to the largest count reached in ``most`` of the last
    ``window`` readings, and falls only after ``quiet`` readings in a row below it, to the largest of them;
    before ``most`` readings exist there is no level yet and a decision is the reading itself."""
    level, levels = 0, []
    for i in range(len(counts)):
        if i + 1 < most:
            levels.append(counts[i])
            continue
        recent = counts[max(0, i + 1 - window):i + 1]
        reached = 0
        for value in range(max(recent) + 1):
            if sum(1 for r in recent if r >= value) >= most:
                reached = value
        if reached > level:
            level = reached
        elif i + 1 >= quiet and all(r < level for r in counts[i + 1 - quiet:i + 1]):
            level = max(counts[i + 1 - quiet:i + 1])
        levels.append(level)
    return levels


@pytest.mark.parametrize('window,most,quiet', [(3, 2, 6), (5, 3, 4), (1, 1, 1), (4, 4, 2)])
def test_sustained_load_follows_the_rule_on_random_sequences(window, most, quiet):
    rng = random.Random(window * 100 + most * 10 + quiet)
    for trial in range(50):
        busy = rng.random()
        counts = [rng.choice((1, 2, 3)) if rng.random() < busy else 0 for _ in range(60)]
        load = threads.SustainedLoad(Script(counts), window=window, most=most, quiet=quiet)
        assert [load.observe() for _ in counts] == reference_levels(counts, window, most, quiet), (trial, counts)


class Clock:
    """A settable clock (seconds) for the tracker's spacing."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_decisions_within_the_spacing_are_one_observation():
    """The metrics that share a pool (SGRecall + SGMeanRecall) decide a fraction of a millisecond apart: with a
    spacing, the second decision of a pool reuses the first's reading, so a passing task seen at one pool counts
    once (no lowering; read twice it would count as two pools under load), while a load seen at two pools still
    lowers the count, and the rule is otherwise the same."""
    for per_pool, lowered in (([1, 0, 0, 0], False), ([2, 2, 0, 0], True), ([0, 3, 3, 3], True)):
        clock, script = Clock(), Script(per_pool)
        load = threads.SustainedLoad(script, spacing=0.002, clock=clock)
        decisions = []
        for pool in range(len(per_pool)):
            clock.now = 0.01 * pool
            decisions.append(load.observe())  # the first metric of the pool
            clock.now += 0.0004
            decisions.append(load.observe())  # the second, 0.4 ms later: no new reading
        assert script.calls == len(per_pool)
        expected = reference_levels(per_pool, 3, 2, 6)
        assert decisions == [level for level in expected for _ in range(2)], per_pool
        assert (max(expected[1:]) > 0) == lowered, per_pool
        unspaced = threads.SustainedLoad(Script([c for c in per_pool for _ in range(2)]))
        read_twice = [unspaced.observe() for _ in range(2 * len(per_pool))]
        assert read_twice == reference_levels([c for c in per_pool for _ in range(2)], 3, 2, 6)
        if not lowered:  # what the spacing prevents: one passing task read by both metrics lowers the count
            assert max(read_twice[2:]) > 0
    assert threads._load._spacing == threads.DECISION_SPACING > 0  # the policy's own tracker spaces its readings
    with pytest.raises(ValueError, match='spacing >= 0'):
        threads.SustainedLoad(Script([]), spacing=-1.0)


def test_sustained_load_refuses_bad_parameters():
    for kwargs in (dict(window=2, most=3), dict(most=0), dict(quiet=0)):
        with pytest.raises(ValueError, match='SustainedLoad needs'):
            threads.SustainedLoad(Script([]), **kwargs)


def test_a_decision_on_this_machine_takes_microseconds():
    """A pool takes tens of milliseconds; the decision (a few /proc reads) must stay far below that (the bound
    here is loose for shared CI machines; a quiet one measures a few microseconds, a busy one ~25)."""
    threads.runnable_elsewhere()
    start = time.perf_counter()
    for _ in range(200):
        threads.runnable_elsewhere()
    assert (time.perf_counter() - start) / 200 < 1e-3


@pytest.mark.parametrize('value', ['abc', '0', '-1', '2.5'])
def test_bad_environment_setting_is_a_one_line_cli_error(value, monkeypatch, capsys):
    """MMSGG_EVAL_NUM_THREADS=abc / 0 / -1: importing works; the command lines exit with status 1 and one line
    naming the variable before any work (no traceback); in Python the first use is a ValueError naming it."""
    import subprocess
    import sys
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
    env = dict(os.environ, MMSGG_EVAL_NUM_THREADS=value, OMP_NUM_THREADS='1',
               PYTHONPATH=root + os.pathsep + os.environ.get('PYTHONPATH', ''))
    for module, args in (('mmsgg_eval.eval', ['--from-state', 'nowhere.state']),
                         ('mmsgg_eval.compare', ['a.state', 'b.state'])):
        run = subprocess.run([sys.executable, '-m', module, *args], capture_output=True, text=True, env=env,
                             timeout=300, cwd=root)
        assert run.returncode == 1, (module, run.stderr)
        assert 'Traceback' not in run.stderr and 'MMSGG_EVAL_NUM_THREADS' in run.stderr, (module, run.stderr)
        assert len([line for line in run.stderr.splitlines() if 'error' in line]) == 1, run.stderr
    monkeypatch.setenv('MMSGG_EVAL_NUM_THREADS', value)
    monkeypatch.setattr(threads, '_setting', None)  # as a fresh process: not read yet
    with pytest.raises(ValueError, match=f"MMSGG_EVAL_NUM_THREADS must be 'auto' or a positive integer, got "
                                         f"'{value}'"):
        threads.get_setting()
    with pytest.raises(ValueError, match='MMSGG_EVAL_NUM_THREADS'):
        threads.choose_threads()
    monkeypatch.setenv('MMSGG_EVAL_NUM_THREADS', '2')
    assert threads.get_setting() == 2
