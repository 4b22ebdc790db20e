"""Where recall is lost (error_analysis=True), relative recall (R@rel / mR@rel) and PySGG's stage-wise recall:
differential tests against the loop reference (tests/reference_error_causes.py), the identity R@K + causes = 100,
hand-built cases for each cause and the many-to-many traps, world sizes 1 / 2 / 3, kernels on / off."""
import itertools

import pytest
import torch

from mmsgg_eval.functional import error_causes
from mmsgg_eval.metrics import SGMeanRecall, SGRecall
from tests.dist_utils import padded_shard, run_distributed
from tests.reference_error_causes import CAUSES, reference_causes, reference_stagewise
from tests.reference_sgg import reference_metrics
from mmsgg_eval.testing.random_samples import add_box_shaped_masks
from tests.sgg_samples import META, NUM_CLASSES, NUM_PREDICATES, random_dataset, scene_graph_keys



def run(samples, batch_size=4, classes=(SGRecall, SGMeanRecall), missing=None, **kwargs):
    """Every key (prefix removed) of SGRecall + SGMeanRecall over ``samples`` (those flagged in ``missing``
    marked ``prediction_missing``) and the last metric."""
    if missing is not None:
        samples = [dict(s, prediction_missing=True) if m else s for s, m in zip(samples, missing)]
    return scene_graph_keys(samples, batch_size, classes, **kwargs)


def identity_total(keys, k):
    """R@K + every miss@K_{cause} (predicate_ng excluded: a subset of predicate)."""
    return keys[f'R@{k}'] + sum(v for name, v in keys.items()
                                if name.startswith(f'miss@{k}_') and not name.endswith('_predicate_ng'))


CASES = list(itertools.product(['predcls', 'sgcls', 'sgdet'], ['bg', 'nobg', 'single'],
                               [dict(), dict(recall_average='micro'), dict(skip_empty_predictions=False),
                                dict(rank='given'), dict(protocol='r1sgg')]))


