"""Reading a prediction stream once: the SHA-256 of provenance taken while reading, records read ahead by a thread
(:mod:`mmsgg_eval.io.readahead`), with the same records, errors and warnings as a reader in the calling thread."""
import hashlib
import os
import pickle
import threading
import time
import warnings

import pytest

from mmsgg_eval.benchmarks.workloads import make_workload
from mmsgg_eval.io.errors import InputFileError, TruncatedStreamError
from mmsgg_eval.io.readahead import HashingReader, forget_digests, known_sha256, read_ahead
from mmsgg_eval.io.stream import PredictionStream, StreamWriter
from mmsgg_eval.runner.results import file_fingerprint


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
