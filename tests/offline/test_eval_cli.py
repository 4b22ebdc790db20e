"""Offline evaluation CLI (mmsgg_eval.eval): JSONL predictions and VLM answers against a dataset config."""
import json
import os.path as osp

import numpy as np
import pytest

from mmsgg_eval.datasets import VG150Dataset
from mmsgg_eval.testing import make_sample_data
from mmsgg_eval.testing.predictions import vlm_answer_lines
from mmsgg_eval.eval import main
from mmsgg_eval.offline import evaluate_file
from mmsgg_eval.metrics import SGMeanRecall, SGRecall
from mmsgg_eval.io.vlm import gt_from_data_info

ROOT = osp.abspath(osp.join(osp.dirname(__file__), '..', '..'))
CONFIG = osp.join(ROOT, 'configs', 'demo', 'freq_predcls_vg150_sample.py')


@pytest.fixture(scope='module')
def sample(tmp_path_factory):
    out = tmp_path_factory.mktemp('offline')
    make_sample_data(str(out), datasets=['vg150'])
    root = str(out / 'vg150') + '/'
    dataset = VG150Dataset(data_root=root, split='test', num_val_images=8, pipeline=[])
    return dict(root=root, dataset=dataset, options={'test_dataloader.dataset.data_root': root})


def predictions_for(dataset, drop=()):
    """SGDet-style JSONL predictions: GT boxes slightly moved, every ordered pair, random scores with the GT
    predicate boosted on half of the GT pairs."""
    rng = np.random.default_rng(0)
    records = []
    for i in range(len(dataset)):
        info = dataset.get_data_info(i)
        boxes = np.array([inst['bbox'] for inst in info['instances']], dtype=np.float32) + 1.0
        labels = [inst['bbox_label'] for inst in info['instances']]
        n = len(labels)
        pairs = [[a, b] for a in range(n) for b in range(n) if a != b]
        scores = rng.random((len(pairs), 51))
        for s, o, p in np.asarray(info['relations']).tolist():
            if rng.random() < 0.5:
                scores[pairs.index([s, o]), p + 1] = 2.0
        if i in drop:
            continue
        records.append({'sample_idx': i, 'pred_instances': {'bboxes': boxes.tolist(), 'labels': labels,
                                                              'scores': [0.9] * n},
                        'pred_relations': {'pair_idxs': pairs, 'scores': scores.tolist()}})
    return records


def direct(dataset, records, **kwargs):
    out = {}
    for cls in (SGRecall, SGMeanRecall):
        metric = cls(mode='sgdet', **kwargs)
        metric.dataset_meta = dataset.metainfo
        samples = []
        for r in records:
            s = gt_from_data_info(dict(dataset.get_data_info(r['sample_idx']), sample_idx=r['sample_idx']))
            s.update({k: {kk: np.asarray(vv) for kk, vv in v.items()} if isinstance(v, dict) else v
                      for k, v in r.items()})
            samples.append(s)
        metric.process({}, samples)
        out.update(metric.evaluate(len(dataset)))
    return {k: v for k, v in out.items() if isinstance(v, float)}


def test_jsonl_predictions_equal_direct_metric(sample, tmp_path):
    records = predictions_for(sample['dataset'])
    path = tmp_path / 'preds.jsonl'
    path.write_text('\n'.join(json.dumps(r) for r in records))
    res = evaluate_file(CONFIG, str(path), metrics=['SGRecall', 'SGMeanRecall'], mode='sgdet',
                        work_dir=str(tmp_path / 'out'), cfg_options=sample['options'], progress=False)
    expected = direct(sample['dataset'], records)
    assert {k: res[k] for k in expected} == expected
    assert expected['sgdet/R@50'] > 20
    assert (tmp_path / 'out' / 'metrics.json').exists()
    assert (tmp_path / 'out' / 'sgdet.per_predicate.png').stat().st_size > 0


def test_missing_predictions_count_as_empty(sample, tmp_path):
    records = predictions_for(sample['dataset'], drop={0, 3})
    path = tmp_path / 'preds.jsonl'
    path.write_text('\n'.join(json.dumps(r) for r in records))
    res = main([CONFIG, str(path), '--metrics', 'SGRecall', '--mode', 'sgdet', '--work-dir', str(tmp_path / 'o'),
                '--no-progress', '--allow-missing', '--metric-options', 'skip_empty_predictions=False',
                '--cfg-options', f'test_dataloader.dataset.data_root={sample["root"]}'])
    full = predictions_for(sample['dataset'])
    empty = [{'sample_idx': i, 'pred_instances': {'bboxes': np.zeros((0, 4)), 'labels': [], 'scores': []},
              'pred_relations': {'pair_idxs': np.zeros((0, 2), int), 'scores': [], 'labels': []}}
             if i in (0, 3) else r for i, r in enumerate(full)]
    expected = direct(sample['dataset'], empty, skip_empty_predictions=False)
    assert res['sgdet/R@50'] == pytest.approx(expected['sgdet/R@50']) and expected['sgdet/R@50'] > 10
    skipped = direct(sample['dataset'], [r for r in full if r['sample_idx'] not in (0, 3)])
    assert res['sgdet/R@50'] < skipped['sgdet/R@50']  # the missing images were counted, as zeros


