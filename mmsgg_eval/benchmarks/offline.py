"""Offline evaluation speed: a workload written as a prediction stream (the ``tools/test.py --out`` format,
:mod:`mmsgg_eval.io.stream`) and evaluated from the file, one record at a time.

Three timings of the same file, each best of ``repeat``: the plain file read (the disk / page-cache share),
reading and unpickling the records alone, and reading + ``Evaluator.offline_evaluate`` with SGRecall +
SGMeanRecall (every key, as :func:`.runners.run_ours`). The records carry their GT, as the in-process
benchmark's samples do.

The offline command line itself (``python -m mmsgg_eval.eval``, each run a fresh subprocess):

* :func:`run_cli`: the workload's stream evaluated by the CLI against :class:`WorkloadDataset` (the same metrics
  as above; progress bar on, as users run it), on ``images`` and on ``images // 10`` records: the time to the
  first sample (interpreter start, imports, config, dataset; measured from before the subprocess starts), the
  total, and the **marginal rate** ``(images - images // 10) / (after(images) - after(images // 10))``, where
  ``after`` is the time from the first sample to the end of the process (reading, evaluating, reports,
  metrics.json with the file's SHA-256): what one more image costs, the start-up left out (on a shared
  machine its noise would swamp the difference) and the fixed report writing cancelled; beside it, the
  reading bound: one pass that reads and SHA-256-hashes the same file (:func:`read_and_hash`, what the
  provenance needs; for a stream this large the CLI runs this same pass in a process of its own beside its
  reading), the marginal rate as a share of it, and the
  projected time of a VG150-test-sized stream (26,446 images: the start-up plus that many at the marginal rate);
* :func:`run_cli_startup`: start-up of the CLI on the bundled VG150 sample (``configs/demo``, the real dataset
  class, a JSONL file of 13 PredCls predictions): the time to the first sample and the total.
"""
import json
import os
import os.path as osp
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, Optional, Sequence

from .timing import best_of

CHUNK = 64  # samples per process() call, the offline CLI's default --batch-size


def write_stream(workload: str, images: int, path: str) -> int:
    """Write ``images`` samples of ``workload`` to the stream ``path`` (generated one at a time, so the writer
    never holds the workload); returns the file size in bytes."""
    from .workloads import iter_workload
    from ..io.stream import StreamWriter
    with StreamWriter(path, expected_records=images, dataset_length=images) as writer:
        for sample in iter_workload(workload, images):
            writer.write(sample)
    return os.path.getsize(path)


def run_offline(workload: str, images: int, repeat: int = 3, path: Optional[str] = None) -> Dict[str, float]:
    """Images/s of reading and of reading + evaluating a stream of ``workload`` (see the module docstring)."""
    from mmengine.evaluator import Evaluator
    from mmengine.logging import MMLogger
    from ..io.stream import iter_records
    from ..metrics import SGMeanRecall, SGRecall
    from .workloads import ZEROSHOT_TRIPLETS, meta, workload_mode
    MMLogger.get_instance('mmengine', log_level='WARNING')
    own = path is None
    if own:
        path = os.path.join(tempfile.mkdtemp(prefix='mmsgg_offline_'), f'{workload}.pkl')
    try:
        size = write_stream(workload, images, path)
        mode = workload_mode(workload)

        def new_evaluator() -> Evaluator:
            evaluator = Evaluator([cls(mode=mode, zeroshot_triplets=ZEROSHOT_TRIPLETS)
                                   for cls in (SGRecall, SGMeanRecall)])
            evaluator.dataset_meta = meta()
            return evaluator

        disk = best_of(lambda: _read_file(path), repeat)['seconds']
        hashed = best_of(lambda: read_and_hash(path), repeat)['seconds']
        read = best_of(lambda: sum(1 for _ in iter_records(path)), repeat)
        assert read['result'] == images, (read['result'], images)
        evaluate = best_of(lambda ev: ev.offline_evaluate(iter_records(path), chunk_size=CHUNK), repeat,
                           setup=new_evaluator)
        seconds, result = evaluate['seconds'], evaluate['result']
        return dict(images_per_s=images / seconds, read_images_per_s=images / read['seconds'],
                    disk_images_per_s=images / disk, hash_images_per_s=images / hashed, file_mb=size / 2 ** 20,
                    read_share=read['seconds'] / seconds, disk_share=disk / seconds,
                    r50=result.get(f'{mode}/R@50'), mr50=result.get(f'{mode}/mR@50'))
    finally:
        if own:
            for name in (path, path + '.tmp'):
                if os.path.exists(name):
                    os.remove(name)
            os.rmdir(os.path.dirname(path))


