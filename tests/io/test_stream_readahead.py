"""Reading a prediction stream once: the SHA-256 of provenance taken while reading (by the reader, or by a process
of its own beside it for large files), records read ahead by a thread (:mod:`mmsgg_eval.io.readahead`), with the
same records, errors and warnings as a reader in the calling thread."""
import hashlib
import json
import os
import pickle
import threading
import time
import warnings

import pytest
import torch

from mmsgg_eval.benchmarks.workloads import make_workload
from mmsgg_eval.io import readahead
from mmsgg_eval.io.errors import InputFileError, TruncatedStreamError
from mmsgg_eval.io.readahead import HashingReader, forget_digests, known_sha256, read_ahead
from mmsgg_eval.io.stream import PredictionStream, StreamWriter
from mmsgg_eval.runner.results import file_fingerprint
from tests.offline.test_eval_cli import sample  # noqa: F401,F811  (module fixture)


def _write(path, samples):
    with StreamWriter(str(path), expected_records=len(samples)) as writer:
        for s in samples:
            writer.write(s)
    return str(path)


def _separate_pass(path):
    return hashlib.sha256(open(path, 'rb').read()).hexdigest()


@pytest.fixture
def stream(tmp_path):
    forget_digests()
    yield _write(tmp_path / 'preds.pkl', make_workload('variable', 12))
    forget_digests()


def test_provenance_hash_is_the_separate_pass_hash(stream):
    assert known_sha256(stream) is None
    before = file_fingerprint(stream)  # nothing read yet: hashed by its own pass
    records = list(PredictionStream(stream))
    assert len(records) == 12
    assert known_sha256(stream) == _separate_pass(stream) == before['sha256']
    assert file_fingerprint(stream) == before  # now from the read


def test_a_changed_or_partly_read_file_is_hashed_again(stream, tmp_path):
    for _ in PredictionStream(stream):
        break  # stopped early: not every byte was read
    assert known_sha256(stream) is None
    list(PredictionStream(stream))
    assert known_sha256(stream) is not None
    with open(stream, 'ab') as f:
        f.write(b'x')
    assert known_sha256(stream) is None  # size and mtime changed
    assert file_fingerprint(stream)['sha256'] == _separate_pass(stream)


def test_hashing_reader_counts_every_read_kind(tmp_path):
    path = tmp_path / 'bytes.bin'
    data = bytes(range(256)) * 100 + b'\nline\n'
    path.write_bytes(data)
    forget_digests()
    with HashingReader(str(path)) as f:
        head = f.read(1000)
        buf = bytearray(20000)
        count = f.readinto(buf)
        rest = f.readline() + f.read()
        assert f.tell() == len(data) and f.digest == hashlib.sha256(data).hexdigest()
    assert head + bytes(buf[:count]) + rest == data
    assert known_sha256(str(path)) == hashlib.sha256(data).hexdigest()


def _in_thread_records(path, **kwargs):
    """The records and the error / warnings of the reader run in the calling thread (no read-ahead)."""
    stream = PredictionStream(path, **kwargs)
    caught = []
    try:
        return list(stream._records(caught.append)), None, caught
    except Exception as err:  # noqa: B902
        return None, err, caught


