"""Running the project's command-line tools from tests, as a user runs them from the checkout's root, or
importing one as a module."""
import importlib.util
import os
import os.path as osp
import subprocess
import sys
from types import ModuleType
from typing import Sequence

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
#: ``--cfg-options`` that load the test data in the main process (no dataloader worker processes)
NO_LOADER_WORKERS = ('test_dataloader.num_workers=0', 'test_dataloader.persistent_workers=False')


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


def sample_data_root(tmp, dataset: str) -> str:
    """``tools/make_sample_data.py`` writes the sample of ``dataset`` under ``tmp/data``; its data root (with the
    trailing slash the configs' ``data_root`` takes)."""
    run_tool(['tools/make_sample_data.py', '--out', str(osp.join(tmp, 'data')), '--datasets', dataset], check=True)
    return osp.join(str(tmp), 'data', dataset) + '/'


def frequency_baseline_on_sample(tmp, dataset: str, config: str, extra_options: Sequence[str] = ()):
    """The sample of ``dataset`` (:func:`sample_data_root`), the ``--cfg-options`` that point ``config``'s test
    and training datasets at it (plus ``extra_options``), and the FREQ baseline built on its training split into
    ``tmp/freq.pth``: ``(root, options, checkpoint path, the build's CompletedProcess)``."""
    root = sample_data_root(tmp, dataset)
    options = [f'test_dataloader.dataset.data_root={root}', f'freq_train_dataset.data_root={root}', *extra_options]
    ckpt = osp.join(str(tmp), 'freq.pth')
    built = run_tool(['tools/build_freq_baseline.py', config, '--out', ckpt, '--cfg-options', *options], check=True)
    return root, options, ckpt, built


def load_tool(name: str) -> ModuleType:
    """The script ``tools/NAME.py`` imported as a module (its functions called in-process)."""
    spec = importlib.util.spec_from_file_location(f'{name}_tool', osp.join(ROOT, 'tools', f'{name}.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
