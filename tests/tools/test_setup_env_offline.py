"""``tools/setup_env.sh --offline`` (the light path) installs what offline evaluation needs and nothing that builds
mmcv or brings the CLIP packages; run here with a stand-in interpreter that records what it is asked to do."""
import os
import stat
import subprocess

from tests.tool_runs import ROOT


def run_setup(tmp_path, *args):
    log = tmp_path / 'calls.log'
    shim = tmp_path / 'python'
    # `have` checks (python - SPEC...) fail: everything counts as missing; other calls succeed
    shim.write_text(f'#!/usr/bin/env bash\necho "$@" >> {log}\nif [ "$1" = "-" ]; then exit 1; fi\nexit 0\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    proc = subprocess.run(['bash', os.path.join(ROOT, 'tools', 'setup_env.sh'), *args], capture_output=True,
                          text=True, env=dict(os.environ, PYTHON=str(shim)), timeout=120)
    return proc, log.read_text() if log.exists() else ''


def test_offline_installs_the_light_stack_only(tmp_path):
    proc, calls = run_setup(tmp_path, '--offline')
    assert proc.returncode == 0, proc.stderr
    installs = [line for line in calls.splitlines() if ' install ' in f' {line} ']
    text = '\n'.join(installs)
    for wanted in ('torch==2.9.1', 'mmcv-lite==2.1.0', 'mmengine==0.10.7', 'mmdet==3.3.0', 'pycocotools', 'h5py',
                   'matplotlib', '-e .'):
        assert wanted in text, (wanted, text)
    for unwanted in ('mmcv==2.1.0', 'open_clip_torch', 'transformers', 'torchvision'):
        assert unwanted not in text, (unwanted, text)
    assert 'light path for offline evaluation' in proc.stdout and 'building mmcv' not in proc.stdout


def test_unknown_option_names_the_known_ones(tmp_path):
    proc, _ = run_setup(tmp_path, '--bogus')
    assert proc.returncode == 2 and '--offline' in proc.stderr