def _read_ahead_records(path, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        try:
            return list(PredictionStream(path, **kwargs)), None, [str(w.message) for w in caught]
        except Exception as err:  # noqa: B902
            return None, err, [str(w.message) for w in caught]


def test_truncated_stream_is_the_same_clear_error(stream, tmp_path):
    cut = tmp_path / 'cut.pkl'
    cut.write_bytes(open(stream, 'rb').read()[:-5000])
    _, err, _ = _read_ahead_records(str(cut))
    _, ref, _ = _in_thread_records(str(cut))
    assert type(err) is TruncatedStreamError and str(err) == str(ref)
    assert 'ends inside record' in str(err) and 'sample_idx=' in str(err)
    records, err, messages = _read_ahead_records(str(cut), allow_truncated=True)
    ref_records, _, ref_messages = _in_thread_records(str(cut), allow_truncated=True)
    assert err is None and len(records) == len(ref_records) and messages == ref_messages
    assert known_sha256(str(cut)) is None or known_sha256(str(cut)) == _separate_pass(str(cut))


def test_bad_record_error_names_the_record(stream, tmp_path):
    bad = tmp_path / 'bad.pkl'
    with open(stream, 'rb') as src, open(bad, 'wb') as out:
        header = pickle.load(src)
        first = pickle.load(src)
        pickle.dump(header, out, protocol=5)
        pickle.dump(first, out, protocol=5)
        pickle.dump(['not', 'a', 'sample'], out, protocol=5)
    _, err, _ = _read_ahead_records(str(bad))
    _, ref, _ = _in_thread_records(str(bad))
    assert isinstance(err, InputFileError) and str(err) == str(ref)
    assert 'record #2' in str(err) and 'expected a data-sample dict' in str(err)


def test_read_ahead_overlaps_and_stops_with_its_consumer():
    produced, closed = [], []

    def make(warn):
        try:
            for i in range(100):
                produced.append(i)
                yield i
        finally:
            closed.append(True)

    threads = threading.active_count()
    items = read_ahead(make, depth=3)
    assert next(items) == 0
    deadline = time.time() + 5
    while len(produced) < 4 and time.time() < deadline:  # read ahead while the consumer does something else
        time.sleep(0.01)
    assert 4 <= len(produced) <= 6  # ahead, but bounded by the depth
    items.close()
    assert closed == [True] and threading.active_count() == threads


def test_read_ahead_error_after_the_items_before_it():
    def make(warn):
        yield 1
        warn('careful')
        yield 2
        raise InputFileError('preds.pkl record #3', 'is not a valid pickle record (boom)', sample='sample_idx=3')

    got = []
    with pytest.warns(UserWarning, match='careful'):
        with pytest.raises(InputFileError, match=r'preds.pkl record #3 \(sample_idx=3\): is not a valid pickle'):
            for item in read_ahead(make):
                got.append(item)
    assert got == [1, 2]


def test_offline_benchmark_reports_the_reading_bound(tmp_path):
    from mmsgg_eval.benchmarks.offline import read_and_hash
    path = _write(tmp_path / 's.pkl', make_workload('triplets', 3))
    assert read_and_hash(path) == _separate_pass(path)
    assert os.path.getsize(path) > 0


# --- the hashing process (large files on POSIX systems) ---------------------------------------------------------

posix_only = pytest.mark.skipif(os.name != 'posix', reason='the hashing process is used on POSIX systems')


@pytest.fixture
def hashed_by_process(monkeypatch):
    """Every file counts as large: PredictionStream reads in the calling thread beside a hashing process."""
    monkeypatch.setattr(readahead, 'HASH_PROCESS_MIN_BYTES', 0)
    started = []
    real = readahead.ProcessHashingReader.__init__

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        started.append(self._process)

    monkeypatch.setattr(readahead.ProcessHashingReader, '__init__', spy)
    return started


def _same_records(a, b):
    assert [i for i, _ in a] == [i for i, _ in b]
    for (_, x), (_, y) in zip(a, b):
        assert x.keys() == y.keys()
        assert all(torch.equal(x['pred_relations'][k], y['pred_relations'][k]) for k in x['pred_relations'])


@posix_only
def test_process_hashed_stream_reads_the_same_records_and_digest(stream, hashed_by_process):
    reference, _, _ = _in_thread_records(stream)
    forget_digests()
    records = list(PredictionStream(stream))
    assert len(hashed_by_process) == 1 and hashed_by_process[0].returncode == 0
    _same_records(records, reference)
    assert known_sha256(stream) == _separate_pass(stream)


def test_stream_read_without_its_digest(stream, hashed_by_process, monkeypatch):
    """with_digest=False (the rank parts a dump merges): the same records, read in the calling thread, nothing
    hashed and no process started."""
    reference, _, _ = _in_thread_records(stream)
    forget_digests()
    import mmsgg_eval.io.stream as stream_module
    monkeypatch.setattr(stream_module, 'read_ahead', None)  # no reader thread
    monkeypatch.setattr(readahead.hashlib, 'sha256', None)  # nothing hashed
    records = list(PredictionStream(stream, with_digest=False))
    _same_records(records, reference)
    assert hashed_by_process == [] and known_sha256(stream) is None


@posix_only
def test_process_hashed_stream_stopped_early_stops_the_process(stream, hashed_by_process):
    for _ in PredictionStream(stream):
        break
    process = hashed_by_process[0]
    assert process.returncode is not None  # waited for: no process left behind
    assert known_sha256(stream) is None


@posix_only
def test_process_hashed_truncated_stream_is_the_same_error(stream, tmp_path, hashed_by_process):
    cut = tmp_path / 'cut.pkl'
    cut.write_bytes(open(stream, 'rb').read()[:-5000])
    _, err, _ = _read_ahead_records(str(cut))
    _, ref, _ = _in_thread_records(str(cut))
    assert type(err) is TruncatedStreamError and str(err) == str(ref)
    records, err, messages = _read_ahead_records(str(cut), allow_truncated=True)
    ref_records, _, ref_messages = _in_thread_records(str(cut), allow_truncated=True)
    assert err is None and len(records) == len(ref_records) and messages == ref_messages
    assert known_sha256(str(cut)) == _separate_pass(str(cut))  # every byte was read
    assert all(p.returncode is not None for p in hashed_by_process)


@posix_only
@pytest.mark.parametrize('lead', [1, 1000, 1 << 30])
def test_hashing_process_paced_by_the_reader(tmp_path, lead):
    """However far the process may run ahead (1 byte: it waits for every report), reading every kind of call
    gives the digest of the file; the process ends."""
    path = tmp_path / 'bytes.bin'
    data = os.urandom(300_000) + b'\nline\n' + os.urandom(5_000)
    path.write_bytes(data)
    forget_digests()
    with readahead.ProcessHashingReader(str(path), lead=lead) as f:
        parts = [f.read(1000)]
        buf = bytearray(290_000)
        parts.append(bytes(buf[:f.readinto(buf)]))
        while True:
            line = f.readline()
            parts.append(line)
            if line.endswith(b'line\n'):
                break
        parts.append(f.read())
        assert f.tell() == len(data) and f.digest == hashlib.sha256(data).hexdigest()
    assert b''.join(parts) == data
    assert known_sha256(str(path)) == hashlib.sha256(data).hexdigest()
    assert f._process.returncode == 0


@posix_only
def test_hashing_process_refuses_another_file(tmp_path, monkeypatch):
    """The process hashes only the file the reader opened (size, mtime, inode, device): else no digest."""
    path = tmp_path / 'bytes.bin'
    path.write_bytes(os.urandom(10_000))
    forget_digests()
    real = readahead.filehash.file_identity
    monkeypatch.setattr(readahead.filehash, 'file_identity', lambda stat: (real(stat)[0] + 1,) + real(stat)[1:])
    with readahead.ProcessHashingReader(str(path)) as f:
        f.read()
        assert f.digest is None
    assert known_sha256(str(path)) is None
    monkeypatch.undo()
    assert file_fingerprint(str(path))['sha256'] == _separate_pass(str(path))


@posix_only
def test_hashing_process_killed_means_a_separate_pass(tmp_path):
    path = tmp_path / 'bytes.bin'
    path.write_bytes(os.urandom(50_000))
    forget_digests()
    with readahead.ProcessHashingReader(str(path), lead=1) as f:  # waits for the first report
        f._process.kill()
        f.read()
        assert f.digest is None
    assert known_sha256(str(path)) is None
    assert file_fingerprint(str(path))['sha256'] == _separate_pass(str(path))


@posix_only
def test_interrupted_while_waiting_for_the_digest_stops_the_process(tmp_path):
    """Ctrl-C while the reader waits for the hash at the end: the process is stopped and waited for."""
    import signal
    path = tmp_path / 'bytes.bin'
    path.write_bytes(os.urandom(1 << 20))
    with pytest.raises(KeyboardInterrupt):
        with readahead.ProcessHashingReader(str(path), lead=1 << 30) as f:
            os.kill(f._process.pid, signal.SIGSTOP)  # its result never comes
            f.read()
            receive = f._channel.receive

            def interrupted(wait=False):
                if wait:
                    raise KeyboardInterrupt
                return receive(wait)

            f._channel.receive = interrupted
            f.digest
    assert f._process.returncode is not None


@posix_only
def test_failing_after_the_process_started_stops_it(tmp_path, monkeypatch):
    """The process started, then the reader could not be made (its channel failed): the error comes through, the
    process is stopped and waited for, and the file is closed."""
    import subprocess
    path = tmp_path / 'bytes.bin'
    path.write_bytes(os.urandom(1 << 16))
    started = []
    popen = subprocess.Popen

    def recording(*args, **kwargs):
        started.append(popen(*args, **kwargs))
        return started[-1]

    def failing(*args):
        raise OSError('no channel')

    monkeypatch.setattr(readahead.subprocess, 'Popen', recording)
    monkeypatch.setattr(readahead.filehash, 'Channel', failing)
    opened = []
    monkeypatch.setattr(readahead._ReadOnce, '__init__', _recording_init(readahead._ReadOnce.__init__, opened))
    with pytest.raises(OSError, match='no channel'):
        readahead.ProcessHashingReader(str(path))
    assert len(started) == 1 and started[0].returncode is not None
    assert opened and opened[0]._file.closed


def _recording_init(init, opened):
    def recorded(self, *args, **kwargs):
        init(self, *args, **kwargs)
        opened.append(self)
    return recorded


@pytest.mark.parametrize('setting', [('executable', ''), ('executable', '/opt/app/uwsgi'), ('frozen', True),
                                     ('env', '0')])
def test_where_no_hashing_process_may_start_the_reader_hashes_itself(tmp_path, monkeypatch, setting):
    """No Python executable, a program embedding Python, a frozen application, MMSGG_EVAL_HASH_PROCESS=0: the
    reader hashes the bytes itself, and the digest is the same."""
    path = tmp_path / 'bytes.bin'
    data = os.urandom(20_000)
    path.write_bytes(data)
    forget_digests()
    monkeypatch.setattr(readahead, 'HASH_PROCESS_MIN_BYTES', 0)
    what, value = setting
    if what == 'env':
        monkeypatch.setenv('MMSGG_EVAL_HASH_PROCESS', value)
    else:
        monkeypatch.setattr(readahead.sys, what, value, raising=False)
    assert not readahead.hashed_by_a_process(str(path))
    with pytest.raises(OSError, match='does not start the hashing process'):
        readahead.ProcessHashingReader(str(path))
    with readahead.open_hashing_reader(str(path)) as f:
        assert isinstance(f, HashingReader)
        assert f.read() == data
    assert known_sha256(str(path)) == hashlib.sha256(data).hexdigest()


def test_small_files_and_other_systems_are_hashed_by_the_reader(tmp_path, monkeypatch):
    path = tmp_path / 'bytes.bin'
    path.write_bytes(b'x' * 100)
    assert not readahead.hashed_by_a_process(str(path))  # below HASH_PROCESS_MIN_BYTES
    monkeypatch.setattr(readahead, 'HASH_PROCESS_MIN_BYTES', 0)
    assert readahead.hashed_by_a_process(str(path)) == (os.name == 'posix')
    monkeypatch.setattr(readahead.os, 'name', 'nt')
    assert not readahead.hashed_by_a_process(str(path))


@pytest.fixture
def channels():
    """Two Channels joined by two pipes (as the reader and the hashing process are); the pipes closed after."""
    from mmsgg_eval.io.filehash import Channel
    a_to_b, b_to_a = os.pipe(), os.pipe()
    yield Channel(b_to_a[0], a_to_b[1]), Channel(a_to_b[0], b_to_a[1])
    for fd in (*a_to_b, *b_to_a):
        try:
            os.close(fd)
        except OSError:
            pass


@posix_only
def test_channel_lines_partial_writes_and_closing(channels):
    a, b = channels
    assert b.receive() == []  # nothing yet: no wait
    a.send(b'12')
    os.write(a.write_fd, b'3')  # half a line
    assert b.receive() == [b'12']
    os.write(a.write_fd, b'4\nend\n')
    assert b.receive(wait=True) == [b'34', b'end']
    os.close(a.write_fd)
    assert b.receive(wait=True) == [] and b.closed
    for _ in range(20000):  # a full pipe: the report is left, nothing waits
        b.send(b'0' * 100)


@posix_only
def test_pacing_reports_waits_for_the_reader_and_stops_when_it_gives_up(channels):
    from mmsgg_eval.io.filehash import _Pacing
    reader, hasher = channels
    pacing = _Pacing(hasher, lead=100)
    assert pacing.may_read(0) and reader.receive() == [b'at 0']
    assert pacing.may_read(10) and reader.receive() == []  # < lead // 8 since the last report
    assert pacing.may_read(20) and reader.receive() == [b'at 20']
    reader.send(b'100')
    reader.send(b'250')
    assert pacing.may_read(340) and pacing.reader_at == 250  # within the lead of the last report
    assert pacing.may_read(345) and reader.receive() == [b'at 340']
    waiting = threading.Thread(target=lambda: pacing.may_read(350))
    waiting.start()
    time.sleep(0.2)
    assert waiting.is_alive() and reader.receive() == [b'at 350']  # waits, having said where it is
    reader.send(b'350')
    waiting.join(5)
    assert not waiting.is_alive()
    reader.send(b'end')
    assert pacing.may_read(10 ** 12) and pacing.reader_done  # the reader read everything: no more waiting
    gone = _Pacing(hasher, lead=5)
    os.close(reader.write_fd)
    assert not gone.may_read(10)  # closed without 'end': the reader gave up


@posix_only
def test_reader_waits_for_a_slower_hashing_process(tmp_path):
    """A hashing process that falls behind (stopped here) holds the reader within the lead of its hash: the
    progress of the reading is that of the hash; once it goes on, both finish and the digest is the file's."""
    import signal
    path = tmp_path / 'bytes.bin'
    data = os.urandom(4 << 20)
    path.write_bytes(data)
    forget_digests()
    lead = 256 << 10
    with readahead.ProcessHashingReader(str(path), lead=lead) as f:
        os.kill(f._process.pid, signal.SIGSTOP)
        parts = []

        def read_all():
            while True:
                piece = f.read(64 << 10)
                if not piece:
                    return
                parts.append(piece)

        reading = threading.Thread(target=read_all)
        reading.start()
        time.sleep(0.5)
        assert reading.is_alive()
        assert f.tell() <= f._hashed + lead + lead // 8 + (64 << 10) < len(data)
        os.kill(f._process.pid, signal.SIGCONT)
        reading.join(10)
        assert not reading.is_alive() and b''.join(parts) == data
        assert f.digest == hashlib.sha256(data).hexdigest()
    assert known_sha256(str(path)) == hashlib.sha256(data).hexdigest()


def test_sha256_file_is_hashlib_for_any_block_size(tmp_path):
    from mmsgg_eval.io.filehash import sha256_file
    path = tmp_path / 'bytes.bin'
    for size in (0, 1, 4095, 4096, 100_001):
        data = os.urandom(size)
        path.write_bytes(data)
        for block in (1, 4096, 1 << 20):
            assert sha256_file(str(path), block) == hashlib.sha256(data).hexdigest()


@posix_only
def test_offline_cli_with_a_hashing_process(sample, tmp_path, monkeypatch):  # noqa: F811  (module fixture)
    """The offline CLI on a stream hashed by a process: the same metrics as with the reader hashing, and the
    provenance digest from that process (no separate pass over the file)."""
    from mmsgg_eval.eval import main
    from mmsgg_eval.runner import results
    from tests.io.test_inputs import write_stream
    from tests.offline.test_eval_cli import CONFIG
    from tests.offline.test_record_identity import options, stream_records
    path = tmp_path / 'test.pkl'
    write_stream(path, stream_records(sample['dataset']), expected=len(sample['dataset']))
    args = [CONFIG, str(path), '--metrics', 'SGRecall', 'SGMeanRecall', '--mode', 'sgdet', '--no-progress',
            *options(sample)]
    forget_digests()
    by_reader = main(args + ['--work-dir', str(tmp_path / 'reader')])
    forget_digests()
    monkeypatch.setattr(readahead, 'HASH_PROCESS_MIN_BYTES', 0)
    monkeypatch.setattr(results, 'sha256_file', None)  # a separate pass would fail
    by_process = main(args + ['--work-dir', str(tmp_path / 'process')])
    assert by_process == by_reader and by_process['sgdet/R@50'] > 20
    provenance = [json.load(open(tmp_path / run / 'metrics.json'))['provenance']['predictions']
                  for run in ('reader', 'process')]
    assert provenance[0] == provenance[1] and provenance[1]['sha256'] == _separate_pass(str(path))