@pytest.mark.parametrize('mode,score_format,option', CASES)
def test_causes_equal_the_loop_reference_and_sum_to_100(mode, score_format, option, score_kernels):
    ks = (1, 3, 20)
    for seed in range(2):
        samples, refs = random_dataset(seed * 31 + len(mode), 25, mode, score_format=score_format,
                                       num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
        plus_one = bool(seed % 2) if 'protocol' not in option else False
        kwargs = dict(mode=mode, topk=ks, ng_topk=7, error_analysis=True, **option)
        if 'protocol' not in option:
            kwargs['iou_plus_one'] = plus_one
        ours, _ = run(samples, batch_size=1 + seed * 4, **kwargs)
        protocol = dict(skip_empty=False, recall_average='micro', rank='given') if 'protocol' in option else {}
        settings = dict(skip_empty=option.get('skip_empty_predictions', True),
                        recall_average=option.get('recall_average', 'image'), rank=option.get('rank', 'score'))
        settings.update(protocol)
        ref = reference_causes(refs, NUM_PREDICATES, mode, ks, plus_one=plus_one, ng_topk=7, **settings)
        base = reference_metrics(refs, NUM_PREDICATES, mode, ks=ks, plus_one=plus_one, ng_topk=7,
                                 mr_average='present' if 'protocol' in option else 'all',
                                 recall_average=settings['recall_average'], skip_empty=settings['skip_empty'],
                                 rank=settings['rank'])
        for k in ks:
            assert ours[f'R@{k}'] == pytest.approx(base[f'R@{k}'], abs=1e-9)
            assert ref[f'hit@{k}'] == pytest.approx(ours[f'R@{k}'], abs=1e-9)
            for cause in CAUSES + ('predicate_ng',):
                key = f'miss@{k}_{cause}'
                if cause == 'no_prediction' and key not in ours:  # only where it can occur
                    assert ref[key] == 0
                    continue
                assert ours[key] == pytest.approx(ref[key], abs=1e-9), (key, ours[key], ref[key])
            assert identity_total(ours, k) == pytest.approx(100.0, abs=1e-9) or ours['R@1'] == 0 and \
                identity_total(ours, k) == 0  # nothing evaluated: every key is 0
        assert ours['R@rel'] == pytest.approx(ref['R@rel'], abs=1e-9)
        if 'protocol' not in option:  # r1sgg divides mR by the predicates present
            assert ours['mR@rel'] == pytest.approx(ref['mR@rel'], abs=1e-9)


@pytest.mark.parametrize('mode', ['predcls', 'sgcls', 'sgdet'])
def test_relative_recall_is_always_on_and_leaves_every_other_key_unchanged(mode, score_kernels):
    samples, refs = random_dataset(7, 30, mode, num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    off, metric_off = run(samples, mode=mode)
    on, metric_on = run(samples, mode=mode, error_analysis=True)
    assert 'R@rel' in off and 'mR@rel' in off
    assert not any(k.startswith(('miss@', 'stage_')) for k in off)
    assert 'cause' not in metric_off.accumulator.schema['relations']  # nothing computed when off
    for key, value in off.items():
        assert on[key] == value, key  # bit-identical
    ref = reference_causes(refs, NUM_PREDICATES, mode, (20,))
    assert off['R@rel'] == pytest.approx(ref['R@rel'], abs=1e-9)
    assert off['mR@rel'] == pytest.approx(ref['mR@rel'], abs=1e-9)


def test_relative_recall_reads_beyond_the_largest_k():
    """An image with more GT relations than max(topk): its R@rel needs list positions beyond K."""
    samples, refs = random_dataset(3, 20, 'predcls', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    ours, _ = run(samples, mode='predcls', topk=(1, 2))
    ref = reference_causes(refs, NUM_PREDICATES, 'predcls', (1,))
    assert max(len(r['gt_rels']) for r in refs) > 2
    assert ours['R@rel'] == pytest.approx(ref['R@rel'], abs=1e-9)
    assert ours['R@rel'] > ours['R@2']


@pytest.mark.parametrize('mode', ['predcls', 'sgcls', 'sgdet'])
def test_stagewise_recall_equals_the_loop_reference(mode, score_kernels):
    ks = (1, 3, 20)
    for seed, plus_one in ((0, True), (1, False)):
        samples, refs = random_dataset(seed + 50, 25, mode, num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
        ours, _ = run(samples, classes=(SGRecall,), mode=mode, topk=ks, error_analysis=True, iou_plus_one=plus_one)
        ref = reference_stagewise(refs, NUM_PREDICATES, mode, ks, 0.5, plus_one)
        assert set(ref) == {k for k in ours if k.startswith('stage_')}
        for key, value in ref.items():
            assert ours[key] == pytest.approx(value, abs=1e-9), key


# ------------------------------------------------------------------------------------------ hand-built cases
BOX = {'a': [0, 0, 10, 10], 'b': [20, 20, 30, 30], 'c': [40, 40, 50, 50], 'far': [80, 80, 90, 90]}


def image(idx, gt, rels, dets, pairs, scores):
    """An SGDet sample: ``gt`` [(box, class)], ``rels`` [(s, o, p)], ``dets`` [(box, class, score)], ``pairs``
    [(s, o)] with score rows [P + 1] (column 0: no relation)."""
    return dict(
        sample_idx=idx,
        gt_instances=dict(bboxes=torch.tensor([BOX[b] for b, _ in gt], dtype=torch.float32).reshape(-1, 4),
                          labels=torch.tensor([c for _, c in gt], dtype=torch.long)),
        gt_relations=dict(pair_idxs=torch.tensor([r[:2] for r in rels], dtype=torch.long).reshape(-1, 2),
                          labels=torch.tensor([r[2] for r in rels], dtype=torch.long)),
        pred_instances=dict(bboxes=torch.tensor([BOX[b] for b, _, _ in dets], dtype=torch.float32).reshape(-1, 4),
                            labels=torch.tensor([c for _, c, _ in dets], dtype=torch.long),
                            scores=torch.tensor([s for _, _, s in dets], dtype=torch.float32)),
        pred_relations=dict(pair_idxs=torch.tensor(pairs, dtype=torch.long).reshape(-1, 2),
                            scores=torch.tensor(scores, dtype=torch.float32).reshape(-1, NUM_PREDICATES + 1)))


def row(top, second=None):
    """A score row whose best predicate is ``top`` (0.6) and second ``second`` (0.3)."""
    values = [0.0] + [0.01] * NUM_PREDICATES
    values[1 + top] = 0.6
    if second is not None:
        values[1 + second] = 0.3
    return values


GT = [('a', 0), ('b', 1)]
HAND_CASES = {
    'hit': image(0, GT, [(0, 1, 2)], [('a', 0, 1.0), ('b', 1, 1.0)], [(0, 1)], [row(2)]),
    'subject_loc': image(0, GT, [(0, 1, 2)], [('far', 0, 1.0), ('b', 1, 1.0)], [(0, 1)], [row(2)]),
    # a wrong-class subject and an unfound object: object_loc
    'object_loc': image(0, GT, [(0, 1, 2)], [('a', 3, 1.0), ('far', 1, 1.0)], [(0, 1)], [row(2)]),
    'subject_cls': image(0, GT, [(0, 1, 2)], [('a', 3, 1.0), ('b', 1, 1.0)], [(0, 1)], [row(2)]),
    'object_cls': image(0, GT, [(0, 1, 2)], [('a', 0, 1.0), ('b', 3, 1.0)], [(0, 1)], [row(2)]),
    # both matched, but the only scored pair joins a wrong-class detection of the subject to the object
    'pair': image(0, GT, [(0, 1, 2)], [('a', 0, 1.0), ('a', 3, 1.0), ('b', 1, 1.0)], [(1, 2), (2, 0)],
                  [row(2), row(2)]),
    'predicate': image(0, GT, [(0, 1, 2)], [('a', 0, 1.0), ('b', 1, 1.0)], [(0, 1)], [row(4)]),
    # the right triplet is listed second; K = 1
    'rank': image(0, GT, [(0, 1, 2)], [('a', 0, 0.5), ('b', 1, 0.5), ('c', 2, 1.0), ('far', 3, 1.0)],
                  [(0, 1), (2, 3)], [row(2), row(1)]),
}


@pytest.mark.parametrize('cause', sorted(HAND_CASES))
def test_each_hand_built_case_gives_its_cause(cause, score_kernels):
    keys, _ = run([HAND_CASES[cause]], classes=(SGRecall,), mode='sgdet', topk=(1,), error_analysis=True)
    expected = {f'miss@1_{c}': 0.0 for c in CAUSES if c != 'no_prediction'}
    if cause == 'hit':
        assert keys['R@1'] == 100.0
    else:
        expected[f'miss@1_{cause}'] = 100.0
        assert keys['R@1'] == 0.0
    assert {k: v for k, v in keys.items() if k in expected} == expected


def test_predicate_ng_is_the_right_predicate_second():
    second = image(0, GT, [(0, 1, 2)], [('a', 0, 1.0), ('b', 1, 1.0)], [(0, 1)], [row(4, second=2)])
    third = image(1, GT, [(0, 1, 2)], [('a', 0, 1.0), ('b', 1, 1.0)], [(0, 1)], [row(4)])
    keys, _ = run([second, third], classes=(SGRecall,), mode='sgdet', topk=(1, 2), error_analysis=True)
    assert keys['miss@1_predicate'] == keys['miss@2_predicate'] == 100.0
    assert keys['miss@1_predicate_ng'] == 0.0  # the NGC top 1 is predicate 4
    assert keys['miss@2_predicate_ng'] == 50.0  # the first image's predicate 2 is the NGC second entry


def test_no_prediction_counts_images_without_pairs_only_when_they_count():
    empty = image(1, GT, [(0, 1, 2), (1, 0, 3)], [('a', 0, 1.0), ('b', 1, 1.0)], [], [])
    samples = [HAND_CASES['hit'], empty]
    keys, _ = run(samples, classes=(SGRecall,), mode='sgdet', topk=(1,), error_analysis=True)
    assert 'miss@1_no_prediction' not in keys and keys['R@1'] == 100.0  # skipped: legacy
    keys, _ = run(samples, classes=(SGRecall,), mode='sgdet', topk=(1,), error_analysis=True,
                  skip_empty_predictions=False)
    assert keys['R@1'] == 50.0 and keys['miss@1_no_prediction'] == 50.0
    assert keys['miss@1_pair'] == 0.0
    keys, _ = run([HAND_CASES['hit'], dict(HAND_CASES['predicate'], sample_idx=1)], classes=(SGRecall,), mode='sgdet',
                  topk=(1,),
                  error_analysis=True, missing=[False, True])
    assert keys['miss@1_no_prediction'] == 50.0 and keys['miss@1_predicate'] == 0.0
    assert keys['stage_inst_loc'] == pytest.approx(50.0, abs=1e-3)  # a missing prediction detects nothing


def test_many_to_many_traps():
    """A GT object matched by several detections (one of the wrong class), two GT relations on one pair, and a
    duplicated GT relation: each relation gets its own outcome, duplicates count twice as in R@K."""
    dets = [('a', 0, 1.0), ('a', 3, 1.0), ('b', 1, 1.0)]
    # the pair of the right-class detection is scored with predicate 2; the wrong-class one with predicate 1
    sample = image(0, GT, [(0, 1, 2), (0, 1, 1), (0, 1, 2), (1, 0, 0)], dets, [(1, 2), (0, 2)],
                   [row(1), row(2)])
    keys, _ = run([sample], classes=(SGRecall,), mode='sgdet', topk=(1, 2), error_analysis=True)
    # (0,1,2) twice: hit at rank 1 (second entry); (0,1,1): the wrong-class pair does not count -> predicate;
    # (1,0,0): no pair joins them in that direction -> pair
    assert keys['R@1'] == 0.0 and keys['miss@1_rank'] == 50.0
    assert keys['miss@1_predicate'] == 25.0 and keys['miss@1_pair'] == 25.0
    assert keys['R@2'] == 50.0 and keys['miss@2_rank'] == 0.0
    assert identity_total(keys, 1) == identity_total(keys, 2) == 100.0


def test_phrdet_and_bad_option_are_refused():
    with pytest.raises(ValueError, match='phrdet'):
        SGRecall(mode='phrdet', error_analysis=True)
    with pytest.raises(ValueError, match='error_analysis'):
        SGMeanRecall(mode='sgdet', error_analysis='yes')
    SGRecall(mode='phrdet')  # off: fine


def test_per_predicate_table_sums_to_100_and_reaches_metrics_json(tmp_path):
    samples, _ = random_dataset(11, 30, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    metric = SGMeanRecall(mode='sgdet', topk=(5, 20), error_analysis=True, report_dir=str(tmp_path))
    metric.dataset_meta = META
    metric.process({}, samples)
    keys = metric.evaluate(len(samples))
    table = metric.last_report['per_predicate_causes']
    assert table and all(row['num_gt'] > 0 for row in table.values())
    per_pred = metric.last_report['per_predicate']
    for name, row in table.items():
        for k in (5, 20):
            assert row[f'R@{k}'] == pytest.approx(per_pred[name][f'R@{k}'], abs=1e-9)
            total = row[f'R@{k}'] + sum(v for c, v in row.items() if c.startswith(f'miss@{k}_'))
            assert total == pytest.approx(100.0, abs=1e-9)
    assert 'sgdet/per_predicate_causes' in metric.extra_results()
    import json
    saved = json.loads((tmp_path / 'sgdet.metrics.json').read_text())
    assert saved['per_predicate_causes'] == json.loads(json.dumps(table))
    assert 'Where recall@20 is lost' in (tmp_path / 'sgdet.tables.md').read_text() or \
        'Where recall@K is lost' in (tmp_path / 'sgdet.tables.md').read_text()
    assert not any(k.split('/')[1].startswith('miss@') for k in keys)  # SGMeanRecall returns no miss keys


def test_per_predicate_table_is_built_once_when_the_summary_is_read(monkeypatch):
    """The keys do not build the per-predicate cause table; reading the summary (either metric of the pair,
    extra_results) builds it once, equal to a fresh evaluation's."""
    calls = []
    table_of = error_causes.per_predicate_cause_shares
    monkeypatch.setattr(error_causes, 'per_predicate_cause_shares',
                        lambda *a, **k: calls.append(1) or table_of(*a, **k))
    samples, _ = random_dataset(5, 12, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    metrics = [cls(mode='sgdet', topk=(5, 20), error_analysis=True) for cls in (SGRecall, SGMeanRecall)]
    for m in metrics:
        m.dataset_meta = META
        m.process({}, samples)
    keys = [m.evaluate(len(samples)) for m in metrics]
    assert calls == [] and any('miss@5_pair' in k for k in keys[0])
    tables = [m.last_report['per_predicate_causes'] for m in metrics]
    assert calls == [1] and tables[0] and tables[0] is tables[1]
    assert metrics[1].extra_results()['sgdet/per_predicate_causes'] is tables[0] and calls == [1]
    fresh = SGMeanRecall(mode='sgdet', topk=(5, 20), error_analysis=True)
    fresh.dataset_meta = META
    fresh.process({}, samples)
    fresh.evaluate(len(samples))
    assert fresh.extra_results()['sgdet/per_predicate_causes'] == tables[0]


def test_logged_line_names_the_causes():
    keys, metric = run([HAND_CASES['object_loc'], dict(HAND_CASES['hit'], sample_idx=1)], classes=(SGRecall,), mode='sgdet',
                       topk=(1,), error_analysis=True)
    text = metric.format_report(metric.last_report, keys)
    assert 'R@1 50.0 | lost: subject_loc 0.0, object_loc 50.0, subject_cls 0.0' in text


def test_mask_matching_gives_the_box_causes():
    samples, _ = random_dataset(9, 12, 'sgdet', int_boxes=True, max_objects=4)
    add_box_shaped_masks(samples)
    box, _ = run(samples, classes=(SGRecall,), mode='sgdet', iou_plus_one=True, error_analysis=True)
    mask, _ = run(samples, classes=(SGRecall,), mode='sgdet', match='mask', error_analysis=True)
    for key, value in box.items():
        if key.startswith(('miss@', 'stage_', 'R@')):
            assert mask[key] == pytest.approx(value, abs=1e-9), key


def test_miss_causes_takes_the_first_that_applies():
    t, f = True, False
    flags = torch.tensor([  # sub_loc, obj_loc, sub_match, obj_match, pair, in_list
        [f, f, f, f, f, f], [t, f, f, f, f, f], [t, t, f, f, f, f], [t, t, t, f, f, f], [t, t, t, t, f, f],
        [t, t, t, t, t, f], [t, t, t, t, t, t], [f, f, t, t, t, t]])
    codes = error_causes.miss_causes(*flags.T[:, None, :])
    assert codes[0].tolist() == [error_causes.SUBJECT_LOC, error_causes.OBJECT_LOC, error_causes.SUBJECT_CLS,
                                 error_causes.OBJECT_CLS, error_causes.PAIR, error_causes.PREDICATE,
                                 error_causes.RANK, error_causes.RANK]  # a match overlaps, whatever the rounding


LENGTH = 23


def evaluate_shard(rank, world_size, mode, batch_size):
    samples, _ = random_dataset(44, LENGTH, mode, num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    mine = [samples[i] for i in padded_shard(LENGTH, world_size, rank)]
    out = {}
    for cls in (SGRecall, SGMeanRecall):
        metric = cls(mode=mode, topk=(2, 20), error_analysis=True, skip_empty_predictions=False)
        metric.dataset_meta = META
        for start in range(0, len(mine), batch_size):
            metric.process({}, mine[start:start + batch_size])
        out.update(metric.evaluate(LENGTH))
        out[f'{cls.__name__}/table'] = metric.last_report['per_predicate_causes']
    return out


@pytest.mark.parametrize('world_size,mode', [(2, 'sgdet'), (3, 'sgcls')])
def test_distributed_equals_single_process(world_size, mode):
    single = evaluate_shard(0, 1, mode, 4)
    assert any(k.startswith(f'{mode}/miss@') for k in single)
    for res in run_distributed(evaluate_shard, world_size, mode, 3):
        assert res == single  # exact, every rank


# ------------------------------------------------------------------------------------------ views
def test_bootstrap_intervals_cover_the_new_keys():
    samples, _ = random_dataset(12, 30, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter('error', UserWarning)  # a key without a matching decomposition warns
        metric = SGRecall(mode='sgdet', topk=(5, 20), error_analysis=True, skip_empty_predictions=False,
                          bootstrap=dict(samples=50, seed=1))
        metric.dataset_meta = META
        metric.process({}, samples)
        keys = metric.evaluate(len(samples))
    intervals = metric.last_report['intervals']
    for key in keys:
        name = key.split('/', 1)[1]
        if name.startswith(('miss@', 'stage_', 'R@rel')):
            assert name in intervals, name
            low, high = intervals[name]
            assert low <= keys[key] + 1e-9 and keys[key] <= high + 1e-9 or low == high, (name, low, high)
    mean = SGMeanRecall(mode='sgdet', topk=(5, 20), error_analysis=True, bootstrap=dict(samples=20, seed=1))
    mean.dataset_meta = META
    mean.process({}, samples)
    mean.evaluate(len(samples))
    assert 'mR@rel' in mean.last_report['intervals']


def test_per_image_records_and_html_summary_give_the_metric_numbers(tmp_path):
    from mmsgg_eval.analysis.browse import cause_section, cause_summary, cause_table
    from mmsgg_eval.metrics.per_image import read_per_image
    samples, _ = random_dataset(13, 30, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    path = str(tmp_path / 'per_image.jsonl')
    keys, metric = run(samples, classes=(SGRecall,), mode='sgdet', topk=(5, 20), error_analysis=True,
                       skip_empty_predictions=False, per_image_out=path)
    records = read_per_image(path)
    causes = cause_summary(records, META['predicates'], (5, 20), 'image')
    for k in (5, 20):  # the summary's own functions (cause_shares): the same numbers, bit for bit
        assert causes['overall'][k]['hit'] == pytest.approx(keys[f'R@{k}'], abs=1e-9)
        for cause in CAUSES:
            assert causes['overall'][k][cause] == keys[f'miss@{k}_{cause}'], cause
    table = metric.last_report['per_predicate_causes']
    assert set(causes['per_predicate']) == set(table)
    for p, row in table.items():
        for k in (5, 20):
            assert causes['per_predicate'][p][k]['hit'] == row[f'R@{k}'], p
            for cause in CAUSES:
                assert causes['per_predicate'][p][k][cause] == row[f'miss@{k}_{cause}'], (p, k, cause)
    missed = [g for r in records for g in r['gt_relations'] if g['outcome']['20'] != 'hit']
    assert missed and all('evidence' in g for g in missed)
    located = [g for g in missed if g['outcome']['20'] == 'subject_cls']
    for g in located:  # overlapped by a detection of another class: the evidence shows it
        assert g['evidence']['subject']['best_iou'] >= 0.5 and g['evidence']['subject']['label'] != g['subject_label']
    html = cause_section({'causes': causes}, 20)
    assert 'Where recall@20 is lost' in html and 'data-cause="subject_loc"' in html
    some = next(r for r in records if any(g['outcome']['20'] != 'hit' for g in r['gt_relations']))
    assert 'Why missed at 20' in cause_table(some, 20)
    assert cause_summary([dict(r, gt_relations=[{k: v for k, v in g.items() if k != 'outcome'}
                                                for g in r['gt_relations']]) for r in records],
                         META['predicates'], (20,)) is None  # records without an error analysis


def test_benchmark_job_list_adds_the_error_analysis_job():
    from mmsgg_eval.benchmarks import report, runners
    from tests.tools.test_benchmark_runners import _tool
    tool = _tool()
    args = tool.build_parser().parse_args(['--workload', 'sgdet-variable', '--error-analysis', '--no-peers'])
    assert tool.job_list(args, ['cpu']) == [('ours', 'sgdet-variable', 'cpu'), ('ours+errors', 'sgdet-variable', 'cpu')]
    assert 'ours+errors' in runners.RUNNERS
    jobs = tool.job_list(args, ['cpu'])
    best = {jobs[0]: dict(images_per_s=10.0), jobs[1]: dict(images_per_s=9.0)}
    assert report.summarize(jobs, best)['ratios']['ours_vs_ours+errors_sgdet-variable_cpu'] == pytest.approx(10 / 9)


def test_compiled_pair_flags_equal_the_torch_path(monkeypatch):
    """The compiled one-pass kernels (box_overlap_flags, relation_pair_flags, first_hit_ranks on the listed ends)
    give the causes, stage-wise ranks and evidence of the torch path (the IoU matrix, the first-hit ranks of the
    list of every pair), also on padded pairs, repeated pairs and images without pairs."""
    from mmsgg_eval.functional import compiled
    from mmsgg_eval.functional.first_hits import _first_hit_ranker, scene_graph_ranks
    from mmsgg_eval.structures import collate_scene_graphs
    if not compiled.built():
        pytest.skip('the compiled kernels are not built')
    samples, _ = random_dataset(77, 40, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    batch = collate_scene_graphs(samples, 'sgdet', NUM_CLASSES, NUM_PREDICATES, ranking=(20, 7))
    first_hits, _, _ = _first_hit_ranker(batch, 0.5, True, False, False)
    assert callable(getattr(first_hits, 'pair_flags', None))
    kernels, used = compiled.kernels(), []
    names = ('box_match_overlap_flags', 'box_relation_end_bits', 'box_overlap_flags', 'relation_pair_flags',
             'stage_first_hit_ranks')
    for name in names:  # the overlaps from the matching's own pass, the stage ranks in one pass: no IoU tensor
        monkeypatch.setattr(kernels, name, lambda *a, _f=getattr(kernels, name), _n=name: used.append(_n) or _f(*a))
    on = scene_graph_ranks(batch, 20, 7, 0.5, True, analysis=error_causes.error_analysis_rows)
    assert used == ['box_match_overlap_flags', 'relation_pair_flags', 'stage_first_hit_ranks']
    # the kernels before the one-pass overlaps (separate matching and overlap passes): the same outputs
    monkeypatch.delattr(kernels, 'box_match_overlap_flags')
    used.clear()
    separate = scene_graph_ranks(batch, 20, 7, 0.5, True, analysis=error_causes.error_analysis_rows)
    assert used == ['box_relation_end_bits', 'box_overlap_flags', 'relation_pair_flags', 'stage_first_hit_ranks']
    assert all(torch.equal(on[name], separate[name]) for name in on)
    monkeypatch.undo()
    # the ranking pass's 2-byte pair codes (what the metrics ask for with error_analysis=True): the pair scan reads
    # them instead of the int64 pair list
    given = []
    monkeypatch.setattr(kernels, 'relation_pair_flags', lambda *a, _f=kernels.relation_pair_flags:
                        given.append(a[-1]) or _f(*a))
    batch = collate_scene_graphs(samples, 'sgdet', NUM_CLASSES, NUM_PREDICATES, ranking=(20, 7, True))
    stage_calls = []
    monkeypatch.setattr(kernels, 'stage_first_hit_ranks', lambda *a, _f=kernels.stage_first_hit_ranks:
                        stage_calls.append(1) or _f(*a))
    with_codes = scene_graph_ranks(batch, 20, 7, 0.5, True, analysis=error_causes.error_analysis_rows)
    assert len(given) == 1 and given[0] is not None and given[0].dtype == torch.int16
    assert stage_calls == [1]  # the list's own ends: the three stage ranks in one pass
    assert all(torch.equal(on[name], with_codes[name]) for name in on)
    monkeypatch.delattr(kernels, 'stage_first_hit_ranks')  # three first_hit_ranks passes: the same ranks
    three = scene_graph_ranks(batch, 20, 7, 0.5, True, analysis=error_causes.error_analysis_rows)
    assert all(torch.equal(three[name], with_codes[name]) for name in on)
    monkeypatch.undo()
    with compiled.disabled():
        batch = collate_scene_graphs(samples, 'sgdet', NUM_CLASSES, NUM_PREDICATES)
        off = scene_graph_ranks(batch, 20, 7, 0.5, True, analysis=error_causes.error_analysis_rows)
    valid = batch.gt_valid
    names = ('cause', 'rank_pair_loc', 'rank_pair_det', 'rank_pred_cls', 'gc', 'subject_iou', 'object_iou',
             'subject_det_label', 'object_det_label', 'subject_det_score', 'object_det_score')
    for name in names:
        assert torch.equal(on[name][valid], off[name][valid]), name
    assert len(set(on['cause'][valid].tolist())) >= 4  # several causes occur


def test_compare_gives_the_change_of_each_cause_with_paired_intervals(tmp_path):
    """States saved with error_analysis=True: python -m mmsgg_eval.compare reports every miss@K_{cause} and R@rel
    change, and the changes of R@K and of the causes sum to 0 (the identity holds in both runs)."""
    from mmsgg_eval.compare import compare_runs, load_run
    from tests.sgg_samples import perturbed
    samples, _ = random_dataset(8, 24, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    for name, run_samples in (('a', samples), ('b', perturbed(samples, 1))):
        for cls in (SGRecall, SGMeanRecall):
            metric = cls(mode='sgdet', topk=(5, 20), error_analysis=True,
                         save_state=str(tmp_path / name / f'{cls.__name__}.state'))
            metric.dataset_meta = META
            metric.process({}, run_samples)
            metric.evaluate(len(run_samples))
    result = compare_runs([load_run(str(tmp_path / 'a')), load_run(str(tmp_path / 'b'))], ['a', 'b'], samples=100)
    keys = {k: r for m in result['comparisons'][0]['metrics'] for k, r in m['keys'].items()}
    for k in (5, 20):
        assert f'miss@{k}_predicate' in keys and f'miss@{k}_subject_loc' in keys
        total = keys[f'R@{k}']['delta'] + sum(r['delta'] for name, r in keys.items()
                                              if name.startswith(f'miss@{k}_') and not name.endswith('predicate_ng'))
        assert total == pytest.approx(0.0, abs=1e-9)
        assert keys[f'miss@{k}_subject_loc']['delta'] == 0  # the same detections in both runs
    assert 'R@rel' in keys and 'mR@rel' in keys
