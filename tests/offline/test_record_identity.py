"""Offline records against the dataset: the identity of each record (image ids of another split, swapped
sample_idx, contradicting ids), the batch size of the offline command line and API, and the start-up imports
of the offline CLI."""
import json
import os
import os.path as osp
import subprocess
import sys

import numpy as np
import pytest
import torch

from mmsgg_eval.eval import main
from mmsgg_eval.offline import evaluate_file, evaluate_grounding_predictions
from mmsgg_eval.io.errors import InputFileError
from mmsgg_eval.io.formats import open_predictions
from mmsgg_eval.io.samples import DatasetSamples
from tests.io.test_inputs import write_stream
from tests.offline.test_eval_cli import CONFIG, ROOT, predictions_for, sample  # noqa: F401  (module fixture)


def options(sample):
    return ['--cfg-options', f'test_dataloader.dataset.data_root={sample["root"]}']


def stream_records(dataset, img_ids=None):
    """Records as tools/test.py writes them (GT of the dataset + predictions), with ``img_ids`` replacing
    the dataset's image ids when given (a stream of another split of the same length)."""
    index = DatasetSamples(dataset)
    out = []
    for r in predictions_for(dataset):
        s = index.gt(r['sample_idx'])
        s.update({g: {k: torch.as_tensor(np.asarray(v)) for k, v in r[g].items()}
                  for g in ('pred_instances', 'pred_relations')})
        if img_ids is not None:
            s['img_id'] = img_ids[r['sample_idx']]
        out.append(s)
    return out


def write_jsonl(path, records):
    path.write_text('\n'.join(json.dumps(r) for r in records))
    return path


# ------------------------------------------------------------------------------- identity of the dump records
def test_stream_of_another_split_with_the_same_length_is_refused(sample, tmp_path, capsys):
    """A stream written for another split (same number of samples: the header's length check passes) is an
    error naming the first record, its img_id and the dataset's img_id at that sample_idx."""
    dataset = sample['dataset']
    ids = [dataset.get_data_info(i)['img_id'] for i in range(len(dataset))]
    other = [i + 10 ** 6 for i in ids]  # the images of another split
    good, bad = tmp_path / 'test.pkl', tmp_path / 'other_split.pkl'
    write_stream(good, stream_records(dataset), expected=len(dataset))
    write_stream(bad, stream_records(dataset, other), expected=len(dataset))
    args = ['--metrics', 'SGRecall', '--mode', 'sgdet', '--no-progress', *options(sample)]
    res = main([CONFIG, str(good), '--work-dir', str(tmp_path / 'good'), *args])
    assert res['sgdet/R@50'] > 20  # the right stream: the check passes (int img_id on both sides)
    with pytest.raises(SystemExit) as exit_:
        main([CONFIG, str(bad), '--work-dir', str(tmp_path / 'bad'), *args])
    err = capsys.readouterr().err
    assert exit_.value.code == 1
    assert f'other_split.pkl record #1 (sample_idx=0): `img_id` {other[0]} disagrees with the dataset' in err
    assert f'sample_idx=0 is img_id={ids[0]}' in err
    assert not (tmp_path / 'bad' / 'metrics.json').exists()


def test_stream_header_config_is_named_in_the_hint(sample, tmp_path):
    from mmsgg_eval.io.stream import StreamWriter
    dataset = sample['dataset']
    path = tmp_path / 'val.pkl'
    with StreamWriter(str(path), expected_records=len(dataset), dataset_length=len(dataset),
                      config='configs/val_split.py') as writer:
        for rec in stream_records(dataset, [f'x{i}' for i in range(len(dataset))]):
            writer.write(rec)
    with pytest.raises(InputFileError, match=r'record #1 .*written with the config configs/val_split\.py'):
        list(open_predictions('dump', str(path), dataset))


# ------------------------------------------------------------------- identity of JSONL, VLM and grounding records
def test_jsonl_with_swapped_sample_idx_is_an_error_naming_both_ids(sample, tmp_path):
    dataset = sample['dataset']
    ids = [dataset.get_data_info(i)['img_id'] for i in range(len(dataset))]
    records = [dict(r, img_id=ids[r['sample_idx']]) for r in predictions_for(dataset)]
    records[0]['sample_idx'], records[1]['sample_idx'] = 1, 0  # two records swapped
    path = write_jsonl(tmp_path / 'swapped.jsonl', records)
    with pytest.raises(InputFileError) as err:
        evaluate_file(CONFIG, str(path), metrics=['SGRecall'], mode='sgdet', work_dir=str(tmp_path / 'o'),
                      cfg_options=sample['options'], progress=False)
    text = str(err.value)
    assert text.startswith(f'{path}:1 (sample_idx=1): `img_id` {ids[0]} disagrees with the dataset')
    assert f'sample_idx=1 is img_id={ids[1]}' in text


def test_jsonl_img_id_that_agrees_keeps_the_dataset_identity(sample, tmp_path):
    """An img_id written as a string that names the right image is accepted, and the samples keep the
    dataset's img_id (the file's does not replace it in messages and reports)."""
    dataset = sample['dataset']
    ids = [dataset.get_data_info(i)['img_id'] for i in range(len(dataset))]
    records = [dict(r, img_id=str(ids[r['sample_idx']])) for r in predictions_for(dataset)]
    path = write_jsonl(tmp_path / 'agree.jsonl', records)
    got = [s['img_id'] for s in open_predictions('jsonl', str(path), dataset)]
    assert got == ids and all(not isinstance(i, str) for i in got)


