"""Per-image results (``per_image_out``) of the scene-graph metrics: they are the metric's own numbers."""
import json

import pytest
import torch

from mmsgg_eval.functional.limits import NO_HIT
from mmsgg_eval.metrics import SGMeanRecall, SGRecall
from mmsgg_eval.metrics.per_image import image_record, read_per_image
from tests.sgg_samples import random_dataset

NUM_CLASSES, NUM_PREDICATES = 4, 5
META = dict(classes=[f'c{i}' for i in range(NUM_CLASSES)], predicates=[f'p{i}' for i in range(NUM_PREDICATES)],
            dataset_name='random')


def run(samples, path, cls=SGRecall, batch_size=4, **kwargs):
    metric = cls(per_image_out=str(path), **kwargs)
    metric.dataset_meta = META
    for start in range(0, len(samples), batch_size):
        metric.process({}, samples[start:start + batch_size])
    keys = metric.evaluate(len(samples))
    return metric, {k.split('/', 1)[1]: v for k, v in keys.items()}, read_per_image(str(path))


@pytest.mark.parametrize('mode', ['predcls', 'sgcls', 'sgdet', 'phrdet'])
@pytest.mark.parametrize('protocol', ['sgb', 'openpsg', 'r1sgg'])
def test_mean_of_per_image_recall_is_the_reported_recall(tmp_path, mode, protocol):
    samples, _ = random_dataset(3, 40, mode)
    kwargs = {'match': 'box'} if protocol == 'openpsg' else {}
    metric, keys, records = run(samples, tmp_path / 'per_image.jsonl', mode=mode, protocol=protocol, **kwargs)
    assert len(records) == len(samples)
    assert [r['sample_idx'] for r in records] == sorted(r['sample_idx'] for r in records)
    evaluated = [r for r in records if r['evaluated']]
    assert evaluated, 'the random data set must have evaluated images'
    for k in metric.topk:
        for family in ('R', 'ngR'):
            key = f'{family}@{k}'
            if metric.recall_average == 'image':
                mean = sum(r[key] for r in evaluated) / len(evaluated)
            else:  # micro: pooled hits over pooled GT relations of the evaluated images
                mean = 100.0 * sum(r['num_hit'][key] for r in evaluated) / sum(r['num_gt'] for r in evaluated)
            assert mean == pytest.approx(keys[key], abs=1e-9), (key, mean, keys[key])
    for r in records:
        if not r['evaluated']:
            assert r['R@20'] is None
        assert len(r['gt_relations']) == r['num_gt']
        assert len(r['predictions']) <= metric.per_image_topk
        # a GT relation is found at K exactly when its first-hit rank is below K: the per-image R@K says so
        if r['evaluated'] and r['num_gt']:
            found = sum(g['rank_gc'] is not None and g['rank_gc'] < 50 for g in r['gt_relations'])
            assert r['num_hit']['R@50'] == found


def test_hits_listed_are_the_first_hits_of_the_metric(tmp_path):
    samples, _ = random_dataset(5, 30, 'sgdet')
    metric, _, records = run(samples, tmp_path / 'p.jsonl', mode='sgdet', per_image_topk=100)
    checked = 0
    for r in records:
        for g in r['gt_relations']:
            if g['rank_gc'] is not None and g['rank_gc'] < 100:
                pred = r['predictions'][g['rank_gc']]
                assert pred['rank'] == g['rank_gc'] and g['index'] in pred['hits']
                # SGDet hits share the class and predicate of the GT relation
                assert (pred['subject_label'], pred['object_label'], pred['predicate']) == \
                    (g['subject_label'], g['object_label'], g['predicate'])
                checked += 1
        for p in r['predictions']:
            for g in p['hits']:
                assert r['gt_relations'][g]['rank_gc'] == p['rank']
        scores = [p['score'] for p in r['predictions']]
        assert scores == sorted(scores, reverse=True)  # the graph-constrained list, ranked by score
    assert checked > 5


def test_pair_confusion_is_the_top_predicate_on_the_gt_pair(tmp_path):
    samples, _ = random_dataset(7, 30, 'predcls')
    _, _, records = run(samples, tmp_path / 'p.jsonl', mode='predcls', per_image_topk=100)
    seen = 0
    for r in records:
        for g in r['gt_relations']:
            if g['pair_rank'] is None:
                continue
            # the entry at pair_rank matches both ends (same classes; the random set has near-duplicate GT
            # objects, so it may be the twin pair), and no earlier entry is the GT pair itself
            pred = r['predictions'][g['pair_rank']]
            assert (pred['subject_label'], pred['object_label']) == (g['subject_label'], g['object_label'])
            assert pred['predicate'] == g['pair_predicate']
            assert all((p['subject'], p['object']) != (g['subject'], g['object'])
                       for p in r['predictions'][:g['pair_rank']])
            if g['rank_gc'] is not None:
                assert g['pair_rank'] <= g['rank_gc']
            seen += 1
    assert seen > 5


def test_single_image_record_equals_the_file(tmp_path):
    """What the visualizer draws for one sample (image_record) is the image's line of the evaluation file."""
    samples, _ = random_dataset(11, 12, 'sgcls')
    metric, _, records = run(samples, tmp_path / 'p.jsonl', mode='sgcls')
    viewer = SGRecall(mode='sgcls')
    viewer.dataset_meta = META
    by_idx = {r['sample_idx']: r for r in records}
    for sample in samples:
        one = image_record(viewer, sample)
        line = dict(by_idx[one['sample_idx']])
        for key in ('gt_relations', 'predictions', 'num_gt', 'num_pred'):
            assert json.loads(json.dumps(one[key])) == line[key]
        if line['evaluated']:
            assert one['R@50'] == line['R@50']


