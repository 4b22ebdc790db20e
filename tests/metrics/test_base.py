"""The metric base (RowMetric / ComputeGroup): sharing between metrics, file output, repeated evaluate(),
empty and missing predictions, unwritable outputs. Regression tests for the metric-layer defects."""
import json
import math
import os
import shutil
import warnings

import pytest
import torch

from mmsgg_eval.metrics import ComputeGroup, DetectionAP, GroundingPr, SGMeanRecall, SGRecall, extra_results_of
from mmsgg_eval.metrics.accumulator import RowAccumulator
from mmsgg_eval.metrics.scene_graph import SceneGraphMetric
from tests.dist_utils import comparable, padded_shard, run_distributed
from tests.reference_sgg import reference_metrics
from tests.sgg_samples import random_dataset
from tests.metrics.scene_graph.test_edge_cases import evaluate, two_relation_image
from tests.metrics.scene_graph.test_recall import META, NUM_CLASSES, NUM_PREDICATES, feed_like_an_evaluator, run_metrics


def build_evaluator(*cfgs):
    """An mmengine Evaluator of mmsgg_eval metrics (scope-qualified types), with META."""
    from mmengine.evaluator import Evaluator
    from mmsgg_eval.registry import METRICS
    evaluator = Evaluator([dict(cfg, type=f'{METRICS.scope}.{cfg["type"]}') for cfg in cfgs])
    evaluator.dataset_meta = META
    return evaluator


def feed(evaluator, samples, batch_size):
    for start in range(0, len(samples), batch_size):
        evaluator.process(samples[start:start + batch_size])


def one_relation_image(idx, triplet_labels=(0, 1), predicate=2):
    """PredCls image: two objects of classes ``triplet_labels``, GT relation 0 -> 1 with ``predicate``,
    predicted perfectly (the top pair and column)."""
    scores = torch.zeros((1, NUM_PREDICATES + 1))
    scores[0, predicate + 1] = 0.9
    return dict(sample_idx=idx, gt_instances=dict(bboxes=torch.tensor([[0., 0, 9, 9], [20, 20, 29, 29]]),
                                                  labels=torch.tensor(list(triplet_labels))),
                gt_relations=dict(pair_idxs=torch.tensor([[0, 1]]), labels=torch.tensor([predicate])),
                pred_relations=dict(pair_idxs=torch.tensor([[0, 1]]), scores=scores))


# ---------------------------------------------------------------------------- exact sharing keys
def test_zeroshot_sets_of_equal_size_and_code_sum_do_not_share_rows():
    """(0,1,2) + (1,0,0) and (0,0,1) + (1,1,1) have the same size and the same sum of
    triplet codes (7 + 20 = 1 + 26 with 4 classes, 5 predicates); the rows must not be shared."""
    zs_a, zs_b = [(0, 1, 2), (1, 0, 0)], [(0, 0, 1), (1, 1, 1)]
    samples = [one_relation_image(i) for i in range(4)]  # GT triplet (0, 1, 2): in set A only
    evaluator = build_evaluator(dict(type='SGRecall', mode='predcls', zeroshot_triplets=zs_b, prefix='zsB',
                                     pool_samples=1),
                                dict(type='SGRecall', mode='predcls', zeroshot_triplets=zs_a, prefix='zsA',
                                     pool_samples=1))
    feed(evaluator, samples, 2)  # pools are ranked during process()
    res = evaluator.evaluate(4)
    assert res['zsA/zR@20'] == 100.0
    assert math.isnan(res['zsB/zR@20'])  # no GT relation in set B: no value
    a, b = evaluator.metrics[1], evaluator.metrics[0]
    assert a.compute_key() != b.compute_key() and a._group is not b._group


def test_compute_key_is_exact_and_shared_only_for_equal_settings():
    metrics = [cls(mode='sgdet', zeroshot_triplets=zs) for cls, zs in
               ((SGRecall, [(0, 1, 2)]), (SGMeanRecall, [(0, 1, 2)]), (SGRecall, [(0, 1, 3)]))]
    for m in metrics:
        m.dataset_meta = META
    assert metrics[0].compute_key() == metrics[1].compute_key() != metrics[2].compute_key()
    other_pool = SGRecall(mode='sgdet', zeroshot_triplets=[(0, 1, 2)], pool_samples=7)
    other_pool.dataset_meta = META
    assert other_pool.compute_key() != metrics[0].compute_key()  # identical pooling on every rank
    assert ComputeGroup.join(metrics[0].compute_key()) is ComputeGroup.join(metrics[1].compute_key())


