"""SceneGraphLocalVisualizer: pixels where they belong, and the hits drawn are the metric's."""
import numpy as np
import pytest
import torch

from mmsgg_eval.metrics import SGRecall
from mmsgg_eval.metrics.per_image import read_per_image
from tests.sgg_samples import random_dataset

NUM_CLASSES, NUM_PREDICATES = 4, 5
META = dict(classes=[f'c{i}' for i in range(NUM_CLASSES)], predicates=[f'p{i}' for i in range(NUM_PREDICATES)],
            dataset_name='random')


@pytest.fixture(scope='module')
def vis_module():
    from mmsgg_eval.visualization import scene_graph
    return scene_graph


def make_vis(vis_module, name, **kwargs):
    vis = vis_module.SceneGraphLocalVisualizer.get_instance(name, **kwargs)
    vis.dataset_meta = META
    return vis


def record(found: bool):
    sub, obj = [10.0, 10.0, 50.0, 50.0], [100.0, 100.0, 150.0, 150.0]
    rel = dict(index=0, subject=0, object=1, subject_label='c0', object_label='c1', predicate='p2',
               rank_gc=0 if found else None, rank_ngc=0 if found else None, zeroshot=False,
               pair_rank=0, pair_predicate='p2' if found else 'p3', subject_box=sub, object_box=obj)
    pred = dict(rank=0, subject=0, object=1, subject_label='c0', object_label='c1',
                predicate='p2' if found else 'p3', score=0.9, hits=[0] if found else [], subject_box=sub,
                object_box=obj)
    return dict(sample_idx=0, mode='predcls', gt_relations=[rel], predictions=[pred])


def close(pixel, color, tol=40):
    return all(abs(int(p) - int(c)) <= tol for p, c in zip(pixel, color))


@pytest.mark.parametrize('found', [True, False])
def test_boxes_and_arrow_in_hit_or_miss_colour(vis_module, found):
    vis = make_vis(vis_module, f'pixels{found}', font_size=10, line_width=2)
    image = np.zeros((160, 160, 3), dtype=np.uint8)
    drawn = vis.draw_record(image, record(found))
    colour = vis_module.HIT if found else vis_module.MISS
    assert drawn.shape[1] == 320 and drawn.shape[0] > 160  # GT | prediction, legend strip below
    for offset in (0, 160):  # both panels
        # the box edges: left edge of the subject box (below its label), right edge of the object box
        assert close(drawn[45, 10 + offset], colour), drawn[45, 10 + offset]
        assert close(drawn[125, 150 + offset], colour)
        # inside the object box, away from its edges, the arrow and the label: the image is untouched
        assert tuple(drawn[145, 105 + offset]) == (0, 0, 0)
        # the arrow joins the boxes' centres (30, 30) -> (125, 125): sampled off its number label
        for t in (0.25, 0.65):
            x = y = int(round(30 + t * 95))
            near = drawn[y - 1:y + 2, x - 1 + offset:x + 2 + offset].reshape(-1, 3)
            assert any(close(p, colour) for p in near), (t, near)
        # nothing is drawn away from the boxes and the arrow
        assert tuple(drawn[10, 150 + offset]) == (0, 0, 0) and tuple(drawn[150, 10 + offset]) == (0, 0, 0)
    other = vis_module.MISS if found else vis_module.HIT
    assert not close(drawn[45, 10], other)


def test_masks_are_blended_in_the_relation_colour(vis_module):
    vis = make_vis(vis_module, 'masks', font_size=10)
    image = np.zeros((160, 160, 3), dtype=np.uint8)
    mask = np.zeros((160, 160), dtype=bool)
    mask[130:145, 103:115] = True
    drawn = vis.draw_record(image, record(True), gt_masks={1: mask}, pred_masks={1: mask})
    for offset in (0, 160):
        px = drawn[140, 106 + offset]
        assert px[1] > 40 and px[0] < 20, px  # green-tinted (0.4 * HIT) inside the object's mask
        assert tuple(drawn[147, 120 + offset]) == (0, 0, 0)  # outside it, inside the box