def test_per_image_rows_only_when_asked_and_not_shared(tmp_path):
    plain, with_file = SGRecall(mode='predcls'), SGMeanRecall(mode='predcls', per_image_out=str(tmp_path / 'x'))
    for m in (plain, with_file):
        m.dataset_meta = META
    assert 'top_triplets' not in plain.row_schema() and 'gt_index' not in plain.row_schema()['relations']
    assert 'top_triplets' in with_file.row_schema()
    assert plain.compute_key() != with_file.compute_key()
    twin = SGRecall(mode='predcls', per_image_out=str(tmp_path / 'y'))
    twin.dataset_meta = META
    assert twin.compute_key() == with_file.compute_key()  # the same rows: shared


def test_metrics_in_one_group_with_and_without_file(tmp_path):
    """An SGRecall without the file and an SGMeanRecall with it, fed the same batches: both keep their keys,
    and the file is the SGMeanRecall's."""
    samples, _ = random_dataset(2, 20, 'predcls')
    a, b = SGRecall(mode='predcls'), SGMeanRecall(mode='predcls', per_image_out=str(tmp_path / 'm.jsonl'))
    for m in (a, b):
        m.dataset_meta = META
    for start in range(0, 20, 4):
        for m in (a, b):
            m.process({}, samples[start:start + 4])
    ka, kb = a.evaluate(20), b.evaluate(20)
    records = read_per_image(str(tmp_path / 'm.jsonl'))
    evaluated = [r for r in records if r['evaluated']]
    assert sum(r['R@50'] for r in evaluated) / len(evaluated) == pytest.approx(ka['predcls/R@50'])
    assert 'predcls/mR@50' in kb


def test_ranks_without_hit_are_null(tmp_path):
    samples, _ = random_dataset(4, 10, 'predcls')
    _, _, records = run(samples, tmp_path / 'p.jsonl', mode='predcls')
    values = [g['rank_gc'] for r in records for g in r['gt_relations']]
    assert None in values and all(v is None or 0 <= v < NO_HIT for v in values)


def test_sgbench_refuses_per_image_out(tmp_path):
    from mmsgg_eval.metrics.sgbench import SGBenchMetric
    with pytest.raises(ValueError, match='per_image_out'):
        SGBenchMetric(per_image_out=str(tmp_path / 'p.jsonl'))


def test_vlm_per_image_lines(tmp_path):
    from mmsgg_eval.metrics import VLMSceneGraphMetric
    from tests.test_vlm import GT, META as VLM_META, VALID
    path = tmp_path / 'vlm.jsonl'
    metric = VLMSceneGraphMetric(iou_plus_one=False, per_image_out=str(path))
    metric.dataset_meta = VLM_META
    metric.process(None, [dict(GT, sample_idx=0, pred_text=VALID, img_path='a.jpg'),
                          dict(GT, sample_idx=1, pred_text='oops')])
    out = metric.evaluate(2)
    lines = read_per_image(str(path))
    assert [(r['sample_idx'], r['parse_status'], r['failure_code']) for r in lines] == \
        [(0, 'ok', 'ok'), (1, 'failed', 'no_json')]
    assert lines[0]['img_path'] == 'a.jpg' and 'unknown_words' in lines[0]
    assert not [k for k in lines[0] if k.startswith(('R@', 'ngR@'))]  # the VLM's own key names, no internal K
    assert sum(r['Recall'] for r in lines if r['evaluated']) / sum(r['evaluated'] for r in lines) == \
        pytest.approx(out['vlm/Recall'])


def test_grounding_per_image_lines(tmp_path):
    from mmsgg_eval.metrics import GroundingPr
    from tests.test_grounding import to_data_sample
    cases = [dict(gt=[0, 0, 10, 10], pred=[[0, 0, 10, 10]]), dict(gt=[0, 0, 10, 10], pred=[[0, 0, 5, 10]]),
             dict(gt=[0, 0, 10, 10], pred=[])]
    metric = GroundingPr(per_image_out=str(tmp_path / 'g.jsonl'))
    metric.process(None, [to_data_sample(c, i) for i, c in enumerate(cases)])
    out = metric.evaluate(3)
    lines = read_per_image(str(tmp_path / 'g.jsonl'))
    assert [r['iou'] for r in lines] == pytest.approx([1.0, 0.5, 0.0])
    assert [r['img_id'] for r in lines] == ['img0', 'img1', 'img2']
    assert [r['hits']['Pr@0.5'] for r in lines] == [True, True, False]
    assert out['grounding/Pr@0.5'] == pytest.approx(100 * 2 / 3)
    assert sum(r['iou'] for r in lines) / 3 == pytest.approx(out['grounding/meanIoU'])


def test_set_per_image_out_paths():
    from mmsgg_eval.metrics.per_image import set_per_image_out
    cfgs = [dict(type='SGRecall', mode='predcls'), dict(type='SGMeanRecall', mode='predcls'),
            dict(type='SGRecall', mode='sgdet'), dict(type='DetectionAP')]
    assert set_per_image_out(cfgs, 'out/p.jsonl') == ['out/p.jsonl', 'out/p.sgdet.jsonl']
    assert [c.get('per_image_out') for c in cfgs] == ['out/p.jsonl', 'out/p.jsonl', 'out/p.sgdet.jsonl', None]
    with pytest.raises(ValueError, match='--per-image'):
        set_per_image_out([dict(type='DetectionAP')], 'p.jsonl')
