"""Bootstrap intervals on a long tail: the coverage of the percentile interval of keys averaging over predicates
(simulated populations with a known value: a steep tail where it fails, a moderate tail at PSG-test size where it
holds), the rule that marks the unreliable ones (:func:`~mmsgg_eval.metrics.bootstrap.interval_warnings`) and
how the mark reaches ``last_report``, ``metrics.json``, the log, the report tables and ``compare``."""
import json
import math
import warnings

import numpy as np
import pytest
import torch

from mmsgg_eval.functional.bootstrap import percentile_interval
from mmsgg_eval.functional.limits import NO_HIT
from mmsgg_eval.functional.threads import compute_threads
from mmsgg_eval.metrics import SGMeanRecall, extra_results_of
from mmsgg_eval.metrics.bootstrap import (RARE_GT, Contributions, interval_warnings, per_predicate_block,
                                          predicate_mean, put, recall_block, support_note)
from tests.metrics.test_bootstrap import drawn_rows, seed_batched_replicates

NUM_PREDICATES = 56
TAIL = list(range(2 * NUM_PREDICATES // 3, NUM_PREDICATES))  # the rarest third: the group key mR_tail


def zipf_population(exponent, size=20000, seed=0, shift=0.0):
    """A fixed population of images (1-6 GT relations each) over 56 predicates drawn with Zipf weights
    1 / rank ** ``exponent``; each relation is hit by a fixed model with a probability set by an image difficulty
    shared by its relations, a predicate effect (rarer predicates are harder) and ``shift`` on the tail
    predicates (a second model). Returns relation arrays and the population values of R, mR and mR_tail
    (means over images of per-image recalls; per-predicate recalls averaged over all 56 predicates)."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, NUM_PREDICATES + 1) ** exponent
    sizes = rng.integers(1, 7, size)
    image = np.repeat(np.arange(size), sizes)
    pred = rng.choice(NUM_PREDICATES, image.size, p=weights / weights.sum())
    effect = 0.15 - 0.3 * np.arange(NUM_PREDICATES) / (NUM_PREDICATES - 1) + rng.uniform(-0.15, 0.15, NUM_PREDICATES)
    effect[TAIL] += shift
    difficulty, draw = rng.beta(2, 2, size), rng.random(image.size)
    hit = draw < np.clip(difficulty[image] + effect[pred], 0.02, 0.98)
    cell = image * NUM_PREDICATES + pred
    count = np.bincount(cell, minlength=size * NUM_PREDICATES).reshape(size, NUM_PREDICATES)
    hits = np.bincount(cell, weights=hit, minlength=size * NUM_PREDICATES).reshape(size, NUM_PREDICATES)
    held = count > 0
    per_pred = (np.where(held, hits / np.maximum(count, 1), 0).sum(0) / held.sum(0))
    truth = {'R': 100 * np.mean(np.bincount(image, weights=hit, minlength=size) / sizes),
             'mR': 100 * per_pred.mean(), 'mR_tail': 100 * per_pred[TAIL].mean()}
    return {'pred': pred, 'hit': hit, 'sizes': sizes}, truth


def tail_contributions(hit, pred, unit, num_units, mode='all'):
    """The package's blocks on relation rows: R, mR (56 predicates) and mR_tail (:data:`TAIL`) at K = 1."""
    rank = torch.where(torch.as_tensor(hit), 0, NO_HIT)
    pred, unit = torch.as_tensor(pred).long(), torch.as_tensor(unit).long()
    c = Contributions(torch.arange(num_units))
    put(c, 'R', [1], recall_block(c, rank, unit, [1], 'image'))
    per_pred, presence = per_predicate_block(c, rank, pred, unit, NUM_PREDICATES, [1], 'image')
    put(c, 'mR', [1], predicate_mean(per_pred, presence, range(NUM_PREDICATES), mode))
    put(c, 'mR', [1], predicate_mean(per_pred, presence, TAIL, mode), '_tail')
    return c


def coverage_study(exponent, n, studies=100, replicates=200, mode='all'):
    """``studies`` evaluations of ``n`` images drawn from the population: per key, the share of studies whose
    95% percentile interval (the package's replicates and :func:`percentile_interval`) covers the population
    value, and the share whose interval :func:`interval_warnings` marks (judged on each study's own images)."""
    with compute_threads(1):  # many small ops: one thread (the package's thread policy) is fastest here
        return _coverage_study(exponent, n, studies, replicates, mode)


def _coverage_study(exponent, n, studies, replicates, mode):
    population, truth = zipf_population(exponent)
    draws = np.random.default_rng(1).integers(0, population['sizes'].size, (studies, n))
    rows, unit = drawn_rows(population, draws)
    hit, pred = population['hit'][rows], population['pred'][rows]
    stat = tail_contributions(hit, pred, unit, draws.size, mode)
    values = seed_batched_replicates([stat], studies, replicates)[0]
    keys = {'R': 'R@1', 'mR': 'mR@1', 'mR_tail': 'mR@1_tail'}
    marked = {name: np.zeros(studies, dtype=bool) for name in keys}
    for s in range(studies):  # each study judged on its own images
        notes = interval_warnings(stat, list(keys.values()), units=torch.arange(s * n, (s + 1) * n))
        for name, key in keys.items():
            marked[name][s] = key in notes
    out = {}
    for name, key in keys.items():
        low, high = percentile_interval(values[key].t(), 0.95)
        covered = ((low <= truth[name]) & (truth[name] <= high)).numpy()
        out[name] = {'coverage': float(covered.mean()), 'marked': float(marked[name].mean()),
                     'coverage_unmarked': float(covered[~marked[name]].mean()) if (~marked[name]).any() else math.nan}
    return out


def test_steep_tail_small_evaluation_intervals_miss_and_are_marked():
    """Zipf 1.6, 600 images: the mR intervals cover the population value in far fewer than 95% of the studies
    (predicates absent from an evaluation count 0 in it and in every replicate), and the rule marks them in
    (nearly) every study; R@K's interval covers as it should and is never marked."""
    result = coverage_study(1.6, 600)
    for name in ('mR', 'mR_tail'):
        assert result[name]['coverage'] < 0.8, (name, result[name])
        assert result[name]['marked'] >= 0.95, (name, result[name])
    assert 0.9 <= result['R']['coverage'] <= 0.99 and result['R']['marked'] == 0.0, result['R']


def test_moderate_tail_at_psg_test_size_intervals_hold_and_are_not_marked():
    """Zipf 1.0, 2,186 images (the PSG test split's size): every interval covers in 88-99% of the studies and
    none is marked."""
    result = coverage_study(1.0, 2186)
    for name, row in result.items():
        assert 0.88 <= row['coverage'] <= 0.99 and row['marked'] == 0.0, (name, row)


def test_unmarked_intervals_cover_across_regimes():
    """Between the two regimes (Zipf 1.3 at 600 images): the intervals left unmarked cover the population
    value in at least 88% of the studies."""
    result = coverage_study(1.3, 600)
    for name, row in result.items():
        assert math.isnan(row['coverage_unmarked']) or row['coverage_unmarked'] >= 0.88, (name, row)
    assert 0 < result['mR']['marked'] < 1, result  # the rule decides study by study, on each one's images


def test_support_note_rule():
    counts = torch.tensor([100, 50, 4, 0, 30, 20, 9, 8, 7, 6])  # 2 of 10 below 5: exactly the 20% share
    assert support_note(counts) == f'2 of 10 predicates with < {RARE_GT} GT relations'
    assert support_note(counts[:2]) is None and support_note(torch.tensor([5, 5, 5, 5, 5, 4])) is None
    assert support_note(torch.tensor([3])) == '1 of 1 predicates with < 5 GT relations'
    assert support_note(torch.zeros(0)) is None
    assert support_note(torch.tensor([0, 1, 2] + [9] * 12)) == '3 of 15 predicates with < 5 GT relations'


def test_every_key_averaging_over_predicates_is_marked_by_what_it_averages():
    """The rule follows what a key averages over, not its name: mR, ngmR, group and novel-predicate mean
    recalls and the F / AVG keys combining mR are marked when their predicates are rare; R, ngR, zR, A and
    the novel-subset recalls (means over relations) never are."""
    from tests.metrics.test_bootstrap import GROUPED_META, sg_case
    from mmsgg_eval.metrics.bootstrap import contributions_of
    metric, tables = sg_case(SGMeanRecall, 'predcls', zeroshot_triplets=[(0, 1, 2)], novel_predicates=['p1'],
                             predicate_groups={'head': ['p0', 'p1'], 'tail': ['p3', 'p4']})
    stat = contributions_of(metric, tables)
    gt = stat.gt_support('mR@20')  # the #GT of the report's per-predicate table (evaluated images only)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        table = metric.summarize(tables)['per_predicate']
    assert gt.tolist() == [table[name]['num_gt'] for name in metric.predicates]
    assert torch.equal(stat.gt_support('mR@20_tail'), gt[3:])
    keys = list(stat.point())
    averaging = [k for k in keys if k.split('@')[0] in ('mR', 'ngmR')]
    assert {'mR@20_head', 'mR@20_tail', 'mR@20_novel_pred', 'ngmR@20_novel_pred'} <= set(averaging)
    assert set(averaging) <= set(stat.support)
    # a 30-image random case has every predicate well supported: nothing is marked but zmR, whose predicates'
    # zero-shot relations (one zero-shot triplet) are rare
    marked = interval_warnings(stat, keys)
    assert set(marked) == {k for k in keys if k.startswith('zmR@')} and 'zmR@20' in marked
    # keep only 3 relations of p3 and p4: the tail group and (2 of 5 predicates) mR are marked, head is not
    rel = tables['relations']
    rare = (rel['predicate'] >= 3).nonzero().squeeze(1)
    keep = torch.ones(rel['predicate'].numel(), dtype=torch.bool)
    keep[rare[3:]] = False
    thin = dict(tables, relations={k: v[keep] for k, v in rel.items()})
    stat = contributions_of(metric, thin)
    notes = interval_warnings(stat, keys)
    for k in (20, 50, 100):
        assert notes[f'mR@{k}'] == notes[f'ngmR@{k}'] == f'2 of 5 predicates with < {RARE_GT} GT relations'
        assert notes[f'mR@{k}_tail'] == f'2 of 2 predicates with < {RARE_GT} GT relations'
        assert notes[f'F@{k}'] == notes[f'AVG@{k}'] == f'{notes[f"mR@{k}"]} (in mR@{k})'
        assert f'mR@{k}_head' not in notes
    assert not [k for k in notes if k.split('@')[0] in ('R', 'ngR', 'zR', 'ngzR', 'A')]
    assert GROUPED_META['predicates'] == metric.predicates


@pytest.mark.parametrize('name', ['sgmeanrecall-sgdet-groups', 'sgcls-micro-present', 'predcls-open-vocab',
                                  'sgbench-predcls', 'vlm', 'grounding', 'relclip'])
def test_every_metric_records_what_its_mean_recalls_average_over(name):
    """Every mean over predicates of every metric (mR, ngmR, groups, novel predicates, sgbench's mR@inf, the
    VLM metric's mRecall) carries its predicates' GT counts, equal to the #GT of the metric's per-predicate
    table; F / AVG depend on mR; nothing else is judged."""
    from tests.metrics.test_bootstrap import CASES, quiet_summary
    from mmsgg_eval.metrics.bootstrap import contributions_of
    metric, tables = CASES[name]()
    keys = list(quiet_summary(metric, tables))
    stat = contributions_of(metric, tables)
    means = [k for k in keys if k.split('@')[0] in ('mR', 'ngmR', 'zmR') or k.startswith('mRecall')]
    assert set(means) == set(stat.support) & set(keys)
    assert set(stat.depends) <= {k for k in keys if k.split('@')[0] in ('F', 'AVG')}
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        summary = metric.summarize(tables)
    table = summary.get('per_predicate')
    if table:
        whole = [k for k in means if stat.support[k][1].numel() == len(table) and not k.startswith('zmR')]
        assert whole
        for key in whole:
            assert stat.gt_support(key).tolist() == [table[n]['num_gt'] for n in stat.table_labels], key
        for key in (k for k in means if k.startswith('zmR')):  # its support: the zero-shot relations only
            assert all(z <= t for z, t in zip(stat.gt_support(key).tolist(),
                                              [table[n]['num_gt'] for n in stat.table_labels])), key


def thin_tail_samples(num=40, seed=7, rare=(3, 4)):
    """Random predcls samples (5 predicates) in which each predicate of ``rare`` keeps its first GT relation
    only (the others become p0): 2 of the 5 predicates have < 5 GT relations."""
    from tests.sgg_samples import random_dataset
    samples, _ = random_dataset(seed, num, 'predcls')
    kept = set()
    for s in samples:
        labels = s['gt_relations']['labels']
        for i, label in enumerate(labels.tolist()):
            if label in rare:
                if label in kept:
                    labels[i] = 0
                kept.add(label)
    assert kept == set(rare)
    return samples


def evaluate_thin(rank=0, world_size=1, report_dir=None, bootstrap=dict(samples=100, seed=1)):
    """SGMeanRecall on :func:`thin_tail_samples` (this rank's shard): (keys, extra results, last_report)."""
    from tests.dist_utils import padded_shard
    from tests.metrics.test_bootstrap import GROUPED_META
    samples = thin_tail_samples()
    mine = [samples[i] for i in padded_shard(len(samples), world_size, rank)]
    metric = SGMeanRecall(mode='predcls', bootstrap=bootstrap, report_dir=report_dir)
    metric.dataset_meta = GROUPED_META
    for start in range(0, len(mine), 4):
        metric.process({}, mine[start:start + 4])
    keys = metric.evaluate(len(samples))
    return keys, extra_results_of([metric]), metric.last_report


def test_marked_intervals_reach_last_report_metrics_json_log_and_tables(tmp_path):
    keys, extra, summary = evaluate_thin(report_dir=str(tmp_path))
    plain, _, _ = evaluate_thin(bootstrap=None)
    assert keys == plain  # the returned numbers do not change
    warned, notes = summary['interval_warnings'], summary['interval_notes']
    reason = f'2 of 5 predicates with < {RARE_GT} GT relations'
    for k in (20, 50, 100):
        assert notes[f'mR@{k}'] == notes[f'ngmR@{k}'] == reason
        assert f'F@{k}' in warned and f'AVG@{k}' in warned
        assert not {f'R@{k}', f'ngR@{k}', f'A@{k}'} & set(warned)
    assert set(warned) == set(notes) and set(warned) <= set(summary['intervals'])
    assert extra['predcls/interval_warnings'] == warned and extra['predcls/interval_notes'] == notes
    saved = json.load(open(summary['report_files']['json']))
    assert saved['interval_warnings'] == warned and saved['interval_notes'] == notes
    low, high = summary['intervals']['mR@50']
    value = summary['metrics']['mR@50']
    assert f'mR@50 {value:.2f} [{low:.1f}, {high:.1f}] unreliable: {reason}' in summary['text']
    assert 'unreliable: the interval is too narrow or misplaced when' in summary['text']
    markdown = open(summary['report_files']['markdown']).read()
    assert f'{value:.2f} [{low:.1f}, {high:.1f}] unreliable: {reason} |' in markdown
    r_low, r_high = summary['intervals']['R@50']
    assert f'{summary["metrics"]["R@50"]:.2f} [{r_low:.1f}, {r_high:.1f}] |' in markdown  # R@50: no mark
    latex = open(summary['report_files']['latex']).read()
    assert f'[{low:.1f}, {high:.1f}] unreliable: 2 of 5 predicates with \\textless{{}} 5 GT relations' in latex


def test_two_ranks_mark_the_same_intervals():
    from tests.dist_utils import run_distributed
    single = evaluate_thin()
    assert single[2]['interval_warnings']
    for keys, extra, _ in run_distributed(evaluate_thin, 2):
        assert keys == single[0] and extra == single[1]


def test_compare_marks_the_deltas_of_keys_on_rare_predicates(tmp_path):
    """The paired interval of Δ mR is marked in compare.md / .csv / .json; Δ R is not."""
    import csv
    from mmsgg_eval.compare import main
    from tests.compare.test_compare import write_run
    from tests.sgg_samples import perturbed
    samples = thin_tail_samples()
    write_run(str(tmp_path / 'a'), samples)
    write_run(str(tmp_path / 'b'), perturbed(samples, 3))
    result = main([str(tmp_path / 'a'), str(tmp_path / 'b'), '--samples', '60', '--out-dir', str(tmp_path / 'out')])
    reason = f'2 of 5 predicates with < {RARE_GT} GT relations'
    for m in result['comparisons'][0]['metrics']:
        notes = m['interval_notes']
        assert all(notes[k] == reason for k in m['keys'] if k.split('@')[0] in ('mR', 'ngmR') and '_' not in k)
        assert not [k for k in notes if k.split('@')[0] in ('R', 'ngR', 'A')]
        assert m['interval_warnings'] == list(notes)
    mr = [m for m in result['comparisons'][0]['metrics'] if 'mR@50' in m['keys']][0]
    r = mr['keys']['mR@50']
    markdown = open(result['outputs']['markdown']).read()
    assert f'[{r["low"]:.2f}, {r["high"]:.2f}] unreliable: {reason} |' in markdown
    rows = list(csv.DictReader(open(result['outputs']['csv'])))
    assert {row['key']: row['unreliable'] for row in rows if row['metric'] == mr['metric']}['mR@50'] == reason
    assert all(not row['unreliable'] for row in rows if row['key'].startswith('R@'))
    assert json.load(open(result['outputs']['json']))['comparisons'][0]['metrics'][0]['interval_warnings'] \
        == result['comparisons'][0]['metrics'][0]['interval_warnings']


#: the regimes of the coverage table in docs/metrics.md: (Zipf exponent, images, mr_average)
REGIMES = ((1.6, 300, 'all'), (1.6, 600, 'all'), (1.6, 1000, 'all'), (1.6, 2186, 'all'), (1.3, 600, 'all'),
           (1.0, 600, 'all'), (1.0, 2186, 'all'), (1.6, 600, 'present'))


def paired_delta_study(exponent, n, studies, replicates, shift=0.10):
    """Compare's paired Δ (model B = the model with ``shift`` on the tail predicates, on the same images and
    draws): per key, the coverage of the true Δ and the share of studies whose Δ interval is marked."""
    population_a, truth_a = zipf_population(exponent)
    population_b, truth_b = zipf_population(exponent, shift=shift)
    draws = np.random.default_rng(1).integers(0, population_a['sizes'].size, (studies, n))
    rows, unit = drawn_rows(population_a, draws)
    stats = [tail_contributions(p['hit'][rows], p['pred'][rows], unit, draws.size) for p in (population_a,
                                                                                            population_b)]
    values_a, values_b = seed_batched_replicates(stats, studies, replicates)
    out = {}
    for name, key in (('R', 'R@1'), ('mR', 'mR@1'), ('mR_tail', 'mR@1_tail')):
        truth = truth_b[name] - truth_a[name]
        low, high = percentile_interval((values_b[key] - values_a[key]).t(), 0.95)
        marked = [key in interval_warnings(stats[0], [key], torch.arange(s * n, (s + 1) * n)) for s in range(studies)]
        out[name] = {'truth': truth, 'coverage': float(((low <= truth) & (truth <= high)).double().mean()),
                     'marked': float(np.mean(marked))}
    return out


def main(argv=None):
    """``python -m tests.metrics.test_bootstrap_tail [--studies 400] [--replicates 1000]``: the coverage table of
    docs/metrics.md (about 5 minutes on 2 cores)."""
    import argparse
    parser = argparse.ArgumentParser(prog='python -m tests.metrics.test_bootstrap_tail')
    parser.add_argument('--studies', type=int, default=400)
    parser.add_argument('--replicates', type=int, default=1000)
    args = parser.parse_args(argv)
    with compute_threads(1):
        for exponent, n, mode in REGIMES:
            result = _coverage_study(exponent, n, args.studies, args.replicates, mode)
            print(f'Zipf {exponent}, {n} images, {mode}: ' + '; '.join(
                f'{k} coverage {v["coverage"]:.3f} marked {v["marked"]:.2f} unmarked coverage '
                f'{v["coverage_unmarked"]:.3f}' for k, v in result.items()), flush=True)
        for exponent, n in ((1.6, 600), (1.0, 2186)):
            result = paired_delta_study(exponent, n, args.studies, args.replicates)
            print(f'paired delta, Zipf {exponent}, {n} images: ' + '; '.join(
                f'{k} (truth {v["truth"]:+.2f}) coverage {v["coverage"]:.3f} marked {v["marked"]:.2f}'
                for k, v in result.items()), flush=True)


if __name__ == '__main__':
    main()
