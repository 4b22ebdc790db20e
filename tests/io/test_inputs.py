"""The I/O package (mmsgg_eval.io) and the offline CLI's handling of incomplete or malformed inputs.

Covers: no import cycle and nothing imported from above io; the prediction stream (header, records, closing
record; truncation; older files); DumpSceneGraphPredictions registered by ``import mmsgg_eval`` and writing
the stream (one and two ranks); JSONL / VLM / grounding input errors naming file, line, sample and field;
missing samples (error unless --allow-missing, then empty predictions marked ``prediction_missing``); CLI
user errors as one message without traceback (``--debug`` keeps it); the refused pickle naming --unsafe-load.
"""
import ast
import json
import os
import os.path as osp
import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

from mmsgg_eval.eval import main
from mmsgg_eval.offline import evaluate_file
from mmsgg_eval.io.errors import InputFileError, MissingSamplesError, TruncatedStreamError, UnsafePickleError
from mmsgg_eval.io.jsonl import iter_jsonl
from mmsgg_eval.io.samples import MISSING_KEY, CoveredSamples, DatasetSamples
from mmsgg_eval.io.stream import MARK, PredictionStream, StreamWriter, iter_records
from mmsgg_eval.io.vlm import iter_vlm_answers, parse_vlm_output
from tests.offline.test_eval_cli import predictions_for, sample  # noqa: F401  (module fixture: the VG150 sample data)
from tests.tool_runs import load_tool

ROOT = osp.abspath(osp.join(osp.dirname(__file__), '..', '..'))
CONFIG = osp.join(ROOT, 'configs', 'demo', 'freq_predcls_vg150_sample.py')
IO_DIR = osp.join(ROOT, 'mmsgg_eval', 'io')
IO_MODULES = sorted(f[:-3] if f.endswith('.py') else f for f in os.listdir(IO_DIR)  # modules and packages
                    if (f.endswith('.py') and f != '__init__.py') or osp.isfile(osp.join(IO_DIR, f, '__init__.py')))


def io_sources(module):
    """(path, depth below io/) of a module's file, or of each file of a subpackage."""
    folder = osp.join(IO_DIR, module)
    if osp.isdir(folder):
        return [(osp.join(folder, f), 1) for f in sorted(os.listdir(folder)) if f.endswith('.py')]
    return [(folder + '.py', 0)]


def run_python(args, timeout=600):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''), OMP_NUM_THREADS='1')
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=timeout)


