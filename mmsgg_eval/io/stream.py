"""The prediction stream written by ``tools/test.py --out`` (``.pkl``) and read by the offline CLI.

Format (version 2): a sequence of pickles (protocol 5) in one file, read back one at a time (the file is never
loaded whole):

1. a **header** record ``{'mmsgg_eval_stream': 'header', 'format_version': 2, 'expected_records': int or None,
   'dataset_length': int or None, 'config': str or None, 'dataset_name': str or None, 'created_utc': str,
   'mmsgg_eval_version': str}``: ``expected_records`` is the number of records the writer will write when known
   (the dataset length for ``tools/test.py --out``);
2. one **record** per data sample: a plain dict of the data contract (metainfo ``sample_idx``, ``img_id``,
   ``img_path``, ``ori_shape``, ..., ``gt_instances``, ``gt_relations``, ``pred_instances``, ``pred_relations``)
   holding numpy arrays (the tensors of the sample, as raw protocol-5 buffers: unpickling them is a copy,
   not a ``torch.load`` per tensor; dtypes numpy lacks, e.g. bfloat16, stay CPU tensors) and Python scalars
   only (no image). The reader hands them back as CPU tensors (sharing the arrays' memory);
3. a **closing** record ``{'mmsgg_eval_stream': 'end', 'num_records': int}`` written by the writer when it is
   closed normally.

A stream without its closing record (copied while still being written, disk full, killed writer) is an error
naming the file and the last good record (:class:`~mmsgg_eval.io.errors.TruncatedStreamError`) unless the
reader is told to accept it (``allow_truncated``; the CLI's ``--allow-missing``). Version 1 streams (protocol 4,
records holding torch tensors) read as before. Older files are still read,
with a warning that truncation cannot be detected: a stream of records without header (written by earlier
versions) and a single pickled list (mmengine's ``DumpResults``). Records are unpickled with the restricted
unpickler of :mod:`mmsgg_eval.io.pickles`; ``unsafe=True`` lifts that for files you trust.
"""
import datetime
import os
import pickle
import warnings
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

import numpy as np
import torch

from .errors import InputFileError, TruncatedStreamError, UnsafePickleError, describe
from .pickles import unpickler
from .readahead import (HashingReader, UnhashedReader, Warn, hashed_by_a_process, open_hashing_reader,
                        read_ahead)

FORMAT_VERSION = 2
#: Key marking the header and closing records (never a key of a data sample).
MARK = 'mmsgg_eval_stream'
SKIP_KEYS = ('inputs',)
PICKLE_PROTOCOL = 5


def to_record(sample: Any) -> Dict[str, Any]:
    """Plain-dict, CPU copy of a data sample (DetDataSample or dict), without images; tensors become numpy
    arrays (see the module docstring)."""
    if hasattr(sample, 'to_dict'):
        sample = sample.to_dict()
    return {key: _plain(value) for key, value in sample.items() if key not in SKIP_KEYS}


def _array(tensor: torch.Tensor) -> Any:
    """A CPU numpy array of ``tensor`` (the tensor itself where numpy has no such dtype)."""
    tensor = tensor.detach().cpu()
    try:
        return tensor.resolve_conj().resolve_neg().numpy()
    except TypeError:  # e.g. bfloat16
        return tensor


