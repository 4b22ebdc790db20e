"""The SHA-256 of a file, in one pass that reads it in blocks into one reused buffer (standard library only).

:func:`sha256_file` is the hash that ``metrics.json``'s provenance records for each input file. This module is
also the program of the **hashing process** of :class:`mmsgg_eval.io.readahead.ProcessHashingReader`: run as a
script (``python -I -S filehash.py PATH SIZE MTIME_NS INODE DEVICE LEAD``, so that it starts in milliseconds and
imports nothing outside the standard library, not even this package), it hashes a file while the process that
started it reads the same file. The two keep within ``LEAD`` bytes of each other over a :class:`Channel` (the
script's standard input and output, one line per message): each reports its position (the reader a decimal byte
offset, the script ``at N``) every ``LEAD // 8`` bytes and before it waits; the script waits while ``LEAD`` bytes
ahead of the reader (a file larger than the page cache is then not read from the disk twice), the reader while
``LEAD`` bytes ahead of the script (its progress is then the evaluation's true progress, without a wait for the
hash at the end). The reader sends ``end`` once it has read the whole file. The script ends with ``sha256 HEX
BYTES`` (the digest and the number of bytes hashed), or ``changed`` when the file it opened is not the file
described by its arguments (size, modification time in ns, inode, device); it stops early when its standard
input closes without ``end`` (the reader gave up).
"""
import hashlib
import os
import select
import sys
from typing import Any, BinaryIO, Callable, List, Optional, Tuple

#: Bytes read per block (one buffer, reused: no memory is allocated per block).
BLOCK_BYTES = 1 << 20


def sha256_stream(f: BinaryIO, block_bytes: int = BLOCK_BYTES,
                  before_block: Optional[Callable[[int], bool]] = None) -> Tuple[str, int]:
    """Hex SHA-256 and byte count of what ``f`` (opened in binary mode) yields from its position to its end.
    ``before_block(bytes hashed so far)`` is called before each block; False stops early (the digest is then of
    the part read)."""
    digest = hashlib.sha256()
    buffer = bytearray(block_bytes)
    total = 0
    with memoryview(buffer) as view:
        while before_block is None or before_block(total):
            count = f.readinto(buffer)
            if not count:
                break
            digest.update(view[:count])
            total += count
    return digest.hexdigest(), total


def sha256_file(path: str, block_bytes: int = BLOCK_BYTES) -> str:
    """Hex SHA-256 of the file ``path``, read once in blocks of ``block_bytes`` (memory does not grow with it)."""
    with open(path, 'rb', buffering=0) as f:
        return sha256_stream(f, block_bytes)[0]


def file_identity(stat: os.stat_result) -> Tuple[int, int, int, int]:
    """What identifies one version of a file here: size, modification time (ns), inode, device."""
    return stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_dev


class Channel:
    """Lines exchanged with the other side over two pipes (``read_fd``, ``write_fd``), neither end ever blocking
    the other: :meth:`send` does not wait for room unless told to (a report that finds a full pipe is left: the
    other side reads its pipe at each of its steps, so it is not waiting for it), :meth:`receive` gives the
    complete lines that arrived (with ``wait``, at least one, or the end of the pipe). ``closed``: the other side
    closed its end (ended, or was stopped)."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd, self.write_fd = read_fd, write_fd
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        self.closed = False
        self._partial = b''

    def send(self, line: bytes, wait: bool = False) -> None:
        try:
            if wait:
                os.set_blocking(self.write_fd, True)
            os.write(self.write_fd, line + b'\n')
        except OSError:  # BlockingIOError: a full pipe (see the class docstring); else the other side ended
            pass

    def receive(self, wait: bool = False) -> List[bytes]:
        lines: List[bytes] = []
        while not self.closed:
            try:
                chunk = os.read(self.read_fd, 1 << 16)
            except BlockingIOError:
                if lines or not wait:
                    break
                select.select([self.read_fd], [], [])
                continue
            if not chunk:
                self.closed = True
                break
            *complete, self._partial = (self._partial + chunk).split(b'\n')
            lines.extend(complete)
        return lines


class _Pacing:
    """The hashing process's side of the pacing: its position reported every ``lead // 8`` bytes and before it
    waits, the reader's reports taken at each block, and a wait while ``lead`` bytes ahead of the reader."""

    def __init__(self, channel: Channel, lead: int) -> None:
        self.channel, self.lead = channel, lead
        self.reader_at = 0
        self.reader_done = False
        self._next_report = 0
        self._said = -1

    def _report(self, hashed: int) -> None:
        self._next_report, self._said = hashed + max(self.lead // 8, 1), hashed
        self.channel.send(b'at %d' % hashed)

    def _hear(self, wait: bool) -> None:
        for line in self.channel.receive(wait):
            if line == b'end':
                self.reader_done = True
            elif line:
                self.reader_at = max(self.reader_at, int(line))

    def may_read(self, hashed: int) -> bool:
        """Before the block after ``hashed`` bytes: False once the reader is gone (its pipe closed without
        ``end``); waits while ``lead`` bytes ahead of it."""
        if hashed >= self._next_report:
            self._report(hashed)
        self._hear(wait=False)
        if not self.reader_done and hashed >= self.reader_at + self.lead:
            if self._said != hashed:
                self._report(hashed)  # the reader may be waiting for it
            while not self.reader_done and not self.channel.closed and hashed >= self.reader_at + self.lead:
                self._hear(wait=True)
        return self.reader_done or not self.channel.closed


def main(argv: Any = None) -> int:
    """``filehash.py PATH SIZE MTIME_NS INODE DEVICE LEAD``: the hashing process (see the module docstring)."""
    path, *numbers = sys.argv[1:] if argv is None else argv
    expected, lead = tuple(int(n) for n in numbers[:4]), int(numbers[4])
    channel = Channel(sys.stdin.fileno(), sys.stdout.fileno())
    with open(path, 'rb', buffering=0) as f:
        if file_identity(os.fstat(f.fileno())) != expected:
            channel.send(b'changed', wait=True)
            return 0
        digest, total = sha256_stream(f, before_block=_Pacing(channel, lead).may_read)
    channel.send(b'sha256 %s %d' % (digest.encode(), total), wait=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