def test_two_differently_configured_sgrecall_in_one_evaluator():
    samples, refs = random_dataset(8, 30, 'sgdet', num_classes=4, num_predicates=NUM_PREDICATES)
    evaluator = build_evaluator(dict(type='SGRecall', mode='sgdet', pool_samples=4),
                                dict(type='SGRecall', mode='sgdet', pool_samples=4, iou_thr=0.7, prefix='iou7'),
                                dict(type='SGMeanRecall', mode='sgdet', pool_samples=4))
    feed(evaluator, samples, 3)
    res = evaluator.evaluate(30)
    ref5 = reference_metrics(refs, NUM_PREDICATES, 'sgdet')
    ref7 = reference_metrics(refs, NUM_PREDICATES, 'sgdet', thr=0.7)
    for k in (20, 50, 100):
        assert res[f'sgdet/R@{k}'] == pytest.approx(ref5[f'R@{k}'], abs=1e-9)
        assert res[f'iou7/R@{k}'] == pytest.approx(ref7[f'R@{k}'], abs=1e-9)
        assert res[f'sgdet/mR@{k}'] == pytest.approx(ref5[f'mR@{k}'], abs=1e-9)
    assert res['sgdet/R@50'] != res['iou7/R@50']


def test_two_evaluators_alive_in_one_process():
    """A val and a test evaluator with the same metric settings, fed alternately (same pool boundaries):
    each equals its own separate run, and within each the second metric still shares the first's work."""
    val, _ = random_dataset(30, 20, 'sgcls')
    test, _ = random_dataset(31, 20, 'sgcls')
    expected_val = run_metrics(val, batch_size=4, mode='sgcls', pool_samples=4)
    expected_test = run_metrics(test, batch_size=4, mode='sgcls', pool_samples=4)
    cfgs = [dict(type='SGRecall', mode='sgcls', pool_samples=4), dict(type='SGMeanRecall', mode='sgcls', pool_samples=4)]
    evaluators = {'val': build_evaluator(*cfgs), 'test': build_evaluator(*cfgs)}
    data = {'val': val, 'test': test}
    for start in range(0, 20, 4):
        for name in ('val', 'test'):
            evaluators[name].process(data[name][start:start + 4])
    for name in ('val', 'test'):
        first, second = evaluators[name].metrics
        assert second.accumulator.holds_same_rows(first.accumulator.sources)
    got = {name: {k.split('/', 1)[1]: v for k, v in evaluators[name].evaluate(20).items()} for name in ('test', 'val')}
    assert got['val'] == expected_val and got['test'] == expected_test
    assert got['val'] != got['test']


def test_second_metric_ranks_nothing_and_reduces_nothing(monkeypatch):
    calls = {'rows': 0, 'reduce': 0}
    row_stages, reduce = SceneGraphMetric._row_stages, RowAccumulator.reduce

    def counting_rows(self, samples, background=False):  # the rows of a pool, in one or two stages
        calls['rows'] += 1
        return row_stages(self, samples, background)

    def counting_reduce(self, fingerprint=None):
        calls['reduce'] += 1
        return reduce(self, fingerprint)

    monkeypatch.setattr(SceneGraphMetric, '_row_stages', counting_rows)
    monkeypatch.setattr(RowAccumulator, 'reduce', counting_reduce)
    samples, _ = random_dataset(2, 24, 'predcls')
    evaluator = build_evaluator(dict(type='SGRecall', mode='predcls', pool_samples=5),
                                dict(type='SGMeanRecall', mode='predcls', pool_samples=5))
    feed(evaluator, samples, 4)
    evaluator.evaluate(24)
    assert calls == {'rows': 3, 'reduce': 1}  # pools of 8 samples (batches of 4), ranked once; one reduce


