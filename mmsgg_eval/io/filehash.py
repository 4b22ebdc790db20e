"""The SHA-256 of a file, in one pass that reads it in blocks into one reused buffer (standard library only).

:func:`sha256_file` is the hash that ``metrics.json``'s provenance records for each input file. This module is
also the program of the **hashing process** of :class:`mmsgg_eval.io.readahead.ProcessHashingReader`: run as a
script (``python -I -S filehash.py ...``, so that it starts in milliseconds and imports nothing outside the
standard library, not even this package), it hashes a file while the process that started it reads the same
file, at most ``lead`` bytes ahead of the position that process reports on the script's standard input (one
decimal byte offset per line; ``end`` once it has read the whole file), so that a file larger than the page
cache is not read from the disk twice. It prints ``sha256 HEX BYTES`` (the digest and the number of bytes
hashed) or ``changed`` when the file it opened is not the file described by its arguments (size, modification
time in ns, inode, device), and stops early when its standard input closes without ``end`` (the reader gave up).
"""
import hashlib
import os
import sys
from typing import Any, BinaryIO, Callable, Optional, Tuple

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


class _Pacing:
    """The reader's position, read from ``lines`` (a binary stream) when the hash is ``lead`` bytes ahead."""

    def __init__(self, lines: Any, lead: int) -> None:
        self.lines, self.lead = lines, lead
        self.reader_at = 0
        self.reader_done = False

    def may_read(self, hashed: int) -> bool:
        """False once the reader gave up (its pipe closed without ``end``); waits while ``lead`` bytes ahead."""
        while not self.reader_done and hashed >= self.reader_at + self.lead:
            line = self.lines.readline()
            if not line:
                return False
            if line.strip() == b'end':
                self.reader_done = True
            else:
                self.reader_at = max(self.reader_at, int(line))
        return True


def main(argv: Any = None) -> int:
    """``filehash.py PATH SIZE MTIME_NS INODE DEVICE LEAD``: the hashing process (see the module docstring)."""
    path, *numbers = sys.argv[1:] if argv is None else argv
    expected, lead = tuple(int(n) for n in numbers[:4]), int(numbers[4])
    with open(path, 'rb', buffering=0) as f:
        if file_identity(os.fstat(f.fileno())) != expected:
            os.write(sys.stdout.fileno(), b'changed\n')
            return 0
        digest, total = sha256_stream(f, before_block=_Pacing(sys.stdin.buffer, lead).may_read)
    try:
        os.write(sys.stdout.fileno(), f'sha256 {digest} {total}\n'.encode())
    except OSError:  # the reader is gone
        pass
    return 0


if __name__ == '__main__':
    sys.exit(main())
