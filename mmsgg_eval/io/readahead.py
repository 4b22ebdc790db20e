"""Reading a file once: its SHA-256 taken while it is read, and records read ahead by a thread.

The offline CLI reads a prediction stream front to back and records the file's SHA-256 in ``metrics.json``'s
provenance. A separate hashing pass afterwards read every byte twice (for a VG150-test-sized SGDet stream,
~34 GB, that pass alone is about as long as the evaluation). Two readers take the digest while the file is read
and remember it for :func:`known_sha256`, which gives it (for the file as it is on disk then: path, size,
modification time and inode must still match) to :func:`mmsgg_eval.runner.results.file_fingerprint`, which
hashes the file itself otherwise:

* :class:`ProcessHashingReader` (for files of at least :data:`HASH_PROCESS_MIN_BYTES` where
  :func:`can_start_a_hashing_process`, :func:`hashed_by_a_process`: POSIX systems, unless
  ``MMSGG_EVAL_HASH_PROCESS=0``): a process of its own (:mod:`mmsgg_eval.io.filehash`, standard library only)
  reads and hashes the same file beside the reader, the two at most :data:`HASH_PROCESS_LEAD_BYTES` apart (a
  file larger than the page cache is read from the disk once: the hashing process reads it first, the reader
  finds its pages cached; where hashing is the slower, the reader waits for it, so progress shown is true
  progress). Hashing is then off the reading process: a hashing thread there
  would need the interpreter lock between blocks and waits for it while the evaluation runs Python code
  (measured: SHA-256 at less than half its speed);
* :class:`HashingReader`: the bytes hashed in the reading thread as they are read (small files, other systems);
* :class:`UnhashedReader`: no digest (a file whose digest nobody records).

:func:`read_ahead` runs a reader (reading, unpickling) in a thread, a bounded number of records ahead of the
consumer (the evaluation), so that the disk and the evaluation overlap: file reads and hashing release the GIL,
as torch's kernels do. Errors of the reader reach the consumer unchanged (same type and message), in order after
the records read before them; warnings are re-issued by the consumer's thread.
"""
import hashlib
import os
import queue
import subprocess
import sys
import threading
import warnings
from collections import OrderedDict
from typing import Any, Callable, Iterator, Optional, Tuple, TypeVar, Union

from . import filehash

T = TypeVar('T')

#: Files whose digest is remembered (the most recent ones; a run reads a few prediction files).
REMEMBERED_FILES = 64
#: Records :func:`read_ahead` reads ahead of the consumer by default (SGDet with all pairs: ~1.3 MB each).
READ_AHEAD_RECORDS = 8
#: Files of at least this many bytes are hashed by a process of their own (:class:`ProcessHashingReader`; it
#: starts in ~25 ms, about the time of hashing 32 MiB in the reading thread).
HASH_PROCESS_MIN_BYTES = 32 << 20
#: How many bytes the hashing process and the reader may be apart (either ahead).
HASH_PROCESS_LEAD_BYTES = 256 << 20

_digests: 'OrderedDict[Tuple[Any, ...], str]' = OrderedDict()
_lock = threading.Lock()


def _identity(path: str, stat: os.stat_result) -> Tuple[Any, ...]:
    """What must not change for a remembered digest to hold: absolute path, size, mtime (ns), inode, device."""
    return (os.path.abspath(path),) + filehash.file_identity(stat)


def _remember(key: Tuple[Any, ...], digest: str) -> None:
    with _lock:
        _digests[key] = digest
        _digests.move_to_end(key)
        while len(_digests) > REMEMBERED_FILES:
            _digests.popitem(last=False)


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


class _ReadOnce:
    """A binary file opened for reading front to back (``read``, ``readinto``, ``readline``: what an unpickler
    calls; ``tell``); each piece read goes to :meth:`_took`. Closing remembers :attr:`digest` for
    :func:`known_sha256` when the whole file was read and nothing was appended meanwhile. Seeking is not offered
    (the digest would no longer be of the file)."""

    def __init__(self, path: str) -> None:
        self._file = open(path, 'rb')
        self._stat = os.fstat(self._file.fileno())
        self._key = _identity(path, self._stat)
        self.size = self._stat.st_size
        self._position = 0

    def _took(self, data: Any) -> None:
        """The bytes just read (``bytes`` or a byte ``memoryview``), after ``_position`` counted them."""

    def _stop(self) -> None:
        """Closing: stop what hashes the file (after :attr:`digest` was taken)."""

    @property
    def digest(self) -> Optional[str]:
        """The hex SHA-256 of the file once every byte was read (else None)."""
        raise NotImplementedError

    def read(self, size: int = -1) -> bytes:
        data = self._file.read(size)
        self._position += len(data)
        self._took(data)
        return data

    def readinto(self, buffer: Any) -> int:
        count = self._file.readinto(buffer)
        if count:
            self._position += count
            with memoryview(buffer) as view, view.cast('B') as flat:
                self._took(flat[:count])
        return count

    def readline(self, size: int = -1) -> bytes:
        data = self._file.readline(size)
        self._position += len(data)
        self._took(data)
        return data

    def tell(self) -> int:
        return self._position

    def close(self) -> None:
        if self._file.closed:
            return
        digest = self.digest
        self._stop()
        if digest is not None and not self._file.read(1):  # the whole file, and nothing was appended meanwhile
            _remember(self._key, digest)
        self._file.close()

    def __enter__(self) -> '_ReadOnce':
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class UnhashedReader(_ReadOnce):
    """A binary file read front to back without its digest (see :class:`_ReadOnce`; :attr:`digest` is None)."""

    @property
    def digest(self) -> Optional[str]:
        return None


