"""OIRelationMetric (the Open Images protocol) against the loop reference of tests/reference_oi.py; the functional
pieces on hand-made cases; distributed runs; bad input; states, bootstrap and reports."""
import json
import math

import numpy as np
import pytest
import torch

from mmsgg_eval.functional import compiled
from mmsgg_eval.functional.oi import greedy_claims, oi_average_precisions, top_predicates, voc_ap
from mmsgg_eval.metrics import OIRelationMetric
from tests import reference_oi
from tests.dist_utils import comparable
from tests.metric_tester import Case, check_metric
from tests.overlap_utils import check_deferred_value_error, compute_threads_fixed, counting_background_passes
from tests.sgg_samples import random_dataset

NUM_CLASSES, NUM_PREDICATES = 4, 5
META = dict(classes=[f'c{i}' for i in range(NUM_CLASSES)], predicates=[f'p{i}' for i in range(NUM_PREDICATES)],
            dataset_name='random', iou_plus_one=True)
KEYS = ('R@20', 'R@50', 'R@100', 'mAP_rel', 'wmAP_rel', 'mAP_phr', 'wmAP_phr', 'final_score', 'w_final_score')


def run_metric(samples, batch_size=4, **kwargs):
    metric = OIRelationMetric(**kwargs)
    metric.dataset_meta = META
    for start in range(0, len(samples), batch_size):
        metric.process({}, samples[start:start + batch_size])
    return metric, metric.evaluate(len(samples))


def assert_close_to_reference(out, prefix, ref, tol=1e-9):
    for key in KEYS:
        assert math.isclose(out[f'{prefix}/{key}'], ref['keys'][key], rel_tol=0, abs_tol=tol), \
            (key, out[f'{prefix}/{key}'], ref['keys'][key])


# ---------------------------------------------------------------------------------------------- functional

def test_top_predicates_ties_take_the_lower_column_first():
    rows = torch.tensor([[0.2, 0.5, 0.5, 0.1], [0.3, 0.3, 0.3, 0.3], [0.0, 0.1, 0.9, 0.9]])
    values, columns = top_predicates(rows, 2)
    assert columns.tolist() == [[1, 2], [0, 1], [2, 3]]
    assert torch.equal(values, torch.tensor([[0.5, 0.5], [0.3, 0.3], [0.9, 0.9]]))
    assert top_predicates(rows[:, :1], 2)[1].tolist() == [[0], [0], [0]]  # one predicate: one entry per pair


def test_greedy_claims_take_the_first_best_gt_without_fallback():
    # entry 0 takes GT 1 (the first of the two best); entry 1's best is GT 1 too -> FP although GT 0 is free;
    # entry 2 overlaps GT 0 by exactly 0.5 -> not strictly above -> FP; entry 3 takes GT 0
    overlap = torch.tensor([[[0.6, 0.9, 0.9], [0.7, 0.8, -1.0], [0.5, -1.0, -1.0], [0.51, -1.0, -1.0]]])
    assert greedy_claims(overlap).tolist() == [[True, False, False, True]]
    assert greedy_claims(torch.zeros((1, 3, 0))).tolist() == [[False, False, False]]


def test_voc_ap_by_hand():
    # sweep TP FP TP with 3 GT: precision 1, 1/2, 2/3 -> envelope 1, 2/3, 2/3 -> AP = (1 + 2/3) / 3
    tp = torch.tensor([True, False, True])
    assert voc_ap(tp, torch.ones(3, dtype=torch.float64), 3) == pytest.approx((1 + 2 / 3) / 3, abs=1e-15)
    assert voc_ap(tp, torch.ones(3, dtype=torch.float64), 0) == 0.0
    assert reference_oi.voc_ap([1, 0, 1], 3) == pytest.approx((1 + 2 / 3) / 3, abs=1e-15)
    # weights are copies of rows: weight 2 on the first row = the sweep TP TP FP TP
    w = torch.tensor([2.0, 1.0, 1.0], dtype=torch.float64)
    assert voc_ap(tp, w, 4) == pytest.approx(reference_oi.voc_ap([1, 1, 0, 1], 4), abs=1e-15)


def test_weighted_ap_equals_the_sweep_with_repeated_rows():
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(1, 30))
        tp = rng.random(n) < 0.5
        w = rng.integers(0, 4, size=n)
        npos = int(tp[w > 0].astype(int) @ w[w > 0]) + int(rng.integers(0, 5))
        expanded = [int(t) for t, c in zip(tp, w) for _ in range(c)]
        got = voc_ap(torch.tensor(tp), torch.tensor(w, dtype=torch.float64), npos)
        assert got == pytest.approx(reference_oi.voc_ap(expanded, npos) if npos else 0.0, abs=1e-12)