def test_in_place_modified_samples_fed_again_are_ranked_afresh():
    """The rows of a pool are reused only within one epoch: after evaluate(), the same sample objects
    modified in place give the new numbers."""
    sample = one_relation_image(0)
    metric = SGRecall(mode='predcls', topk=(1,))
    metric.dataset_meta = META
    metric.process({}, [sample])
    assert metric.evaluate(1)['predcls/R@1'] == 100.0
    sample['pred_relations']['pair_idxs'] = torch.tensor([[1, 0]])  # now the wrong pair
    metric.process({}, [sample])
    assert metric.evaluate(1)['predcls/R@1'] == 0.0


# ---------------------------------------------------------------------------- scalars only (defect 3)
def test_metrics_return_scalars_and_tables_reach_metrics_json(tmp_path):
    samples, _ = random_dataset(4, 12, 'predcls')
    evaluator = build_evaluator(dict(type='SGRecall', mode='predcls', report_dir=str(tmp_path)),
                                dict(type='SGMeanRecall', mode='predcls', report_dir=str(tmp_path)))
    feed(evaluator, samples, 5)
    res = evaluator.evaluate(12)
    assert res and all(type(v) is float for v in res.values()), {k: type(v) for k, v in res.items()}
    assert 'predcls/per_predicate_recall' not in res
    mean_recall = evaluator.metrics[1]
    extra = extra_results_of(evaluator.metrics)
    assert extra['predcls/per_predicate_recall'] == mean_recall.last_report['per_predicate']
    assert extra['predcls/num_missing_predictions'] == 0
    assert len(extra['predcls/per_predicate_recall']) == NUM_PREDICATES
    assert 'Per-predicate recall' in mean_recall.last_report['text']  # the printed table
    saved = json.load(open(tmp_path / 'predcls.metrics.json'))
    assert saved['per_predicate'] == json.loads(json.dumps(mean_recall.last_report['per_predicate']))
    # the runner writes metrics.json from the scalars plus the extra results (tools/test.py)
    from mmsgg_eval.runner.results import write_metrics_json
    path = write_metrics_json({**res, **extra}, str(tmp_path / 'work'))
    written = json.load(open(path))
    assert written['predcls/per_predicate_recall'] == saved['per_predicate']


def test_vlm_and_grounding_return_scalars():
    from tests.metrics.test_vlm import GT, META as VLM_META, VALID
    from mmsgg_eval.metrics import VLMSceneGraphMetric
    vlm = VLMSceneGraphMetric(topk=(1,), iou_plus_one=False)
    vlm.dataset_meta = VLM_META
    vlm.process(None, [dict(GT, sample_idx=0, pred_text=VALID), dict(GT, sample_idx=1, pred_text='no')])
    out = vlm.evaluate(2)
    assert all(type(v) is float for v in out.values())
    assert extra_results_of([vlm])['vlm/per_predicate_recall'] == vlm.last_report['per_predicate']
    grounding = GroundingPr()
    grounding.process(None, [{'sample_idx': 0, 'gt_instances': {'bboxes': [[0, 0, 10, 10]]},
                              'pred_instances': {'bboxes': [[0, 0, 10, 10]]}}])
    assert all(type(v) is float for v in grounding.evaluate(1).values())


# ---------------------------------------------------------------------------- outfile_prefix (item 5)
def test_outfile_prefix_of_sgrecall_and_sgmeanrecall_are_two_files(tmp_path):
    samples, _ = random_dataset(6, 10, 'predcls')
    prefix = str(tmp_path / 'out' / 'res')
    evaluator = build_evaluator(dict(type='SGRecall', mode='predcls', outfile_prefix=prefix),
                                dict(type='SGMeanRecall', mode='predcls', outfile_prefix=prefix))
    feed(evaluator, samples, 4)
    res = evaluator.evaluate(10)
    recall = json.load(open(f'{prefix}.predcls.recall.json'))
    mean_recall = json.load(open(f'{prefix}.predcls.mean_recall.json'))
    assert recall['keys']['R@50'] == res['predcls/R@50'] and 'mR@50' not in recall['keys']
    assert mean_recall['keys']['mR@50'] == res['predcls/mR@50'] and 'R@50' not in mean_recall['keys']


