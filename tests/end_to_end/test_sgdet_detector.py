"""SGDet / SGCls end to end with a real mmdet detector: tools/train.py trains a random-init
Faster R-CNN (ResNet-18, small inputs) for 2 iterations on the VG150 sample; tools/test.py in SGDet and SGCls
with that checkpoint gives the same numbers in one process, on 3 gloo ranks, through mmdet's own
tools/test.py, and (SGDet) offline from the --out record stream. Plus in-process checks of the template."""
import glob
import json
import math
import os
import os.path as osp

import pytest

from tests.tool_runs import run_tool, sample_data_root
import torch

pytest.importorskip('mmdet.models', reason='the detector path needs mmdet with compiled mmcv ops')

ROOT = osp.abspath(osp.join(osp.dirname(__file__), '..', '..'))
DET_CONFIG = osp.join(ROOT, 'configs', 'demo', 'faster-rcnn_r18_fpn_vg150_sample.py')
CONFIGS = {mode: osp.join(ROOT, 'configs', 'demo', f'freq_{mode}_faster-rcnn_r18_fpn_vg150_sample.py')
           for mode in ('sgdet', 'sgcls')}


def run(args):
    return run_tool(args, timeout=900, trusted_checkpoints=True)


def mmdet_tool(name):
    import mmdet
    path = osp.join(osp.dirname(mmdet.__file__), '.mim', 'tools', name)
    if not osp.isfile(path):
        pytest.skip(f'mmdet does not ship {path}')
    return path


def floats(metrics):
    return {k: v for k, v in metrics.items() if isinstance(v, float)}


def same_numbers(a, b):
    fa, fb = floats(a), floats(b)
    assert fa.keys() == fb.keys(), sorted(set(fa) ^ set(fb))
    bad = {k: (fa[k], fb[k]) for k in fa if not (fa[k] == fb[k] or (math.isnan(fa[k]) and math.isnan(fb[k])))}
    assert not bad, bad


def read_json(path):
    with open(path) as f:
        return json.load(f)


def predictions_by_index(path):
    """{sample_idx: (pred_instances, pred_relations)} of a prediction file (ours or mmdet's DumpDetResults)."""
    from mmsgg_eval.io.stream import iter_records
    return {int(r['sample_idx']): (r['pred_instances'], r['pred_relations'])
            for r in iter_records(str(path), unsafe=True)}


def assert_same_predictions(path_a, path_b):
    """Every sample's detections and ranked relations are bit-identical (a stronger check than equal metrics on
    a barely trained detector, whose recalls are mostly 0)."""
    a, b = predictions_by_index(path_a), predictions_by_index(path_b)
    assert sorted(a) == sorted(b) == list(range(13))
    for idx in a:
        for group_a, group_b in zip(a[idx], b[idx]):
            assert set(group_a) == set(group_b)
            for key in group_a:
                assert torch.equal(torch.as_tensor(group_a[key]), torch.as_tensor(group_b[key])), (idx, key)


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('sgdet')
    root = sample_data_root(tmp, 'vg150')
    work = tmp / 'det'
    out = run(['tools/train.py', DET_CONFIG, '--work-dir', str(work), '--cfg-options',
               'train_cfg.max_iters=2', 'train_cfg.val_interval=2', 'default_hooks.checkpoint.interval=2',
               f'train_dataloader.dataset.data_root={root}', f'val_dataloader.dataset.data_root={root}',
               f'test_dataloader.dataset.data_root={root}'])
    assert out.returncode == 0, out.stderr[-4000:]
    ckpt = work / 'iter_2.pth'
    assert ckpt.is_file(), os.listdir(work)
    log = out.stdout + out.stderr
    assert 'bbox/mAP' in log and 'bbox/AP@50' in log  # DetectionAP validated the detector
    options = [f'test_dataloader.dataset.data_root={root}', f'model.relation_head.statistics_dataset.data_root={root}']
    return dict(tmp=tmp, root=root, ckpt=str(ckpt), options=options, runs={})


