"""OIv6 end to end on the sample, the dataset side: tools/build_freq_baseline.py counts PySGG's statistics split;
tools/test.py on configs/oiv6 (FREQ, PredCls) gives the whole OIv6 table row, equal to SGMeanRecall and
OIRelationMetric run directly on the saved predictions with the dataset's GT; the same run's pictures
(--show-dir), per-image files (--per-image) and the HTML report (tools/analysis/browse_results.py). The offline
CLI on the same dump: tests/end_to_end/test_oiv6_metric.py."""
import json
import os
import os.path as osp

import pytest

from tests.tool_runs import NO_LOADER_WORKERS, frequency_baseline_on_sample, run_tool

pytest.importorskip('mmdet.datasets', reason='the MMDet pipeline path needs mmdet with compiled mmcv')

ROOT = osp.abspath(osp.join(osp.dirname(__file__), '..', '..'))
CONFIG = osp.join(ROOT, 'configs', 'oiv6', 'freq_predcls_oiv6.py')
ROW = ('R@20', 'R@50', 'R@100', 'mR@50', 'mAP_rel', 'wmAP_rel', 'mAP_phr', 'wmAP_phr', 'final_score',
       'w_final_score')


def run(args):
    return run_tool(args, check=True)


def read_metrics(work_dir):
    with open(osp.join(work_dir, 'metrics.json')) as f:
        return json.load(f)


@pytest.fixture(scope='module')
def oiv6_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('oiv6')
    root, options, _, built = frequency_baseline_on_sample(tmp, 'oiv6', CONFIG, NO_LOADER_WORKERS)
    work = tmp / 'work'
    run(['tools/test.py', CONFIG, str(tmp / 'freq.pth'), '--work-dir', str(work), '--out', str(tmp / 'preds.pkl'),
         '--per-image', str(tmp / 'per_image.jsonl'), '--show-dir', 'vis', '--cfg-options', *options])
    return dict(tmp=tmp, root=root, options=options, build_log=built.stdout, metrics=read_metrics(work), work=work)


def test_frequency_statistics_count_every_training_relation(oiv6_run):
    from mmsgg_eval.datasets import OIv6Dataset
    log = oiv6_run['build_log']
    assert "'duplicate_rels': 'keep'" in log and "'clip_boxes': False" in log  # PySGG's statistics split
    meta = OIv6Dataset(data_root=oiv6_run['root'], split='test', lazy_init=True).metainfo
    assert f'saved {oiv6_run["tmp"] / "freq.pth"}: {sum(meta["predicate_counts"])} relations' in log


def test_tools_test_gives_the_oiv6_row_equal_to_the_metrics(oiv6_run):
    import mmsgg_eval  # noqa: F401
    from mmsgg_eval.datasets import OIv6Dataset
    from mmsgg_eval.io.stream import iter_records
    from mmsgg_eval.metrics import OIRelationMetric, SGMeanRecall
    metrics = oiv6_run['metrics']
    row = {k: metrics[f'predcls/{k}'] for k in ROW}
    assert all(isinstance(v, float) and 0 <= v <= 100 for v in row.values()), row
    assert row['R@100'] > 0 and row['mAP_rel'] > 0  # FREQ gets some relations of its own sample right
    assert row['w_final_score'] == pytest.approx(0.2 * row['R@50'] + 0.4 * row['wmAP_rel'] + 0.4 * row['wmAP_phr'])

    # the same predictions scored directly by the two metrics on the dataset's GT
    dataset = OIv6Dataset(data_root=oiv6_run['root'], split='test', pipeline=[])
    records = list(iter_records(str(oiv6_run['tmp'] / 'preds.pkl')))
    assert sorted(r['sample_idx'] for r in records) == list(range(len(dataset)))
    direct = {}
    for metric in (SGMeanRecall(mode='predcls'), OIRelationMetric(mode='predcls')):
        metric.dataset_meta = dataset.metainfo
        metric.process({}, records)
        direct.update(metric.evaluate(len(dataset)))
    scalar = {k: v for k, v in direct.items() if isinstance(v, float)}
    assert set(f'predcls/{k}' for k in ROW) <= set(scalar)
    assert {k: metrics[k] for k in scalar} == pytest.approx(scalar, abs=1e-9)



def test_pictures_per_image_files_and_report(oiv6_run):
    tmp, metrics = oiv6_run['tmp'], oiv6_run['metrics']
    pictures = [f for d, _, files in os.walk(oiv6_run['work']) for f in files
                if f.endswith('.jpg') and osp.basename(d) == 'vis']
    lines = [json.loads(line) for line in open(tmp / 'per_image.jsonl')]  # SGMeanRecall: per-image recall
    oi_lines = [json.loads(line) for line in open(tmp / 'per_image.predcls.oi.jsonl')]  # the OI lists
    assert len(pictures) == len(lines) == len(oi_lines) == 16
    assert [r['img_id'] for r in lines] == [r['img_id'] for r in oi_lines]
    num_gt = sum(len(r['gt']) for r in oi_lines)
    for k in (20, 50, 100):  # R@K of the OI protocol: pooled over the images
        assert 100 * sum(r['hits'][f'R@{k}'] for r in oi_lines) / num_gt == pytest.approx(metrics[f'predcls/R@{k}'])
    report = tmp / 'report'
    run([osp.join('tools', 'analysis', 'browse_results.py'), CONFIG, str(tmp / 'preds.pkl'), '--out-dir', str(report),
         '--no-progress', '--cfg-options', *oiv6_run['options']])
    index = (report / 'index.html').read_text(encoding='utf-8')
    assert len(list((report / 'images').glob('*.html'))) == len(lines)
    assert all(f'images/{r["sample_idx"]}.html' in index or str(r['img_id']) in index for r in lines)
