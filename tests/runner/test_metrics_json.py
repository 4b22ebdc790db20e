"""``metrics.json`` of the command lines (tools/test.py and the offline CLI) and the options that reach the metrics.

* ``tools/test.py`` and the offline CLI write ``metrics.json`` with one writer: the same keys for the same
  predictions (per-predicate table and missing-sample count included), one name for the missing count.
* every ``metrics.json`` records its provenance (versions, git commit, config, checkpoint / predictions
  with size and SHA-256, dataset, protocols and conventions, UTC date).
* the offline CLI gives every metric with a ``report_dir`` the work dir; ``--mode`` reaches SGBenchMetric;
  ``--protocol`` lists every preset and names itself when a metric does not accept it.
"""
import datetime
import hashlib
import json
import os
import os.path as osp
import runpy
import shutil
import subprocess

import pytest

from tests.tool_runs import run_tool

from mmsgg_eval.testing import make_sample_data
from mmsgg_eval.eval import main
from mmsgg_eval.offline import evaluate_file, metric_cfgs
from mmsgg_eval.runner.results import file_fingerprint, git_state
from tests.offline.test_eval_cli import predictions_for

ROOT = osp.abspath(osp.join(osp.dirname(__file__), '..', '..'))
CONFIG = osp.join(ROOT, 'configs', 'demo', 'freq_predcls_vg150_sample.py')
GROUNDING_CONFIG = osp.join(ROOT, 'configs', 'rsvgd', 'grounding_rsvgd.py')
#: provenance fields that name the input of the run (a checkpoint online, a prediction file offline)
INPUT_FIELDS = ('tool', 'checkpoint', 'options', 'date', 'work_dir')


def run(args):
    return run_tool(args)


def sha256(path):
    return hashlib.sha256(open(path, 'rb').read()).hexdigest()


@pytest.fixture(scope='module')
def vg150(tmp_path_factory):
    out = tmp_path_factory.mktemp('reports_json')
    make_sample_data(str(out), datasets=['vg150'])
    from mmsgg_eval.datasets import VG150Dataset
    root = str(out / 'vg150') + '/'
    return dict(tmp=out, root=root, dataset=VG150Dataset(data_root=root, split='test', num_val_images=8, pipeline=[]),
                options={'test_dataloader.dataset.data_root': root},
                cli_options=['--cfg-options', f'test_dataloader.dataset.data_root={root}'])


@pytest.fixture(scope='module')
def online_offline(vg150):
    """tools/test.py on the demo (frequency baseline, PredCls) with --out, then the offline CLI on the dump."""
    pytest.importorskip('mmdet.datasets', reason='tools/test.py needs mmdet with compiled mmcv')
    tmp, root = vg150['tmp'], vg150['root']
    options = [f'test_dataloader.dataset.data_root={root}', f'freq_train_dataset.data_root={root}']
    ckpt = tmp / 'freq.pth'
    build = runpy.run_path(osp.join(ROOT, 'tools', 'build_freq_baseline.py'))['main']
    build([CONFIG, '--out', str(ckpt), '--cfg-options', *options])
    online, offline, pred = tmp / 'online', tmp / 'offline', tmp / 'preds.pkl'
    out = run(['tools/test.py', CONFIG, str(ckpt), '--work-dir', str(online), '--out', str(pred),
               '--cfg-options', *options])
    assert out.returncode == 0, out.stderr[-3000:]
    main([CONFIG, str(pred), '--work-dir', str(offline), '--no-progress', '--cfg-options', *options])  # the CLI
    return dict(online=json.load(open(online / 'metrics.json')), offline=json.load(open(offline / 'metrics.json')),
                ckpt=str(ckpt), pred=str(pred))


# ------------------------------------------------------------------------------------------------ one writer

def test_online_and_offline_metrics_json_of_the_same_predictions_have_the_same_keys(online_offline):
    """Before: the offline file had no `predcls/per_predicate_recall` and no `predcls/num_missing_predictions`."""
    online, offline = online_offline['online'], online_offline['offline']
    assert set(online) == set(offline)
    assert {'predcls/per_predicate_recall', 'predcls/num_missing_predictions', 'provenance'} <= set(online)
    assert online['predcls/per_predicate_recall'] == offline['predcls/per_predicate_recall']
    assert online['predcls/num_missing_predictions'] == offline['predcls/num_missing_predictions'] == 0
    numbers = [k for k, v in online.items() if isinstance(v, float)]
    assert numbers and {k: online[k] for k in numbers} == {k: offline[k] for k in numbers}
    p_on, p_off = online['provenance'], offline['provenance']
    assert set(p_on) == set(p_off)
    assert {k: v for k, v in p_on.items() if k not in INPUT_FIELDS} == \
        {k: v for k, v in p_off.items() if k not in INPUT_FIELDS}  # same dump file, dataset, metrics, versions