def test_report_files_written_once_per_evaluator(tmp_path, monkeypatch):
    from mmsgg_eval.metrics import scene_graph
    written = []
    original = scene_graph.write_scene_graph_reports

    def recording(summary, out_dir, prefix, *args, **kwargs):
        written.append(prefix)
        return original(summary, out_dir, prefix, *args, **kwargs)

    monkeypatch.setattr(scene_graph, 'write_scene_graph_reports', recording)
    samples, _ = random_dataset(6, 10, 'predcls')
    evaluator = build_evaluator(dict(type='SGRecall', mode='predcls', report_dir=str(tmp_path)),
                                dict(type='SGMeanRecall', mode='predcls', report_dir=str(tmp_path)),
                                dict(type='SGRecall', mode='predcls', report_dir=str(tmp_path), topk=(5,),
                                     prefix='predcls_top5'))
    feed(evaluator, samples, 4)
    evaluator.evaluate(10)
    assert written == ['predcls', 'predcls_top5']  # the equal summary of SGMeanRecall is not written again
    assert evaluator.metrics[1].last_report['report_files'] == evaluator.metrics[0].last_report['report_files']


# ---------------------------------------------------------------------------- evaluate() twice (item 6)
def processed_sgrecall(samples, **kwargs):
    """An SGRecall (sgdet unless given) that processed ``samples`` in one call."""
    metric = SGRecall(**{'mode': 'sgdet', **kwargs})
    metric.dataset_meta = META
    metric.process({}, samples)
    return metric


def test_evaluate_twice_returns_the_same_result():
    samples, _ = random_dataset(7, 12, 'sgdet')
    metric = processed_sgrecall(samples)
    first = metric.evaluate(12)
    assert first['sgdet/R@100'] > 0
    with pytest.warns(UserWarning, match='evaluate\\(\\) called again'):
        second = metric.evaluate(12)
    assert second == first
    grounding = GroundingPr()
    grounding.process(None, [{'sample_idx': 0, 'gt_instances': {'bboxes': [[0, 0, 10, 10]]},
                              'pred_instances': {'bboxes': [[0, 0, 10, 5]]}}])
    once = grounding.evaluate(1)
    with pytest.warns(UserWarning):
        assert grounding.evaluate(1) == once
    # the next epoch starts from scratch
    metric.process({}, samples[:3])
    assert metric.evaluate(3) == processed_sgrecall(samples[:3]).evaluate(3)


# ---------------------------------------------------------------------------- no predicted pair (item 7)
@pytest.mark.parametrize('mode', ['predcls', 'sgdet'])
def test_no_image_has_a_predicted_pair(mode):
    samples, _ = random_dataset(9, 6, mode, num_classes=4, num_predicates=NUM_PREDICATES)
    for s in samples:
        s['pred_relations'] = dict(pair_idxs=torch.zeros((0, 2), dtype=torch.long),
                                   scores=torch.zeros((0, NUM_PREDICATES + 1)))
    metrics = [cls(mode=mode, zeroshot_triplets=[(0, 1, 2)]) for cls in (SGRecall, SGMeanRecall)]
    feed_like_an_evaluator(metrics, samples, 3)
    with pytest.warns(UserWarning, match='no image was evaluated'):
        results = [m.evaluate(6) for m in metrics]
    whole = ('R@', 'ngR@', 'mR@', 'ngmR@', 'A@', 'F@', 'AVG@')  # the evaluation's keys: 0, warned
    for res in results:
        for key, v in res.items():
            name = key.split('/', 1)[1]
            subset = name.startswith(('zR', 'ngzR', 'zmR')) or '_' in name  # zero-shot, groups: no value
            assert math.isnan(v) if subset else (v == 0.0 and name.startswith(whole)), key
    assert metrics[0].last_report['num_images'] == 0


# ---------------------------------------------------------------------------- missing predictions
def _flag_missing(samples, indices):
    """What a reader of a partial predictions file gives for the samples it has no prediction for: the GT
    only, flagged ``prediction_missing`` (in the sample or in its metainfo)."""
    for n, i in enumerate(indices):
        samples[i] = {k: v for k, v in samples[i].items() if k not in ('pred_instances', 'pred_relations')}
        if n % 2:
            samples[i]['metainfo'] = {'prediction_missing': True}
        else:
            samples[i]['prediction_missing'] = True


