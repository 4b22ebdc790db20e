"""Running the project's command-line tools from tests, as a user runs them from the checkout's root."""
import os
import os.path as osp
import subprocess
import sys
from typing import Sequence

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))


def run_tool(args: Sequence[str], check: bool = False, timeout: float = 600, trusted_checkpoints: bool = False,
             **kwargs) -> subprocess.CompletedProcess:
    """``python ARGS`` in the checkout's root, with this checkout first on ``PYTHONPATH`` and one OpenMP thread;
    output captured as text. ``trusted_checkpoints``: let mmengine 0.10.7 load its own training checkpoints
    (``torch.load``'s default ``weights_only=True`` since torch 2.6 refuses their numpy metadata; the tests load
    only checkpoints they have just written). ``check``: assert exit status 0, showing the output's tail."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''), OMP_NUM_THREADS='1')
    if trusted_checkpoints:
        env['TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD'] = '1'
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=timeout, **kwargs)
    if check:
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out