def test_missing_sample_count_has_one_name(vg150, tmp_path):
    """Before: `offline/missing_predictions` next to the metrics' `{prefix}/num_missing_predictions`."""
    path = tmp_path / 'preds.jsonl'
    path.write_text('\n'.join(json.dumps(r) for r in predictions_for(vg150['dataset'], drop={0, 3})))
    main([CONFIG, str(path), '--metrics', 'SGRecall', 'DetectionAP', '--mode', 'sgdet', '--work-dir',
          str(tmp_path / 'o'), '--no-progress', '--allow-missing', *vg150['cli_options']])
    saved = json.load(open(tmp_path / 'o' / 'metrics.json'))
    assert saved['sgdet/num_missing_predictions'] == 2
    assert [k for k in saved if 'missing' in k] == ['sgdet/num_missing_predictions']


# ------------------------------------------------------------------------------------------------ provenance

def test_metrics_json_records_its_provenance(online_offline, vg150):
    ckpt, pred = online_offline['ckpt'], online_offline['pred']
    import mmsgg_eval
    for name, content in (('online', online_offline['online']), ('offline', online_offline['offline'])):
        p = content['provenance']
        assert p['mmsgg_eval_version'] == mmsgg_eval.__version__, name
        assert p['config'] == osp.abspath(CONFIG)
        date = datetime.datetime.strptime(p['date'], '%Y-%m-%dT%H:%M:%SZ').replace(tzinfo=datetime.timezone.utc)
        assert abs((datetime.datetime.now(datetime.timezone.utc) - date).total_seconds()) < 3600
        assert p['predictions'] == {'path': osp.abspath(pred), 'size': osp.getsize(pred), 'sha256': sha256(pred),
                                    'format': 'dump'}, name
        assert p['dataset'] == {'name': 'VG150', 'type': 'VG150Dataset', 'split': 'test',
                                'ann_file': vg150['dataset'].ann_file, 'data_root': vg150['root'],
                                'num_samples': len(vg150['dataset'])}, name
        assert [(m['type'], m['prefix'], m['mode'], m['protocol']) for m in p['metrics']] == \
            [('SGRecall', 'predcls', 'predcls', 'sgb'), ('SGMeanRecall', 'predcls', 'predcls', 'sgb')], name
        conventions = p['metrics'][0]['conventions']
        assert conventions['protocol'] == 'sgb' and conventions['iou'].startswith('+1 pixel')  # VG150's IoU
        assert p['versions']['torch'] and p['versions']['mmengine']
        if shutil.which('git') and osp.isdir(osp.join(ROOT, '.git')):
            head = subprocess.run(['git', '-C', ROOT, 'rev-parse', 'HEAD'], capture_output=True, text=True)
            assert p['git']['commit'] == head.stdout.strip() and isinstance(p['git']['dirty'], bool)
    online, offline = online_offline['online']['provenance'], online_offline['offline']['provenance']
    assert online['checkpoint'] == {'path': osp.abspath(ckpt), 'size': osp.getsize(ckpt), 'sha256': sha256(ckpt)}
    assert offline['checkpoint'] is None
    assert (online['tool'], offline['tool']) == ('tools/test.py', 'mmsgg_eval.eval')


def test_file_fingerprint_hashes_in_chunks(tmp_path):
    path = tmp_path / 'blob.bin'
    data = os.urandom(10_000)
    path.write_bytes(data)
    expected = {'path': str(path), 'size': 10_000, 'sha256': hashlib.sha256(data).hexdigest()}
    for chunk in (1, 4096, 1 << 22):
        assert file_fingerprint(str(path), chunk_bytes=chunk) == expected


def test_git_state_never_fails_without_git_or_repository(tmp_path, monkeypatch):
    assert git_state(str(tmp_path)) is None  # not a repository
    assert git_state(str(tmp_path / 'nowhere')) is None
    if shutil.which('git'):  # a repository that does not track the directory's files (a copy inside a project)
        subprocess.run(['git', 'init', '-q', str(tmp_path)], check=True)
        (tmp_path / 'pkg').mkdir()
        (tmp_path / 'pkg' / 'version.py').write_text('x = 1\n')
        assert git_state(str(tmp_path / 'pkg')) is None
    monkeypatch.setenv('PATH', str(tmp_path / 'empty'))  # no git executable at all
    assert git_state() is None


def test_offline_provenance_of_a_grounding_run(tmp_path):
    make_sample_data(str(tmp_path), datasets=['rsvgd'])
    from mmsgg_eval.datasets import RSVGDDataset
    root = str(tmp_path / 'rsvgd') + '/'
    dataset = RSVGDDataset(data_root=root, split='test', pipeline=[])
    preds = [{'sample_idx': i, 'bbox': dataset.get_data_info(i)['instances'][0]['bbox']}
             for i in range(1, len(dataset))]
    path = tmp_path / 'boxes.json'
    path.write_text(json.dumps(preds))
    evaluate_file(GROUNDING_CONFIG, str(path), fmt='grounding', work_dir=str(tmp_path / 'o'),
                  cfg_options={'test_dataloader.dataset.data_root': root}, progress=False, allow_missing=True)
    res = json.load(open(tmp_path / 'o' / 'metrics.json'))
    p = res['provenance']
    assert p['predictions']['sha256'] == sha256(path) and p['predictions']['format'] == 'grounding'
    assert p['dataset']['split'] == 'test' and p['dataset']['num_samples'] == len(dataset)
    assert [(m['type'], m['protocol']) for m in p['metrics']] == [('GroundingPr', 'exact')]
    assert res['grounding/num_missing_predictions'] == 1  # GroundingPr's own count, under the one name
    # item 18: the offline CLI gives GroundingPr (not a scene-graph metric) the work dir for its reports
    assert (tmp_path / 'o' / 'grounding.metrics.json').is_file()