# ---------------------------------------------------------------------------------------------- layering
def test_each_io_module_imports_alone_and_nothing_above_io():
    assert IO_MODULES and 'stream' in IO_MODULES and 'vlm' in IO_MODULES
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''), OMP_NUM_THREADS='1')
    procs = {m: subprocess.Popen([sys.executable, '-c', f'import mmsgg_eval.io.{m}'], cwd=ROOT, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for m in IO_MODULES}  # a fresh interpreter per module (in parallel): an import cycle fails here
    for module, proc in procs.items():
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, f'mmsgg_eval.io.{module}: {err[-2000:]}'
    allowed = {'mmsgg_eval.io', 'mmsgg_eval.structures', 'mmsgg_eval.version'}
    graph = {}
    for module in IO_MODULES + ['__init__']:
        graph[module] = set()
        for path, depth in io_sources(module):
            tree = ast.parse(open(path).read())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level and node.level <= depth:
                    continue  # within the subpackage
                if isinstance(node, ast.ImportFrom) and node.level:
                    level = node.level - depth
                    base = 'mmsgg_eval.io' if level == 1 else 'mmsgg_eval'
                    target = base + ('.' + node.module if node.module else '')
                    assert any(target == a or target.startswith(a + '.') for a in allowed), (module, target)
                    if level == 1 and node.module:
                        graph[module].add(node.module.split('.')[0])
                if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    assert not node.module.startswith('mmsgg_eval') or \
                        any(node.module.startswith(a) for a in allowed), (module, node.module)
    order, state = [], {}

    def visit(m, path):  # depth-first: no module reaches itself through the io imports (deferred ones too)
        assert state.get(m) != 'open', f'import cycle: {" -> ".join(path + [m])}'
        if state.get(m) is None:
            state[m] = 'open'
            for dep in sorted(graph.get(m, ())):
                visit(dep, path + [m])
            state[m] = 'done'
            order.append(m)

    for m in graph:
        visit(m, [])
    assert set(order) == set(graph)


def test_dump_metric_is_registered_by_import_mmsgg_eval(tmp_path):
    """dict(type='DumpSceneGraphPredictions') failed after custom_imports=['mmsgg_eval']."""
    code = ('from mmengine.evaluator import Evaluator\n'
            'from mmengine.registry import init_default_scope\n'
            'import mmsgg_eval\n'
            'init_default_scope("mmdet")\n'
            f'ev = Evaluator([dict(type="DumpSceneGraphPredictions", out_file_path={str(tmp_path / "p.pkl")!r})])\n'
            'print(type(ev.metrics[0]).__module__)\n')
    out = run_python(['-c', code])
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == 'mmsgg_eval.metrics.dump'


# ---------------------------------------------------------------------------------------------- stream
def records(n, start=0):
    return [{'sample_idx': i, 'img_id': str(i), 'pred_relations': {'pair_idxs': torch.zeros((0, 2), dtype=torch.long),
                                                                    'scores': torch.zeros((0, 3))}}
            for i in range(start, start + n)]


def write_stream(path, recs, expected=None, close=True):
    writer = StreamWriter(str(path), expected_records=expected, dataset_length=expected, config='cfg.py')
    for r in recs:
        writer.write(r)
    if close:
        writer.close()
    else:  # what a killed writer leaves: header and records, no closing record
        writer._file.close()
        os.replace(writer._tmp, str(path))


def pickles(path):
    out = []
    with open(path, 'rb') as f:
        while True:
            try:
                out.append(pickle.load(f))
            except EOFError:
                return out


def test_stream_round_trip_header_and_closing_record(tmp_path):
    path = tmp_path / 'p.pkl'
    write_stream(path, records(5), expected=5)
    raw = pickles(path)
    assert raw[0][MARK] == 'header' and raw[0]['format_version'] == 2 and raw[0]['expected_records'] == 5
    assert raw[0]['config'] == 'cfg.py' and raw[-1] == {MARK: 'end', 'num_records': 5} and len(raw) == 7
    stream = PredictionStream(str(path))
    got = list(stream)
    assert [i for i, _ in got] == [1, 2, 3, 4, 5] and [r['sample_idx'] for _, r in got] == [0, 1, 2, 3, 4]
    assert stream.complete and stream.num_records == 5 and stream.header['dataset_length'] == 5
    assert not osp.exists(str(path) + '.tmp')


def test_stream_without_closing_record_is_an_error(tmp_path):
    path = tmp_path / 'cut.pkl'
    write_stream(path, records(4), expected=10, close=False)
    with pytest.raises(TruncatedStreamError, match=r'cut.pkl.*no closing record.*last good record is #4 '
                                                   r'\(sample_idx=3\), of 10 expected'):
        list(iter_records(str(path)))
    with pytest.warns(UserWarning, match='no closing record'):
        assert len(list(iter_records(str(path), allow_truncated=True))) == 4


def test_stream_cut_inside_a_record_and_empty_file(tmp_path):
    path = tmp_path / 'p.pkl'
    write_stream(path, records(3), expected=3)
    data = path.read_bytes()
    ends = []
    with open(path, 'rb') as f:  # byte offset after each pickle
        while f.tell() < len(data):
            pickle.load(f)
            ends.append(f.tell())
    cut = tmp_path / 'cut.pkl'
    cut.write_bytes(data[:ends[2] + 7])  # header, 2 records, 7 bytes of the third
    with pytest.raises(TruncatedStreamError, match=r'ends inside record #3; the last good record is #2'):
        list(iter_records(str(cut)))
    with pytest.warns(UserWarning):
        assert [r['sample_idx'] for r in iter_records(str(cut), allow_truncated=True)] == [0, 1]
    empty = tmp_path / 'empty.pkl'
    empty.write_bytes(b'')
    with pytest.raises(TruncatedStreamError, match='empty.pkl: the file is empty'):
        list(iter_records(str(empty)))


def test_stream_older_formats_and_corruption(tmp_path):
    old = tmp_path / 'old.pkl'
    with open(old, 'wb') as f:
        for r in records(3):
            pickle.dump(r, f, protocol=4)
    with pytest.warns(UserWarning, match='without header'):
        assert [r['sample_idx'] for r in iter_records(str(old))] == [0, 1, 2]
    as_list = tmp_path / 'list.pkl'
    with open(as_list, 'wb') as f:
        pickle.dump(records(2), f)
    with pytest.warns(UserWarning, match='DumpResults'):
        assert len(list(iter_records(str(as_list)))) == 2
    twice = tmp_path / 'twice.pkl'
    write_stream(twice, records(2), expected=2)
    twice.write_bytes(twice.read_bytes() * 2)
    with pytest.raises(InputFileError, match='bytes follow the closing record'):
        list(iter_records(str(twice)))
    newer = tmp_path / 'newer.pkl'
    with open(newer, 'wb') as f:
        pickle.dump({MARK: 'header', 'format_version': 99}, f)
    with pytest.raises(InputFileError, match='version 99 is newer'):
        list(iter_records(str(newer)))


class Payload:
    def __reduce__(self):
        return (os.getcwd, ())


def test_stream_refuses_code_and_names_the_record(tmp_path):
    path = tmp_path / 'evil.pkl'
    with open(path, 'wb') as f:
        pickle.dump(records(1)[0], f)
        pickle.dump({'sample_idx': 1, 'x': Payload()}, f)
    with pytest.raises(UnsafePickleError, match=r'evil.pkl record #1: .*posix.getcwd|evil.pkl record #1: .*getcwd') \
            as info:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            list(iter_records(str(path)))
    assert 'unsafe=True' in str(info.value) and '--unsafe-load' in info.value.cli_message()


def _dump_worker(rank, world_size, out_file, n):
    from mmsgg_eval.metrics.dump import DumpSceneGraphPredictions
    from tests.dist_utils import padded_shard
    metric = DumpSceneGraphPredictions(out_file_path=out_file, config='demo.py')
    metric.dataset_meta = {'dataset_name': 'toy'}
    shard = padded_shard(n, world_size, rank)
    for k in range(0, len(shard), 2):
        metric.process(None, [dict(sample_idx=i, pred_relations={'scores': torch.full((1, 3), float(i))})
                              for i in shard[k:k + 2]])
    return metric.evaluate(n)


def test_dump_metric_writes_a_complete_stream_on_two_ranks(tmp_path):
    from tests.dist_utils import run_distributed
    out_file = str(tmp_path / 'sub' / 'preds.pkl')
    assert run_distributed(_dump_worker, 2, out_file, 5) == [{}, {}]
    stream = PredictionStream(out_file)
    got = [r for _, r in stream]
    assert sorted(r['sample_idx'] for r in got) == [0, 1, 2, 3, 4]  # sampler padding dropped
    assert stream.complete and stream.header['expected_records'] == 5 and stream.header['config'] == 'demo.py'
    assert stream.header['dataset_name'] == 'toy' and os.listdir(tmp_path / 'sub') == ['preds.pkl']
    assert float(got[0]['pred_relations']['scores'][0, 0]) == got[0]['sample_idx']


# ---------------------------------------------------------------------------------------------- JSONL
@pytest.mark.parametrize('line,match', [
    ({'sample_idx': None}, r':1: `sample_idx` must be a non-negative integer .*got null'),
    ({'sample_idx': 'abc'}, r":1: `sample_idx` must be a non-negative integer .*got 'abc'"),
    ({'sample_idx': '3'}, r":1: `sample_idx` must be a non-negative integer .*got '3'"),
    ({'sample_idx': 1.0}, r':1: `sample_idx` must be a non-negative integer .*got 1.0'),
    ({'sample_idx': -1}, r':1: `sample_idx` must be a non-negative integer .*got -1'),
    ({'sample_idx': True}, r':1: `sample_idx` must be a non-negative integer .*got True'),
    ({'sample_idx': 99}, r':1: `sample_idx` = 99 is outside the dataset'),
    ({'img_id': 'nope'}, r":1: `img_id` 'nope' is not in the dataset"),
    ({'sample_idx': 0, 'pred_relations': [[0, 1, 0.5]]},
     r':1 \(sample_idx=0\): `pred_relations` must be an object of named arrays .*got a JSON array'),
    ({'sample_idx': 0, 'pred_relations': {'pair_idxs': [[0, 1], [1, 0]], 'scores': [[0.1, 0.2], [0.3]]}},
     r':1 \(sample_idx=0\): `pred_relations.scores` is not a rectangular array \(row 0 has 2 entries, row 1 has 1'),
    ({'sample_idx': 0, 'pred_relations': {'pair_idxs': [[0, 1]], 'scores': [[0.1, None]]}},
     r'`pred_relations.scores` \[0\]\[1\] = null: expected numbers'),
    ({'sample_idx': 0, 'pred_relations': {'pair_idxs': [[0.9, 1.9]], 'scores': [[0.1, 0.2]]}},
     r'`pred_relations.pair_idxs` holds non-integer values .*expected integers'),
    ({'sample_idx': 0, 'pred_relations': {'pair_idxs': [[0, 1]], 'scores': [[0.1, 0.2]], 'labels': [True]}},
     r'`pred_relations.labels` \[0\] = True: expected integers'),
    ({'sample_idx': 0, 'pred_relations': {'pair_idxs': [[0, 1]], 'scores': [[0.1, 0.2]], 'labels': [False]}},
     r'`pred_relations.labels` \[0\] = False: expected integers'),
    ({'sample_idx': 0, 'pred_instances': {'labels': [1, True]}, 'pred_relations': {'pair_idxs': [], 'scores': []}},
     r'`pred_instances.labels` \[1\] = True: expected integers'),
    ({'sample_idx': 0, 'pred_relations': {'pair_idxs': [[0, 1]], 'scores': [['0.5', 0.2]]}},
     r"`pred_relations.scores` \[0\]\[0\] = '0.5': expected numbers"),
    ({'sample_idx': 0, 'pred_relations': {'pair_idxs': [[0, 1], [1, 0]], 'scores': [[0.1, 0.2]]}},
     r'`pred_relations` lengths differ \(`pred_relations.pair_idxs` 2, `pred_relations.scores` 1\)'),
    ({'sample_idx': 0, 'pred_relations': {'pair_idxs': [[0, 1, 2]], 'scores': [[0.1, 0.2]]}},
     r'`pred_relations.pair_idxs` has shape \[1, 3\], expected \[n, 2\]'),
    ({'sample_idx': 0, 'pred_relations': {'pair_idxs': [[0, 1]], 'scores': [0.5]}},
     r'`pred_relations.scores` is 1-D: give `pred_relations.labels`'),
    ({'sample_idx': 0, 'pred_instances': {'bboxes': [[0, 0, 1]]}, 'pred_relations': {'pair_idxs': [], 'scores': []}},
     r'`pred_instances.bboxes` is not a rectangular array|`pred_instances.bboxes` has shape \[1, 3\]'),
])
def test_jsonl_errors_name_line_sample_and_field(sample, tmp_path, line, match):
    path = tmp_path / 'preds.jsonl'
    path.write_text(json.dumps(line) + '\n')
    with pytest.raises(InputFileError, match=match):
        evaluate_file(CONFIG, str(path), metrics=['SGRecall'], mode='sgdet', work_dir=str(tmp_path / 'o'),
                      cfg_options=sample['options'], progress=False)


def test_jsonl_binary_bytes_and_duplicates(sample, tmp_path):
    path = tmp_path / 'bin.jsonl'
    path.write_bytes(json.dumps({'sample_idx': 0}).encode() + b'\n{"sample_idx": 1, "x": "\xff\xfe"}\n')
    with pytest.raises(InputFileError, match=r'bin.jsonl:2: is not UTF-8 text \(byte 0xff at column 25\)'):
        list(iter_jsonl(str(path)))
    good = predictions_for(sample['dataset'])
    path = tmp_path / 'dup.jsonl'
    path.write_text('\n'.join(json.dumps(r) for r in good + good[2:3]))
    n = len(good)
    with pytest.raises(InputFileError, match=rf'dup.jsonl:{n + 1}: `sample_idx` sample_idx=2 was already predicted '
                                             rf'at .*dup.jsonl:3'):
        evaluate_file(CONFIG, str(path), metrics=['SGRecall'], mode='sgdet', work_dir=str(tmp_path / 'o'),
                      cfg_options=sample['options'], progress=False)


# ---------------------------------------------------------------------------------------------- coverage
def test_missing_samples_are_fed_as_marked_empty_predictions(sample):
    index = DatasetSamples(sample['dataset'])
    n = len(index)
    given = [(f'f:{i + 1}', dict(index.gt(i), pred_text='x')) for i in range(n) if i not in (1, 4)]
    strict = CoveredSamples(iter(given), index, 'f')
    with pytest.raises(MissingSamplesError, match=rf'f: 2 of the {n} dataset samples have no prediction '
                                                  r'\(first sample_idx: 1, 4\)') as info:
        list(strict)
    assert info.value.missing == [1, 4]
    allowed = CoveredSamples(iter(given), index, 'f', allow_missing=True)
    out = list(allowed)
    assert len(out) == len(allowed) == n and allowed.missing == [1, 4] and allowed.num_read == n - 2
    marked = [s for s in out if s.get(MISSING_KEY)]
    assert [s['sample_idx'] for s in marked] == [1, 4]
    for s in marked:  # the dataset GT with an empty prediction
        assert s['pred_relations']['pair_idxs'].shape == (0, 2) and s['pred_instances']['bboxes'].shape == (0, 4)
        assert torch.equal(s['gt_relations']['labels'], index.gt(s['sample_idx'])['gt_relations']['labels'])
    assert not any(MISSING_KEY in s for s in out if s['sample_idx'] not in (1, 4))


# ---------------------------------------------------------------------------------------------- fixtures
def keeping(dataset, keep):
    """JSONL records (:func:`predictions_for`) of the samples in ``keep`` only."""
    return predictions_for(dataset, drop=set(range(len(dataset))) - set(keep))


def stream_for(dataset, path, keep=None, close=True):
    """A prediction stream (GT of the dataset + the JSONL predictions as tensors), as tools/test.py writes."""
    index = DatasetSamples(dataset)
    recs = []
    for r in (predictions_for(dataset) if keep is None else keeping(dataset, keep)):
        s = index.gt(r['sample_idx'])
        s.update({g: {k: torch.as_tensor(np.asarray(v)) for k, v in r[g].items()}
                  for g in ('pred_instances', 'pred_relations')})
        recs.append(s)
    write_stream(path, recs, expected=len(dataset), close=close)


# ---------------------------------------------------------------------------------------------- CLI
def cli_options(sample):
    return ['--cfg-options', f'test_dataloader.dataset.data_root={sample["root"]}']


def cli(sample, path, tmp_path, *extra, fmt=None):
    args = [CONFIG, str(path), '--metrics', 'SGRecall', '--mode', 'sgdet', '--work-dir', str(tmp_path / 'o'),
            '--no-progress', *extra, *cli_options(sample)]
    return main(args + (['--format', fmt] if fmt else []))


def test_cli_truncated_stream_fails_unless_allowed(sample, tmp_path, capsys):
    n = len(sample['dataset'])
    full = tmp_path / 'full.pkl'
    stream_for(sample['dataset'], full)
    cli(sample, full, tmp_path)
    assert json.load(open(tmp_path / 'o' / 'metrics.json'))['sgdet/num_missing_predictions'] == 0
    cut = tmp_path / 'cut.pkl'
    stream_for(sample['dataset'], cut, keep=set(range(5)), close=False)
    with pytest.raises(SystemExit) as info:
        cli(sample, cut, tmp_path)
    err = capsys.readouterr().err
    assert info.value.code == 1 and 'Traceback' not in err and len(err.strip().splitlines()) == 2
    assert 'cut.pkl: the stream has no closing record; the last good record is #5 (sample_idx=4), of ' \
           f'{n} expected' in err and '--allow-missing' in err
    with pytest.warns(UserWarning):
        cli(sample, cut, tmp_path, '--allow-missing')
    saved = json.load(open(tmp_path / 'o' / 'metrics.json'))
    assert saved['sgdet/num_missing_predictions'] == n - 5
    # a complete stream cut at a record boundary and closed (e.g. a filtered copy) still misses samples
    part = tmp_path / 'part.pkl'
    stream_for(sample['dataset'], part, keep=set(range(3, n)))
    with pytest.raises(SystemExit):
        cli(sample, part, tmp_path)
    assert f'3 of the {n} dataset samples have no prediction (first sample_idx: 0, 1, 2)' in capsys.readouterr().err


def test_cli_empty_pkl_fails(sample, tmp_path, capsys):
    empty = tmp_path / 'empty.pkl'
    empty.write_bytes(b'')
    with pytest.raises(SystemExit) as info:
        cli(sample, empty, tmp_path)
    assert info.value.code == 1 and 'empty.pkl: the file is empty' in capsys.readouterr().err


def test_cli_stream_for_another_dataset_fails(sample, tmp_path, capsys):
    path = tmp_path / 'other.pkl'
    write_stream(path, records(2), expected=1000)
    with pytest.raises(SystemExit):
        cli(sample, path, tmp_path)
    assert 'was written for a dataset of 1000 samples' in capsys.readouterr().err


def test_cli_partial_jsonl_fails_unless_allowed(sample, tmp_path, capsys):
    """5 of 13 lines evaluated as if complete (missing ones skipped by skip_empty_predictions)."""
    dataset = sample['dataset']
    n = len(dataset)
    path = tmp_path / 'part.jsonl'
    path.write_text('\n'.join(json.dumps(r) for r in keeping(dataset, range(5))))
    with pytest.raises(SystemExit) as info:
        cli(sample, path, tmp_path)
    err = capsys.readouterr().err
    assert info.value.code == 1 and 'Traceback' not in err
    assert f'part.jsonl: {n - 5} of the {n} dataset samples have no prediction (first sample_idx: 5, 6, 7' in err
    cli(sample, path, tmp_path, '--allow-missing')
    assert json.load(open(tmp_path / 'o' / 'metrics.json'))['sgdet/num_missing_predictions'] == n - 5


def test_allowed_missing_samples_count_as_recall_zero_by_default(sample, tmp_path):
    dataset = sample['dataset']
    path = tmp_path / 'part.jsonl'
    path.write_text('\n'.join(json.dumps(r) for r in keeping(dataset, range(5))))
    partial = cli(sample, path, tmp_path, '--allow-missing')  # default skip_empty_predictions=True
    forced = cli(sample, path, tmp_path, '--allow-missing', '--metric-options', 'skip_empty_predictions=False')
    assert partial['sgdet/R@50'] == forced['sgdet/R@50']


def test_cli_metric_refusal_names_the_file_and_sample(sample, tmp_path, capsys):
    recs = predictions_for(sample['dataset'])
    recs[3]['pred_instances']['labels'][0] = 999
    path = tmp_path / 'labels.jsonl'
    path.write_text('\n'.join(json.dumps(r) for r in recs))
    with pytest.raises(SystemExit) as info:
        cli(sample, path, tmp_path)
    err = capsys.readouterr().err
    assert info.value.code == 1 and 'Traceback' not in err and len(err.strip().splitlines()) == 2
    assert 'labels.jsonl: invalid prediction: ' in err and 'sample_idx=3' in err and 'pred_instances.labels' in err


def test_cli_refused_pickle_names_the_flag(sample, tmp_path, capsys):
    path = tmp_path / 'evil.pkl'
    with open(path, 'wb') as f:
        pickle.dump({'sample_idx': 0, 'x': Payload()}, f)
    with pytest.raises(SystemExit) as info:
        cli(sample, path, tmp_path)
    err = capsys.readouterr().err
    assert info.value.code == 1 and '--unsafe-load' in err and 'unsafe=True' not in err and 'Traceback' not in err
    legacy = tmp_path / 'evil.pth'
    torch.save([Payload()], str(legacy))
    with pytest.raises(SystemExit):
        cli(sample, legacy, tmp_path, fmt='legacy')
    err = capsys.readouterr().err
    assert 'evil.pth: safe loading' in err and 'getcwd' in err and '--unsafe-load' in err


def test_cli_user_error_without_traceback_and_debug(sample, tmp_path):
    path = tmp_path / 'bad.jsonl'
    path.write_text('{"sample_idx": "abc"}\n')
    base = ['-m', 'mmsgg_eval.eval', CONFIG, str(path), '--metrics', 'SGRecall', '--no-progress',
            '--work-dir', str(tmp_path / 'o'), *cli_options(sample)]
    out = run_python(base)
    assert out.returncode == 1 and 'Traceback' not in out.stderr, out.stderr[-3000:]
    assert "bad.jsonl:1: `sample_idx` must be a non-negative integer (the dataset index), got 'abc'" in out.stderr
    out = run_python(base + ['--debug'])
    assert out.returncode == 1 and 'Traceback' in out.stderr and 'InputFileError' in out.stderr
    out = run_python(['-m', 'mmsgg_eval.eval', CONFIG, str(tmp_path / 'absent.jsonl'), *cli_options(sample)])
    assert out.returncode == 1 and 'predictions file not found' in out.stderr and 'Traceback' not in out.stderr


def test_cli_partial_grounding_fails_unless_allowed(tmp_path, capsys):
    from mmsgg_eval.datasets import RSVGDDataset
    from mmsgg_eval.testing import make_sample_data
    make_sample_data(str(tmp_path), datasets=['rsvgd'])
    root = str(tmp_path / 'rsvgd') + '/'
    dataset = RSVGDDataset(data_root=root, split='test', pipeline=[])
    n = len(dataset)
    preds = [{'sample_idx': i, 'bbox': dataset.get_data_info(i)['instances'][0]['bbox']} for i in range(1, n)]
    path = tmp_path / 'boxes.json'
    path.write_text(json.dumps(preds))
    args = [osp.join(ROOT, 'configs', 'rsvgd', 'grounding_rsvgd.py'), str(path), '--format', 'grounding',
            '--work-dir', str(tmp_path / 'o'), '--no-progress', '--cfg-options', f'test_dataloader.dataset.data_root={root}']
    with pytest.raises(SystemExit):
        main(args)
    assert f'boxes.json: 1 of the {n} dataset samples have no prediction (first sample_idx: 0)' in capsys.readouterr().err
    res = main(args + ['--allow-missing'])
    assert res['grounding/Pr@0.5'] == pytest.approx(100.0 * (n - 1) / n) and \
        json.load(open(tmp_path / 'o' / 'metrics.json'))['grounding/num_missing_predictions'] == 1


# ---------------------------------------------------------------------------------------------- VLM answers
def test_vlm_binary_answer_is_a_failed_sample(sample, tmp_path):
    dataset = sample['dataset']
    n = len(dataset)
    lines = [json.dumps({'sample_idx': i, 'output': '{"objects": [], "relationships": []}'}).encode()
             for i in range(n)]
    lines[2] = b'{"sample_idx": 2, "output": "\x89PNG\xff\xfe"}'
    path = tmp_path / 'vlm.jsonl'
    path.write_bytes(b'\n'.join(lines) + b'\n')
    (where, identity, text), = [x for x in iter_vlm_answers(str(path)) if x[1]['sample_idx'] == 2]
    assert where.endswith('vlm.jsonl:3') and isinstance(text, bytes)
    result = parse_vlm_output(text, (100, 100), ['a'], ['b'])
    assert not result.ok and result.code == 'not_text' and 'not UTF-8' in result.reason
    res = evaluate_file(CONFIG, str(path), fmt='vlm', work_dir=str(tmp_path / 'o'), cfg_options=sample['options'],
                        progress=False)
    assert res['vlm/FailureRate'] == pytest.approx(100.0 / n)
    bad_id = tmp_path / 'badid.jsonl'
    bad_id.write_bytes(b'{"img_id": "\xff", "output": "x"}\n')
    with pytest.raises(InputFileError, match=r'badid.jsonl:1: `img_id` is not UTF-8 text'):
        list(iter_vlm_answers(str(bad_id)))


def test_vlm_missing_answers_fail_unless_allowed(sample, tmp_path, capsys):
    n = len(sample['dataset'])
    path = tmp_path / 'vlm.jsonl'
    path.write_text('\n'.join(json.dumps({'sample_idx': i, 'output': '{"objects": [], "relationships": []}'})
                              for i in range(n - 2)))
    args = [CONFIG, str(path), '--format', 'vlm', '--no-progress', '--work-dir', str(tmp_path / 'o'), *cli_options(sample)]
    with pytest.raises(SystemExit):
        main(args)
    assert f'2 of the {n} dataset samples have no prediction' in capsys.readouterr().err
    res = main(args + ['--allow-missing'])
    assert res['vlm/FailureRate'] == pytest.approx(200.0 / n) and \
        json.load(open(tmp_path / 'o' / 'metrics.json'))['vlm/num_missing_predictions'] == 2


def test_stream_v2_records_hold_arrays_and_read_back_as_tensors(tmp_path):
    """Version 2 stores tensors as numpy protocol-5 buffers (no torch.load per tensor) and hands them back as
    tensors of the same dtype and values; dtypes numpy lacks stay tensors; the safe unpickler accepts them."""
    sample = {'sample_idx': 3, 'img_id': 'a', 'ori_shape': (480, 640),
              'pred_relations': {'scores': torch.rand(7, 4), 'pair_idxs': torch.randint(0, 5, (7, 2))},
              'pred_instances': {'labels': torch.tensor([1, 2], dtype=torch.int32),
                                 'keep': torch.tensor([True, False]), 'half': torch.rand(2).half(),
                                 'bf16': torch.rand(2).bfloat16(), 'strided': torch.arange(12.).view(3, 4).t()},
              'tags': ['x', torch.tensor([1.5])]}
    path = tmp_path / 'v2.pkl'
    with StreamWriter(str(path), expected_records=1) as writer:
        writer.write(sample)
    raw = pickles(path)
    assert raw[0]['format_version'] == 2
    assert isinstance(raw[1]['pred_relations']['scores'], np.ndarray)
    assert isinstance(raw[1]['pred_instances']['bf16'], torch.Tensor)
    (got,) = list(iter_records(str(path)))
    for group in ('pred_relations', 'pred_instances'):
        for key, value in sample[group].items():
            back = got[group][key]
            assert isinstance(back, torch.Tensor) and back.dtype == value.dtype and torch.equal(back, value), key
    assert got['ori_shape'] == (480, 640) and got['tags'][0] == 'x' and torch.equal(got['tags'][1], sample['tags'][1])


def test_stream_v1_with_tensor_records_is_still_read(tmp_path):
    path = tmp_path / 'v1.pkl'
    recs = records(3)
    with open(path, 'wb') as f:
        pickle.dump({MARK: 'header', 'format_version': 1, 'expected_records': 3}, f, protocol=4)
        for r in recs:
            pickle.dump(r, f, protocol=4)
        pickle.dump({MARK: 'end', 'num_records': 3}, f, protocol=4)
    got = list(iter_records(str(path)))
    assert [r['sample_idx'] for r in got] == [0, 1, 2]
    assert torch.equal(got[1]['pred_relations']['scores'], recs[1]['pred_relations']['scores'])


def test_offline_benchmark_evaluates_a_stream_to_the_in_memory_numbers(tmp_path):
    """tools/benchmark.py --offline: a workload written as a stream and evaluated from the file gives the
    numbers of the same images evaluated in memory."""
    from mmsgg_eval.benchmarks.offline import run_offline
    from mmsgg_eval.benchmarks.workloads import make_workload, meta
    from mmsgg_eval.metrics import SGMeanRecall, SGRecall
    offline = run_offline('variable', 12, repeat=1, path=str(tmp_path / 'variable.pkl'))
    metrics = [cls(mode='sgdet', zeroshot_triplets=[(0, 1, 2), (3, 4, 5)]) for cls in (SGRecall, SGMeanRecall)]
    for m in metrics:
        m.dataset_meta = meta()
    samples = make_workload('variable', 12)
    for m in metrics:
        m.process({}, samples)
    in_memory = {}
    for m in metrics:
        in_memory.update(m.evaluate(12))
    assert offline['r50'] == in_memory['sgdet/R@50'] and offline['mr50'] == in_memory['sgdet/mR@50']
    assert offline['images_per_s'] > 0 and 0 < offline['read_share'] and offline['file_mb'] > 0


def test_benchmark_cli_keeps_each_jobs_best_round():
    """tools/benchmark.py runs its job list --rounds times in turn and reports one row per job (its best
    round), with the ratios JSON line; --torch-path adds the run without the compiled kernels (same numbers)."""
    import json
    from pathlib import Path
    from tests.tool_runs import run_tool
    tool = Path(__file__).resolve().parents[2] / 'tools' / 'benchmark.py'
    out = run_tool([str(tool), '--workload', 'triplets', '--images', '8', '--batch-size', '4', '--repeat', '1',
                    '--rounds', '2', '--no-peers', '--device', 'cpu', '--torch-path'], timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stderr.count('running ours on triplets (cpu)') == 2 and 'round 2/2' in out.stderr
    assert out.stderr.count('running ours-torch on triplets (cpu)') == 2
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary['rounds'] == 2 and summary['images_per_s']['ours/triplets/cpu'] > 0
    assert summary['images_per_s']['ours-torch/triplets/cpu'] > 0
    assert 'ours_vs_ours-torch_triplets_cpu' in summary['ratios']
    from mmsgg_eval.functional import compiled
    assert summary['compiled_kernels'] == compiled.built()
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith('ours')]
    assert [r[0] for r in rows] == ['ours', 'ours-torch'] and rows[0][-2:] == rows[1][-2:]  # same R@50, mR@50
    bad = run_tool([str(tool), '--rounds', '0'], timeout=120)
    assert bad.returncode == 2 and 'argument --rounds: must be a positive integer (>= 1), got 0' in bad.stderr


def test_benchmark_sgbench_with_and_without_its_lists_in_the_timing():
    """The two sgbench jobs of tools/benchmark.py time different work but compute the same numbers (or both say
    that sgbench is not installed)."""
    import importlib.util
    tool = load_tool('benchmark')
    given = tool.run_sgbench('variable', 6, 1)
    built = tool.run_sgbench('variable', 6, 1, include_lists=True)
    if importlib.util.find_spec('sgbench') is None:
        assert 'skipped' in given and 'skipped' in built
        return
    assert given['r50'] == built['r50'] and given['mr50'] == built['mr50']
    assert given['images_per_s'] > 0 and built['images_per_s'] > 0
    assert 'sgbench+lists' in tool.PEER_WORKLOADS and 'variable' in tool.PEER_WORKLOADS['sgbench+lists']


def test_dump_metric_does_not_warn_about_its_prefix(tmp_path, monkeypatch):
    """tools/test.py --out logged "The prefix is not set in metric class DumpSceneGraphPredictions"."""
    import mmengine.evaluator.metric as metric_module
    from mmsgg_eval.metrics.dump import DumpSceneGraphPredictions
    logged = []
    monkeypatch.setattr(metric_module, 'print_log', lambda msg, *a, **k: logged.append(str(msg)))
    DumpSceneGraphPredictions(out_file_path=str(tmp_path / 'p.pkl'))
    assert not any('prefix is not set' in m for m in logged)
