"""End to end through MMDetection: tools/test.py (single process and torchrun with 3 gloo ranks),
tools/build_freq_baseline.py, --out dumps and offline evaluation, user-facing errors."""
import json
import os.path as osp

import pytest

from tests.tool_runs import frequency_baseline_on_sample, run_tool

pytest.importorskip('mmdet.datasets', reason='the MMDet pipeline path needs mmdet with compiled mmcv '
                                              '(tools/setup_env.sh installs it)')

ROOT = osp.abspath(osp.join(osp.dirname(__file__), '..', '..'))
CONFIG = osp.join(ROOT, 'configs', 'demo', 'freq_predcls_vg150_sample.py')


def run(args, **kwargs):
    return run_tool(args, **kwargs)


@pytest.fixture(scope='module')
def demo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('e2e')
    root, options, ckpt, _ = frequency_baseline_on_sample(tmp, 'vg150', CONFIG)
    return dict(tmp=tmp, root=root, ckpt=ckpt, options=options)


def read_metrics(work_dir):
    with open(osp.join(work_dir, 'metrics.json')) as f:
        return json.load(f)


def direct_metrics(pred_file, root):
    """The same predictions scored directly by the metrics (no Runner)."""
    import mmsgg_eval  # noqa: F401
    from mmsgg_eval.datasets import VG150Dataset
    from mmsgg_eval.metrics import SGMeanRecall, SGRecall
    from mmsgg_eval.io.stream import iter_records
    dataset = VG150Dataset(data_root=root, split='test', num_val_images=8, pipeline=[])
    records = list(iter_records(pred_file))
    assert sorted(r['sample_idx'] for r in records) == list(range(len(dataset)))
    out = {}
    for cls in (SGRecall, SGMeanRecall):
        metric = cls(mode='predcls')
        metric.dataset_meta = dataset.metainfo
        metric.process({}, records)
        out.update(metric.evaluate(len(dataset)))
    return out


def test_tools_test_reports_the_metric_of_its_predictions(demo):
    work = demo['tmp'] / 'single'
    pred = work / 'preds.pkl'
    out = run(['tools/test.py', CONFIG, demo['ckpt'], '--work-dir', str(work), '--out', str(pred),
               '--cfg-options', *demo['options']])
    assert out.returncode == 0, out.stderr[-3000:]
    log = out.stdout + out.stderr
    assert 'SGG eval:' in log and 'mode=predcls' in log and 'VG150' in log
    metrics = read_metrics(work)
    expected = direct_metrics(str(pred), demo['root'])
    scalar = {k: v for k, v in expected.items() if isinstance(v, float)}
    assert scalar and all(metrics[k] == pytest.approx(v, abs=1e-9) for k, v in scalar.items())
    assert metrics['predcls/R@100'] > 0  # the baseline predicts something right on its own sample
    for name in ('predcls.metrics.json', 'predcls.per_predicate.png', 'predcls.tables.md'):
        assert (work / name).stat().st_size > 0
    # offline evaluation of the dump gives exactly the online numbers
    off = demo['tmp'] / 'offline'
    out = run(['tools/eval_offline.py', CONFIG, str(pred), '--work-dir', str(off), '--no-progress',
               '--cfg-options', *demo['options']])
    assert out.returncode == 0, out.stderr[-3000:]
    offline = read_metrics(off)
    assert {k: offline[k] for k in scalar} == {k: metrics[k] for k in scalar}
    demo['single_metrics'] = metrics


def test_torchrun_three_gloo_ranks_equal_single_process(demo):
    if 'single_metrics' not in demo:
        pytest.skip('single-process run failed')
    work = demo['tmp'] / 'dist'
    from tests.dist_utils import free_port
    out = run(['-m', 'torch.distributed.run', '--nproc_per_node=3', f'--master_port={free_port()}',
               'tools/test.py', CONFIG, demo['ckpt'], '--launcher', 'pytorch', '--work-dir', str(work),
               '--cfg-options', *demo['options'], 'env_cfg.dist_cfg.backend=gloo'])
    assert out.returncode == 0, out.stderr[-4000:]
    dist_metrics = read_metrics(work)
    single = demo['single_metrics']
    assert {k: v for k, v in dist_metrics.items() if isinstance(v, float)} == \
        {k: v for k, v in single.items() if isinstance(v, float)}
    assert dist_metrics['predcls/per_predicate_recall'] == single['predcls/per_predicate_recall']


def test_user_errors_are_explained(demo, tmp_path):
    out = run(['tools/test.py', CONFIG, str(tmp_path / 'missing.pth')])
    assert out.returncode != 0 and 'checkpoint not found' in out.stderr and 'build_freq_baseline' in out.stderr
    out = run(['tools/test.py', CONFIG, demo['ckpt'], '--work-dir', str(tmp_path / 'w'),
               '--cfg-options', f'test_dataloader.dataset.data_root={tmp_path}/nowhere/'])
    assert out.returncode != 0 and 'not found' in out.stderr and 'nowhere' in out.stderr
    # an SGDet evaluator on a model that only predicts relations between GT objects
    out = run(['tools/test.py', CONFIG, demo['ckpt'], '--work-dir', str(tmp_path / 'w2'),
               '--cfg-options', *demo['options'], 'test_evaluator.0.mode=sgdet', 'test_evaluator.1.mode=sgdet'])
    assert out.returncode != 0
    assert 'pred_instances.bboxes' in out.stderr or 'sgdet' in out.stderr.lower()


def test_unwritable_outputs_fail_before_evaluating(demo, tmp_path):
    blocker = tmp_path / 'a_file'
    blocker.write_text('x')  # a file where a directory is expected: not writable, even for root
    for where in (['--work-dir', str(blocker / 'work')],
                  ['--work-dir', str(tmp_path / 'w'), '--out', str(blocker / 'preds.pkl')]):
        out = run(['tools/test.py', CONFIG, demo['ckpt'], *where, '--cfg-options', *demo['options']])
        log = out.stdout + out.stderr
        assert out.returncode != 0 and 'OutputNotWritableError' in out.stderr and 'a_file' in out.stderr, log
        assert 'nothing was evaluated' in out.stderr and 'SGG eval' not in log and 'Traceback' not in log


@pytest.mark.slow
def test_repeated_three_rank_torchrun_runs_all_exit_cleanly(demo):
    """Gloo ranks used to abort at exit now and then ("terminate called without an active exception", 1 in
    ~6 runs of 3 ranks): every run must exit 0 and write metrics.json equal to the single-process run."""
    if 'single_metrics' not in demo:
        pytest.skip('single-process run failed')
    from tests.dist_utils import free_port
    single = {k: v for k, v in demo['single_metrics'].items() if isinstance(v, float)}
    for attempt in range(10):
        work = demo['tmp'] / f'repeat{attempt}'
        out = run(['-m', 'torch.distributed.run', '--nproc_per_node=3', f'--master_port={free_port()}',
                   'tools/test.py', CONFIG, demo['ckpt'], '--launcher', 'pytorch', '--work-dir', str(work),
                   '--cfg-options', *demo['options'], 'env_cfg.dist_cfg.backend=gloo',
                   'env_cfg.dist_cfg.timeout=120'])
        assert out.returncode == 0, f'run {attempt}:\n{out.stderr[-4000:]}'
        assert 'terminate called' not in out.stderr
        assert {k: v for k, v in read_metrics(work).items() if isinstance(v, float)} == single
