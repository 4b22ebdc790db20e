"""Offline CLI options reach the metrics they are meant for: ``--metric-options`` only where a metric takes the
argument (or ``Type.key`` for one type), one-line errors naming the option and the metrics, ``--protocol
openpsg`` on data without masks matches boxes (saying so), ``--metrics`` keeps the config's mode."""
import json
import os.path as osp

import pytest

from mmsgg_eval.eval import main
from mmsgg_eval.offline import evaluate_file
from tests.offline.test_eval_cli import predictions_for, sample  # noqa: F401  (fixture)

pytest.importorskip('mmdet.evaluation', reason='the SGDet config holds DetectionAP (mmdet)')

ROOT = osp.abspath(osp.join(osp.dirname(__file__), '..', '..'))
SGDET = osp.join(ROOT, 'configs', 'demo', 'freq_sgdet_faster-rcnn_r18_fpn_vg150_sample.py')


@pytest.fixture(scope='module')
def jsonl(sample, tmp_path_factory):  # noqa: F811
    path = tmp_path_factory.mktemp('options') / 'preds.jsonl'
    path.write_text('\n'.join(json.dumps(r) for r in predictions_for(sample['dataset'])))
    return str(path)


def cli(sample, jsonl, tmp_path, *args):  # noqa: F811
    options = [f'{k}={v}' for k, v in sample['options'].items()]
    return main([SGDET, jsonl, '--work-dir', str(tmp_path / 'out'), '--no-progress', '--cfg-options', *options,
                 *args])


def test_metric_option_reaches_only_the_metrics_that_take_it(sample, jsonl, tmp_path, capsys):  # noqa: F811
    """``match=box`` on an SGDet config (SGRecall, SGMeanRecall, DetectionAP) used to reach DetectionAP too:
    TypeError with a traceback."""
    res = cli(sample, jsonl, tmp_path, '--metric-options', 'match=box')
    assert 'sgdet/R@50' in res and 'sgdet/mAP' in res
    settings = json.load(open(tmp_path / 'out' / 'metrics.json'))['provenance']['metrics']
    assert {m['type'] for m in settings} >= {'SGRecall', 'SGMeanRecall', 'DetectionAP'}
    one = cli(sample, jsonl, tmp_path / 'one', '--metric-options', 'SGRecall.recall_average=micro')
    assert one['sgdet/R@50'] != res['sgdet/R@50'] and one['sgdet/mR@50'] == res['sgdet/mR@50']


@pytest.mark.parametrize('option, message', [
    ('bogus=1', '--metric-options bogus: no metric of this run takes it (metrics: SGRecall, SGMeanRecall, '
                'DetectionAP)'),
    ('DetectionAP.match=box', "--metric-options DetectionAP.match: DetectionAP has no argument 'match'"),
    ('GroundingPr.strict=true', '--metric-options GroundingPr.strict: no GroundingPr is evaluated here'),
])
def test_unknown_options_are_one_line_errors(sample, jsonl, tmp_path, capsys, option, message):  # noqa: F811
    with pytest.raises(SystemExit) as exit_:
        cli(sample, jsonl, tmp_path, '--metric-options', option)
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and message in err and 'Traceback' not in err


def test_openpsg_on_box_only_data_matches_boxes_and_says_so(sample, jsonl, tmp_path, capsys):  # noqa: F811
    """Used to fail on the first sample (missing gt_instances.masks), suggesting an option that then crashed."""
    auto = cli(sample, jsonl, tmp_path / 'auto', '--protocol', 'openpsg')
    err = capsys.readouterr().err
    assert 'SGRecall (protocol openpsg)' in err and 'match=box' in err
    explicit = cli(sample, jsonl, tmp_path / 'explicit', '--protocol', 'openpsg', '--metric-options', 'match=box')
    assert auto == explicit
    assert auto != cli(sample, jsonl, tmp_path / 'sgb')  # openpsg's own conventions (given rank, plain IoU)
    with pytest.raises(SystemExit):  # an explicit match=mask is kept: the data has no masks
        cli(sample, jsonl, tmp_path / 'mask', '--protocol', 'openpsg', '--metric-options', 'match=mask')
    assert 'gt_instances.masks' in capsys.readouterr().err


def test_metrics_keep_the_config_mode(sample, jsonl, tmp_path):  # noqa: F811
    """``--metrics SGRecall SGMeanRecall`` on an SGDet config used to evaluate PredCls."""
    res = evaluate_file(SGDET, jsonl, metrics=['SGRecall', 'SGMeanRecall'], work_dir=str(tmp_path / 'out'),
                        cfg_options=sample['options'], progress=False)
    assert 'sgdet/R@50' in res and not any(k.startswith('predcls/') for k in res)
    full = evaluate_file(SGDET, jsonl, work_dir=str(tmp_path / 'full'), cfg_options=sample['options'],
                         progress=False)
    assert all(res[k] == full[k] for k in res if k.startswith('sgdet/'))
    sgcls = evaluate_file(SGDET, jsonl, metrics=['SGRecall'], mode='sgcls', work_dir=str(tmp_path / 'sgcls'),
                          cfg_options=sample['options'], progress=False)
    assert 'sgcls/R@50' in sgcls  # --mode still chooses
