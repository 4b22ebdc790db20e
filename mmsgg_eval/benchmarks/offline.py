"""Offline evaluation speed: a workload written as a prediction stream (the ``tools/test.py --out`` format,
:mod:`mmsgg_eval.io.stream`) and evaluated from the file, one record at a time.

Three timings of the same file, each best of ``repeat``: the plain file read (the disk / page-cache share),
reading and unpickling the records alone, and reading + ``Evaluator.offline_evaluate`` with SGRecall +
SGMeanRecall (every key, as :func:`tools.benchmark.run_ours`). The records carry their GT, as the in-process
benchmark's samples do; the offline CLI takes the GT from the dataset instead.
"""
import os
import tempfile
import time
from typing import Dict, Optional

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
    from .workloads import meta
    MMLogger.get_instance('mmengine', log_level='WARNING')
    own = path is None
    if own:
        path = os.path.join(tempfile.mkdtemp(prefix='mmsgg_offline_'), f'{workload}.pkl')
    try:
        size = write_stream(workload, images, path)
        mode = 'predcls' if workload == 'predcls-full' else 'sgdet'
        best = {'disk': None, 'read': None, 'evaluate': None}

        def keep(name: str, seconds: float) -> None:
            best[name] = seconds if best[name] is None else min(best[name], seconds)

        result = {}
        for _ in range(repeat):
            start = time.perf_counter()
            with open(path, 'rb') as f:
                while f.read(1 << 24):
                    pass
            keep('disk', time.perf_counter() - start)
            start = time.perf_counter()
            count = sum(1 for _ in iter_records(path))
            keep('read', time.perf_counter() - start)
            assert count == images, (count, images)
            evaluator = Evaluator([cls(mode=mode, zeroshot_triplets=[(0, 1, 2), (3, 4, 5)])
                                   for cls in (SGRecall, SGMeanRecall)])
            evaluator.dataset_meta = meta()
            start = time.perf_counter()
            result = evaluator.offline_evaluate(iter_records(path), chunk_size=CHUNK)
            keep('evaluate', time.perf_counter() - start)
        return dict(images_per_s=images / best['evaluate'], read_images_per_s=images / best['read'],
                    disk_images_per_s=images / best['disk'], file_mb=size / 2 ** 20,
                    read_share=best['read'] / best['evaluate'], disk_share=best['disk'] / best['evaluate'],
                    r50=result.get(f'{mode}/R@50'), mr50=result.get(f'{mode}/mR@50'))
    finally:
        if own:
            for name in (path, path + '.tmp'):
                if os.path.exists(name):
                    os.remove(name)
            os.rmdir(os.path.dirname(path))
