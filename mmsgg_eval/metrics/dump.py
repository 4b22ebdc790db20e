"""``DumpSceneGraphPredictions``: write every evaluated data sample to a prediction stream file.

The file is the stream format of :mod:`mmsgg_eval.io.stream` (a header with the dataset length, one record
per sample, a closing record), read back by ``python -m mmsgg_eval.eval CONFIG FILE``.
"""
import glob
import os
from typing import Any, Optional, Sequence

from mmengine.dist import barrier, get_rank, get_world_size, is_main_process
from mmengine.evaluator import BaseMetric
from mmengine.logging import print_log

from ..io.stream import PredictionStream, StreamWriter
from ..registry import METRICS


@METRICS.register_module()
class DumpSceneGraphPredictions(BaseMetric):
    """Write every processed data sample to a prediction stream (``tools/test.py --out``); returns no key.

    Each rank streams its records to ``{out_file_path}.part{rank}`` while processing (nothing is gathered
    through the network and nothing is held in memory; the parts must be on a shared file system for
    multi-node runs). ``evaluate(size)`` closes the parts and, on the main rank, writes ``out_file_path``:
    the header (``expected_records`` = ``dataset_length`` = ``size``, ``config``, the dataset name), the
    records in rank order without the sampler-padding duplicates (by ``sample_idx``), and the closing record;
    then the parts are removed.

    Args:
        out_file_path: the ``.pkl`` / ``.pickle`` file to write.
        config: recorded in the header (e.g. the config path), optional.
        prefix: unused (the metric returns no key); ``'dump'`` by default, so that MMEngine does not warn
            that no prefix is set.
    """

    default_prefix: Optional[str] = 'dump'

    def __init__(self, out_file_path: str, config: Optional[str] = None, collect_device: str = 'cpu',
                 prefix: Optional[str] = None) -> None:
        super().__init__(collect_device=collect_device, prefix=prefix)
        if not out_file_path.endswith(('.pkl', '.pickle')):
            raise ValueError(f'out_file_path must be a .pkl or .pickle file, got {out_file_path!r}')
        self.out_file_path = out_file_path
        self.config = config
        self._writer: Optional[StreamWriter] = None

    def _part(self, rank: int) -> str:
        return f'{self.out_file_path}.part{rank}'

    def process(self, data_batch: Any, data_samples: Sequence[Any]) -> None:
        if self._writer is None:
            self._writer = StreamWriter(self._part(get_rank()))
        for sample in data_samples:
            self._writer.write(sample)

    def evaluate(self, size: int) -> dict:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        barrier()
        if is_main_process():
            seen = set()
            name = (self.dataset_meta or {}).get('dataset_name')
            with StreamWriter(self.out_file_path, expected_records=size, dataset_length=size, config=self.config,
                              dataset_name=name) as out:
                for rank in range(get_world_size()):
                    part = self._part(rank)
                    if not os.path.exists(part):
                        continue
                    # our own file (plain records); its digest is recorded nowhere
                    for _, record in PredictionStream(part, unsafe=True, with_digest=False):
                        idx = record.get('sample_idx')
                        if idx is not None and idx in seen:
                            continue  # sampler padding
                        seen.add(idx)
                        out.write(record)
                written = out.num_records
            for part in glob.glob(f'{glob.escape(self.out_file_path)}.part*'):
                os.remove(part)
            print_log(f'{written} predictions written to {self.out_file_path}', logger='current')
        barrier()
        return {}

    def compute_metrics(self, results: list) -> dict:  # pragma: no cover - evaluate() is overridden
        return {}