def test_predicates_without_entries_or_gt():
    rows = {'predicate': torch.tensor([0, 0, 2]), 'tp_rel': torch.tensor([True, False, False]),
            'tp_phr': torch.tensor([False, True, False])}
    rel, phr = oi_average_precisions(rows, torch.tensor([2.0, 1.0, 0.0]), 3)
    assert rel.tolist() == [0.5, 0.0, 0.0] and phr.tolist() == [0.25, 0.0, 0.0]


# ---------------------------------------------------------------------------------------------- reference

@pytest.mark.parametrize('mode', ['sgdet', 'predcls', 'sgcls'])
@pytest.mark.parametrize('seed', [0, 1, 2])
def test_matches_the_loop_reference(mode, seed):
    samples, refs = random_dataset(seed, 30, mode, num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES,
                                   empty_pred_prob=0.2)
    metric, out = run_metric(samples, batch_size=3, mode=mode)
    ref = reference_oi.evaluate(refs, mode, NUM_PREDICATES)
    assert_close_to_reference(out, mode, ref)
    per = metric.last_report['per_predicate']
    for c, name in enumerate(META['predicates']):
        assert per[name]['num_gt'] == ref['npos'][c]
        assert per[name]['AP_rel'] == pytest.approx(100 * ref['ap_rel'][c], abs=1e-9)
        assert per[name]['AP_phr'] == pytest.approx(100 * ref['ap_phr'][c], abs=1e-9)
    assert out[f'{mode}/R@100'] > 0


def test_near_duplicate_boxes_long_lists_and_saturation():
    """Many pairs (lists cut at 100), jittered copies of the GT boxes, K = 200 saturating at the list."""
    samples, refs = random_dataset(7, 12, 'sgdet', num_classes=3, num_predicates=NUM_PREDICATES, max_objects=12,
                                   empty_pred_prob=0.0, tie_prob=0.5)
    _, out = run_metric(samples, batch_size=5, mode='sgdet', topk=(20, 50, 100, 200, 40000))
    ref = reference_oi.evaluate(refs, 'sgdet', NUM_PREDICATES, ks=(20, 50, 100, 200, 40000))
    assert_close_to_reference(out, 'sgdet', ref)
    assert out['sgdet/R@200'] == out['sgdet/R@100'] == out['sgdet/R@40000'] < 100
    assert any(len(r['rel_pairs']) * 2 > 100 for r in refs)