def _plain(value: Any) -> Any:
    if hasattr(value, 'to_dict') and not isinstance(value, dict):
        value = value.to_dict()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if hasattr(value, 'tensor') and isinstance(getattr(value, 'tensor'), torch.Tensor):  # mmdet boxes
        return _array(value.tensor)
    if hasattr(value, 'to_ndarray'):  # mmdet masks
        return value.to_ndarray()
    if isinstance(value, torch.Tensor):
        return _array(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


def _as_tensors(value: Any) -> Any:
    """A version-2 record with its numeric numpy arrays as CPU tensors (``torch.from_numpy``: no copy)."""
    if isinstance(value, dict):
        return {k: _as_tensors(v) for k, v in value.items()}
    if isinstance(value, np.ndarray) and value.dtype.kind in 'biuf' and value.dtype.isnative:
        return torch.from_numpy(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_as_tensors(v) for v in value)
    return value


def _version() -> str:
    from ..version import __version__
    return __version__


class StreamWriter:
    """Write a prediction stream: the header on opening, :meth:`write` per sample, the closing record on
    :meth:`close`. The file is written as ``path + '.tmp'`` and renamed to ``path`` when closed, so ``path``
    never holds a partial stream (a context manager closes it; on an exception the partial file is removed)."""

    def __init__(self, path: str, expected_records: Optional[int] = None, dataset_length: Optional[int] = None,
                 config: Optional[str] = None, dataset_name: Optional[str] = None):
        self.path = path
        self.num_records = 0
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self._tmp = path + '.tmp'
        self._file = open(self._tmp, 'wb')
        self.header = {MARK: 'header', 'format_version': FORMAT_VERSION, 'expected_records': expected_records,
                       'dataset_length': dataset_length, 'config': config, 'dataset_name': dataset_name,
                       'created_utc': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
                       'mmsgg_eval_version': _version()}
        pickle.dump(self.header, self._file, protocol=PICKLE_PROTOCOL)

    def write(self, sample: Any) -> None:
        """Append one data sample (converted by :func:`to_record`)."""
        pickle.dump(to_record(sample), self._file, protocol=PICKLE_PROTOCOL)
        self.num_records += 1

    def close(self) -> None:
        """Write the closing record, flush to disk and move the file to its final name."""
        if self._file is None:
            return
        pickle.dump({MARK: 'end', 'num_records': self.num_records}, self._file, protocol=PICKLE_PROTOCOL)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        """Close without the closing record and remove the partial file."""
        if self._file is not None:
            self._file.close()
            self._file = None
            os.remove(self._tmp)

    def __enter__(self) -> 'StreamWriter':
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _warn(message: str) -> None:
    """A UserWarning issued where the records are consumed."""
    warnings.warn(message, UserWarning, stacklevel=3)


def _mark(obj: Any) -> Optional[str]:
    return obj.get(MARK) if isinstance(obj, dict) else None


class PredictionStream:
    """Reader of a prediction stream (see the module docstring); iterate for ``(record index, record)``.

    Args:
        path: the ``.pkl`` file.
        unsafe: unpickle with the full unpickler (only for files you trust).
        allow_truncated: a stream without its closing record (or with a partial last record) ends with a
            warning instead of :class:`~mmsgg_eval.io.errors.TruncatedStreamError`.
        with_digest: take the file's SHA-256 while reading it (False for a file whose digest nobody records, e.g.
            the per-rank parts that ``DumpSceneGraphPredictions`` merges: no hashing work).

    After iterating, ``header`` (None for older files), ``num_records`` and ``complete`` (the closing record
    was read, or the older format has no way to tell) describe the file. The file's SHA-256 is taken while it is
    read (the provenance of ``metrics.json`` then needs no second pass over the file): for a large file on a POSIX
    system by a process of its own a bounded distance ahead, which also brings the file's pages from the disk
    before they are read (:class:`~mmsgg_eval.io.readahead.ProcessHashingReader`), and the records are read
    and unpickled in the thread that iterates; otherwise the bytes are hashed as they are read
    (:class:`~mmsgg_eval.io.readahead.HashingReader`) by a thread a few records ahead of the loop that consumes
    them (:func:`~mmsgg_eval.io.readahead.read_ahead`: reading overlaps the evaluation); with ``with_digest=False``,
    the records are read in the calling thread and nothing is hashed. Either way errors and warnings reach the
    loop as they were raised, after the records before them. ``header`` is set before the first record arrives.
    """

    def __init__(self, path: str, unsafe: bool = False, allow_truncated: bool = False, with_digest: bool = True):
        if not os.path.isfile(path):
            raise FileNotFoundError(f'predictions file not found: {os.path.abspath(path)}')
        self.path, self.unsafe, self.allow_truncated = path, unsafe, allow_truncated
        self.with_digest = with_digest
        self.header: Optional[Dict[str, Any]] = None
        self.num_records = 0
        self.complete = False

    def _load(self, f: Any, size: int, index: int) -> Tuple[str, Any]:
        """('ok', object) | ('eof', None) at a record boundary | ('partial', None) for a cut record."""
        start = f.tell()
        if start >= size:
            return 'eof', None
        try:
            return 'ok', unpickler(f, self.unsafe).load()
        except UnsafePickleError as err:
            raise err.located(describe(self.path, record=index)) from None
        except EOFError:
            return 'partial', None
        except pickle.UnpicklingError as err:
            if 'truncated' in str(err):
                return 'partial', None
            raise InputFileError(describe(self.path, record=index), f'is not a valid pickle record ({err})') from None
        except (ValueError, KeyError, TypeError, IndexError, AttributeError, ImportError, RuntimeError) as err:
            raise InputFileError(describe(self.path, record=index),
                                 f'is not a valid pickle record ({type(err).__name__}: {err})') from None

    def _truncated(self, why: str, last: Optional[Dict[str, Any]], warn: Warn) -> None:
        if self.num_records:
            good = f'the last good record is #{self.num_records - 1 + (self.header is not None)}'
            if isinstance(last, dict) and last.get('sample_idx') is not None:
                good += f' (sample_idx={last["sample_idx"]})'
        else:
            good = 'it holds no complete record'
        expected = (self.header or {}).get('expected_records')
        problem = f'{why}; {good}' + (f', of {expected} expected' if expected is not None else '') + \
            ' (was the file copied while still being written, or the disk full?)'
        if not self.allow_truncated:
            raise TruncatedStreamError(self.path, problem + '; pass --allow-missing (allow_missing=True) to '
                                                            'evaluate the records present')
        warn(f'{self.path}: {problem}; evaluating the {self.num_records} records present')

    def __iter__(self) -> Iterator[Tuple[int, Dict[str, Any]]]:
        if not self.with_digest:
            return self._records(_warn, UnhashedReader)
        if hashed_by_a_process(self.path):
            return self._records(_warn, open_hashing_reader)
        return read_ahead(self._records)

    def _records(self, warn: Warn, open_reader: Callable[[str], Any] = HashingReader
                 ) -> Iterator[Tuple[int, Dict[str, Any]]]:
        """The records, read in the calling thread (``warn``: how warnings are issued; ``open_reader(path)``:
        the hashing reader of the file)."""
        self.header, self.num_records, self.complete = None, 0, False
        last: Optional[Dict[str, Any]] = None
        with open_reader(self.path) as f:
            size = f.size
            state, first = self._load(f, size, 0)
            if state == 'eof':
                self._truncated('the file is empty (no header, no record)', None, warn)
                return
            if state == 'partial':
                self._truncated('the file ends inside its first record', None, warn)
                return
            if isinstance(first, list):  # mmengine DumpResults: one pickled list
                from .pickles import PickledRecord
                if first and isinstance(first[0], PickledRecord):
                    raise InputFileError(self.path, 'is a list of OpenPSG Result objects (OpenPSG\'s tools/test.py '
                                                    '--out result.pkl): read it with --format openpsg')
                warn(f'{self.path}: a pickled list (mmengine DumpResults), not a versioned prediction '
                     f'stream: a truncated file cannot be detected')
                for record in first:
                    yield self.num_records, record
                    self.num_records += 1
                self.complete = True
                return
            arrays = False  # version-2 records hold numpy arrays for the tensors
            if _mark(first) == 'header':
                self.header = first
                version = first.get('format_version')
                if not isinstance(version, int) or version > FORMAT_VERSION:
                    raise InputFileError(describe(self.path, record=0),
                                         f'stream format version {version!r} is newer than this reader '
                                         f'(version {FORMAT_VERSION}); update mmsgg_eval')
                arrays = version >= 2
            else:
                warn(f'{self.path}: prediction stream without header (written by an older version): '
                     f'a truncated file cannot be detected')
                if _mark(first) is None:
                    yield 0, first
                    self.num_records = 1
                    last = first
            while True:
                index = self.num_records + (self.header is not None)
                state, obj = self._load(f, size, index)
                if state == 'eof':
                    if self.header is None:
                        self.complete = True
                    else:
                        self._truncated('the stream has no closing record', last, warn)
                    return
                if state == 'partial':
                    self._truncated(f'the stream ends inside record #{index}', last, warn)
                    return
                if _mark(obj) == 'end':
                    self._check_end(obj, f, size, index)
                    self.complete = True
                    return
                if not isinstance(obj, dict) or _mark(obj) is not None:
                    raise InputFileError(describe(self.path, record=index),
                                         f'expected a data-sample dict, got {type(obj).__name__}')
                if arrays:
                    obj = _as_tensors(obj)
                yield index, obj
                self.num_records += 1
                last = obj

    def _check_end(self, end: Dict[str, Any], f: Any, size: int, index: int) -> None:
        if end.get('num_records') != self.num_records:
            raise InputFileError(describe(self.path, record=index),
                                 f'the closing record counts {end.get("num_records")!r} records, the stream holds '
                                 f'{self.num_records}')
        if f.tell() != size:
            raise InputFileError(describe(self.path, record=index + 1),
                                 f'{size - f.tell()} bytes follow the closing record (two streams concatenated?)')


def iter_records(path: str, unsafe: bool = False, allow_truncated: bool = False) -> Iterator[Dict[str, Any]]:
    """The data-sample records of a prediction stream (or of a pickled list), one at a time."""
    for _, record in PredictionStream(path, unsafe, allow_truncated):
        yield record