def _read_file(path: str) -> None:
    """Read ``path`` through in 16 MiB blocks (the plain file read: disk or page cache)."""
    with open(path, 'rb') as f:
        while f.read(1 << 24):
            pass


def read_and_hash(path: str) -> str:
    """One pass that reads ``path`` and SHA-256 hashes it (what the provenance of ``metrics.json`` needs; the
    pass of :func:`mmsgg_eval.io.filehash.sha256_file`, in blocks of 1 MiB into one reused buffer, the
    hashing process of the offline CLI): the reading bound of offline evaluation. Returns the hex digest."""
    from ..io.filehash import sha256_file
    return sha256_file(path)


#: Images of the VG150 test split, whose offline evaluation time :func:`run_cli` projects.
VG150_TEST_IMAGES = 26446


ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
#: The command run by :func:`timed_cli`: ``python -m mmsgg_eval.eval ARGS`` that also prints the time (epoch
#: seconds) and its CPU time when the first sample is read. ``mmsgg_eval.io.samples`` is imported first to hook
#: it, which the CLI imports first anyway.
TIMED_CLI = """
import sys, time
from mmsgg_eval.io import samples
tick = samples.CoveredSamples._tick
def first_tick(self):
    samples.CoveredSamples._tick = tick
    print(f'FIRST_SAMPLE {time.time():.6f} {time.process_time():.6f}', file=sys.stderr, flush=True)
    tick(self)
samples.CoveredSamples._tick = first_tick
sys.argv[0] = 'mmsgg_eval.eval'
from mmsgg_eval.eval import main
main()
"""


class WorkloadDataset:
    """The images of a workload as the dataset of a config (annotations only): ``img_id`` = index, the
    ``dataset_meta`` of the workloads; the GT is in the stream's records. Registered as ``WorkloadDataset``
    when this module is imported (``custom_imports`` of the config :func:`run_cli` writes)."""

    def __init__(self, num_images: int, **kwargs: Any):
        from .workloads import meta
        self.num_images, self.metainfo = int(num_images), meta()

    def __len__(self) -> int:
        return self.num_images

    def get_data_info(self, idx: int) -> Dict[str, Any]:
        return dict(sample_idx=idx, img_id=idx, instances=[], relations=[])


def _register() -> None:
    from ..registry import DATASETS
    DATASETS.register_module(name='WorkloadDataset', module=WorkloadDataset, force=True)


TIMED_CLI_KEYS = ('first_sample_s', 'total_s', 'first_sample_cpu_s', 'total_cpu_s')
"""The timings :func:`timed_cli` returns."""
CLI_TIMINGS = TIMED_CLI_KEYS + ('after_first_s', 'after_first_cpu_s')
"""The timings of each stream size in :func:`run_cli`."""


def timed_cli(args: Sequence[str], env: Optional[Dict[str, str]] = None) -> Dict[str, float]:
    """Run the offline CLI with ``args`` in a subprocess: seconds to the first sample and in total (both from
    before the process starts), and the CPU seconds of the process at these two points (user + system, all
    threads: a figure that a busy machine changes less); ``RuntimeError`` with the CLI's last lines when it
    fails."""
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    out = subprocess.run([sys.executable, '-c', TIMED_CLI, *args], capture_output=True, text=True, env=env,
                         cwd=ROOT)
    total = time.time() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    first = [line.split() for line in out.stderr.splitlines() if line.startswith('FIRST_SAMPLE ')]
    if out.returncode != 0 or not first:
        raise RuntimeError(f'the offline CLI failed (exit status {out.returncode}): '
                           + ' | '.join((out.stderr.strip() or out.stdout.strip()).splitlines()[-3:]))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return dict(first_sample_s=float(first[0][1]) - start, total_s=total, first_sample_cpu_s=float(first[0][2]),
                total_cpu_s=cpu)


def _cli_env() -> Dict[str, str]:
    """The environment of the CLI subprocesses: this checkout first on the path (the configs import it)."""
    env = dict(os.environ)
    env['PYTHONPATH'] = ROOT + (os.pathsep + env['PYTHONPATH'] if env.get('PYTHONPATH') else '')
    return env


def write_workload_config(path: str, num_images: int, mode: str) -> None:
    """A config evaluating a stream of ``num_images`` workload images with the metrics of :func:`run_offline`."""
    from .workloads import ZEROSHOT_TRIPLETS
    metrics = [dict(type=name, mode=mode, zeroshot_triplets=ZEROSHOT_TRIPLETS)
               for name in ('SGRecall', 'SGMeanRecall')]
    with open(path, 'w') as f:
        f.write(f"default_scope = 'mmdet'\n"
                f"custom_imports = dict(imports=['mmsgg_eval', 'mmsgg_eval.benchmarks.offline'], "
                f"allow_failed_imports=False)\n"
                f"test_dataloader = dict(dataset=dict(type='WorkloadDataset', num_images={num_images}))\n"
                f"test_evaluator = {metrics!r}\n")


