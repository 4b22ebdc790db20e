"""Per-image results (``per_image_out``) of the scene-graph metrics: they are the metric's own numbers."""
import json

import pytest
import torch

from mmsgg_eval.functional.limits import NO_HIT
from mmsgg_eval.metrics import SGMeanRecall, SGRecall
from mmsgg_eval.metrics.per_image import image_record, read_per_image
from tests.sgg_samples import random_dataset
from tests.sgg_samples import feed_like_an_evaluator

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
    from tests.metrics.test_vlm import GT, META as VLM_META, VALID
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
    from tests.sgg_samples import grounding_sample
    cases = [dict(gt=[0, 0, 10, 10], pred=[[0, 0, 10, 10]]), dict(gt=[0, 0, 10, 10], pred=[[0, 0, 5, 10]]),
             dict(gt=[0, 0, 10, 10], pred=[])]
    metric = GroundingPr(per_image_out=str(tmp_path / 'g.jsonl'))
    metric.process(None, [grounding_sample(c, i) for i, c in enumerate(cases)])
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


def test_two_metrics_with_one_per_image_path_keep_both_files(tmp_path):
    """SGRecall(iou_thr=0.5) and SGMeanRecall(iou_thr=0.9) of one run with one prefix and one per_image_out
    path: the second metric's lines go to another file, named with a warning at the first process() (before
    any work), and each file averages to its own metric's R@K; metrics writing the very same lines (equal
    settings) share one file; two states given one save_state path are both kept."""
    samples, _ = random_dataset(4, 24, 'sgdet')
    path = tmp_path / 'per_image.jsonl'
    loose = SGRecall(mode='sgdet', iou_thr=0.5, per_image_out=str(path), save_state=str(tmp_path / 's.state'))
    strict = SGMeanRecall(mode='sgdet', iou_thr=0.9, per_image_out=str(path), save_state=str(tmp_path / 's.state'))
    with pytest.warns(UserWarning, match=r'another metric of this run writes other contents to per_image_out'):
        feed_like_an_evaluator([loose, strict], samples[:4], 4)
    renamed = tmp_path / 'per_image.sgdet.mean_recall.jsonl'
    feed_like_an_evaluator([loose, strict], samples[4:], 4)
    keys_loose, _ = loose.evaluate(24), strict.evaluate(24)
    reference = SGRecall(mode='sgdet', iou_thr=0.9)
    reference.dataset_meta = META
    reference.process({}, samples)
    keys_strict = reference.evaluate(24)
    for file, keys in ((path, keys_loose), (renamed, keys_strict)):
        evaluated = [r for r in read_per_image(str(file)) if r['evaluated']]
        assert sum(r['R@50'] for r in evaluated) / len(evaluated) == pytest.approx(keys['sgdet/R@50'])
    assert keys_loose['sgdet/R@50'] != keys_strict['sgdet/R@50']  # the files differ
    from mmsgg_eval.metrics.state import load_state
    assert load_state(str(tmp_path / 's.state')).metric_type == 'SGRecall'
    assert load_state(str(tmp_path / 's.sgdet.mean_recall.state')).metric_type == 'SGMeanRecall'
    # equal settings: the same lines, one file, no warning
    shared = tmp_path / 'shared.jsonl'
    twins = [SGRecall(mode='sgdet', per_image_out=str(shared)), SGMeanRecall(mode='sgdet', per_image_out=str(shared))]
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        feed_like_an_evaluator(twins, samples, 6)
        for m in twins:
            m.evaluate(24)
    assert not [w for w in caught if 'another metric' in str(w.message)]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith('shared')) == ['shared.jsonl']