def test_missing_predictions_count_as_zero_even_when_empty_predictions_are_skipped():
    samples, refs = random_dataset(12, 24, 'predcls', num_classes=4, num_predicates=NUM_PREDICATES,
                                   empty_pred_prob=0.0)  # every image with GT relations has a prediction
    missing = [3, 4, 10, 17]
    _flag_missing(samples, missing)
    for i in missing:
        refs[i] = dict(refs[i], rel_pairs=[], rel_scores=[])
    res = run_metrics(samples, batch_size=5, mode='predcls', skip_empty_predictions=True)
    ref = reference_metrics(refs, NUM_PREDICATES, 'predcls', skip_empty=False)
    for key in ('R@20', 'R@50', 'ngR@100', 'mR@50', 'ngmR@20', 'A@20'):
        assert res[key] == pytest.approx(ref[key], abs=1e-9), key
    skipped = reference_metrics(refs, NUM_PREDICATES, 'predcls', skip_empty=True)
    assert res['R@50'] != pytest.approx(skipped['R@50'])  # not dropped from the average
    metric = processed_sgrecall(samples, mode='predcls')
    metric.evaluate(24)
    assert metric.last_report['num_missing_predictions'] == len(missing)
    assert 'without prediction=4 (recall 0)' in metric.last_report['text']
    assert extra_results_of([metric])['predcls/num_missing_predictions'] == len(missing)


@pytest.mark.parametrize('mode', ['sgcls', 'sgdet'])
def test_missing_predictions_in_detection_modes_equal_a_prediction_that_hits_nothing(mode):
    samples, _ = random_dataset(13, 20, mode, num_classes=4, num_predicates=NUM_PREDICATES)
    missing = [i for i, s in enumerate(samples) if len(s['gt_relations']['labels'])][:5]
    missed = [dict(s) for s in samples]
    for i in missing:  # one predicted pair that cannot match: wrong classes far away
        labels = samples[i]['gt_instances']['labels']
        far = torch.tensor([[5000., 5000, 5001, 5001], [6000, 6000, 6001, 6001]])
        missed[i]['pred_instances'] = dict(bboxes=far if mode == 'sgdet' else samples[i]['gt_instances']['bboxes'],
                                           labels=(labels[:2] + 1) % 4 if mode == 'sgdet' else (labels + 1) % 4,
                                           scores=torch.ones(2 if mode == 'sgdet' else len(labels)))
        missed[i]['pred_relations'] = dict(pair_idxs=torch.tensor([[0, 1]]), scores=torch.ones((1, NUM_PREDICATES + 1)))
    _flag_missing(samples, missing)
    res = run_metrics(samples, batch_size=4, mode=mode)
    expected = run_metrics(missed, batch_size=4, mode=mode)
    recall_keys = [k for k in expected if not k.startswith('A@')]  # pair accuracy ignores object classes
    assert recall_keys and {k: res[k] for k in recall_keys} == {k: expected[k] for k in recall_keys}
    assert res['R@50'] > 0


def test_grounding_counts_missing_predictions():
    metric = GroundingPr()
    metric.process(None, [{'sample_idx': 0, 'gt_instances': {'bboxes': [[0, 0, 10, 10]]},
                           'pred_instances': {'bboxes': [[0, 0, 10, 10]]}},
                          {'sample_idx': 1, 'gt_instances': {'bboxes': [[0, 0, 10, 10]]},
                           'prediction_missing': True}])
    out = metric.evaluate(2)
    assert out['grounding/Pr@0.5'] == 50.0 and metric.last_report['num_missing_predictions'] == 1