def test_images_without_pairs_count_their_gt():
    samples, refs = random_dataset(5, 10, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    for s, r in zip(samples[:4], refs[:4]):
        s['pred_relations'] = dict(pair_idxs=torch.zeros((0, 2), dtype=torch.long),
                                   scores=torch.zeros((0, NUM_PREDICATES + 1)))
        r['rel_pairs'], r['rel_scores'] = [], []
    metric, out = run_metric(samples, mode='sgdet')
    ref = reference_oi.evaluate(refs, 'sgdet', NUM_PREDICATES)
    assert_close_to_reference(out, 'sgdet', ref)
    assert metric.last_report['num_gt_relations'] == sum(len(r['gt_rels']) for r in refs)
    assert metric.last_report['num_without_pairs'] >= 4


def test_pool_size_and_batch_split_do_not_change_anything():
    samples, _ = random_dataset(11, 25, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    _, a = run_metric(samples, batch_size=1, mode='sgdet', pool_samples=1)
    _, b = run_metric(samples, batch_size=7, mode='sgdet', pool_samples=100)
    assert a == b


def test_duplicate_sample_idx_counts_once():
    samples, _ = random_dataset(1, 10, 'predcls', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    _, once = run_metric(samples, mode='predcls')
    _, twice = run_metric(samples + samples[:3], mode='predcls')
    assert once == twice


def test_tied_scores_follow_the_documented_order():
    """Two images with the same entries tie on every score: the earlier sample_idx is swept first."""
    box = [0.0, 0.0, 10.0, 10.0]
    other = [20.0, 20.0, 30.0, 30.0]

    def image(idx, hit):
        gt = torch.tensor([box, other])
        pred = gt if hit else gt + 50
        return dict(sample_idx=idx, gt_instances=dict(bboxes=gt, labels=torch.tensor([0, 1])),
                    gt_relations=dict(pair_idxs=torch.tensor([[0, 1]]), labels=torch.tensor([0])),
                    pred_instances=dict(bboxes=pred, labels=torch.tensor([0, 1]), scores=torch.ones(2)),
                    pred_relations=dict(pair_idxs=torch.tensor([[0, 1]]),
                                        scores=torch.tensor([[0.0, 0.5, 0.25, 0.0, 0.0, 0.0]])))
    # sample 0 a miss, sample 1 a hit, equal scores: sweep FP then TP -> AP(p0) = 1/2 * 1/2 (2 GT)
    metric, _ = run_metric([image(0, False), image(1, True)], mode='sgdet')
    assert metric.last_report['per_predicate']['p0']['AP_rel'] == pytest.approx(25.0)
    metric, _ = run_metric([image(0, True), image(1, False)], mode='sgdet')
    assert metric.last_report['per_predicate']['p0']['AP_rel'] == pytest.approx(50.0)


def test_missing_prediction_counts_its_gt():
    samples, refs = random_dataset(4, 8, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    samples[2] = dict(samples[2], prediction_missing=True)
    refs[2] = dict(refs[2], rel_pairs=[], rel_scores=[])
    metric, out = run_metric(samples, mode='sgdet')
    assert_close_to_reference(out, 'sgdet', reference_oi.evaluate(refs, 'sgdet', NUM_PREDICATES))
    assert metric.last_report['num_missing_predictions'] == 1


# ---------------------------------------------------------------------------------------------- bad input

def test_bad_input_names_the_sample_and_the_field():
    samples, _ = random_dataset(2, 4, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES,
                                empty_pred_prob=0.0)
    bad = dict(samples[1], pred_relations=dict(samples[1]['pred_relations']))
    scores = bad['pred_relations']['scores'].clone()
    scores[0, 1] = float('nan')
    bad['pred_relations']['scores'] = scores
    metric = OIRelationMetric(mode='sgdet', pool_samples=2)
    metric.dataset_meta = META
    with pytest.raises(ValueError) as err:  # (the pass reads the scores: with two threads, the next flush raises)
        metric.process({}, [samples[0], bad])
        metric.evaluate(2)
    assert 'sample_idx=1' in str(err.value) or 'img1' in str(err.value)
    assert 'scores' in str(err.value)
    bad = dict(samples[2], pred_relations=dict(samples[2]['pred_relations']))
    bad['pred_relations']['pair_idxs'] = bad['pred_relations']['pair_idxs'] + 1000
    metric = OIRelationMetric(mode='sgdet', pool_samples=1)
    metric.dataset_meta = META
    with pytest.raises(ValueError) as err:
        metric.process({}, [bad])
        metric.evaluate(1)
    assert ('sample_idx=2' in str(err.value) or 'img2' in str(err.value)) and 'pair_idxs' in str(err.value)


@pytest.mark.parametrize('mode', ['predcls', 'sgdet'])
def test_overlapped_pools_give_the_keys_of_one_stage_pools(mode):
    """With two compute threads a pool's reader pass runs in the background while the previous pool's lists are
    built: every key equals the one-thread run's, bit for bit."""
    if compiled.kernels() is None:
        pytest.skip('the compiled kernels are not built')
    samples, _ = random_dataset(4, 33, mode, num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES, max_objects=9)
    with compute_threads_fixed(1):
        _, one_stage = run_metric(samples, batch_size=5, mode=mode, pool_samples=5)
    with compute_threads_fixed(2), counting_background_passes() as started:
        _, overlapped = run_metric(samples, batch_size=5, mode=mode, pool_samples=5)
    assert started, 'no pass ran in the background: the test would not test the overlap'
    assert comparable(overlapped) == comparable(one_stage)


def test_a_value_error_of_an_overlapped_pool_is_raised_by_the_next_flush_naming_the_sample():
    if compiled.kernels() is None:
        pytest.skip('the compiled kernels are not built')
    samples, _ = random_dataset(3, 12, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES,
                                max_objects=6, empty_pred_prob=0.0)
    metric = OIRelationMetric(mode='sgdet', pool_samples=4)
    metric.dataset_meta = META
    check_deferred_value_error(metric, samples)


@pytest.mark.parametrize('kwargs,word', [(dict(mode='phrdet'), 'mode'), (dict(topk=0), 'topk'),
                                         (dict(iou_plus_one='yes'), 'iou_plus_one'),
                                         (dict(score_layout='x'), 'score_layout')])
def test_bad_arguments(kwargs, word):
    with pytest.raises(ValueError, match=word):
        OIRelationMetric(**kwargs)


def test_missing_dataset_meta_fails_at_the_first_process():
    samples, _ = random_dataset(2, 2, 'sgdet')
    with pytest.raises(ValueError, match='classes'):
        OIRelationMetric().process({}, samples)


# ---------------------------------------------------------------------------------------------- distributed

LENGTH = 23


@pytest.mark.parametrize('world_size,mode', [(2, 'sgdet'), (3, 'predcls')])
def test_distributed_equals_single_process(world_size, mode):
    """1 and 2 or 3 ranks (23 images: uneven shards), pool_samples 2 / 1 and the score kernels on / off give the
    same keys and per-predicate APs bit for bit, the loop reference's keys."""
    samples, refs = random_dataset(42, LENGTH, mode, num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    ref = reference_oi.evaluate(refs, mode, NUM_PREDICATES)['keys']
    case = Case((OIRelationMetric,), dict(mode=mode), samples, META, {k: ref[k] for k in KEYS}, name=mode,
                report_fields=('per_predicate',))
    single = check_metric([case], world_sizes=(1, world_size), pool_samples=(2, 1), abs_tol=1e-9)[0]
    assert single['mAP_rel'] > 0


# ---------------------------------------------------------------------------------------------- outputs

def test_reports_state_bootstrap_and_per_image(tmp_path):
    from mmsgg_eval.metrics.per_image import read_per_image
    from mmsgg_eval.metrics.state import load_state
    samples, refs = random_dataset(9, 20, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    metric, out = run_metric(samples, mode='sgdet', report_dir=str(tmp_path), outfile_prefix=str(tmp_path / 'o'),
                             per_image_out=str(tmp_path / 'images.jsonl'), save_state=str(tmp_path / 'oi.state'),
                             bootstrap=dict(samples=50, seed=1))
    report = metric.last_report
    assert set(report['intervals']) == set(KEYS)
    for key, (low, high) in report['intervals'].items():
        assert low <= out[f'sgdet/{key}'] + 1e-9 and out[f'sgdet/{key}'] <= high + 1e-9
    summary = json.loads((tmp_path / 'sgdet.oi.metrics.json').read_text())
    assert summary['metrics']['wmAP_rel'] == pytest.approx(out['sgdet/wmAP_rel'])
    assert set(summary['per_predicate']['p0']) == {'AP_rel', 'AP_phr', 'num_gt'}
    assert (tmp_path / 'sgdet.oi.tables.per_predicate.csv').exists()
    assert json.loads((tmp_path / 'o.sgdet.oi.json').read_text())['keys']['R@50'] == out['sgdet/R@50']
    records = read_per_image(str(tmp_path / 'images.jsonl'))
    assert [r['sample_idx'] for r in records] == list(range(20))
    ref_lists = reference_oi.evaluate(refs, 'sgdet', NUM_PREDICATES)['lists']
    for record, ref_list in zip(records, ref_lists):
        assert [e['predicate'] for e in record['entries']] == [f'p{e["predicate"]}' for e in ref_list]
        assert [e['score'] for e in record['entries']] == [float(e['score']) for e in ref_list]
    state = load_state(str(tmp_path / 'oi.state'))
    rebuilt = state.build_metric()
    assert rebuilt.summarize(state.tables)['metrics'] == report['metrics']
    extra = metric.extra_results()
    assert extra['sgdet/per_predicate_ap'] == report['per_predicate']


def test_with_sgmeanrecall_in_one_evaluator_keys_do_not_collide(tmp_path):
    from mmengine.evaluator import Evaluator
    from mmsgg_eval.registry import METRICS
    samples, _ = random_dataset(3, 12, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    evaluator = Evaluator([dict(type=f'{METRICS.scope}.SGMeanRecall', mode='sgdet', report_dir=str(tmp_path)),
                           dict(type=f'{METRICS.scope}.OIRelationMetric', mode='sgdet', report_dir=str(tmp_path))])
    evaluator.dataset_meta = META
    for start in range(0, 12, 4):
        evaluator.process(samples[start:start + 4], {})
    out = evaluator.evaluate(12)
    assert {'sgdet/mR@50', 'sgdet/R@50', 'sgdet/wmAP_rel', 'sgdet/w_final_score'} <= set(out)
    assert (tmp_path / 'sgdet.oi.metrics.json').exists() and (tmp_path / 'sgdet.metrics.json').exists()


def test_benchmark_workload_and_numpy_peer_agree():
    """The OIv6-like benchmark workload: OIRelationMetric and the numpy peer of tools/benchmark.py agree."""
    from mmsgg_eval.benchmarks.oi_numpy import evaluate_oi
    from mmsgg_eval.benchmarks.runners import numpy_images
    from mmsgg_eval.benchmarks.workloads import OI_NUM_PREDICATES, make_workload, meta
    data = make_workload('oiv6-sgdet', 4)
    assert data[0]['pred_relations']['scores'].shape == (80 * 79, OI_NUM_PREDICATES + 1)
    metric = OIRelationMetric(mode='sgdet')
    metric.dataset_meta = meta('oiv6-sgdet')
    metric.process({}, data[:3])
    metric.process({}, data[3:])
    ours = metric.evaluate(4)
    peer = evaluate_oi(numpy_images('oiv6-sgdet', 4), OI_NUM_PREDICATES)
    for key in KEYS:
        assert ours[f'sgdet/{key}'] == pytest.approx(peer[key], abs=1e-9), key
    assert ours['sgdet/R@100'] > 0


def test_compare_two_runs_states(tmp_path):
    """``python -m mmsgg_eval.compare`` on the states of two OI runs over the same images: every key with its
    paired interval (the AP keys recomputed on each replicate)."""
    from mmsgg_eval.compare import main
    samples, _ = random_dataset(21, 16, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    worse = []
    for s in samples:
        rel = dict(s['pred_relations'])
        rel['scores'] = torch.flip(rel['scores'], (1,))  # another model: the predicate columns reversed
        worse.append(dict(s, pred_relations=rel))
    for name, data in (('a', samples), ('b', worse)):
        run_metric(data, mode='sgdet', save_state=str(tmp_path / f'{name}.state'))
    out = main([str(tmp_path / 'a.state'), str(tmp_path / 'b.state'), '--samples', '50', '--out-dir',
                str(tmp_path / 'cmp')])
    text = (tmp_path / 'cmp' / 'compare.md').read_text()
    for key in KEYS:
        assert key in text
    assert out is not None



def hand_image(idx, gt_predicate, pairs):
    """PredCls image with objects c0 [0, 0, 10, 10] and c1 [5, 5, 20, 20], one GT relation (0, 1,
    ``gt_predicate``) and the predicted pairs ``pairs`` [(subject, object, {predicate: probability})]."""
    scores = torch.zeros((len(pairs), NUM_PREDICATES + 1))
    for row, (_, _, probs) in enumerate(pairs):
        for c, value in probs.items():
            scores[row, c + 1] = value
    return dict(sample_idx=idx, img_id=f'img{idx}',
                gt_instances=dict(bboxes=torch.tensor([[0., 0., 10., 10.], [5., 5., 20., 20.]]),
                                  labels=torch.tensor([0, 1])),
                gt_relations=dict(pair_idxs=torch.tensor([[0, 1]]), labels=torch.tensor([gt_predicate])),
                pred_relations=dict(pair_idxs=torch.tensor([[s, o] for s, o, _ in pairs]).reshape(-1, 2),
                                    scores=scores))


def compared_states(tmp_path, mode, runs, *extra):
    """States of OIRelationMetric(``mode``) on each ``runs`` item (name -> samples) and ``python -m
    mmsgg_eval.compare`` of them: (the summaries by name, the compared metrics by name, compare's result)."""
    from mmsgg_eval.compare import main
    summaries = {}
    for name, data in runs.items():
        metric, _ = run_metric(data, mode=mode, save_state=str(tmp_path / name / 'oi.state'))
        summaries[name] = metric.last_report
    a, b = list(runs)
    out = main([str(tmp_path / a), str(tmp_path / b), '--samples', '200', '--out-dir', str(tmp_path / 'cmp'),
                *extra])
    by_metric = {m['metric']: m for m in out['comparisons'][0]['metrics']}
    return summaries, by_metric, out


def test_compare_per_predicate_ap_by_hand(tmp_path):
    """Per-predicate AP_rel in compare, by hand. A: image 0 (GT p0) lists p0 0.9, p1 0.1; image 1 (GT p0) p1 0.8,
    p0 0.2; image 2 (GT p1) p1 0.6, p0 0.4. p0: TP FP TP of 2 GT -> (1 + 2/3) / 2 = 83.33; p1: FP TP FP of 1 GT
    -> 50. B adds to image 1 the pair (1, 0) (labels c1, c0: no GT) with p0 0.95, p1 0.05: p0 FP TP FP TP ->
    (1/2 + 1/2) / 2 = 50 (Δ -33.33); p1 FP TP FP FP -> 50 (Δ 0)."""
    run_a = [hand_image(0, 0, [(0, 1, {0: 0.9, 1: 0.1})]), hand_image(1, 0, [(0, 1, {0: 0.2, 1: 0.8})]),
             hand_image(2, 1, [(0, 1, {0: 0.4, 1: 0.6})])]
    run_b = [run_a[0], hand_image(1, 0, [(0, 1, {0: 0.2, 1: 0.8}), (1, 0, {0: 0.95, 1: 0.05})]), run_a[2]]
    summaries, by_metric, _ = compared_states(tmp_path, 'predcls', {'a': run_a, 'b': run_b})
    pp = by_metric['OIRelationMetric (predcls)']['per_predicate']
    assert pp['key'] == 'AP_rel' and [r['predicate'] for r in pp['rows']] == META['predicates']
    rows = {r['predicate']: r for r in pp['rows']}
    assert rows['p0']['a'] == pytest.approx(500 / 6) and rows['p0']['b'] == pytest.approx(50)
    assert rows['p0']['delta'] == pytest.approx(-100 / 3) and rows['p1']['delta'] == 0
    assert rows['p1']['a'] == rows['p1']['b'] == pytest.approx(50)
    assert (rows['p0']['num_gt_a'], rows['p1']['num_gt_a'], rows['p2']['num_gt_a']) == (2, 1, 0)
    assert pp['num_tested'] == 2 and math.isnan(rows['p2']['p_holm'])  # predicates without GT are not tested
    assert rows['p0']['low'] <= rows['p0']['delta'] <= rows['p0']['high'] and 0 < rows['p0']['p'] <= 1
    assert rows['p0']['p_holm'] >= rows['p0']['p']
    for name in ('a', 'b'):
        assert summaries[name]['per_predicate']['p0']['AP_rel'] == pytest.approx(rows['p0'][name])
    text = (tmp_path / 'cmp' / 'compare.md').read_text()
    assert 'Per-predicate AP_rel' in text and '| p0 | 2 | 83.33 | 50.00 | -33.33 |' in text
    # AP_phr on request (PredCls: the same boxes, so the same values here)
    _, by_metric, _ = compared_states(tmp_path, 'predcls', {'a': run_a, 'b': run_b}, '--per-predicate-key',
                                      'AP_phr')
    phr = by_metric['OIRelationMetric (predcls)']['per_predicate']
    assert phr['key'] == 'AP_phr' and {r['predicate']: r['delta'] for r in phr['rows']}['p0'] == pytest.approx(-100 / 3)
    with pytest.raises(SystemExit):  # a table no compared metric has: refused (one line, exit 1)
        compared_states(tmp_path, 'predcls', {'a': run_a, 'b': run_b}, '--per-predicate-key', 'R@50')


def test_compare_per_predicate_ap_deltas_and_replicates(tmp_path):
    """Random SGDet runs: per-predicate rows of AP_rel whose A, B and Δ are each run's own per-predicate AP (its
    summary); each replicate's table equals the metric's own summary of the resampled images."""
    from mmsgg_eval.functional.bootstrap import resample_counts
    from mmsgg_eval.metrics.bootstrap import contributions_of
    from tests.metrics.test_bootstrap import reduced_tables, resampled_tables
    samples, _ = random_dataset(21, 16, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    worse = []
    for s in samples:
        rel = dict(s['pred_relations'])
        rel['scores'] = torch.flip(rel['scores'], (1,))
        worse.append(dict(s, pred_relations=rel))
    summaries, by_metric, _ = compared_states(tmp_path, 'sgdet', {'a': samples, 'b': worse})
    pp = by_metric['OIRelationMetric (sgdet)']['per_predicate']
    assert pp['key'] == 'AP_rel' and len(pp['rows']) == NUM_PREDICATES
    changed = 0
    for r in pp['rows']:
        ap_a = summaries['a']['per_predicate'][r['predicate']]['AP_rel']
        ap_b = summaries['b']['per_predicate'][r['predicate']]['AP_rel']
        assert (r['a'], r['b']) == (ap_a, ap_b)  # the all-ones replicate is the summary, bit for bit
        assert r['delta'] == pytest.approx(ap_b - ap_a, abs=1e-12)
        assert r['num_gt_a'] == summaries['a']['per_predicate'][r['predicate']]['num_gt']
        changed += r['delta'] != 0
    assert changed >= 2
    metric = OIRelationMetric(mode='sgdet')
    metric.dataset_meta = META
    samples, _ = random_dataset(23, 16, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES,
                                tie_prob=0.6)  # tied entries of one image: copies must not reorder them
    tables = reduced_tables(metric, samples)
    stat = contributions_of(metric, tables)
    for row in list(next(resample_counts(stat.num_units, 6, seed=11))):
        expected = metric.summarize(resampled_tables(tables, stat.units, row.long().tolist()))
        for name in ('AP_rel', 'AP_phr'):
            got = stat.resampled_tables[name](row)
            want = [expected['per_predicate'][p][name] for p in META['predicates']]
            assert got.tolist() == pytest.approx(want, abs=1e-9), name
        for key, fn in stat.resampled.items():
            assert fn(row) == pytest.approx(expected['metrics'][key], abs=1e-9), key


def test_copies_of_an_image_repeat_its_tied_rows_as_a_group():
    """Image 0 drawn twice lists p0 TP and FP at one score, then p0 TP at a lower score; image 1 once, p0 FP at
    the first score. Swept as distinct copies: TP FP (copy 1), TP FP (copy 2), FP (image 1), TP, TP -- not
    TP TP FP FP. 3 GT per copy (6): precisions 1, 1/2, 2/3, 2/4, 2/5, 3/6, 4/7; AP = (1 + 2/3 + 4/7 + 4/7) / 6."""
    from mmsgg_eval.functional.oi import copied_rows, tie_groups
    rows = {'predicate': torch.tensor([0, 0, 0, 0]), 'score': torch.tensor([0.5, 0.5, 0.5, 0.25]),
            'sample_idx': torch.tensor([0, 0, 1, 0]), 'tp_rel': torch.tensor([True, False, False, True])}
    index = copied_rows(tie_groups(rows), torch.tensor([2.0, 2.0, 1.0, 2.0], dtype=torch.float64))
    assert index.tolist() == [0, 1, 0, 1, 2, 3, 3]
    tp = rows['tp_rel'][index]
    ap = voc_ap(tp, torch.ones(7, dtype=torch.float64), 6)
    assert ap == pytest.approx((1 + 2 / 3 + 4 / 7 + 4 / 7) / 6, abs=1e-15)
    assert ap == pytest.approx(reference_oi.voc_ap([1, 0, 1, 0, 0, 1, 1], 6), abs=1e-15)
    weighted = voc_ap(rows['tp_rel'], torch.tensor([2.0, 2.0, 1.0, 2.0], dtype=torch.float64), 6)
    assert weighted != pytest.approx(ap)  # row weights alone would sweep TP TP FP FP FP TP TP
    assert copied_rows(tie_groups(rows), torch.zeros(4, dtype=torch.float64)).numel() == 0


def test_compare_oi_next_to_sgmeanrecall_shows_both_tables(tmp_path):
    """The OIv6 SGDet evaluator (SGMeanRecall and OIRelationMetric of one prefix, DetectionAP): R@100 of
    SGMeanRecall and AP_rel of OIRelationMetric, one per-predicate table each; DetectionAP (no per-image keys)
    named as not compared instead of a traceback."""
    from mmsgg_eval.compare import main
    from mmsgg_eval.metrics import SGMeanRecall
    from mmsgg_eval.metrics.detection import DetectionAP
    samples, _ = random_dataset(22, 12, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    for name in ('a', 'b'):
        data = samples if name == 'a' else [dict(s, pred_relations=dict(s['pred_relations'], scores=torch.flip(
            s['pred_relations']['scores'], (1,)))) for s in samples]
        for cls in (SGMeanRecall, OIRelationMetric, DetectionAP):
            kwargs = {} if cls is DetectionAP else dict(mode='sgdet')
            metric = cls(save_state=str(tmp_path / name / f'{cls.__name__}.state'), **kwargs)
            metric.dataset_meta = META
            metric.process({}, data)
            metric.evaluate(len(data))
    out = main([str(tmp_path / 'a'), str(tmp_path / 'b'), '--samples', '50', '--out-dir', str(tmp_path / 'cmp')])
    keys = {m['metric']: (m['per_predicate'] or {}).get('key') for m in out['comparisons'][0]['metrics']}
    assert keys == {'SGMeanRecall (sgdet)': 'R@100', 'OIRelationMetric (sgdet)': 'AP_rel'}
    assert out['comparisons'][0]['not_compared'] == ['DetectionAP (sgdet)']
    text = (tmp_path / 'cmp' / 'compare.md').read_text()
    assert 'Per-predicate R@100' in text and 'Per-predicate AP_rel' in text
    assert 'Not compared (keys without a per-image decomposition, so no paired bootstrap): DetectionAP' in text


def test_states_of_disjoint_shards_merge_into_the_whole_run(tmp_path):
    from mmsgg_eval.metrics.state import load_state, merge_states, summarize_state
    samples, _ = random_dataset(17, 20, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    _, whole = run_metric(samples, mode='sgdet')
    for name, part in (('a', samples[::2]), ('b', samples[1::2])):
        run_metric(part, mode='sgdet', save_state=str(tmp_path / f'{name}.state'))
    merged = merge_states([load_state(str(tmp_path / f'{n}.state')) for n in ('a', 'b')])
    keys, summary = summarize_state(merged)
    assert {f'sgdet/{k}': v for k, v in keys.items()} == whole
    assert summary['num_images'] == 20


def test_candidate_pairs_by_the_compiled_top_k_equal_torch_topk():
    """The pairs that can own a listed entry: the compiled prefix top-k's threshold keeps the very pairs
    ``torch.topk``'s does (ties at the threshold, zeros, images with fewer pairs than the list, no pairs)."""
    from mmsgg_eval.functional import compiled
    from mmsgg_eval.functional.oi import candidate_pairs
    gen = torch.Generator().manual_seed(3)
    for length in (1, 5, 40):
        count = torch.tensor([0, 3, 40, 60, 60, 17])
        valid = torch.arange(60)[None, :] < count[:, None]
        first = (torch.randint(0, 6, (6, 60), generator=gen) / 5.0).float()  # many ties, zeros
        with compiled.disabled():
            want = candidate_pairs(first, valid, length)
        got = candidate_pairs(first, valid, length, count)
        assert torch.equal(got, want), length
        assert torch.equal(candidate_pairs(first, valid, length), want)


def test_ap_order_equals_four_stable_sorts():
    """The AP sweep's order from packed integer keys (rows in (sample_idx, rank) order or not; predicates out of
    the packed range take the four sorts) equals sorting by rank, sample_idx, score descending and predicate in
    turn, each sort stable."""
    from mmsgg_eval.functional.oi import ap_order
    from mmsgg_eval.functional.ranking import sortable_key
    g = torch.Generator().manual_seed(11)
    for trial in range(60):
        n = int(torch.randint(0, 300, (1,), generator=g))
        sample_idx = torch.randint(0, 12, (n,), generator=g)
        rank = torch.randint(0, 100, (n,), generator=g).to(torch.int16)
        if trial % 2:  # the reduced tables' order: by sample_idx, ranks increasing within a sample
            pairs = sorted(set(zip(sample_idx.tolist(), rank.tolist())))
            sample_idx = torch.tensor([p[0] for p in pairs], dtype=torch.long).reshape(-1)
            rank = torch.tensor([p[1] for p in pairs], dtype=torch.int16).reshape(-1)
            n = len(pairs)
        predicate = torch.randint(0, 5, (n,), generator=g).to(torch.int16)
        if trial % 7 == 3 and n:
            predicate = predicate.long() - 3  # negative predicates
        if trial % 7 == 5 and n:
            predicate = predicate.long() * 2 ** 31  # out of the packed range (the four sorts)
        score = torch.randint(0, 6, (n,), generator=g).float() / 5 - 0.2 * (trial % 3 == 0)
        wide = torch.rand(n, generator=g) < 0.2  # magnitudes up to the float32 range, both signs
        score[wide] = torch.tensor([3e38, -3e38, 1e-30, -1e-30, 7.0, -7.0])[torch.randint(0, 6, (n,), generator=g)][wide]
        score[torch.rand(n, generator=g) < 0.1] = -0.0
        expected = torch.sort(rank.long(), stable=True).indices
        for key in (sample_idx, -sortable_key(score), predicate.long()):
            expected = expected.index_select(0, torch.sort(key.index_select(0, expected), stable=True).indices)
        assert torch.equal(ap_order(predicate, score, sample_idx, rank), expected), trial