def _with_time_after_first(timing: Dict[str, float]) -> Dict[str, float]:
    """A :func:`timed_cli` timing with the seconds and CPU seconds after the first sample added."""
    return dict(timing, after_first_s=timing['total_s'] - timing['first_sample_s'],
                after_first_cpu_s=timing['total_cpu_s'] - timing['first_sample_cpu_s'])


def run_cli(workload: str, images: int, repeat: int = 1) -> Dict[str, float]:
    """Start-up, total and marginal rate of the offline CLI on streams of ``workload`` (module docstring);
    each time the best of ``repeat`` runs."""
    small = max(images // 10, 1)
    if small >= images:
        raise ValueError(f'run_cli needs at least 2 images, got {images}')
    from .workloads import workload_mode
    mode = workload_mode(workload)
    tmp = tempfile.mkdtemp(prefix='mmsgg_cli_')
    env = _cli_env()
    try:
        runs = {}
        for n in (small, images):
            stream, config = osp.join(tmp, f'{workload}-{n}.pkl'), osp.join(tmp, f'{workload}-{n}.py')
            write_stream(workload, n, stream)
            write_workload_config(config, n, mode)
            args = [config, stream, '--work-dir', osp.join(tmp, f'out-{n}')]
            runs[n] = best_of(lambda: _with_time_after_first(timed_cli(args, env)), repeat, reported=CLI_TIMINGS)
            if n == images:  # the reading bound: one read + SHA-256 pass over the same file, in the same run
                size = os.path.getsize(stream)
                hashed = best_of(lambda: read_and_hash(stream), repeat)['seconds']
            os.remove(stream)
        rate = {}
        for key in ('after_first_s', 'after_first_cpu_s'):
            extra = runs[images][key] - runs[small][key]
            rate[key] = (images - small) / extra if extra > 0 else float('inf')
        return dict(images_per_s=rate['after_first_s'], cpu_images_per_s=rate['after_first_cpu_s'],
                    small_images=small, **{k: runs[small][k] for k in TIMED_CLI_KEYS},
                    total_s_full=runs[images]['total_s'], hash_images_per_s=images / hashed,
                    share_of_hash=rate['after_first_s'] / (images / hashed), file_mb=size / 2 ** 20,
                    vg150_test_s=runs[small]['first_sample_s'] + VG150_TEST_IMAGES / rate['after_first_s'],
                    vg150_test_gb=VG150_TEST_IMAGES * size / images / 1e9)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def predcls_jsonl(dataset: Any, path: str) -> None:
    """PredCls predictions of every sample of ``dataset``: its GT relations, scored one-hot [R, P+1]."""
    num_predicates = len(dataset.metainfo['predicates'])
    with open(path, 'w') as f:
        for i in range(len(dataset)):
            rels = [[int(v) for v in r] for r in dataset.get_data_info(i)['relations']]
            scores = [[1.0 if c == r[2] + 1 else 0.0 for c in range(num_predicates + 1)] for r in rels]
            f.write(json.dumps({'sample_idx': i, 'pred_relations': {'pair_idxs': [r[:2] for r in rels],
                                                                     'scores': scores}}) + '\n')


def run_cli_startup(repeat: int = 3) -> Dict[str, float]:
    """Seconds to the first sample and in total of the offline CLI on the bundled VG150 sample (module
    docstring), each the best of ``repeat`` runs."""
    from ..datasets import VG150Dataset
    from ..testing import VG150_SAMPLE_NUM_VAL, make_sample_data
    tmp = tempfile.mkdtemp(prefix='mmsgg_startup_')
    try:
        make_sample_data(tmp, datasets=['vg150'])
        root = osp.join(tmp, 'vg150') + '/'
        dataset = VG150Dataset(data_root=root, split='test', num_val_images=VG150_SAMPLE_NUM_VAL, pipeline=[])
        preds = osp.join(tmp, 'preds.jsonl')
        predcls_jsonl(dataset, preds)
        config = osp.join(ROOT, 'configs', 'demo', 'freq_predcls_vg150_sample.py')
        args = [config, preds, '--mode', 'predcls', '--work-dir', osp.join(tmp, 'out'), '--no-progress',
                '--cfg-options', f'test_dataloader.dataset.data_root={root}']
        best = best_of(lambda: timed_cli(args, _cli_env()), repeat, reported=TIMED_CLI_KEYS)
        return dict({key: best[key] for key in TIMED_CLI_KEYS}, images=len(dataset))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


_register()
