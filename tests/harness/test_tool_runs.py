"""tests/tool_runs.run_tool: a tool run in a process forked from the preloaded forkserver gives what a new
interpreter gives (exit status, standard output and error, argv, sys.path, environment, working directory, thread
count, atexit handlers), and falls back to a new interpreter where it cannot."""
import json
import os
import sys

import pytest

from tests.tool_runs import ROOT, _forkable, run_tool

PROBE = r'''
import atexit, json, os, sys
import torch
atexit.register(lambda: print('atexit ran', flush=True))
print(json.dumps(dict(argv=sys.argv, path=sys.path[:2], cwd=os.getcwd(), probe=os.environ.get('MMSGG_TOOL_PROBE'),
                      threads=torch.get_num_threads(), weights=os.environ.get('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD'),
                      main=__name__)))
print('to stderr: \u00e9', file=sys.stderr)
what = sys.argv[1]
if what == 'raise':
    raise ValueError('the probe refuses')
if what == 'message':
    sys.exit('a one-line error')
sys.exit(int(what))
'''


@pytest.fixture
def probe(tmp_path, monkeypatch):
    monkeypatch.setenv('MMSGG_TOOL_PROBE', 'from-the-test')
    path = tmp_path / 'probe_tool.py'
    path.write_text(PROBE)
    return str(path)


@pytest.mark.parametrize('what', ['0', '3', 'raise', 'message'])
def test_a_forked_tool_run_equals_a_new_interpreter(probe, what):
    """Every exit path forked; a new interpreter for two of them (each costs a torch import)."""
    assert _forkable([probe])
    forked = run_tool([probe, what], trusted_checkpoints=True)
    assert forked.args == [sys.executable, probe, what]
    assert forked.returncode == {'0': 0, '3': 3}.get(what, 1)
    info = json.loads(forked.stdout.splitlines()[0])
    assert info == dict(argv=[probe, what], path=[os.path.dirname(probe), ROOT], cwd=ROOT, probe='from-the-test',
                        threads=1, weights='1', main='__main__')
    assert forked.stdout.splitlines()[1:] == ['atexit ran']
    expected_err = {'message': 'to stderr: \u00e9\na one-line error\n'}.get(what, 'to stderr: \u00e9\n')
    if what == 'raise':  # the traceback's last line and the script's frame (the forked one adds runpy's frames)
        assert forked.stderr.startswith(expected_err + 'Traceback (most recent call last):')
        assert forked.stderr.splitlines()[-1] == 'ValueError: the probe refuses' and 'probe_tool.py' in forked.stderr
    else:
        assert forked.stderr == expected_err
    if what in ('raise', 'message'):
        fresh = run_tool([probe, what], trusted_checkpoints=True, fresh=True)
        assert (fresh.args, fresh.returncode, fresh.stdout) == (forked.args, forked.returncode, forked.stdout)
        assert fresh.stderr.startswith(expected_err) and fresh.stderr.splitlines()[-1] == \
            forked.stderr.splitlines()[-1]


def test_a_module_run_and_the_fallbacks():
    forked = run_tool(['-m', 'mmsgg_eval.eval', '--help'])
    assert forked.returncode == 0 and forked.stdout.startswith('usage: ') and forked.stderr == ''
    assert not _forkable(['-c', 'print(1)']) and not _forkable(['-m']) and not _forkable([])
    assert not _forkable(['-m', 'torch.distributed.run', '--nproc_per_node=2', 'tools/test.py'])
    assert run_tool(['-c', 'import sys; print(sys.argv)']).stdout == "['-c']\n"  # a new interpreter


def test_a_hanging_tool_times_out(tmp_path):
    import subprocess
    path = tmp_path / 'sleeper.py'
    path.write_text('import time\ntime.sleep(60)\n')
    with pytest.raises(subprocess.TimeoutExpired):
        run_tool([str(path)], timeout=2)
