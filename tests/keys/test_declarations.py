"""The key declarations (``mmsgg_eval/keys.py``): every declared scene-graph key reaches the summary, the bootstrap
intervals, the paired comparison and the report tables without any other code; ``zmR@K`` (added through the
declaration alone) against a loop reference written from its definition; the report families and the
SGRecall / SGMeanRecall split derived from the declarations."""
import math
import os.path as osp

import pytest

from mmsgg_eval.compare import compare_runs
from mmsgg_eval.functional.error_causes import CAUSES
from mmsgg_eval.keys import ERROR_FAMILIES, FAMILY_ORDER, FAMILY_TITLES, SCENE_GRAPH_FAMILIES, reported_families
from mmsgg_eval.metrics import SGMeanRecall, SGRecall
from mmsgg_eval.metrics.bootstrap import bootstrap_summary, contributions_of
from mmsgg_eval.metrics.state import load_state
from mmsgg_eval.reports import scene_graph_tables
from tests.sgg_samples import random_dataset
from tests.metrics.test_bootstrap import GROUPED_META, reduced_tables
from tests.compare.test_compare import perturbed

ZS = [(0, 1, 2), (1, 2, 3), (2, 0, 1), (0, 0, 4), (3, 1, 0), (1, 1, 1)]
NUM_PRED = len(GROUPED_META['predicates'])


def zmr_reference(tables, ks, recall_average, mr_average, skip_empty=True):
    """zmR@K (percent) from its definition, by loops over the reduced rows: per predicate, the recall of its
    zero-shot GT relations of the evaluated images (mean of per-image recalls over the images holding one, or
    hits / relations), averaged over every predicate (an absent one 0) or the present ones; NaN: none."""
    images, rels = tables['images'], tables['relations']
    evaluated = set()
    for i, s in enumerate(images['sample_idx'].tolist()):
        has_pred = int(images['num_pred'][i]) > 0 or bool(images['missing'][i])
        if int(images['num_gt'][i]) > 0 and (has_pred or not skip_empty):
            evaluated.add(s)
    out = {}
    for k in ks:
        cells = {}  # (predicate, image) -> [hits, count]
        for j, s in enumerate(rels['sample_idx'].tolist()):
            if s not in evaluated or not bool(rels['zeroshot'][j]):
                continue
            cell = cells.setdefault((int(rels['predicate'][j]), s), [0, 0])
            cell[0] += int(rels['rank_gc'][j]) < k
            cell[1] += 1
        recalls = {}
        for p in range(NUM_PRED):
            mine = [v for (q, _), v in cells.items() if q == p]
            if not mine:
                continue
            if recall_average == 'image':
                recalls[p] = sum(h / c for h, c in mine) / len(mine)
            else:
                recalls[p] = sum(h for h, _ in mine) / sum(c for _, c in mine)
        if not recalls:
            out[k] = float('nan')
        elif mr_average == 'all':
            out[k] = 100.0 * sum(recalls.values()) / NUM_PRED
        else:
            out[k] = 100.0 * sum(recalls.values()) / len(recalls)
    return out


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


@pytest.mark.parametrize('mode,recall_average,mr_average,seed', [
    ('predcls', 'image', 'all', 3), ('sgdet', 'micro', 'present', 4), ('sgcls', 'image', 'present', 5),
    ('phrdet', 'micro', 'all', 6)])
def test_zero_shot_mean_recall_against_the_loop_reference(mode, recall_average, mr_average, seed):
    samples, _ = random_dataset(seed, 30, mode)
    metric = SGMeanRecall(mode=mode, recall_average=recall_average, mr_average=mr_average, zeroshot_triplets=ZS)
    metric.dataset_meta = GROUPED_META
    tables = reduced_tables(metric, samples)
    summary = metric.summarize(tables)
    reference = zmr_reference(tables, metric.topk, recall_average, mr_average)
    for k in metric.topk:
        assert same(summary['metrics'][f'zmR@{k}'], reference[k]), (k, summary['metrics'][f'zmR@{k}'], reference[k])
    assert any(not math.isnan(v) for v in reference.values())  # the case holds zero-shot relations