@pytest.mark.parametrize('mode', ['sgdet', 'sgcls'])
def test_single_process_reports_and_dumps(trained, mode):
    work = trained['tmp'] / f'{mode}_single'
    args = ['tools/test.py', CONFIGS[mode], trained['ckpt'], '--work-dir', str(work),
            '--cfg-options', *trained['options']]
    args[3:3] = ['--out', str(work / 'preds.pkl')]
    out = run(args)
    assert out.returncode == 0, out.stderr[-4000:]
    log = out.stdout + out.stderr
    assert 'loaded a detector checkpoint' in log
    metrics = read_json(work / 'metrics.json')
    assert f'{mode}/R@100' in metrics
    if mode == 'sgdet':
        assert {'sgdet/mAP', 'sgdet/AP@50'} <= set(metrics)
        assert 0 <= metrics['sgdet/mAP'] <= metrics['sgdet/AP@50'] <= 100
        assert 'Detection AP (VG150, 13 images' in log
        check_sgdet_records(work / 'preds.pkl', trained['root'])
    else:
        check_sgcls_records(work / 'preds.pkl', trained['root'])
    trained['runs'][mode] = metrics


def check_sgdet_records(pred_file, root):
    """Detections reach the stream in the ORIGINAL frame (images are larger than the 192-pixel input)."""
    from mmsgg_eval.io.stream import iter_records
    records = list(iter_records(str(pred_file)))
    assert sorted(r['sample_idx'] for r in records) == list(range(13))
    beyond_input = 0
    for r in records:
        boxes = torch.as_tensor(r['pred_instances']['bboxes'])
        h, w = r['ori_shape']
        assert 0 < boxes.shape[0] <= 80 and r['pred_mode'] == 'sgdet'
        assert float(boxes[:, 0::2].max()) <= w + 1e-3 and float(boxes[:, 1::2].max()) <= h + 1e-3
        beyond_input += int(float(boxes.max()) > 192)
        n = boxes.shape[0]
        assert tuple(torch.as_tensor(r['pred_relations']['pair_idxs']).shape) == (n * (n - 1), 2)
        assert tuple(torch.as_tensor(r['pred_relations']['scores']).shape) == (n * (n - 1), 51)
    assert beyond_input > 0


def check_sgcls_records(pred_file, root):
    """SGCls returns the GT boxes after the resize round trip, classified, with all ordered pairs."""
    from mmsgg_eval.io.stream import iter_records
    for r in iter_records(str(pred_file)):
        boxes, gt = torch.as_tensor(r['pred_instances']['bboxes']), torch.as_tensor(r['gt_instances']['bboxes'])
        assert boxes.shape == gt.shape and torch.allclose(boxes, gt, atol=1e-3) and r['pred_mode'] == 'sgcls'
        labels = torch.as_tensor(r['pred_instances']['labels'])
        assert int(labels.min()) >= 0 and int(labels.max()) < 150
        n = boxes.shape[0]
        assert tuple(torch.as_tensor(r['pred_relations']['scores']).shape) == (n * (n - 1), 51)


@pytest.mark.parametrize('mode', ['sgdet', 'sgcls'])
def test_three_gloo_ranks_equal_single_process(trained, mode):
    if mode not in trained['runs']:
        pytest.skip('single-process run failed')
    from tests.dist_utils import free_port
    work = trained['tmp'] / f'{mode}_dist'
    out = run(['-m', 'torch.distributed.run', '--nproc_per_node=3', f'--master_port={free_port()}',
               'tools/test.py', CONFIGS[mode], trained['ckpt'], '--launcher', 'pytorch', '--work-dir', str(work),
               '--out', str(work / 'preds.pkl'), '--cfg-options', *trained['options'],
               'env_cfg.dist_cfg.backend=gloo'])
    assert out.returncode == 0, out.stderr[-4000:]
    same_numbers(read_json(work / 'metrics.json'), trained['runs'][mode])
    assert_same_predictions(work / 'preds.pkl', trained['tmp'] / f'{mode}_single' / 'preds.pkl')