class HashingReader(_ReadOnce):
    """A binary file read front to back whose bytes are SHA-256 hashed as they are read, in the reading thread
    (see :class:`_ReadOnce`)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._hash = hashlib.sha256()

    def _took(self, data: Any) -> None:
        self._hash.update(data)

    @property
    def digest(self) -> Optional[str]:
        """The hex SHA-256 of the file once every byte was read (else None)."""
        return self._hash.hexdigest() if self._position == self.size else None


class ProcessHashingReader(_ReadOnce):
    """A binary file read front to back (see :class:`_ReadOnce`) while a process of its own reads and
    SHA-256-hashes the same file (:mod:`mmsgg_eval.io.filehash`); neither runs more than ``lead`` bytes ahead of
    the other (their positions exchanged every ``lead // 8`` bytes): the reader waits for the hash where hashing
    is the slower, so its progress is the true one. When this reader has read the whole file, :attr:`digest`
    waits for the process and gives its digest (None if the file it hashed was not the one opened here, or it
    could not hash all of it). Closing before the end stops the process. ``OSError`` when the process cannot
    start.
    """

    def __init__(self, path: str, lead: int = HASH_PROCESS_LEAD_BYTES) -> None:
        if not can_start_a_hashing_process():
            raise OSError('this interpreter does not start the hashing process (can_start_a_hashing_process)')
        super().__init__(path)
        self._lead = max(int(lead), 1)
        self._next_report = 0
        self._hashed = 0  # the bytes the process reported hashed
        self._result: Optional[str] = None
        self._finished = False
        self._process: Optional[subprocess.Popen] = None
        try:
            self._process = subprocess.Popen(
                [sys.executable, '-I', '-S', filehash.__file__, os.path.abspath(path),
                 *map(str, filehash.file_identity(self._stat)), str(self._lead)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            self._channel = filehash.Channel(self._process.stdout.fileno(), self._process.stdin.fileno())
        except BaseException:  # (no process left behind: stopped when it started)
            self._file.close()
            if self._process is not None:
                self._finish(wait=False)
            raise

    def _hear(self, wait: bool) -> None:
        """Take the process's messages: its position, its result (then it ends), or that it refused the file."""
        for line in self._channel.receive(wait):
            words = line.split()
            if len(words) in (2, 3) and words[-1].isdigit():
                self._hashed = max(self._hashed, int(words[-1]))
                if words[0] == b'sha256' and int(words[-1]) == self.size:
                    self._result = words[1].decode('ascii')

    def _took(self, data: Any) -> None:
        """Every ``lead // 8`` bytes: report the position, take the process's reports, and wait while ``lead``
        bytes ahead of its hash (until it catches up or ends)."""
        if self._position < self._next_report:
            return
        self._next_report = self._position + max(self._lead // 8, 1)
        self._channel.send(b'%d' % self._position)
        self._hear(wait=False)
        while not self._channel.closed and self._position >= self._hashed + self._lead:
            self._hear(wait=True)

    def _finish(self, wait: bool) -> None:
        """End the process: with ``wait``, tell it the reader is done and take its result; else stop it."""
        if self._finished:
            return
        self._finished = True
        process = self._process
        ended = False
        try:
            if wait:
                self._channel.send(b'end', wait=True)
                while not self._channel.closed:
                    self._hear(wait=True)
                ended = True
        finally:  # also when interrupted while waiting for the result
            if not ended:
                process.kill()
            process.wait()
            for pipe in (process.stdin, process.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass

    def _stop(self) -> None:
        self._finish(wait=False)

    @property
    def digest(self) -> Optional[str]:
        """The hex SHA-256 of the file once every byte was read (else None); waits for the hashing process."""
        if self._position != self.size:
            return None
        self._finish(wait=True)
        return self._result


def can_start_a_hashing_process() -> bool:
    """Whether this interpreter may start the hashing process: a POSIX system, an interpreter that is a plain
    ``python`` / ``pypy`` executable (not a frozen application or a program embedding Python, which would not
    run the script), and no ``MMSGG_EVAL_HASH_PROCESS=0`` in the environment."""
    name = os.path.basename(sys.executable or '').lower()
    return (os.name == 'posix' and not getattr(sys, 'frozen', False) and name.startswith(('python', 'pypy'))
            and os.environ.get('MMSGG_EVAL_HASH_PROCESS', '1') != '0')


def hashed_by_a_process(path: str) -> bool:
    """Whether ``path`` is read beside a hashing process (:func:`open_hashing_reader`): a file of at least
    :data:`HASH_PROCESS_MIN_BYTES` where :func:`can_start_a_hashing_process`."""
    try:
        return os.path.getsize(path) >= HASH_PROCESS_MIN_BYTES and can_start_a_hashing_process()
    except OSError:
        return False


def open_hashing_reader(path: str) -> Union[HashingReader, ProcessHashingReader]:
    """A :class:`ProcessHashingReader` of ``path`` (for a file where :func:`hashed_by_a_process`: the caller
    decides), or a :class:`HashingReader` when its process cannot start."""
    try:
        return ProcessHashingReader(path)
    except OSError:
        return HashingReader(path)


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