def test_zero_shot_mean_recall_needs_a_zero_shot_set_and_has_no_value_without_its_relations():
    samples, _ = random_dataset(3, 20, 'predcls')
    metric = SGMeanRecall(mode='predcls')
    metric.dataset_meta = GROUPED_META
    assert not any(k.startswith('zmR') for k in metric.summarize(reduced_tables(metric, samples))['metrics'])
    metric = SGMeanRecall(mode='predcls', zeroshot_triplets=[(3, 3, 4)], iou_plus_one=True)
    metric.dataset_meta = GROUPED_META
    tables = reduced_tables(metric, samples)
    tables['relations']['zeroshot'][:] = False  # no evaluated relation is zero-shot
    summary = metric.summarize(tables)
    assert all(math.isnan(summary['metrics'][f'zmR@{k}']) for k in metric.topk)
    assert any('zmR@20' in entry['keys'] for entry in summary['no_value'])


def declared_names(metric, summary):
    """The keys of a summary that the declarations produce (every family of SCENE_GRAPH_FAMILIES and
    ERROR_FAMILIES)."""
    names = {f.name for f in SCENE_GRAPH_FAMILIES + ERROR_FAMILIES}
    return [k for k in summary['metrics'] if k.split('@')[0] in names]


def expected_error_keys(ks, causes):
    """The error analysis' keys by their definition (docs/metrics.md), in the summary's order."""
    return ([f'miss@{k}_{c}' for c in causes + ('predicate_ng',) for k in ks]
            + [f'stage_{s}@{k}' for s in ('pair_loc', 'pair_det', 'pred_cls') for k in ks]
            + ['stage_inst_loc', 'stage_inst_det'])


@pytest.mark.parametrize('mode,error_analysis', [('predcls', False), ('sgdet', True), ('sgcls', True)])
def test_every_declared_key_gets_an_interval_a_compare_row_and_a_report_row(tmp_path, mode, error_analysis):
    """Whatever the declarations hold: each declared key of the summary (the error analysis' included) has a
    per-image decomposition that reproduces it, a bootstrap interval, a paired-comparison row (from the metric
    that returns it) and a row or column in the report tables."""
    samples, _ = random_dataset(7, 24, mode)
    kwargs = dict(mode=mode, zeroshot_triplets=ZS, novel_objects=['c0', 'c1'], novel_predicates=['p1'],
                  error_analysis=error_analysis)
    metric = SGMeanRecall(**kwargs)
    metric.dataset_meta = GROUPED_META
    tables = reduced_tables(metric, samples)
    summary = metric.summarize(tables)
    declared = declared_names(metric, summary)
    families = {k.split('@')[0] for k in declared}
    assert {'zmR', 'zR', 'mR', 'F'} <= families and all(f.name in families for f in SCENE_GRAPH_FAMILIES
                                                        if mode in f.modes)
    errors = [k for k in declared if k.split('@')[0] in {f.name for f in ERROR_FAMILIES}]
    assert errors == (expected_error_keys(metric.topk, tuple(summary['causes'])) if error_analysis else [])
    point = contributions_of(metric, tables).point()
    for key in declared:
        assert same(float(point[key][0]), summary['metrics'][key]), key
    intervals = bootstrap_summary(metric, tables, summary, dict(samples=30, seed=0, level=0.9))['intervals']
    assert set(declared) <= set(intervals)
    report = scene_graph_tables(summary, metric.topk, 'random', mode)
    shown = {str(cell) for t in report for row in t.rows for cell in row} | {h for t in report for h in t.header}
    for name in families:
        assert name in shown or any(h.startswith(name + '@') for h in shown), name
    if error_analysis:  # the causes table (one row per cause) and the stage-wise keys
        text = '\n'.join(str(cell) for t in report for row in [t.header] + t.rows for cell in row)
        for key in errors:
            cause = key.split('_', 1)[1] if key.startswith('miss@') else key.split('@')[0]
            assert cause in text, key
    by_family = {row[0]: row[1] for t in report if t.name == 'families' for row in t.rows}
    assert by_family['zmR'] == FAMILY_TITLES['zmR'] == 'Zero-shot mean recall'
    for run, data in (('a', samples), ('b', perturbed(samples, 1))):
        for cls in (SGRecall, SGMeanRecall):
            m = cls(save_state=osp.join(str(tmp_path), run, f'{cls.__name__}.state'), **kwargs)
            m.dataset_meta = GROUPED_META
            m.process({}, data)
            m.evaluate(len(data))
    runs = [[load_state(osp.join(str(tmp_path), r, f'{c}.state')) for c in ('SGRecall', 'SGMeanRecall')]
            for r in 'ab']
    compared = {m['metric']: m['keys'] for m in compare_runs(runs, ['a', 'b'], samples=40)['comparisons'][0]['metrics']}
    rows = set(compared[f'SGRecall ({mode})']) | set(compared[f'SGMeanRecall ({mode})'])
    assert set(declared) <= rows
    assert 'zmR@50' in compared[f'SGMeanRecall ({mode})'] and 'zmR@50' not in compared[f'SGRecall ({mode})']
    assert set(errors) <= set(compared[f'SGRecall ({mode})'])