def test_vlm_answers_with_contradicting_image_id(sample, tmp_path):
    dataset = sample['dataset']
    ids = [dataset.get_data_info(i)['img_id'] for i in range(len(dataset))]
    lines = [{'sample_idx': i, 'image_id': ids[i], 'output': '{}'} for i in range(len(dataset))]
    ok = write_jsonl(tmp_path / 'ok.jsonl', lines)
    assert len(list(open_predictions('vlm', str(ok), dataset))) == len(dataset)
    lines[2]['image_id'] = ids[3]
    bad = write_jsonl(tmp_path / 'bad.jsonl', lines)
    with pytest.raises(InputFileError, match=rf'bad.jsonl:3 \(sample_idx=2\): `img_id` {ids[3]} disagrees.*'
                                             rf'sample_idx=2 is img_id={ids[2]}'):
        list(open_predictions('vlm', str(bad), dataset))
    # `id` beside an index may name a question, not an image: not checked
    lines[2] = {'sample_idx': 2, 'id': 'question-7', 'output': '{}'}
    other = write_jsonl(tmp_path / 'question_ids.jsonl', lines)
    assert len(list(open_predictions('vlm', str(other), dataset))) == len(dataset)


class TinyGroundingDataset:
    """Three images, one query each, 100 x 100 pixels."""
    metainfo = {'classes': ('thing',)}

    def __len__(self):
        return 3

    def get_data_info(self, i):
        return {'img_id': f'img{i}', 'width': 100, 'height': 100, 'text': f'query {i}',
                'instances': [{'bbox': [10.0, 10.0, 50.0, 50.0], 'bbox_label': 0, 'ignore_flag': 0}]}


def test_grounding_entry_with_contradicting_img_id():
    dataset = TinyGroundingDataset()
    entries = [{'sample_idx': i, 'img_id': f'img{i}', 'bbox': [10, 10, 50, 50]} for i in range(3)]
    assert evaluate_grounding_predictions(entries, dataset)['grounding/Pr@0.5'] == 100.0
    entries[1]['img_id'] = 'img2'
    with pytest.raises(InputFileError, match=r"entry #1 \(sample_idx=1\): `img_id` 'img2' disagrees.*"
                                             r"sample_idx=1 is img_id='img1'"):
        evaluate_grounding_predictions(entries, dataset)


def test_check_identity_is_one_data_info_per_record():
    """The check reads the record's own sample (no index of the dataset is built per record)."""
    calls = []

    class Counting(TinyGroundingDataset):
        def get_data_info(self, i):
            calls.append(i)
            return super().get_data_info(i)

    index = DatasetSamples(Counting())
    for i in range(3):
        index.check_identity('f', {'sample_idx': i, 'img_id': f'img{i}'})
    index.check_identity('f', {'sample_idx': 1})  # nothing to compare: not read
    assert calls == [0, 1, 2]


# ---------------------------------------------------------------------------------------------- batch sizes
@pytest.mark.parametrize('value', ['0', '-3', 'two', '1.5'])
def test_cli_batch_size_must_be_positive(value, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(['config.py', 'preds.pkl', '--batch-size', value])
    assert exit_.value.code == 2
    assert 'argument --batch-size: must be a positive integer' in capsys.readouterr().err


@pytest.mark.parametrize('value', [0, -1, 2.5, True, '64'])
def test_python_api_batch_size_must_be_positive(value, tmp_path):
    with pytest.raises(ValueError, match='evaluate_file: batch_size must be an integer >= 1'):
        evaluate_file('absent_config.py', 'absent.pkl', batch_size=value)
    with pytest.raises(ValueError, match='evaluate_grounding_predictions: batch_size must be an integer >= 1'):
        evaluate_grounding_predictions([], TinyGroundingDataset(), batch_size=value)


# ---------------------------------------------------------------------------------------------- start-up imports


#: Run in a fresh interpreter: the offline CLI on the VG150 sample, printing the heavy modules loaded when the
#: first sample is read and at the end.
PROBE = """
import json, sys
from mmsgg_eval.io import samples
HEAVY = ('mmdet.datasets', 'mmdet.evaluation', 'transformers', 'matplotlib', 'mmengine.model')
seen = {}
tick = samples.CoveredSamples._tick
def first(self):
    seen.setdefault('first_sample', [m for m in HEAVY if m in sys.modules])
    tick(self)
samples.CoveredSamples._tick = first
from mmsgg_eval.eval import main
main(sys.argv[1:])
seen['end'] = [m for m in HEAVY if m in sys.modules]
print('MODULES ' + json.dumps(seen))
"""


def test_offline_cli_start_up_imports_neither_mmdet_datasets_nor_transformers(sample, tmp_path):
    """Start-up of the offline CLI: our dataset and metrics are built by class, so mmengine's registry does not
    import all of mmdet.datasets / mmdet.evaluation (and with them transformers, matplotlib: seconds); the chart
    imports matplotlib only after the last sample."""
    from mmsgg_eval.benchmarks.offline import predcls_jsonl
    preds = tmp_path / 'preds.jsonl'
    predcls_jsonl(sample['dataset'], str(preds))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''))
    out = subprocess.run([sys.executable, '-c', PROBE, CONFIG, str(preds), '--mode', 'predcls', '--work-dir',
                          str(tmp_path / 'o'), '--no-progress', *options(sample)],
                         capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.split('MODULES ')[-1])
    assert seen['first_sample'] == []
    assert seen['end'] == ['matplotlib']  # the long-tail chart, written after the evaluation
    assert json.load(open(tmp_path / 'o' / 'metrics.json'))['predcls/R@50'] == 100.0


def test_dataset_modules_do_not_import_h5py():
    code = 'import sys, mmsgg_eval; print("h5py" in sys.modules)'
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == 'False', out.stderr[-2000:]