def test_drawn_hits_are_the_metric_hits(vis_module, tmp_path):
    """Per sample, the visualizer's decision (one image at a time) equals the evaluation's per-image file,
    and the GT relations drawn as found give the reported R@50."""
    samples, _ = random_dataset(21, 24, 'sgdet')
    metric = SGRecall(mode='sgdet', per_image_out=str(tmp_path / 'p.jsonl'))
    metric.dataset_meta = META
    for start in range(0, len(samples), 6):
        metric.process({}, samples[start:start + 6])
    r50 = metric.evaluate(len(samples))['sgdet/R@50']
    lines = {r['sample_idx']: r for r in read_per_image(str(tmp_path / 'p.jsonl'))}
    vis = make_vis(vis_module, 'hits', mode='sgdet', k=50, topk_drawn=20)
    per_image, drawn_hits = [], 0
    for sample in samples:
        rec = vis.record_of(sample)
        gt_items, pred_items = vis_module.relation_items(rec, 50, 20)
        line = lines[rec['sample_idx']]
        assert [i['hit'] for i in gt_items] == [g['rank_gc'] is not None and g['rank_gc'] < 50
                                                 for g in line['gt_relations']]
        assert [i['hit'] for i in pred_items] == [bool(p['hits']) for p in line['predictions'][:20]]
        drawn_hits += sum(i['hit'] for i in pred_items)
        if line['evaluated']:
            per_image.append(100.0 * sum(i['hit'] for i in gt_items) / len(gt_items))
        assert vis.draw_record(np.zeros((100, 100, 3), np.uint8), rec).dtype == np.uint8
    assert drawn_hits > 0
    assert sum(per_image) / len(per_image) == pytest.approx(r50)


def test_add_datasample_writes_the_picture(vis_module, tmp_path):
    import mmcv
    samples, _ = random_dataset(2, 4, 'predcls')
    vis = make_vis(vis_module, 'write')
    out = tmp_path / 'a.png'
    vis.add_datasample('a', np.zeros((100, 120, 3), np.uint8), samples[1], out_file=str(out))
    img = mmcv.imread(str(out))
    assert img.shape[1] == 240 and img.shape[0] >= 100


def test_registered_in_mmdet_visualizers_and_current_instance():
    import mmsgg_eval  # noqa: F401
    from mmdet.registry import VISUALIZERS
    from mmengine.visualization import Visualizer
    vis = VISUALIZERS.build(dict(type='SceneGraphLocalVisualizer', name='from_registry', topk_drawn=7))
    assert type(vis).__name__ == 'SceneGraphLocalVisualizer' and vis.topk_drawn == 7
    assert Visualizer.get_current_instance() is vis  # what mmdet's DetVisualizationHook draws with
    with pytest.raises(ValueError, match='topk_drawn'):
        VISUALIZERS.build(dict(type='SceneGraphLocalVisualizer', name='bad', topk_drawn=0))


def test_gt_relations_not_found_name_the_model_predicate(vis_module):
    gt_items, pred_items = vis_module.relation_items(record(False), 50, 20)
    assert gt_items[0]['note'] == 'miss, model: p3' and not gt_items[0]['hit']
    assert not pred_items[0]['hit']
    assert torch is not None


def test_show_dir_and_per_image_options_of_tools_test():
    from mmengine.config import Config
    from mmsgg_eval.runner.cli import set_config_per_image, trigger_visualization_hook
    cfg = Config(dict(default_hooks=dict(logger=dict(type='LoggerHook')),
                      visualizer=dict(type='DetLocalVisualizer', vis_backends=[dict(type='LocalVisBackend')]),
                      test_evaluator=[dict(type='SGRecall', mode='predcls'), dict(type='DetectionAP')]))
    trigger_visualization_hook(cfg, 'vis')
    assert cfg.default_hooks.visualization == dict(type='DetVisualizationHook', draw=True, test_out_dir='vis')
    assert cfg.visualizer.type == 'SceneGraphLocalVisualizer'
    set_config_per_image(cfg, 'p.jsonl')
    assert cfg.test_evaluator[0]['per_image_out'] == 'p.jsonl' and 'per_image_out' not in cfg.test_evaluator[1]
    single = Config(dict(test_evaluator=dict(type='GroundingPr')))
    set_config_per_image(single, 'g.jsonl')
    assert single.test_evaluator['per_image_out'] == 'g.jsonl'


def test_offline_cli_per_image_option(tmp_path, monkeypatch):
    import inspect
    import mmsgg_eval.eval as cli
    seen = {}
    signature = inspect.signature(cli.evaluate_file)
    monkeypatch.setattr(cli, 'evaluate_file', lambda *a, **k: seen.setdefault('call', signature.bind(*a, **k)))
    cli.main(['c.py', 'p.jsonl', '--per-image', str(tmp_path / 'x.jsonl')])
    assert seen['call'].arguments['per_image'] == str(tmp_path / 'x.jsonl')
