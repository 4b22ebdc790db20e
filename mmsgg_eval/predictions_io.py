"""Saved predictions: the stream format written by ``tools/test.py --out`` and readers for offline evaluation.

Stream format (``.pkl``): a sequence of pickled records, one per data sample, each a plain dict of the data
contract (SPEC section 1: ``sample_idx``, ``img_id``, ``img_path``, ``ori_shape``, ``gt_instances``,
``gt_relations``, ``pred_instances``, ``pred_relations``...) holding CPU tensors / numpy arrays and Python
scalars only (no image). Records are read back one at a time (the file is never loaded whole) with a
restricted unpickler that only builds tensors, arrays and builtins; ``unsafe=True`` lifts that for files
you trust. A single pickled list (mmengine's ``DumpResults`` format) is accepted too.

JSONL format (``.jsonl``), one object per line, GT taken from the dataset::

    {"sample_idx": 0,   # or "img_id"
     "pred_instances": {"bboxes": [[x1, y1, x2, y2], ...], "labels": [...], "scores": [...]},
     "pred_relations": {"pair_idxs": [[s, o], ...], "scores": [[p0, p1, ...], ...]  # [R, P+1] / [R, P]
                        # or "scores": [...] with "labels": [...] (single-label, 0-based predicates)
                       }}

Boxes are xyxy in original image pixels; labels are 0-based.
"""
import glob
import json
import os
import pickle
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple

import numpy as np
import torch
from mmengine.evaluator import BaseMetric

from .legacy import SafeUnpickler
from .registry import METRICS

SKIP_KEYS = ('inputs',)


def to_record(sample: Any) -> Dict[str, Any]:
    """Plain-dict, CPU copy of a data sample (DetDataSample or dict), without images."""
    if hasattr(sample, 'to_dict'):
        sample = sample.to_dict()
    out: Dict[str, Any] = {}
    for key, value in sample.items():
        if key in SKIP_KEYS:
            continue
        out[key] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if hasattr(value, 'to_dict') and not isinstance(value, dict):
        value = value.to_dict()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if hasattr(value, 'tensor') and isinstance(getattr(value, 'tensor'), torch.Tensor):
        return value.tensor.detach().cpu()
    if hasattr(value, 'to_ndarray'):
        return value.to_ndarray()
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


def iter_records(path: str, unsafe: bool = False) -> Iterator[Dict[str, Any]]:
    """Yield the records of a stream file (or of a single pickled list), one at a time."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f'predictions file not found: {os.path.abspath(path)}')
    with open(path, 'rb') as f:
        while True:
            try:
                obj = (pickle.Unpickler(f) if unsafe else SafeUnpickler(f)).load()
            except EOFError:
                return
            except pickle.UnpicklingError as err:
                raise pickle.UnpicklingError(f'{path}: {err}') from None
            if isinstance(obj, list):
                yield from obj
            else:
                yield obj


def iter_json_lines(path: str) -> Iterator[Tuple[int, Dict[str, Any]]]:
    """Yield ``(line number, object)`` for each non-empty line of a JSONL file; errors name the line."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f'predictions file not found: {os.path.abspath(path)}')
    with open(path, encoding='utf-8') as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f'{path}:{lineno}: not valid JSON ({err.msg})') from None
            if not isinstance(record, dict):
                raise ValueError(f'{path}:{lineno}: each line must be a JSON object')
            yield lineno, record


def iter_jsonl(path: str) -> Iterator[Dict[str, Any]]:
    """Yield the prediction records of a JSONL file (see the module docstring), with errors naming the line."""
    for lineno, record in iter_json_lines(path):
        if not ({'sample_idx', 'img_id'} & set(record)):
            raise ValueError(f'{path}:{lineno}: each line must be an object with `sample_idx` or `img_id`')
        out = {k: v for k, v in record.items() if k not in ('pred_instances', 'pred_relations')}
        for group in ('pred_instances', 'pred_relations'):
            if group in record:
                out[group] = {k: np.asarray(v) for k, v in record[group].items()}
        out['_line'] = lineno
        yield out


@METRICS.register_module()
class DumpSceneGraphPredictions(BaseMetric):
    """Write every processed data sample to a prediction stream file (``tools/test.py --out``).

    Each rank appends its records to ``{out_file}.part{rank}`` while processing; ``evaluate()`` concatenates
    the parts on rank 0 (rank order), dropping sampler-padding duplicates by ``sample_idx``. Nothing is
    gathered through the network and no part is held in memory (the parts must be on a shared file system
    for multi-node runs).
    """

    def __init__(self, out_file_path: str, collect_device: str = 'cpu', prefix: Optional[str] = None) -> None:
        super().__init__(collect_device=collect_device, prefix=prefix)
        if not out_file_path.endswith(('.pkl', '.pickle')):
            raise ValueError('the output file must be a .pkl or .pickle file')
        self.out_file_path = out_file_path
        self._handle = None

    def _part(self, rank: int) -> str:
        return f'{self.out_file_path}.part{rank}'

    def process(self, data_batch: Any, data_samples: Sequence[Any]) -> None:
        from mmengine.dist import get_rank
        if self._handle is None:
            os.makedirs(os.path.dirname(os.path.abspath(self.out_file_path)), exist_ok=True)
            self._handle = open(self._part(get_rank()), 'wb')
        for sample in data_samples:
            pickle.dump(to_record(sample), self._handle, protocol=4)

    def evaluate(self, size: int) -> dict:
        from mmengine.dist import barrier, get_rank, get_world_size
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        barrier()
        if get_rank() == 0:
            seen, written = set(), 0
            with open(self.out_file_path, 'wb') as out:
                for rank in range(get_world_size()):
                    part = self._part(rank)
                    if not os.path.exists(part):
                        continue
                    for record in iter_records(part, unsafe=True):  # our own file: plain records
                        idx = record.get('sample_idx')
                        if idx is not None and idx in seen:
                            continue  # sampler padding
                        seen.add(idx)
                        pickle.dump(record, out, protocol=4)
                        written += 1
            for part in glob.glob(f'{self.out_file_path}.part*'):
                os.remove(part)
            from mmengine.logging import print_log
            print_log(f'{written} predictions written to {self.out_file_path}', logger='current')
        barrier()
        return {}

    def compute_metrics(self, results: list) -> dict:  # pragma: no cover - evaluate() is overridden
        return {}