# ---------------------------------------------------------------------------- unwritable outputs (item 10)
def test_unwritable_output_directory_fails_before_evaluating(tmp_path):
    blocker = tmp_path / 'a_file'
    blocker.write_text('not a directory')
    samples, _ = random_dataset(1, 4, 'predcls')
    for kwargs, argument in ((dict(report_dir=str(blocker / 'reports')), 'report_dir'),
                             (dict(outfile_prefix=str(blocker / 'sub' / 'res')), 'outfile_prefix')):
        metric = SGRecall(mode='predcls', **kwargs)
        metric.dataset_meta = META
        with pytest.raises(OSError, match=f'SGRecall: {argument} .*cannot be written'):
            metric.process({}, samples)
    grounding = GroundingPr(outfile_prefix=str(blocker / 'res'))
    with pytest.raises(OSError, match='GroundingPr: outfile_prefix'):
        grounding.process(None, [{'sample_idx': 0, 'gt_instances': {'bboxes': [[0, 0, 1, 1]]}}])


def test_a_failed_write_loses_no_number_and_stops_no_other_metric(tmp_path):
    out_dir = tmp_path / 'out'
    samples, _ = random_dataset(3, 10, 'predcls')
    expected = run_metrics(samples, batch_size=4, mode='predcls')
    evaluator = build_evaluator(dict(type='SGRecall', mode='predcls', outfile_prefix=str(out_dir / 'res')),
                                dict(type='SGMeanRecall', mode='predcls', report_dir=str(out_dir)))
    feed(evaluator, samples, 4)
    shutil.rmtree(out_dir)
    out_dir.write_text('the directory became a file')  # e.g. removed or replaced while the model ran
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        res = evaluator.evaluate(10)
    assert {k.split('/', 1)[1]: v for k, v in res.items()} == expected  # every number of both metrics
    errors = [str(w.message) for w in caught if 'could not write' in str(w.message)]
    assert len(errors) == 2 and 'SGRecall' in errors[0] and 'SGMeanRecall' in errors[1]
    for metric in evaluator.metrics:
        assert f'{metric.prefix}' in metric.last_report['text'] and 'SGG eval:' in metric.last_report['text']


# ---------------------------------------------------------------------------- main rank only (defect 2)
def _write_worker(rank, world_size, root):
    from tests.metrics.test_vlm import GT, META as VLM_META, VALID
    from mmsgg_eval.metrics import VLMSceneGraphMetric
    from tests.sgg_samples import grounding_sample
    mine = os.path.join(root, f'rank{rank}')
    grounding = GroundingPr(outfile_prefix=os.path.join(mine, 'res'), report_dir=mine)
    cases = [{'gt': [0, 0, 10, 10], 'pred': [[0, 0, 5, 10]]}, {'gt': [0, 0, 10, 10], 'pred': [[0, 0, 10, 10]]},
             {'gt': [0, 0, 10, 10], 'pred': []}]
    shard = padded_shard(len(cases), world_size, rank)
    grounding.process(None, [grounding_sample(cases[i], i) for i in shard])
    vlm = VLMSceneGraphMetric(report_dir=mine, outfile_prefix=os.path.join(mine, 'res'), iou_plus_one=False)
    vlm.dataset_meta = VLM_META
    vlm.process(None, [dict(GT, sample_idx=i, pred_text=VALID if i else 'garbage') for i in shard])
    out = grounding.evaluate(len(cases))
    out.update(vlm.evaluate(len(cases)))
    return out


def test_files_are_written_on_the_main_rank_only(tmp_path):
    results = run_distributed(_write_worker, 2, str(tmp_path))
    assert comparable(results[0]) == comparable(results[1])
    assert sorted(os.listdir(tmp_path)) == ['rank0']
    assert sorted(os.listdir(tmp_path / 'rank0')) == sorted([
        'res.grounding.json', 'grounding.metrics.json', 'res.vlm.json', 'vlm.metrics.json',
        'vlm.per_predicate.png', 'vlm.tables.md']
        + [f'grounding.tables.{ext}' for ext in ('md', 'tex', 'main.csv', 'thresholds.csv')]
        + [f'vlm.tables.{ext}' for ext in ('tex', 'main.csv', 'families.csv', 'groups.csv', 'per_predicate.csv',
                                            'no_value.csv')])  # the tail group has no GT relation here


