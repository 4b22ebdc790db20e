"""Reading a file once: its SHA-256 taken from the bytes as they are read, and records read ahead by a thread.

The offline CLI reads a prediction stream front to back and records the file's SHA-256 in ``metrics.json``'s
provenance. A separate hashing pass read every byte twice (for a VG150-test-sized SGDet stream, ~34 GB, that
pass alone is about as long as the evaluation); :class:`HashingReader` hashes the bytes the reader reads, and
when it has read the whole file :func:`known_sha256` gives that digest (for the file as it is on disk then:
path, size, modification time and inode must still match) to
:func:`mmsgg_eval.runner.results.file_fingerprint`, which hashes the file itself otherwise.

:func:`read_ahead` runs a reader (reading, hashing, unpickling) in a thread, a bounded number of records ahead
of the consumer (the evaluation), so that the disk, the hash and the evaluation overlap: file reads and hashing
release the GIL, as torch's kernels do. Errors of the reader reach the consumer unchanged (same type and
message), in order after the records read before them; warnings are re-issued by the consumer's thread.
"""
import hashlib
import os
import queue
import threading
import warnings
from collections import OrderedDict
from typing import Any, Callable, Iterator, Optional, Tuple, TypeVar

T = TypeVar('T')

#: Files whose digest is remembered (the most recent ones; a run reads a few prediction files).
REMEMBERED_FILES = 64
#: Records :func:`read_ahead` reads ahead of the consumer by default (SGDet with all pairs: ~1.3 MB each).
READ_AHEAD_RECORDS = 8

_digests: 'OrderedDict[Tuple[Any, ...], str]' = OrderedDict()
_lock = threading.Lock()


def _identity(path: str, stat: os.stat_result) -> Tuple[Any, ...]:
    """What must not change for a remembered digest to hold: absolute path, size, mtime (ns), inode, device."""
    return (os.path.abspath(path), stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_dev)


def known_sha256(path: str) -> Optional[str]:
    """The SHA-256 (hex) of ``path`` taken while a :class:`HashingReader` read it whole, when the file is still
    the one read (same path, size, modification time, inode); else None."""
    try:
        key = _identity(path, os.stat(path))
    except OSError:
        return None
    with _lock:
        return _digests.get(key)


def forget_digests() -> None:
    """Forget every remembered digest (tests)."""
    with _lock:
        _digests.clear()


class HashingReader:
    """A binary file opened for reading front to back whose bytes are SHA-256 hashed as they are read (``read``,
    ``readinto``, ``readline``: what an unpickler calls). When it has read the whole file, the digest is kept
    for :func:`known_sha256`. Seeking is not offered (the hash would no longer be of the file)."""

    def __init__(self, path: str) -> None:
        self._file = open(path, 'rb')
        self._key = _identity(path, os.fstat(self._file.fileno()))
        self.size = self._key[1]
        self._hash = hashlib.sha256()
        self._position = 0

    def read(self, size: int = -1) -> bytes:
        data = self._file.read(size)
        self._hash.update(data)
        self._position += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        count = self._file.readinto(buffer)
        if count:
            with memoryview(buffer) as view:
                self._hash.update(view.cast('B')[:count])
            self._position += count
        return count

    def readline(self, size: int = -1) -> bytes:
        data = self._file.readline(size)
        self._hash.update(data)
        self._position += len(data)
        return data

    def tell(self) -> int:
        return self._position

    @property
    def digest(self) -> Optional[str]:
        """The hex SHA-256 of the file once every byte was read (else None)."""
        return self._hash.hexdigest() if self._position == self.size else None

    def close(self) -> None:
        if self._file.closed:
            return
        digest = self.digest
        if digest is not None and not self._file.read(1):  # the whole file, and nothing was appended meanwhile
            with _lock:
                _digests[self._key] = digest
                _digests.move_to_end(self._key)
                while len(_digests) > REMEMBERED_FILES:
                    _digests.popitem(last=False)
        self._file.close()

    def __enter__(self) -> 'HashingReader':
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


Warn = Callable[[str], None]


def read_ahead(make: Callable[[Warn], Iterator[T]], depth: int = READ_AHEAD_RECORDS) -> Iterator[T]:
    """The items of ``make(warn)``, produced by a reader thread at most ``depth`` items ahead.

    ``warn(message)`` (given to ``make``) issues a UserWarning from the consumer's thread, in order with the
    items. An exception raised by the reader is raised here unchanged, after the items before it; closing this
    generator early (or an error of the consumer) stops the reader and closes its iterator."""
    items: 'queue.Queue[Tuple[str, Any]]' = queue.Queue(maxsize=max(int(depth), 1))
    stop = threading.Event()

    def put(kind: str, value: Any) -> bool:
        while not stop.is_set():
            try:
                items.put((kind, value), timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        source = None
        try:
            source = make(lambda message: put('warn', message))
            for item in source:
                if not put('item', item):
                    return
            put('end', None)
        except BaseException as err:  # noqa: B902 - every error goes to the consumer
            put('error', err)
        finally:
            close = getattr(source, 'close', None)
            if close is not None:
                close()

    thread = threading.Thread(target=work, name='mmsgg_eval-reader', daemon=True)
    thread.start()
    try:
        while True:
            kind, value = items.get()
            if kind == 'item':
                yield value
            elif kind == 'warn':
                warnings.warn(value, UserWarning, stacklevel=2)
            elif kind == 'error':
                raise value
            else:
                return
    finally:
        stop.set()
        thread.join()