@pytest.mark.parametrize('mode,recall_average,skip_empty', [
    ('predcls', 'image', True), ('sgdet', 'micro', False), ('sgcls', 'image', False)])
def test_error_families_come_from_their_declarations(mode, recall_average, skip_empty):
    """The error analysis' keys are the declared ERROR_FAMILIES walked by key_instances: summary_keys restricted
    to them gives exactly the summary's miss / stage keys, bit for bit, and the bootstrap's point estimate
    reproduces each; without error_analysis the walk yields none of them."""
    from mmsgg_eval.metrics.key_values import key_instances, summary_keys
    samples, _ = random_dataset(11, 20, mode)
    metric = SGRecall(mode=mode, recall_average=recall_average, skip_empty_predictions=skip_empty,
                      error_analysis=True)
    metric.dataset_meta = GROUPED_META
    tables = reduced_tables(metric, samples)
    summary = metric.summarize(tables)
    expected = expected_error_keys(metric.topk, tuple(summary['causes']))
    assert [k for k in summary['metrics'] if k.split('@')[0] in {f.name for f in ERROR_FAMILIES}] == expected
    assert ('no_prediction' in summary['causes']) == (not skip_empty or bool(tables['images']['missing'].any()))
    assert set(summary['causes']) <= set(CAUSES)
    counted = _counted(metric, tables)
    names = [n for block in key_instances(metric, counted, ERROR_FAMILIES) for inst in block for n in inst.names]
    assert sorted(names) == sorted(expected)
    only = summary_keys(metric, counted, ERROR_FAMILIES)
    assert list(only) == expected and all(only[k] == summary['metrics'][k] for k in expected)
    point = contributions_of(metric, tables).point()
    for key in expected:
        assert same(float(point[key][0]), summary['metrics'][key]), key
    counted.errors = None
    assert not list(key_instances(metric, counted, ERROR_FAMILIES))


def _counted(metric, tables):
    """The summary's Relations (with the error rows) of ``tables``, as ``summarize`` builds them."""
    from mmsgg_eval.functional.recall import evaluated_image_rows
    images, rels = tables['images'], tables['relations']
    evaluated = metric._evaluated_images(images)
    image_of, keep, num_images = evaluated_image_rows(images['sample_idx'], evaluated, rels['sample_idx'])
    rel = {n: c[keep] for n, c in rels.items()}
    image = {n: c[evaluated] for n, c in images.items()}
    counted = metric.key_relations(rel, image_of, num_images, image['num_gt'], None, None, {}, {})
    counted.errors = metric.error_rows(rel, image, image_of, counted)
    return counted


def test_report_families_and_the_split_between_the_two_metrics_come_from_the_declarations():
    assert FAMILY_ORDER == ('R', 'ngR', 'zR', 'ngzR', 'A', 'PairR', 'mR', 'ngmR', 'zmR', 'F', 'AVG')
    assert SGRecall.report_keys == reported_families('recall')
    assert set(SGMeanRecall.report_keys) == {f.name for f in SCENE_GRAPH_FAMILIES if f.reported_by == 'mean_recall'}
    assert not set(SGRecall.report_keys) & set(SGMeanRecall.report_keys)


def test_bootstrap_flag_names_the_metrics_without_intervals():
    from mmsgg_eval.metrics.bootstrap import set_bootstrap
    from mmsgg_eval.metrics.detection import DetectionAP
    recall, detection = SGRecall(mode='predcls'), DetectionAP()
    with pytest.warns(UserWarning, match=r'--bootstrap: no intervals for DetectionAP'):
        set_bootstrap([recall, detection], 20)
    assert recall.bootstrap['samples'] == 20 and detection.bootstrap is None