def test_bad_jsonl_line_is_named(sample, tmp_path):
    path = tmp_path / 'bad.jsonl'
    path.write_text('{"sample_idx": 0}\n{oops\n')
    with pytest.raises(ValueError, match='bad.jsonl:2'):
        evaluate_file(CONFIG, str(path), metrics=['SGRecall'], mode='sgdet', work_dir=str(tmp_path / 'o'),
                      cfg_options=sample['options'], progress=False)


def test_vlm_answers(sample, tmp_path):
    dataset = sample['dataset']
    # the example answers (sample 1 a failure, the others their GT graph as JSON), identified by sample_idx alone
    lines = [{k: v for k, v in line.items() if k != 'img_id'} for line in vlm_answer_lines(dataset)]
    path = tmp_path / 'vlm.jsonl'
    path.write_text('\n'.join(json.dumps(x) for x in lines))
    res = evaluate_file(CONFIG, str(path), fmt='vlm', work_dir=str(tmp_path / 'o'),
                        cfg_options=sample['options'], progress=False)
    n = len(dataset)
    assert res['vlm/FailureRate'] == pytest.approx(100.0 / n)
    # GT graphs given back (boxes rounded on the 0-1000 canvas): everything but the failed image is recalled
    assert 90.0 < res['vlm/Recall'] <= 100.0 * (n - 1) / n + 1e-6


def test_legacy_dump_through_the_cli(sample, tmp_path):
    """A legacy eval_results.pytorch (BoxList records) is re-scored with the dataset's vocabulary."""
    import torch
    from mmsgg_eval.io.legacy import convert_legacy_results
    from tests.io.test_legacy import fake_maskrcnn_benchmark
    with fake_maskrcnn_benchmark() as BoxList:
        gts, preds = [], []
        for i in range(3):
            g = BoxList([[0, 0, 49, 49], [60, 60, 99, 99], [10, 70, 40, 95]], (120, 100))
            g.add_field('labels', torch.tensor([1, 2, 3 + i]))
            g.add_field('relation_tuple', torch.tensor([[0, 1, 1 + i], [2, 1, 4]]))
            p = BoxList(torch.tensor([[1., 1, 49, 49], [60, 61, 99, 99], [10, 70, 41, 95]]), (120, 100))
            p.add_field('pred_labels', torch.tensor([1, 2, 3 + i]))
            p.add_field('pred_scores', torch.tensor([0.9, 0.8, 0.7]))
            p.add_field('rel_pair_idxs', torch.tensor([[0, 1], [2, 1], [1, 0]]))
            scores = torch.rand(3, 51, generator=torch.Generator().manual_seed(i))
            p.add_field('pred_rel_scores', scores)
            gts.append(g)
            preds.append(p)
        path = str(tmp_path / 'eval_results.pytorch')
        torch.save({'groundtruths': gts, 'predictions': preds}, path)
    res = evaluate_file(CONFIG, path, metrics=['SGRecall'], mode='sgdet', work_dir=str(tmp_path / 'o'),
                        cfg_options=sample['options'], progress=False)
    metric = SGRecall(mode='sgdet')
    metric.dataset_meta = sample['dataset'].metainfo
    metric.process({}, convert_legacy_results(path, mode='sgdet'))
    expected = metric.evaluate(3)
    assert {k: res[k] for k in expected} == expected


def test_grounding_predictions_through_the_cli(tmp_path):
    make_sample_data(str(tmp_path), datasets=['rsvgd'])
    from mmsgg_eval.datasets import RSVGDDataset
    root = str(tmp_path / 'rsvgd') + '/'
    dataset = RSVGDDataset(data_root=root, split='test', pipeline=[])
    preds = []
    for i in range(len(dataset)):
        x1, y1, x2, y2 = dataset.get_data_info(i)['instances'][0]['bbox']
        shift = 0 if i % 2 == 0 else (x2 - x1)  # every other prediction misses completely
        preds.append({'sample_idx': i, 'bbox': [x1 + shift, y1, x2 + shift, y2]})
    path = tmp_path / 'grounding.json'
    path.write_text(json.dumps(preds))
    config = osp.join(ROOT, 'configs', 'rsvgd', 'grounding_rsvgd.py')
    res = main([config, str(path), '--format', 'grounding', '--work-dir', str(tmp_path / 'o'), '--no-progress',
                '--cfg-options', f'test_dataloader.dataset.data_root={root}'])
    hit = sum(1 for i in range(len(dataset)) if i % 2 == 0)
    assert res['grounding/Pr@0.5'] == pytest.approx(100.0 * hit / len(dataset))
    assert json.load(open(tmp_path / 'o' / 'metrics.json'))['grounding/Pr@0.9'] == res['grounding/Pr@0.9']
