"""The runner layer: process-group timeout and failure handling, output checks, registration, import cost, and the
one-line errors of tools/test.py."""
import ast
import datetime
import json
import os
import os.path as osp
import subprocess
import sys

import pytest

from mmsgg_eval.runner import (DEFAULT_TIMEOUT_S, DistributedEvaluationError, EvalOnlyModelWrapper,
                               OutputNotWritableError, check_writable, explain_collective_failures,
                               process_group_timeout, write_metrics_json)
from mmsgg_eval.runner import cli
from tests.dist_utils import free_port
from tests.tool_runs import run_tool

ROOT = osp.abspath(osp.join(osp.dirname(__file__), '..', '..'))
PACKAGE = osp.join(ROOT, 'mmsgg_eval')
CONFIG = osp.join(ROOT, 'configs', 'demo', 'freq_predcls_vg150_sample.py')


def python(code_or_args, timeout=300, **kwargs):
    args = ['-c', code_or_args] if isinstance(code_or_args, str) else list(code_or_args)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''), OMP_NUM_THREADS='1')
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=timeout, **kwargs)


# --- timeout from the config -------------------------------------------------------------------------------

def test_process_group_timeout_reads_the_config():
    assert process_group_timeout(dict(env_cfg=dict(dist_cfg=dict(backend='gloo', timeout=20)))) == 20.0
    assert process_group_timeout(dict(env_cfg=dict(dist_cfg=dict(timeout=datetime.timedelta(minutes=2))))) == 120
    assert process_group_timeout(dict()) == DEFAULT_TIMEOUT_S
    assert process_group_timeout(dict(env_cfg=dict(dist_cfg=dict(backend='gloo')))) == DEFAULT_TIMEOUT_S
    for bad in (0, -5, '20', True):
        with pytest.raises(ValueError, match='env_cfg.dist_cfg.timeout'):
            process_group_timeout(dict(env_cfg=dict(dist_cfg=dict(timeout=bad))))


def test_setup_gives_the_process_group_the_configured_timeout(monkeypatch):
    """Before the fix ``init_process_group`` was called without it (torch's 30 min default)."""
    import torch
    import torch.distributed as dist
    from mmsgg_eval.runner import setup_cpu_distributed
    calls = []
    monkeypatch.setattr(dist, 'is_initialized', lambda: False)
    monkeypatch.setattr(dist, 'init_process_group', lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    cfg = dict(env_cfg=dict(dist_cfg=dict(backend='nccl', timeout=20)))
    assert setup_cpu_distributed(cfg, 'pytorch') is True
    assert calls == [dict(backend='gloo', timeout=datetime.timedelta(seconds=20))]
    assert cfg['env_cfg']['dist_cfg']['backend'] == 'gloo'
    assert cfg['model_wrapper_cfg']['type'].endswith('.EvalOnlyModelWrapper')
    cfg = dict()
    setup_cpu_distributed(cfg, 'pytorch')
    assert calls[-1]['timeout'] == datetime.timedelta(seconds=DEFAULT_TIMEOUT_S)
    assert setup_cpu_distributed(dict(), 'none') is False and len(calls) == 2


def test_collective_failures_are_explained(monkeypatch):
    monkeypatch.setenv('WORLD_SIZE', '3')
    monkeypatch.setenv('RANK', '1')
    with pytest.raises(DistributedEvaluationError, match=r'rank 1 of 3.*timeout=20 s.*stopped') as info:
        with explain_collective_failures(20):
            raise RuntimeError('[gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 20000ms for recv '
                               'operation to complete')
    assert isinstance(info.value.__cause__, RuntimeError)
    with pytest.raises(DistributedEvaluationError, match='closed its connection: it died'):
        with explain_collective_failures(20):
            raise RuntimeError('[gloo/transport/tcp/pair.cc:538] Read error [127.0.0.1]:5333: Connection reset '
                               'by peer')
    with pytest.raises(RuntimeError, match='^unrelated$'):  # other errors pass through unchanged
        with explain_collective_failures(20):
            raise RuntimeError('unrelated')
    monkeypatch.setenv('WORLD_SIZE', '1')
    with pytest.raises(RuntimeError, match='^Timed out$'):  # a single process has no peer to blame
        with explain_collective_failures(20):
            raise RuntimeError('Timed out')


def _fault_run(fault, world=3, timeout=5, faulty=2):
    port = free_port()
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''), OMP_NUM_THREADS='1')
    code = 'from tests.dist_utils import fault_worker_main; fault_worker_main()'
    procs = [subprocess.Popen([sys.executable, '-c', code, str(r), str(world), str(port), str(timeout),
                               str(faulty), fault], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=ROOT, env=env) for r in range(world)]
    outputs = {}
    try:
        for r, proc in enumerate(procs):
            if r == faulty:
                continue
            out, err = proc.communicate(timeout=240)  # hangs forever without the fix
            outputs[r] = (proc.returncode, out, err)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()  # SIGKILL also ends a stopped process
                proc.wait()
    return outputs