@pytest.mark.parametrize('mode', ['sgdet', 'sgcls'])
def test_mmdet_own_test_tool_gives_the_same_numbers(trained, mode):
    if mode not in trained['runs']:
        pytest.skip('single-process run failed')
    work = trained['tmp'] / f'{mode}_mmdet'
    out = run([mmdet_tool('test.py'), CONFIGS[mode], trained['ckpt'], '--work-dir', str(work),
               '--out', str(work / 'mmdet_preds.pkl'), '--cfg-options', *trained['options']])
    assert out.returncode == 0, out.stderr[-4000:]
    logs = sorted(glob.glob(str(work / '*' / '*.json')))
    assert logs, os.listdir(work)
    logged = {k[len('test/'):] if k.startswith('test/') else k: v for k, v in read_json(logs[-1]).items()}
    expected = floats(trained['runs'][mode])
    same_numbers({k: logged[k] for k in expected}, expected)
    assert_same_predictions(work / 'mmdet_preds.pkl', trained['tmp'] / f'{mode}_single' / 'preds.pkl')


def test_sgdet_stream_evaluated_offline_gives_the_same_numbers(trained):
    if 'sgdet' not in trained['runs']:
        pytest.skip('single-process run failed')
    work = trained['tmp'] / 'sgdet_offline'
    out = run(['-m', 'mmsgg_eval.eval', CONFIGS['sgdet'], str(trained['tmp'] / 'sgdet_single' / 'preds.pkl'),
               '--work-dir', str(work), '--no-progress', '--cfg-options', *trained['options']])
    assert out.returncode == 0, out.stderr[-4000:]
    same_numbers(read_json(work / 'metrics.json'), trained['runs']['sgdet'])


def test_mmdet_own_train_tool_trains_the_detector(trained):
    work = trained['tmp'] / 'det_mmdet'
    root = trained['root']
    out = run([mmdet_tool('train.py'), DET_CONFIG, '--work-dir', str(work), '--cfg-options',
               'train_cfg.max_iters=1', 'train_cfg.val_interval=1000', 'default_hooks.checkpoint.interval=1',
               f'train_dataloader.dataset.data_root={root}', f'val_dataloader.dataset.data_root={root}',
               f'test_dataloader.dataset.data_root={root}', 'val_dataloader.dataset.indices=2'])
    assert out.returncode == 0, out.stderr[-4000:]
    assert (work / 'iter_1.pth').is_file()


# ---------------------------------------------------------------------------------------------- in process
def build(mode, root, **model):
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    import mmsgg_eval  # noqa: F401
    from mmsgg_eval.registry import MODELS
    cfg = Config.fromfile(CONFIGS['sgdet'])
    init_default_scope('mmdet')
    cfg.model.mode = mode
    cfg.model.relation_head.statistics_dataset.data_root = root
    cfg.model.update(model)
    return MODELS.build(cfg.model), cfg


def test_predcls_template_equals_the_frequency_baseline(trained):
    """FREQ on the template in PredCls == FrequencyBaseline (same statistics, same ranked pairs)."""
    from mmsgg_eval.models import FrequencyBaseline
    from mmsgg_eval.registry import DATASETS
    model, cfg = build('predcls', trained['root'])
    baseline = FrequencyBaseline(150, 50)
    baseline.fit(model.relation_head.counts.numpy())
    dataset = DATASETS.build(dict(cfg.test_dataloader.dataset, data_root=trained['root'],
                                  pipeline=[dict(type='LoadSceneGraphAnnotations'), dict(type='PackSceneGraphInputs')]))
    samples = [dataset[i]['data_samples'] for i in range(3)]
    ours = model.predict(None, [s.clone() for s in samples])
    ref = baseline.predict([s.clone() for s in samples])
    for a, b in zip(ours, ref):
        assert torch.equal(a.pred_relations.pair_idxs, b.pred_relations.pair_idxs)
        assert torch.equal(a.pred_relations.scores, b.pred_relations.scores)
        assert torch.equal(a.pred_instances.bboxes, b.pred_instances.bboxes)


def test_plain_detector_checkpoint_loads_into_the_template(trained, monkeypatch):
    from mmengine.runner import load_checkpoint
    monkeypatch.setenv('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD', '1')  # see run()
    model, _ = build('sgdet', trained['root'])
    counts = model.relation_head.counts.clone()
    load_checkpoint(model, trained['ckpt'], map_location='cpu')
    state = torch.load(trained['ckpt'], map_location='cpu', weights_only=False)['state_dict']
    key = next(k for k in state if k.startswith('roi_head.'))
    assert torch.equal(model.state_dict()['detector.' + key], state[key])
    assert torch.equal(model.relation_head.counts, counts)  # statistics kept (not in a detector checkpoint)


