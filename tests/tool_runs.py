"""Running the project's command-line tools from tests, as a user runs them from the checkout's root, or
importing one as a module (:func:`load_tool`).

``run_tool(args)`` is ``python ARGS`` (a script path or ``-m MODULE`` and their arguments) in the checkout's root.
By default the tool runs in a process forked from the test session's forkserver (see :mod:`tests.dist_utils`),
which imported torch, MMEngine, MMDetection and mmsgg_eval once: a fresh interpreter spends seconds importing them
before the tool starts. The forked process is set up as the interpreter would be: the given environment, the
checkout's root as working directory, ``sys.argv`` and ``sys.path`` of ``python ARGS`` (the script's folder, or the
working directory for ``-m``, then ``PYTHONPATH``), the ``OMP_NUM_THREADS`` thread count, standard output and error
captured at the descriptor level, the exit status of ``sys.exit`` (1 and the traceback for an uncaught exception),
``atexit`` handlers run at the end. ``fresh=True`` runs a real interpreter, for what the forked process cannot
show (import-time behaviour, interpreter options); so do the launchers (``-m torch.distributed.run``: their
tests check how processes start and end), other interpreter arguments and other ``subprocess.run`` options, and a
checkout whose package is not the one the session imported.
"""
import importlib.util
import os
import os.path as osp
import subprocess
import sys
import tempfile
from types import ModuleType
from typing import Dict, List, Optional, Sequence

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
#: ``--cfg-options`` that load the test data in the main process (no dataloader worker processes)
NO_LOADER_WORKERS = ('test_dataloader.num_workers=0', 'test_dataloader.persistent_workers=False')
#: launchers run in a new interpreter: their tests check how processes start and end
LAUNCHERS = ('torch.distributed.run', 'torch.distributed.launch')


def run_tool(args: Sequence[str], check: bool = False, timeout: float = 600, trusted_checkpoints: bool = False,
             fresh: bool = False, **kwargs) -> subprocess.CompletedProcess:
    """``python ARGS`` in the checkout's root, with this checkout first on ``PYTHONPATH`` and one OpenMP thread;
    output captured as text. ``trusted_checkpoints``: let mmengine 0.10.7 load its own training checkpoints
    (``torch.load``'s default ``weights_only=True`` since torch 2.6 refuses their numpy metadata; the tests load
    only checkpoints they have just written). ``check``: assert exit status 0, showing the output's tail.
    ``fresh``: a new interpreter instead of a process forked from the preloaded forkserver (module docs)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''), OMP_NUM_THREADS='1')
    if trusted_checkpoints:
        env['TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD'] = '1'
    args = [str(a) for a in args]
    if fresh or kwargs or not _forkable(args):
        out = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                             timeout=timeout, **kwargs)
    else:
        out = _run_forked(args, env, timeout)
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


def _forkable(args: List[str]) -> bool:
    """A script path or ``-m MODULE`` (no other interpreter option), and the session's mmsgg_eval is this
    checkout's (the forked process has it imported already)."""
    if not args or (args[0].startswith('-') and (args[0] != '-m' or len(args) < 2)) or \
            (args[0] == '-m' and args[1] in LAUNCHERS):
        return False
    import multiprocessing
    if 'forkserver' not in multiprocessing.get_all_start_methods():
        return False
    import mmsgg_eval
    return osp.dirname(osp.dirname(osp.abspath(mmsgg_eval.__file__))) == ROOT


def _run_forked(args: List[str], env: Dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    from tests.dist_utils import forkserver_context
    context = forkserver_context()
    with tempfile.TemporaryDirectory() as tmp:
        paths = osp.join(tmp, 'stdout'), osp.join(tmp, 'stderr')
        process = context.Process(target=_tool_entry, args=(args, env, ROOT, *paths))
        process.start()
        process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired([sys.executable, *args], timeout)
        stdout, stderr = (open(p, encoding='utf-8', errors='replace').read() if osp.exists(p) else ''
                          for p in paths)
    return subprocess.CompletedProcess([sys.executable, *args], process.exitcode, stdout, stderr)


def _tool_entry(args: List[str], env: Dict[str, str], cwd: str, stdout_path: str, stderr_path: str) -> None:
    """The forked process: ``python ARGS`` as the interpreter would run it (module docs); ends with its status."""
    import atexit
    import io
    import runpy
    import traceback
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for fd, path in ((1, stdout_path), (2, stderr_path)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, 'w', closefd=False), encoding='utf-8')
    sys.stderr = io.TextIOWrapper(io.FileIO(2, 'w', closefd=False), encoding='utf-8', errors='backslashreplace',
                                  line_buffering=True)
    sys.stdin = open(os.devnull)
    threads = env.get('OMP_NUM_THREADS')
    if threads and threads.isdigit():
        import torch
        torch.set_num_threads(int(threads))
    python_path = [osp.abspath(p) for p in env.get('PYTHONPATH', '').split(os.pathsep) if p]
    module = args[1] if args[0] == '-m' else None
    first = cwd if module else osp.dirname(osp.abspath(args[0]))
    session = [p for p in sys.path if p and osp.abspath(p) not in python_path and osp.abspath(p) != cwd]
    sys.path[:] = [first, *python_path, *session]
    sys.argv = [module or args[0], *args[2 if module else 1:]]
    code: Optional[object] = 0
    try:
        if module:
            # a new interpreter has not imported the module it runs (the forkserver may have): run it as the only copy
            sys.modules.pop(module, None)
            runpy.run_module(module, run_name='__main__', alter_sys=True)
        else:
            runpy.run_path(args[0], run_name='__main__')
    except SystemExit as stop:
        code = stop.code
    except BaseException:  # noqa: BLE001 - the interpreter prints it and exits with 1
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr, flush=True)
        code = 1
    os._exit(code or 0)