def _stamp(out, name):
    return float(next(line for line in out.splitlines() if line.startswith(name)).split()[1])


def test_stalled_rank_ends_the_others_with_a_clear_error_within_the_timeout():
    timeout = 5
    outputs = _fault_run('stop', timeout=timeout)
    for rank, (code, out, err) in outputs.items():
        assert code == 1, (rank, out, err)
        assert 'DistributedEvaluationError' in out and f'rank {rank} of 3' in out, out
        assert f'env_cfg.dist_cfg.timeout={timeout} s' in out and 'stopped' in out, out
        waited = _stamp(out, 'failed-at') - _stamp(out, 'collective-start')
        assert waited < timeout + 25, waited  # the timeout, plus scheduling on a loaded machine


def test_dead_rank_ends_the_others_at_once():
    outputs = _fault_run('die', timeout=120)
    for rank, (code, out, err) in outputs.items():
        assert code == 1, (rank, out, err)
        assert 'DistributedEvaluationError' in out and 'closed its connection' in out, out
        assert _stamp(out, 'failed-at') - _stamp(out, 'collective-start') < 60  # far below the 120 s timeout


def test_three_ranks_without_fault_agree_and_tear_down():
    outputs = _fault_run('none', faulty=-1)
    assert all(code == 0 and 'ok' in out for code, out, err in outputs.values()), outputs


# --- outputs ----------------------------------------------------------------------------------------------

def test_check_writable_names_the_location(tmp_path):
    assert check_writable(str(tmp_path / 'new' / 'dir'), 'work dir') == str(tmp_path / 'new' / 'dir')
    assert os.listdir(tmp_path / 'new' / 'dir') == []  # the probe file is removed
    blocker = tmp_path / 'file'
    blocker.write_text('x')  # a file where a directory is expected fails even for root
    with pytest.raises(OutputNotWritableError, match=r'work dir \(--work-dir\) .*file/sub is not writable'):
        check_writable(str(blocker / 'sub'), 'work dir (--work-dir)')


def test_write_metrics_json_is_atomic_and_never_loses_the_numbers(tmp_path, capsys):
    metrics = {'predcls/R@20': 12.5, 'predcls/per_predicate_recall': {'on': 50.0}}
    path = write_metrics_json(metrics, str(tmp_path))
    assert json.load(open(path)) == metrics and os.listdir(tmp_path) == ['metrics.json']
    blocker = tmp_path / 'file'
    blocker.write_text('x')
    with pytest.raises(OSError):
        write_metrics_json(metrics, str(blocker / 'sub'))
    err = capsys.readouterr().err
    assert 'could not write' in err and '"predcls/R@20": 12.5' in err


# --- registration and import cost -------------------------------------------------------------------------

def _registered_classes():
    """(registry variable, class name) of every ``@X.register_module(...)`` class in the package source."""
    found = []
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if not name.endswith('.py'):
                continue
            tree = ast.parse(open(osp.join(folder, name)).read())
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    for dec in node.decorator_list:
                        call = dec.func if isinstance(dec, ast.Call) else dec
                        if isinstance(call, ast.Attribute) and call.attr == 'register_module':
                            found.append((call.value.id, node.name))
    return found


def test_import_mmsgg_eval_registers_every_registered_class():
    classes = _registered_classes()
    assert ('MODEL_WRAPPERS', 'EvalOnlyModelWrapper') in classes and ('MODELS', 'FrequencyBaseline') in classes
    assert ('METRICS', 'DumpSceneGraphPredictions') in classes
    code = ('import json, sys\nimport mmsgg_eval\n'
            'from mmsgg_eval import registry\nfrom mmsgg_eval.encoders import ENCODERS\n'
            'regs = dict(vars(registry), ENCODERS=ENCODERS)\n'
            f'missing = [(r, c) for r, c in {classes!r} if c not in regs[r].module_dict]\n'
            'print(json.dumps(missing))\n')
    out = python(code)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_lazily_registered_model_builds_the_real_class():
    code = ('import sys\nimport mmsgg_eval\nfrom mmsgg_eval.registry import MODELS\n'
            'assert "mmsgg_eval.models.frequency_baseline" not in sys.modules\n'
            'model = MODELS.module_dict["FrequencyBaseline"](num_classes=3, num_predicates=2)\n'
            'from mmsgg_eval.models import FrequencyBaseline\n'
            'assert type(model) is FrequencyBaseline and MODELS.module_dict["FrequencyBaseline"] is FrequencyBaseline\n'
            'from mmengine.model import BaseModel\nassert isinstance(model, BaseModel)\n'
            'print("ok")\n')
    out = python(code)
    assert out.returncode == 0 and 'ok' in out.stdout, out.stderr