def test_head_interface_errors_are_explained(trained):
    from mmsgg_eval.models import BaseRelationHead
    from mmsgg_eval.registry import MODELS

    @MODELS.register_module(force=True)
    class WrongWidthHead(BaseRelationHead):
        needs_features = False

        def predict(self, feats, objects, pair_idxs, data_samples):
            return [torch.zeros(p.shape[0], 3) for p in pair_idxs]

    model, cfg = build('predcls', trained['root'])
    model.relation_head = WrongWidthHead(150, 50)
    from mmsgg_eval.registry import DATASETS
    dataset = DATASETS.build(dict(cfg.test_dataloader.dataset, data_root=trained['root'],
                                  pipeline=[dict(type='LoadSceneGraphAnnotations'), dict(type='PackSceneGraphInputs')]))
    with pytest.raises(ValueError, match=r'sample_idx=0.*WrongWidthHead.*\[.*, 51\]'):
        model.predict(None, [dataset[0]['data_samples']])
    with pytest.raises(ValueError, match='mode must be one of'):
        build('phrdet', trained['root'])


SHIPPED = [osp.join(ROOT, 'configs', ds, f'freq_{mode}_faster-rcnn_r50_fpn_{ds}.py')
           for ds in ('vg150', 'gqa200', 'psg', 'oiv6') for mode in ('sgdet', 'sgcls', 'predcls')]


@pytest.mark.parametrize('config', SHIPPED, ids=[osp.basename(c) for c in SHIPPED])
def test_shipped_configs_resolve_mmdet_bases(config):
    """mmdet's own Faster R-CNN R50-FPN model config comes in through the cross-repo `_base_`; sizes agree."""
    from mmengine.config import Config
    cfg = Config.fromfile(config)
    mode = osp.basename(config).split('_')[1]
    assert cfg.model.type == 'SceneGraphDetector' and cfg.model.mode == mode
    det = cfg.model.detector
    assert det.type == 'FasterRCNN' and det.backbone.depth == 50
    head = cfg.model.relation_head
    assert det.roi_head.bbox_head.num_classes == head.num_classes
    sizes = {'vg150': (150, 50), 'gqa200': (200, 100), 'psg': (133, 56),
             'oiv6': (601, 30)}[osp.basename(osp.dirname(config))]
    assert (head.num_classes, head.num_predicates) == sizes
    assert head.statistics_dataset.split == 'train'
    evaluators = [m['type'] for m in cfg.test_evaluator]
    assert ('DetectionAP' in evaluators) == (mode == 'sgdet')
    assert all(m.get('mode', mode) == mode for m in cfg.test_evaluator if m['type'] != 'DetectionAP')
    if 'psg' in config:
        assert cfg.test_dataloader.dataset.with_masks is False
        assert all(m.get('match', 'box') == 'box' for m in cfg.test_evaluator)


@pytest.mark.parametrize('ds,classes', [('vg150', 150), ('gqa200', 200), ('psg', 133), ('oiv6', 601)])
def test_detector_configs_train_on_the_dataset_wrappers(ds, classes, tmp_path):
    """The detection training set of each dataset: mmdet's LoadAnnotations + RandomFlip + PackDetInputs."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    import mmsgg_eval  # noqa: F401
    from mmsgg_eval.testing import make_sample_data
    from mmsgg_eval.registry import DATASETS
    make_sample_data(str(tmp_path), datasets=[ds])
    cfg = Config.fromfile(osp.join(ROOT, 'configs', ds, f'faster-rcnn_r50_fpn_{ds}.py'))
    assert cfg.model.type == 'FasterRCNN' and cfg.model.roi_head.bbox_head.num_classes == classes
    init_default_scope('mmdet')
    extra = dict(num_val_images=8) if ds == 'vg150' else {}
    dataset = DATASETS.build(dict(cfg.train_dataloader.dataset, data_root=str(tmp_path / ds) + '/', **extra))
    assert len(dataset.metainfo['classes']) == classes and len(dataset) > 0
    item = dataset[0]
    sample = item['data_samples']
    assert item['inputs'].dim() == 3 and sample.gt_instances.bboxes.shape[0] == len(sample.gt_instances.labels) > 0
    assert 'flip' in sample.metainfo
