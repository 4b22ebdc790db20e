"""OIv6 end to end, the metric side: tools/test.py on the bundled OIv6 sample with the frequency
baseline gives the whole OIv6 row (R@50, R@100, mR@50, wmAP_rel, wmAP_phr, w_final_score) with the per-predicate
AP table, and the offline CLI on its prediction dump gives the same numbers (tests/end_to_end/test_oiv6_dataset.py
compares tools/test.py with the metrics run directly)."""
import json
import os.path as osp

import pytest

from tests.tool_runs import NO_LOADER_WORKERS, frequency_baseline_on_sample, run_tool

pytest.importorskip('mmdet.datasets', reason='the MMDet pipeline path needs mmdet with compiled mmcv '
                                              '(tools/setup_env.sh installs it)')

ROOT = osp.abspath(osp.join(osp.dirname(__file__), '..', '..'))
CONFIG = osp.join(ROOT, 'configs', 'oiv6', 'freq_predcls_oiv6.py')
ROW = ('R@50', 'R@100', 'mR@50', 'wmAP_rel', 'wmAP_phr', 'w_final_score')


@pytest.fixture(scope='module')
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('oi_e2e')
    root, options, ckpt, _ = frequency_baseline_on_sample(tmp, 'oiv6', CONFIG, NO_LOADER_WORKERS)
    out = run_tool(['tools/test.py', CONFIG, ckpt, '--work-dir', str(tmp / 'work'), '--out', str(tmp / 'pred.pkl'),
                    '--cfg-options', *options])
    assert out.returncode == 0, out.stderr
    return dict(tmp=tmp, root=root, options=options)


def test_tools_test_and_offline_cli_give_the_oiv6_row(run):
    tmp = run['tmp']
    with open(tmp / 'work' / 'metrics.json') as f:
        online = json.load(f)
    for key in ROW:
        assert f'predcls/{key}' in online, key
    assert online['predcls/wmAP_rel'] > 0 and online['predcls/R@50'] > 0
    table = online['predcls/per_predicate_ap']
    assert set(next(iter(table.values()))) == {'AP_rel', 'AP_phr', 'num_gt'} and len(table) == 30
    assert (tmp / 'work' / 'predcls.oi.tables.per_predicate.csv').exists()
    out = run_tool(['-m', 'mmsgg_eval.eval', CONFIG, str(tmp / 'pred.pkl'), '--work-dir', str(tmp / 'off'),
                    '--cfg-options', f'test_dataloader.dataset.data_root={run["root"]}'])
    assert out.returncode == 0, out.stderr
    with open(tmp / 'off' / 'metrics.json') as f:
        offline = json.load(f)
    for key, value in online.items():
        if isinstance(value, float):
            assert offline[key] == value, key