def test_eval_only_wrapper_lives_in_the_runner_and_keeps_its_registry_name():
    from mmsgg_eval.registry import MODEL_WRAPPERS
    assert MODEL_WRAPPERS.module_dict['EvalOnlyModelWrapper'] is EvalOnlyModelWrapper
    assert EvalOnlyModelWrapper.__module__ == 'mmsgg_eval.runner.wrapper'


HEAVY = ('transformers', 'open_clip', 'mmdet.models', 'mmengine.optim', 'mmengine.model')


def test_import_mmsgg_eval_does_not_load_heavy_modules():
    code = ('import sys\nimport mmsgg_eval\n'
            f'print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n')
    out = python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == '[]'


def test_offline_cli_help_does_not_load_heavy_modules():
    code = ('import runpy, sys\nsys.argv = ["mmsgg_eval.eval", "--help"]\n'
            'try:\n    runpy.run_module("mmsgg_eval.eval", run_name="__main__")\nexcept SystemExit:\n    pass\n'
            f'print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n')
    out = python(code)
    assert out.returncode == 0, out.stderr
    assert 'usage' in out.stdout and out.stdout.strip().splitlines()[-1] == '[]'


def test_tools_do_not_edit_sys_path():
    for tool in ('test.py', 'benchmark.py'):
        assert 'sys.path' not in open(osp.join(ROOT, 'tools', tool)).read(), tool


def test_registered_types_resolve_to_classes_without_the_registry_import():
    from mmsgg_eval.datasets import VG150Dataset
    from mmsgg_eval.metrics import SGRecall
    from mmsgg_eval.registry import DATASETS, METRICS, resolve_registered
    assert resolve_registered(DATASETS, {'type': 'VG150Dataset', 'split': 'val'}) == \
        {'type': VG150Dataset, 'split': 'val'}
    assert resolve_registered(DATASETS, {'type': f'{DATASETS.scope}.VG150Dataset'})['type'] is VG150Dataset
    assert resolve_registered(METRICS, {'type': 'SGRecall'})['type'] is SGRecall
    assert resolve_registered(DATASETS, {'type': 'NoSuchDataset'}) == {'type': 'NoSuchDataset'}  # left as it is
    assert resolve_registered(DATASETS, {'type': 'other_scope.VG150Dataset'})['type'] == 'other_scope.VG150Dataset'
    cfg = {'type': 'VG150Dataset'}
    resolve_registered(DATASETS, cfg)
    assert cfg == {'type': 'VG150Dataset'}  # a copy


# --- one-line errors of tools/test.py ---------------------------------------------------------------------
def test_tools_test_user_errors_are_one_line_and_debug_shows_the_traceback(tmp_path):
    """Before: a SystemExit message without the tool's name or --debug (and tracebacks for metric errors)."""
    out = run_tool(['tools/test.py', CONFIG, str(tmp_path / 'missing.pth')])
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and 'Traceback' not in out.stderr, out.stderr
    assert lines[-2].startswith('tools/test.py: error: checkpoint not found: ') and 'build_freq_baseline' in lines[-2]
    assert lines[-1] == '(rerun with --debug for the traceback)'


@pytest.mark.parametrize('error, shown', [
    (ValueError('sample 3 (img_id 7): `pred_relations.scores` has shape [2]'), 'sample 3 (img_id 7)'),
    (DistributedEvaluationError('rank 1 of 3: a collective across ranks failed'),
     'DistributedEvaluationError: rank 1 of 3'),
    (FileNotFoundError('class `VG150Dataset` in mmdet/dataset: file not found: /x/nowhere/VG-SGG.h5'), 'nowhere'),
])
def test_tools_test_errors_from_the_run_are_one_line(monkeypatch, capsys, error, shown):
    def fail(args):
        raise error
    monkeypatch.setattr(cli, '_run', fail)
    with pytest.raises(SystemExit) as info:
        cli.main([CONFIG, 'ckpt.pth'])
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert info.value.code == 1 and len(lines) == 2 and lines[1] == '(rerun with --debug for the traceback)'
    assert lines[0].startswith('tools/test.py: error: ') and shown in lines[0]
    with pytest.raises(type(error)):  # --debug: the exception itself, with its traceback
        cli.main([CONFIG, 'ckpt.pth', '--debug'])