# ------------------------------------------------------------------------------------------------ options reaching the metrics

def _vlm_answers(dataset, path):
    path.write_text('\n'.join(json.dumps({'sample_idx': i, 'output': '{"objects": [], "relationships": []}'})
                              for i in range(len(dataset))))
    return path


def test_offline_cli_gives_every_metric_with_report_dir_the_work_dir(vg150, tmp_path):
    """Before: only SGRecall / SGMeanRecall got it; VLMSceneGraphMetric and SGBenchMetric wrote no report."""
    path = _vlm_answers(vg150['dataset'], tmp_path / 'vlm.jsonl')
    evaluate_file(CONFIG, str(path), fmt='vlm', work_dir=str(tmp_path / 'o'), cfg_options=vg150['options'],
                  progress=False)
    assert (tmp_path / 'o' / 'vlm.metrics.json').is_file()
    jsonl = tmp_path / 'preds.jsonl'
    jsonl.write_text('\n'.join(json.dumps(r) for r in predictions_for(vg150['dataset'])))
    evaluate_file(CONFIG, str(jsonl), metrics=['SGBenchMetric'], mode='sgdet', work_dir=str(tmp_path / 's'),
                  cfg_options=vg150['options'], progress=False)
    assert any(name.startswith('sgdet') and name.endswith('.metrics.json') for name in os.listdir(tmp_path / 's'))


def test_mode_reaches_every_scene_graph_metric(vg150, tmp_path):
    """Before: `--mode` skipped SGBenchMetric (its own default mode, sgdet, was evaluated)."""
    cfgs = metric_cfgs({}, ['SGRecall', 'SGMeanRecall', 'SGBenchMetric', 'mmdet.SGRecall', 'GroundingPr'], 'sgcls')
    assert [m.get('mode') for m in cfgs] == ['sgcls', 'sgcls', 'sgcls', 'sgcls', None]
    jsonl = tmp_path / 'preds.jsonl'
    jsonl.write_text('\n'.join(json.dumps(r) for r in predictions_for(vg150['dataset'])))
    res = evaluate_file(CONFIG, str(jsonl), metrics=['SGBenchMetric'], mode='sgcls', work_dir=str(tmp_path / 'o'),
                        cfg_options=vg150['options'], progress=False)
    assert 'sgcls/R@20' in res and not [k for k in res if k.startswith('sgdet/')]


def test_protocol_help_lists_every_preset(capsys):
    from mmsgg_eval.metrics.protocols import PROTOCOLS
    with pytest.raises(SystemExit):
        main(['--help'])
    text = ' '.join(capsys.readouterr().out.split())
    assert '{' + ','.join(PROTOCOLS) + '}' in text and 'sgbench' in PROTOCOLS


def test_protocol_a_metric_does_not_accept_names_the_option(vg150, tmp_path, capsys):
    """Before: docs/protocols.md said --protocol openpsg applies to the VLM metric; it raised from the registry
    without naming the option."""
    path = _vlm_answers(vg150['dataset'], tmp_path / 'vlm.jsonl')
    with pytest.raises(SystemExit) as info:
        main([CONFIG, str(path), '--format', 'vlm', '--protocol', 'openpsg', '--no-progress', '--work-dir',
              str(tmp_path / 'o'), *vg150['cli_options']])
    err = capsys.readouterr().err
    assert info.value.code == 1 and len(err.strip().splitlines()) == 2 and 'Traceback' not in err
    assert "--protocol openpsg does not apply to VLMSceneGraphMetric" in err and "'r1sgg', 'sgb'" in err
    assert not (tmp_path / 'o' / 'metrics.json').exists()
    with pytest.raises(ValueError, match='--protocol sgbench does not apply to SGRecall.*SGBenchMetric'):
        evaluate_file(CONFIG, str(path), fmt='vlm', metrics=['SGRecall'], protocol='sgbench',
                      work_dir=str(tmp_path / 'o'), cfg_options=vg150['options'], progress=False)
    with pytest.raises(ValueError, match=r'--protocol sgb applies to .*none of which is evaluated here '
                                         r'\(GroundingPr\)'):
        evaluate_file(CONFIG, str(path), fmt='vlm', metrics=['GroundingPr'], protocol='sgb',
                      work_dir=str(tmp_path / 'o'), cfg_options=vg150['options'], progress=False)