# ---------------------------------------------------------------------------- distributed sharing
def _sharing_worker(rank, world_size):
    samples, _ = random_dataset(44, 17, 'sgdet', num_classes=4, num_predicates=NUM_PREDICATES)
    mine = [samples[i] for i in padded_shard(17, world_size, rank)]
    metrics = [SGRecall(mode='sgdet', pool_samples=3), SGMeanRecall(mode='sgdet', pool_samples=3),
               SGRecall(mode='sgdet', pool_samples=3, iou_thr=0.7, prefix='iou7'),
               SGRecall(mode='sgdet', pool_samples=3, recall_average='micro', prefix='micro')]
    feed_like_an_evaluator(metrics, mine, 2)
    out = {}
    for m in metrics:
        out.update(m.evaluate(17))
    return out, metrics[1].last_report['per_predicate']


def test_distributed_sharing_with_mixed_settings_equals_single_process():
    single = _sharing_worker(0, 1)
    for res in run_distributed(_sharing_worker, 3):
        assert comparable(res) == comparable(single)


def test_every_metric_is_registered_by_its_class_name_and_nothing_else():
    """What configs name (``dict(type='VLMSceneGraphMetric')``) is in the registry, and only classes are: a
    decorator left on a helper function once registered the helper instead of the metric."""
    import inspect

    import mmsgg_eval.metrics as metrics
    from mmsgg_eval.registry import METRICS
    ours = {name: obj for name, obj in METRICS.module_dict.items() if obj.__module__.startswith('mmsgg_eval.')}
    assert all(inspect.isclass(obj) for obj in ours.values()), sorted(ours)
    machinery = {'RowAccumulator', 'RowMetric', 'ComputeGroup', 'extra_results_of', 'SceneGraphMetric'}
    assert set(metrics.__all__) - machinery <= set(ours), sorted(set(metrics.__all__) - machinery - set(ours))


def _detection_sample(idx, good):
    box = torch.tensor([[0., 0, 10, 10]])
    pred = box if good else torch.tensor([[50., 50, 60, 60]])
    return dict(sample_idx=idx, gt_instances=dict(bboxes=box, labels=torch.tensor([0])),
                pred_instances=dict(bboxes=pred, labels=torch.tensor([0]), scores=torch.tensor([0.9])))


def _grounding_sample(idx, good):
    box = torch.tensor([[0., 0, 10, 10]])
    return dict(sample_idx=idx, ori_shape=(100, 100), gt_instances=dict(bboxes=box),
                pred_instances=dict(bboxes=box if good else torch.tensor([[50., 50, 60, 60]]),
                                    scores=torch.tensor([1.0])))


@pytest.mark.parametrize('build,make,key', [
    (lambda: DetectionAP(), _detection_sample, 'sgdet/AP@50'),
    (lambda: GroundingPr(), _grounding_sample, 'grounding/Pr@0.5'),
    (lambda: SGRecall(mode='sgdet'), None, 'sgdet/R@50'),
])
def test_repeated_sample_idx_counts_its_first_occurrence_within_and_across_pools(build, make, key):
    """Regression: inside ONE pool DetectionAP kept both copies (AP@50 50.5 instead of 100) and GroundingPr
    counted both (50 in one process() call, 100 over two)."""
    if make is None:
        good = two_relation_image(0, hit_both=True)
        bad = two_relation_image(0, hit_both=False)
        for s in (good, bad):
            s['pred_instances'] = dict(bboxes=s['gt_instances']['bboxes'], labels=s['gt_instances']['labels'],
                                       scores=torch.ones(2))
        first, second = good, bad
    else:
        first, second = make(5, True), make(5, False)  # (not 0: DetectionAP's legacy quirk on sample 0)
    one_call = evaluate(build(), [[first, second]], size=1)
    two_calls = evaluate(build(), [[first], [second]], size=1)
    alone = evaluate(build(), [[first]], size=1)
    assert one_call[key] == two_calls[key] == alone[key] == pytest.approx(100.0)


