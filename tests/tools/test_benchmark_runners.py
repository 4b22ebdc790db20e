"""The machinery of tools/benchmark.py, without timing anything: best_of, the busy processes of --load (started
and stopped, also on errors, Ctrl-C and a parent killed hard), the job list and the subprocess environment of
ours-1thread, and the table / JSON formatting."""
import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mmsgg_eval.benchmarks import load, report, runners
from mmsgg_eval.benchmarks.timing import best_of
from mmsgg_eval.offline import evaluate_file
from tests.tool_runs import ROOT, load_tool, run_tool

TOOL = Path(ROOT) / 'tools' / 'benchmark.py'


def _tool():
    return load_tool('benchmark')


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, counts as gone)."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rpartition(')')[2].split()[0] not in ('Z', 'X')
    except OSError:
        return False


def _wait_gone(pids, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def test_best_of_keeps_the_smallest_times_and_the_last_result():
    calls = []

    def setup():
        calls.append('setup')
        return len(calls)

    def run(value):
        calls.append(('run', value))
        return dict(value=value, inner=10.0 - value)

    best = best_of(run, 3, setup=setup, reported=('inner',))
    assert calls == ['setup', ('run', 1), 'setup', ('run', 3), 'setup', ('run', 5)]
    assert best['result'] == dict(value=5, inner=5.0) and best['inner'] == 5.0
    assert best['seconds'] >= 0 and best['cpu_seconds'] >= 0
    assert len(best['runs_seconds']) == 3 and min(best['runs_seconds']) == best['seconds']
    assert best_of(lambda: 'plain', 1)['result'] == 'plain'
    with pytest.raises(ValueError, match='repeat must be >= 1, got 0'):
        best_of(lambda: None, 0)


def test_busy_processes_run_during_the_block_and_stop_after_it():
    with load.busy_processes(2) as procs:
        assert len(procs) == 2 and all(p.poll() is None for p in procs)
        pids = [p.pid for p in procs]
    assert all(p.poll() is not None for p in procs) and not any(_alive(p) for p in pids)
    with load.busy_processes(0) as none:
        assert none == []
    with pytest.raises(ValueError, match='count must be >= 0, got -1'):
        with load.busy_processes(-1):
            pass


@pytest.mark.parametrize('error', [RuntimeError, KeyboardInterrupt])
def test_busy_processes_stop_on_an_error_and_on_ctrl_c(error):
    with pytest.raises(error):
        with load.busy_processes(1) as procs:
            raise error('inside the benchmark')
    assert procs[0].poll() is not None


def test_busy_processes_end_themselves_when_the_benchmark_is_killed_hard(tmp_path):
    """A parent killed with SIGKILL runs no cleanup: its busy processes notice and exit by themselves."""
    pid_file = tmp_path / 'pids'
    code = ('import sys, time\n'
            'from mmsgg_eval.benchmarks.load import start_busy\n'
            f'procs = start_busy(2)\nopen({str(pid_file)!r}, "w").write(" ".join(str(p.pid) for p in procs))\n'
            'time.sleep(600)\n')
    parent = subprocess.Popen([sys.executable, '-c', code], cwd=str(TOOL.parents[1]))
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = [int(p) for p in pid_file.read_text().split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    assert _wait_gone(pids), 'busy processes outlived their parent'


def test_load_option_accepts_zero_and_refuses_negative_numbers():
    from mmsgg_eval.runner.arguments import non_negative_int_arg
    assert non_negative_int_arg('0') == 0 and non_negative_int_arg('3') == 3
    for bad, message in (('-1', 'non-negative integer (>= 0), got -1'), ('x', "non-negative integer, got 'x'")):
        with pytest.raises(argparse.ArgumentTypeError, match=message.replace('(', '\\(').replace(')', '\\)')):
            non_negative_int_arg(bad)
    out = run_tool([str(TOOL), '--load', '-2'], timeout=120)
    assert out.returncode == 2 and 'argument --load: must be a non-negative integer (>= 0), got -2' in out.stderr


def test_job_list_adds_the_single_thread_run_and_its_subprocess_environment(monkeypatch):
    tool = _tool()
    args = tool.build_parser().parse_args(['--workload', 'variable', '--single-thread', '--torch-path',
                                           '--no-peers', '--load', '1'])
    assert args.load == 1
    assert tool.job_list(args, ['cpu']) == [('ours', 'variable', 'cpu'), ('ours-1thread', 'variable', 'cpu'),
                                            ('ours-torch', 'variable', 'cpu')]
    assert tool.job_list(args, ['cuda'])[0] == ('ours', 'variable', 'cuda') and len(tool.job_list(args, ['cuda'])) == 1
    seen = {}

    def fake_run(cmd, capture_output, text, env, cwd=None):
        seen[cmd[3]] = env
        return subprocess.CompletedProcess(cmd, 0, 'RESULT {"images_per_s": 1.0}\n', '')

    monkeypatch.setattr(runners.subprocess, 'run', fake_run)
    monkeypatch.delenv('OMP_NUM_THREADS', raising=False)
    for impl in ('ours', 'ours-1thread'):
        assert runners.run_in_subprocess((impl, 'variable', 'cpu'), dict(images=1)) == {'images_per_s': 1.0}
    assert seen['ours-1thread']['OMP_NUM_THREADS'] == '1' and 'OMP_NUM_THREADS' not in seen['ours']
    assert set(runners.SUBPROCESS_ENV) <= set(runners.RUNNERS)


def test_best_rounds_keeps_the_best_round_and_the_median_of_every_run(monkeypatch):
    """The kept result is the best round's; its median is over every repeat of every round (here 9 runs whose
    median, 5, is in no round's best); a job without runs (a skipped peer) gets no median."""
    results = iter([dict(images_per_s=3.0, runs_images_per_s=[1.0, 2.0, 3.0]), dict(skipped='no'),
                    dict(images_per_s=9.0, runs_images_per_s=[9.0, 8.0, 7.0]), dict(skipped='no'),
                    dict(images_per_s=6.0, runs_images_per_s=[4.0, 5.0, 6.0]), dict(skipped='no')])
    monkeypatch.setattr(runners, 'run_in_subprocess', lambda job, options: next(results))
    jobs = [('ours', 'variable', 'cpu'), ('sgbench', 'variable', 'cpu')]
    best = runners.best_rounds(jobs, {}, 3)
    assert best[jobs[0]]['images_per_s'] == 9.0 and best[jobs[0]]['median_images_per_s'] == 5.0
    assert best[jobs[0]]['runs'] == 9 and best[jobs[1]] == dict(skipped='no')


def test_report_states_the_load_and_the_single_thread_ratios():
    assert report.load_line(0, '0.10 0.20 0.30', '0.40 0.50 0.60') == (
        'competing load: none (quiet); load average 0.10 0.20 0.30 at the start, 0.40 0.50 0.60 at the end')
    assert report.load_line(1, 'a', 'b').startswith('competing load: 1 CPU-bound busy process (--load 1);')
    assert report.load_line(2, 'a', 'b').startswith('competing load: 2 CPU-bound busy processes (--load 2);')
    row = dict(images_per_s=300.0, cpu_images_per_s=200.0, host_peak_rss_mb=100.0, bytes_per_image=12.0,
               r50=0.5, mr50=0.25)
    jobs = [('ours', 'variable', 'cpu'), ('ours-1thread', 'variable', 'cpu'), ('sgbench', 'variable', 'cpu')]
    best = {jobs[0]: row, jobs[1]: dict(row, images_per_s=150.0), jobs[2]: dict(skipped='sgbench not installed')}
    best[jobs[0]] = dict(row, median_images_per_s=240.0, runs=9)
    lines = report.format_table(jobs, best, 10)
    assert lines[1] == report.HEADER and lines[2].split()[:5] == ['ours', 'variable', 'cpu', '300', '240']
    assert lines[3].split()[:5] == ['ours-1thread', 'variable', 'cpu', '150', '-']
    assert lines[4].split()[3:] == ['sgbench', 'not', 'installed']
    best[jobs[2]] = dict(row, images_per_s=50.0)
    summary = report.summarize(jobs, best)
    ratios = summary['ratios']
    assert summary['median_ratios'] == {}  # the references have no median
    best[jobs[1]] = dict(best[jobs[1]], median_images_per_s=160.0)
    assert report.summarize(jobs, best)['median_ratios'] == {'ours_vs_ours-1thread_variable_cpu': 1.5}
    assert ratios['ours_vs_ours-1thread_variable_cpu'] == 2.0 and ratios['ours_vs_sgbench_variable_cpu'] == 6.0
    assert ratios['ours-1thread_vs_sgbench_variable_cpu'] == 3.0
    assert not any(k.startswith('ours-1thread_vs_ours') for k in ratios)


def test_bootstrap_job_row_and_summary():
    from mmsgg_eval.benchmarks.report import ROW_FORMATS, summarize
    job = ('bootstrap', '-', 'cpu')
    res = {'bootstrap_seconds': 0.85, 'images': 26446, 'samples': 1000, 'keys': 36, 'threads': 2}
    key, row = ROW_FORMATS['bootstrap']
    assert key == 'bootstrap_seconds'
    line = row(job, res, {job: res}, 0)[0]
    assert '1000 replicates x 26446 images, 36 keys' in line and '0.85 s' in line
    assert summarize([job], {job: res})['images_per_s']['bootstrap/seconds/cpu'] == 0.85


def test_baseline_job_runs_ours_of_another_checkout_through_its_own_protocol(monkeypatch, tmp_path):
    """``--baseline PATH``: the job list gains ``baseline`` per workload; its subprocess runs in PATH, first on
    the import path, through PATH's job module, or its ``tools/benchmark.py --worker`` where that module does
    not exist yet; a path that is no checkout is refused (exit 2) before anything runs."""
    tool = _tool()
    new, old, empty = tmp_path / 'new', tmp_path / 'old', tmp_path / 'empty'
    (new / 'mmsgg_eval' / 'benchmarks').mkdir(parents=True)
    (new / 'mmsgg_eval' / 'benchmarks' / 'runners.py').write_text('')
    (old / 'mmsgg_eval').mkdir(parents=True)
    (old / 'tools').mkdir()
    (old / 'tools' / 'benchmark.py').write_text('')
    (empty / 'mmsgg_eval').mkdir(parents=True)
    args = tool.build_parser().parse_args(['--workload', 'variable', 'triplets', '--no-peers', '--baseline', str(new)])
    assert tool.job_list(args, ['cpu']) == [('ours', 'variable', 'cpu'), ('baseline', 'variable', 'cpu'),
                                            ('ours', 'triplets', 'cpu'), ('baseline', 'triplets', 'cpu')]
    out = run_tool([str(TOOL), '--baseline', str(tmp_path)], timeout=120)
    assert out.returncode == 2 and 'is not a checkout of mmsgg_eval' in out.stderr
    calls = []

    def fake_run(cmd, capture_output, text, env, cwd=None):
        calls.append((cmd, env, cwd))
        return subprocess.CompletedProcess(cmd, 0, 'RESULT {"images_per_s": 2.0}\n', '')

    monkeypatch.setattr(runners.subprocess, 'run', fake_run)
    options = dict(images=40, batch_size=8, repeat=2, baseline=str(new))
    assert runners.run_in_subprocess(('baseline', 'variable', 'cpu'), options) == {'images_per_s': 2.0}
    cmd, env, cwd = calls[-1]
    assert cmd[1:5] == ['-m', 'mmsgg_eval.benchmarks.runners', 'ours', 'variable'] and cwd == str(new)
    assert env['PYTHONPATH'].split(':')[0] == str(new)
    runners.run_in_subprocess(('baseline', 'variable', 'cpu'), dict(options, baseline=str(old)))
    cmd = calls[-1][0]
    assert cmd[1] == str(old / 'tools' / 'benchmark.py') and cmd[2:6] == ['--worker', 'ours', 'variable', 'cpu']
    assert cmd[cmd.index('--images') + 1] == '40' and cmd[cmd.index('--repeat') + 1] == '2'
    with pytest.raises(FileNotFoundError, match='a checkout of mmsgg_eval is expected'):
        runners.run_in_subprocess(('baseline', 'variable', 'cpu'), dict(options, baseline=str(empty)))
    best = {('ours', 'variable', 'cpu'): dict(images_per_s=3.0, median_images_per_s=3.0, host_peak_rss_mb=1),
            ('baseline', 'variable', 'cpu'): dict(images_per_s=2.0, median_images_per_s=1.5, host_peak_rss_mb=1)}
    summary = report.summarize(list(best), best)
    assert summary['ratios']['ours_vs_baseline_variable_cpu'] == 1.5
    assert summary['median_ratios']['ours_vs_baseline_variable_cpu'] == 2.0


def test_baseline_run_of_this_checkout_itself():
    """A real run with this checkout as its own baseline: both rows, the same R@50."""
    root = Path(__file__).resolve().parents[2]
    out = run_tool([str(TOOL), '--workload', 'triplets', '--no-peers', '--rounds', '1', '--repeat', '1', '--images',
                    '40', '--device', 'cpu', '--baseline', str(root)], timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()
            if line.startswith(('ours ', 'baseline '))}
    assert set(rows) == {'ours', 'baseline'} and rows['ours'][-2:] == rows['baseline'][-2:]
    assert 'ours_vs_baseline_triplets_cpu' in out.stdout



@pytest.mark.parametrize('option', ['--images', '--batch-size', '--repeat', '--rounds', '--offline-images'])
def test_benchmark_numbers_must_be_positive(option, capsys):
    tool = _tool()
    for value in ('0', '-2', 'x'):
        with pytest.raises(SystemExit) as exit_:
            tool.main([option, value])
        assert exit_.value.code == 2
        assert f'argument {option}: must be a positive integer' in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        tool.main(['--offline', '--offline-images', '1'])
    assert exit_.value.code == 2 and 'must be at least 2 with --offline' in capsys.readouterr().err


def test_workload_dataset_and_timed_cli_helpers(tmp_path):
    """The pieces of tools/benchmark.py --offline's CLI timing: the workload dataset's identity matches the
    stream writer's records, and its config builds the dataset and metrics."""
    from mmengine.config import Config

    from mmsgg_eval.benchmarks.offline import WorkloadDataset, write_stream, write_workload_config
    from mmsgg_eval.offline import build_dataset
    config = tmp_path / 'workload.py'
    write_workload_config(str(config), 5, 'sgdet')
    dataset = build_dataset(Config.fromfile(str(config)))
    assert isinstance(dataset, WorkloadDataset) and len(dataset) == 5
    stream = tmp_path / 'w.pkl'
    write_stream('triplets', 5, str(stream))
    res = evaluate_file(str(config), str(stream), work_dir=str(tmp_path / 'o'), progress=False)
    assert 0 <= res['sgdet/R@50'] <= 100


def test_detection_ap_job_runs_the_three_metrics(monkeypatch):
    """``--detection-ap`` adds ``ours+detap`` (SGRecall + SGMeanRecall + DetectionAP in one evaluator) beside
    ``ours``, compared with it; its run has the same R@50 as ``ours`` and the detector's mAP next to them."""
    from mmsgg_eval.benchmarks import report, runners
    tool = _tool()
    args = tool.build_parser().parse_args(['--workload', 'sgdet-variable', '--detection-ap', '--no-peers'])
    jobs = tool.job_list(args, ['cpu'])
    assert jobs == [('ours', 'sgdet-variable', 'cpu'), ('ours+detap', 'sgdet-variable', 'cpu')]
    best = {jobs[0]: dict(images_per_s=10.0), jobs[1]: dict(images_per_s=4.0)}
    assert report.summarize(jobs, best)['ratios']['ours_vs_ours+detap_sgdet-variable_cpu'] == 2.5
    opts = dict(images=6, batch_size=4, repeat=1)
    plain, with_ap = (runners.RUNNERS[name]('sgdet-variable', 'cpu', opts) for name in ('ours', 'ours+detap'))
    assert with_ap['r50'] == plain['r50'] and with_ap['num_keys'] == plain['num_keys'] + 2  # mAP, AP@50


def test_numpy_inputs_job_hands_over_numpy_fields():
    """``--numpy-inputs`` adds ``ours+numpy`` on the CPU: the same samples with every field a numpy array (the
    workload's memory), compared with ``ours``: the same keys."""
    import numpy as np

    from mmsgg_eval.benchmarks import report, runners
    tool = _tool()
    args = tool.build_parser().parse_args(['--workload', 'sgdet-variable', '--numpy-inputs', '--no-peers'])
    jobs = tool.job_list(args, ['cpu', 'cuda'])
    assert jobs == [('ours', 'sgdet-variable', 'cpu'), ('ours', 'sgdet-variable', 'cuda'),
                    ('ours+numpy', 'sgdet-variable', 'cpu')]
    best = {job: dict(images_per_s=rate) for job, rate in zip(jobs, (10.0, 20.0, 4.0))}
    assert report.summarize(jobs, best)['ratios']['ours_vs_ours+numpy_sgdet-variable_cpu'] == 2.5
    from mmsgg_eval.benchmarks.workloads import make_workload
    sample = make_workload('sgdet-variable', 1)[0]
    fields = runners.numpy_fields(sample)
    assert fields['sample_idx'] == sample['sample_idx']
    for group in ('gt_instances', 'gt_relations', 'pred_instances', 'pred_relations'):
        for key, value in sample[group].items():
            assert type(fields[group][key]) is np.ndarray and np.shares_memory(fields[group][key], value.numpy())
    opts = dict(images=6, batch_size=4, repeat=1)
    plain, numpy_run = (runners.RUNNERS[name]('sgdet-variable', 'cpu', opts) for name in ('ours', 'ours+numpy'))
    assert numpy_run['r50'] == plain['r50'] and numpy_run['mr50'] == plain['mr50']
    assert numpy_run['num_keys'] == plain['num_keys']


def test_oi_recipe_job_runs_the_recipe_evaluator():
    """``--oi-recipe`` adds ``ours+recipe`` on the OIv6-like workload only: the evaluator of
    configs/_base_/evaluators/oi_sgdet.py (SGMeanRecall + OIRelationMetric + DetectionAP), compared with ``ours``
    (the OI metric alone): the same OI keys, the mean recalls and the detector's mAP next to them."""
    from mmsgg_eval.benchmarks import report, runners
    tool = _tool()
    args = tool.build_parser().parse_args(['--workload', 'sgdet-variable', 'oiv6-sgdet', '--oi-recipe', '--no-peers'])
    jobs = tool.job_list(args, ['cpu'])
    assert jobs == [('ours', 'sgdet-variable', 'cpu'), ('ours', 'oiv6-sgdet', 'cpu'),
                    ('ours+recipe', 'oiv6-sgdet', 'cpu')]
    best = {job: dict(images_per_s=rate) for job, rate in zip(jobs, (9.0, 10.0, 4.0))}
    assert report.summarize(jobs, best)['ratios']['ours_vs_ours+recipe_oiv6-sgdet_cpu'] == 2.5
    assert [type(m).__name__ for m in runners.oi_recipe_metrics('sgdet')] == \
        ['SGMeanRecall', 'OIRelationMetric', 'DetectionAP']
    opts = dict(images=6, batch_size=4, repeat=1)
    alone, recipe = (runners.RUNNERS[name]('oiv6-sgdet', 'cpu', opts) for name in ('ours', 'ours+recipe'))
    assert recipe['r50'] == alone['r50'] and recipe['wmap_rel'] == alone['wmap_rel']
    assert recipe['num_keys'] > alone['num_keys'] + 2 and recipe['mr50'] is not None