def test_metrics_with_other_settings_do_not_overwrite_each_others_files(tmp_path):
    """Regression: two SGRecall with IoU 0.5 and 0.9, same prefix and report_dir: the second overwrote the
    first's report files (and its outfile_prefix file)."""
    samples, _ = random_dataset(7, 20, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    report, out = str(tmp_path / 'reports'), str(tmp_path / 'out' / 'run')
    metrics = [SGRecall(mode='sgdet', iou_thr=thr, report_dir=report, outfile_prefix=out) for thr in (0.5, 0.9)]
    results = []
    for metric in metrics:
        metric.dataset_meta = META
    for start in range(0, 20, 5):
        for metric in metrics:
            metric.process({}, samples[start:start + 5])
    for metric in metrics:
        results.append(metric.evaluate(20))
    assert results[0]['sgdet/R@100'] > results[1]['sgdet/R@100']
    names = sorted(os.listdir(report))
    json_files = [n for n in names if n.endswith('.metrics.json')]
    assert len(json_files) == 2, names
    thresholds = sorted(json.load(open(os.path.join(report, n)))['conventions']['iou_threshold'] for n in json_files)
    assert thresholds == ['>= 0.5', '>= 0.9']
    outs = sorted(os.listdir(os.path.dirname(out)))
    assert len(outs) == 2, outs
    # evaluated again (the next validation epoch): each metric overwrites its own files, no third name
    for start in range(0, 20, 5):
        for metric in metrics:
            metric.process({}, samples[start:start + 5])
    for metric in metrics:
        metric.evaluate(20)
    assert sorted(os.listdir(report)) == names and sorted(os.listdir(os.path.dirname(out))) == outs


def _deduplicated_by_loops(tables):
    """The de-duplication written out: per sample_idx the least (rank, occurrence) over all tables; kept rows in
    (sample_idx, original position) order."""
    first = {}
    for cols in tables.values():
        for i, r, o in zip(cols['sample_idx'].tolist(), cols['rank'].tolist(), cols['occurrence'].tolist()):
            first[i] = min(first.get(i, (r, o)), (r, o))
    out = {}
    for name, cols in tables.items():
        rows = [j for j, (i, r, o) in enumerate(zip(cols['sample_idx'].tolist(), cols['rank'].tolist(),
                                                     cols['occurrence'].tolist())) if first[i] == (r, o)]
        rows.sort(key=lambda j: (cols['sample_idx'][j].item(), j))
        out[name] = {c: v[torch.tensor(rows, dtype=torch.long)] for c, v in cols.items()}
    return out


@pytest.mark.parametrize('ids', ['small', 'large', 'negative'])
def test_deduplicate_equals_the_loops_and_keeps_tables_already_in_order(ids):
    """Indices small and non-negative (counted in a table indexed by sample_idx), large or negative (by rank
    among the distinct ones); tables in order without repeats come back as the very same tensors."""
    from mmsgg_eval.metrics.accumulator import deduplicate
    g = torch.Generator().manual_seed(7)
    for trial in range(40):
        base = {'small': 0, 'large': 10 ** 12, 'negative': -50}[ids]
        tables = {}
        for name, rows in (('images', int(torch.randint(0, 30, (1,), generator=g))),
                           ('entries', int(torch.randint(0, 200, (1,), generator=g)))):
            if trial % 4 in (0, 1):  # one rank, one pass: nothing to drop; in order (0) or not (1)
                idx = torch.sort(torch.randint(0, 40, (rows,), generator=g)).values if trial % 4 == 0 else \
                    torch.randperm(rows, generator=g)
                rank, occ = torch.zeros(rows, dtype=torch.long), torch.zeros(rows, dtype=torch.int32)
            else:  # repeats from other ranks and passes, in order (2) or not (3)
                idx = torch.randint(0, 40, (rows,), generator=g)
                idx = torch.sort(idx).values if trial % 4 == 2 else idx
                rank = torch.randint(0, 3, (rows,), generator=g)
                occ = torch.randint(0, 4, (rows,), generator=g).int()
            tables[name] = {'sample_idx': idx + base, 'rank': rank, 'occurrence': occ,
                            'value': torch.randn(rows, 2, generator=g)}
        ours, expected = deduplicate(tables), _deduplicated_by_loops(tables)
        for name in tables:
            assert list(ours[name]) == list(tables[name])
            for column in tables[name]:
                assert torch.equal(ours[name][column], expected[name][column]), (trial, name, column)
            if trial % 4 == 0:
                assert ours[name] is tables[name]
