"""Bootstrap intervals (``bootstrap=`` of the row metrics): every key's per-image decomposition against the
metric's own summary of resampled tables (a loop-based reference), a hand-enumerated 3-image case, the
sampler, determinism, world sizes, reports, and the coverage of the intervals on simulated data."""
import itertools
import math
import random
import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch

from mmsgg_eval.functional.bootstrap import (holm_adjust, paired_p_value, percentile_interval, resample_counts,
                                             weighted_totals)
from mmsgg_eval.functional.limits import NO_HIT
from mmsgg_eval.metrics import SGMeanRecall, SGRecall, extra_results_of
from mmsgg_eval.metrics.bootstrap import (Contributions, bootstrap_options, contributions_of, per_predicate_block,
                                          predicate_mean, recall_block)
from mmsgg_eval.metrics.grounding import GroundingPr
from mmsgg_eval.metrics.sgbench import SGBenchMetric
from mmsgg_eval.metrics.vlm import VLMSceneGraphMetric
from tests.sgg_samples import random_dataset
from tests.metrics.scene_graph.test_recall import META

GROUPED_META = dict(META, predicate_counts=[50, 40, 30, 20, 10])


def reduced_tables(metric, samples, size=None):
    """The reduced tables of ``metric`` fed ``samples`` (one process), without evaluate()."""
    for start in range(0, len(samples), 5):
        metric.process({}, samples[start:start + 5])
    metric.flush()
    return metric.accumulator.reduce_to_cpu(size or len(samples), metric.name)


def resampled_tables(tables, units, counts):
    """Loop-based reference of a resample: the rows of unit u copied counts[u] times; copy r of unit u is the
    new sample ``first[u] + r`` (ascending in unit order, so the tables stay in canonical order)."""
    position = {int(s): i for i, s in enumerate(units.tolist())}
    first = [0] * len(counts)
    for u in range(1, len(counts)):
        first[u] = first[u - 1] + int(counts[u - 1])
    out = {}
    for name, cols in tables.items():
        picks = []
        for i, s in enumerate(cols['sample_idx'].tolist()):
            u = position[int(s)]
            picks += [(first[u] + r, i) for r in range(int(counts[u]))]
        picks.sort(key=lambda p: p[0])  # stable: a sample's rows keep their order
        rows = torch.tensor([i for _, i in picks], dtype=torch.long)
        out[name] = {c: v.index_select(0, rows) for c, v in cols.items()}
        out[name]['sample_idx'] = torch.tensor([n for n, _ in picks], dtype=cols['sample_idx'].dtype)
    return out


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def sg_case(cls, mode, seed=3, meta=GROUPED_META, **kwargs):
    samples, _ = random_dataset(seed, 30, mode)
    metric = cls(mode=mode, **kwargs)
    metric.dataset_meta = meta
    return metric, reduced_tables(metric, samples)


def vlm_case():
    from tests.metrics.test_vlm import CORPUS, GT, META as VLM_META
    metric = VLMSceneGraphMetric(topk=(1,), iou_plus_one=False)
    metric.dataset_meta = VLM_META
    texts = [text for _, text, _ in CORPUS[:12]]
    return metric, reduced_tables(metric, [dict(GT, sample_idx=i, pred_text=t) for i, t in enumerate(texts)])


def grounding_case():
    from tests.sgg_samples import grounding_sample, random_grounding_case
    rng = random.Random(5)
    metric = GroundingPr()
    samples = [grounding_sample(random_grounding_case(rng), i, torch.float64) for i in range(40)]
    return metric, reduced_tables(metric, samples)


def relclip_case():
    """RelCLIPScore's summary reads only its rows: random tables of its schema (with the region breakdown)."""
    from mmsgg_eval.metrics.relclip import RelCLIPScore
    from tests.metrics.test_relclip import META as RC_META, StubEncoder
    metric = RelCLIPScore(encoder=StubEncoder(), region_breakdown=True)
    metric.dataset_meta = RC_META
    g = torch.Generator().manual_seed(0)
    n = 25
    counted = torch.randint(0, 6, (n,), generator=g)
    images = {'sample_idx': torch.arange(n), 'num_objects': torch.randint(0, 7, (n,), generator=g).int(),
              'num_counted': counted.int(), 'sum_score': torch.rand(n, generator=g).double() * counted,
              'num_ref': torch.minimum(counted, torch.randint(0, 4, (n,), generator=g)).int(),
              'sum_ref': torch.rand(n, generator=g).double() * 2}
    r = int(counted.sum())
    relations = {'sample_idx': torch.repeat_interleave(torch.arange(n), counted),
                 'score': torch.rand(r, generator=g).double(), 'has_ref': torch.rand(r, generator=g) < 0.6,
                 'ref': torch.rand(r, generator=g).double(), 'hit': torch.rand(r, generator=g) < 0.5,
                 'ratio': torch.rand(r, generator=g) * 3, 'distance': torch.rand(r, generator=g)}
    return metric, {'images': images, 'relations': relations}


CASES = {
    'sgrecall-predcls-zs': lambda: sg_case(SGRecall, 'predcls', zeroshot_triplets=[(0, 1, 2), (1, 2, 3), (2, 0, 1)]),
    'sgmeanrecall-sgdet-groups': lambda: sg_case(SGMeanRecall, 'sgdet', zeroshot_triplets=[(0, 1, 2)],
                                                 predicate_groups={'head': ['p0', 'p1'], 'tail': ['p3', 'p4']}),
    'sgcls-micro-present': lambda: sg_case(SGMeanRecall, 'sgcls', recall_average='micro', mr_average='present'),
    'phrdet-derived-zs': lambda: sg_case(SGRecall, 'phrdet', meta=dict(GROUPED_META, train_triplets=[[0, 1, 2]])),
    'predcls-open-vocab': lambda: sg_case(SGMeanRecall, 'predcls', novel_objects=['c0', 'c1'], novel_predicates=['p1']),
    'predcls-skip-empty-off': lambda: sg_case(SGMeanRecall, 'predcls', skip_empty_predictions=False),
    'sgbench-predcls': lambda: sg_case(SGBenchMetric, 'predcls'),
    'sgbench-sgdet': lambda: sg_case(SGBenchMetric, 'sgdet', seed=4),
    'vlm': vlm_case,
    'grounding': grounding_case,
    'relclip': relclip_case,
}


def quiet_summary(metric, tables):
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        return metric.summarize(tables)['metrics']


@pytest.mark.parametrize('name', list(CASES))
def test_all_ones_replicate_reproduces_every_key(name):
    metric, tables = CASES[name]()
    reported = quiet_summary(metric, tables)
    point = contributions_of(metric, tables).point()
    assert set(reported) <= set(point), f'keys without a decomposition: {set(reported) - set(point)}'
    for key, value in reported.items():
        assert same(float(point[key][0]), float(value)), (key, float(point[key][0]), value)
    assert any(v > 0 for v in reported.values())


@pytest.mark.parametrize('name', list(CASES))
def test_replicates_equal_the_summary_of_resampled_tables(name):
    """Each replicate (a [N] count vector, also with zero counts) equals the metric's own summary of the
    tables in which every image is repeated as often as it was drawn."""
    metric, tables = CASES[name]()
    stat = contributions_of(metric, tables)
    counts = list(next(resample_counts(stat.num_units, 3, seed=11)))
    counts.append(torch.zeros(stat.num_units, dtype=torch.float64).index_fill_(0, torch.arange(0, stat.num_units,
                                                                                                 3), 3.0))
    for row in counts:
        values = stat.evaluate(weighted_totals(row[None], stat.matrix()))
        values.update({k: torch.tensor([fn(row)], dtype=torch.float64) for k, fn in stat.resampled.items()})
        expected = quiet_summary(metric, resampled_tables(tables, stat.units, row.long().tolist()))
        for key, value in expected.items():
            assert same(float(values[key][0]), float(value)), (key, float(values[key][0]), value)


def three_images():
    """Hand case: image 0 holds 2 GT relations of p0 (1 hit), image 1 one of p0 (hit) and one of p1 (missed),
    image 2 three of p1 (2 hit). Per-image recall: 1/2, 1/2, 2/3."""
    rank = torch.tensor([0, NO_HIT, 0, NO_HIT, 0, 0, NO_HIT])
    unit = torch.tensor([0, 0, 1, 1, 2, 2, 2])
    predicate = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    c = Contributions(torch.arange(3))
    r = recall_block(c, rank, unit, [1], 'image')
    per_pred, presence = per_predicate_block(c, rank, predicate, unit, 2, [1], 'image')
    c.blocks.append((['R'], lambda t: 100 * r(t)))
    c.blocks.append((['mR'], lambda t: 100 * predicate_mean(per_pred, presence, [0, 1], 'all')(t)))
    return c


def hand_values(draw):
    """R and mR of a resample ``draw`` (image indices), from the hand case's per-image numbers."""
    recall = {0: Fraction(1, 2), 1: Fraction(1, 2), 2: Fraction(2, 3)}
    p0 = {0: Fraction(1, 2), 1: Fraction(1)}  # recall of p0 in the images holding it
    p1 = {1: Fraction(0), 2: Fraction(2, 3)}
    r = sum(recall[i] for i in draw) / len(draw)
    means = []
    for table in (p0, p1):
        held = [table[i] for i in draw if i in table]
        means.append(sum(held) / len(held) if held else Fraction(0))
    return 100 * r, 100 * sum(means) / 2


def test_three_image_bootstrap_distribution_enumerated_exactly():
    c = three_images()
    point = c.point()
    assert float(point['R'][0]) == pytest.approx(float(100 * Fraction(5, 9)))
    assert float(point['mR'][0]) == pytest.approx(float(100 * (Fraction(3, 4) + Fraction(1, 3)) / 2))
    # the 27 equally likely ordered draws: every replicate value by hand, and the exact distribution
    exact = {}
    for draw in itertools.product(range(3), repeat=3):
        counts = torch.bincount(torch.tensor(draw), minlength=3).double()[None]
        got = c.evaluate(weighted_totals(counts, c.matrix()))
        r, mr = hand_values(draw)
        assert float(got['R'][0]) == pytest.approx(float(r)) and float(got['mR'][0]) == pytest.approx(float(mr))
        exact[(r, mr)] = exact.get((r, mr), 0) + Fraction(1, 27)
    # the sampler draws each resample with its multinomial probability (20,000 replicates: within 4.5 sigma)
    n = 20000
    stat_counts = torch.cat(list(resample_counts(3, n, seed=1)))
    seen = {}
    for row in stat_counts.long().tolist():
        draw = [i for i in range(3) for _ in range(row[i])]
        key = hand_values(draw)
        seen[key] = seen.get(key, 0) + 1
    assert set(seen) == set(exact)
    for key, p in exact.items():
        sigma = math.sqrt(float(p) * (1 - float(p)) / n)
        assert abs(seen[key] / n - float(p)) < 4.5 * sigma, key
    # exact percentiles of R*: P(R* = 50) = 8/27 > 2.5%, P(R* = 66.7) = 1/27 > 2.5%: the 95% interval is [50, 66.7]
    low, high = percentile_interval(torch.tensor([[float(k[0])] for k in seen for _ in range(seen[k])]), 0.95)
    assert float(low[0]) == pytest.approx(50.0) and float(high[0]) == pytest.approx(200 / 3)


def test_resample_counts_deterministic_and_chunk_prefix():
    a = torch.cat(list(resample_counts(17, 120, seed=5)))
    b = torch.cat(list(resample_counts(17, 120, seed=5)))
    c = torch.cat(list(resample_counts(17, 60, seed=5)))
    assert torch.equal(a, b) and torch.equal(a[:50], c[:50]) and a.shape == (120, 17)
    assert torch.all(a.sum(1) == 17) and not torch.equal(a, torch.cat(list(resample_counts(17, 120, seed=6))))


def test_p_value_and_holm():
    deltas = torch.tensor([[1.0, -1.0, 0.0], [2.0, 1.0, 0.0], [3.0, -2.0, 0.0], [4.0, 0.5, 0.0]])
    p = paired_p_value(deltas)
    assert p.tolist() == pytest.approx([1 / 5, 5 / 5, 1.0])
    adjusted = holm_adjust(torch.tensor([0.01, 0.04, float('nan'), 0.03]))
    assert adjusted[0] == pytest.approx(0.03) and adjusted[3] == pytest.approx(0.06)
    assert adjusted[1] == pytest.approx(0.06) and math.isnan(adjusted[2])


def test_bootstrap_option_errors():
    assert bootstrap_options(200, 'M') == {'samples': 200, 'level': 0.95, 'seed': 0}
    assert bootstrap_options(None, 'M') is None and bootstrap_options(True, 'M')['samples'] == 1000
    for bad, match in ((dict(samples=0), 'samples'), (dict(level=1.5), 'level'), (dict(seed='x'), 'seed'),
                       (dict(sample=3), 'unknown'), ('yes', 'bootstrap must be')):
        with pytest.raises(ValueError, match=match):
            bootstrap_options(bad, 'SGRecall')
    with pytest.raises(ValueError, match='SGRecall: unknown bootstrap'):
        SGRecall(mode='predcls', bootstrap=dict(smaples=10))


def evaluate_with_bootstrap(rank, world_size, report_dir=None, bootstrap=dict(samples=300, seed=2)):
    from tests.dist_utils import padded_shard
    samples, _ = random_dataset(42, 23, 'sgdet')
    mine = [samples[i] for i in padded_shard(23, world_size, rank)]
    out = {}
    metrics = [cls(mode='sgdet', bootstrap=bootstrap, report_dir=report_dir) for cls in (SGRecall, SGMeanRecall)]
    for metric in metrics:
        metric.dataset_meta = GROUPED_META
    for start in range(0, len(mine), 3):
        for metric in metrics:
            metric.process({}, mine[start:start + 3])
    for metric in metrics:
        out.update(metric.evaluate(23))
    return out, extra_results_of(metrics), metrics[1].last_report


def test_intervals_reach_reports_and_metrics_json_scalars_unchanged(tmp_path):
    keys, extra, summary = evaluate_with_bootstrap(0, 1, str(tmp_path))
    plain, _, _ = evaluate_with_bootstrap(0, 1, None, None)
    assert keys == plain  # the scalars returned to the runner are the same
    intervals = extra['sgdet/intervals']
    assert set(intervals) == set(summary['metrics']) and extra['sgdet/bootstrap']['samples'] == 300
    for key, (low, high) in intervals.items():
        assert low <= summary['metrics'][key] + 1e-9 or math.isclose(low, high)
        assert low <= high
    markdown = open(summary['report_files']['markdown']).read()
    r50 = summary['metrics']['R@50']
    low, high = intervals['R@50']
    assert f'{r50:.2f} [{low:.1f}, {high:.1f}]' in markdown
    assert '95% bootstrap intervals (300 resamples of the 23 images' in summary['text']


def test_two_ranks_give_the_intervals_of_one_process():
    from tests.dist_utils import run_distributed
    single = evaluate_with_bootstrap(0, 1)
    for keys, extra, _ in run_distributed(evaluate_with_bootstrap, 2):
        assert keys == single[0] and extra == single[1]  # exact


# ---------------------------------------------------------------------------------------------- coverage

def simulated_population(size=4000, num_predicates=6, seed=0):
    """A fixed population of images: 1-6 GT relations each (long-tailed predicates), each relation hit with a
    probability set by an image difficulty shared by its relations and by its predicate. Returns flat relation
    arrays (predicate, hit probability, one fixed draw of the hits, image sizes) and the true R and mR of those
    hits (population means over images of per-image recalls, the legacy conventions)."""
    rng = np.random.default_rng(seed)
    probs = np.array([0.35, 0.25, 0.15, 0.12, 0.08, 0.05])[:num_predicates]
    sizes = rng.integers(1, 7, size)
    image = np.repeat(np.arange(size), sizes)
    pred = rng.choice(num_predicates, image.size, p=probs / probs.sum())
    prob = np.clip(rng.beta(2, 2, size)[image] - 0.08 * pred, 0.02, 0.98)
    hit = rng.random(image.size) < prob
    true_r = np.mean(np.bincount(image, weights=hit, minlength=size) / sizes)
    cell = image * num_predicates + pred
    count = np.bincount(cell, minlength=size * num_predicates).reshape(size, num_predicates)
    hits = np.bincount(cell, weights=hit, minlength=size * num_predicates).reshape(size, num_predicates)
    per_pred = [np.mean(hits[count[:, q] > 0, q] / count[count[:, q] > 0, q]) for q in range(num_predicates)]
    return ({'pred': pred, 'prob': prob, 'hit': hit, 'sizes': sizes, 'num_predicates': num_predicates},
            100 * true_r, 100 * float(np.mean(per_pred)))


def drawn_rows(population, draws):
    """(relation rows of the population, unit of each) of S samples of n images (``draws`` [S, n] population
    indices): unit s * n + i is image i of sample s."""
    sizes = population['sizes']
    start = np.cumsum(sizes) - sizes
    length = sizes[draws.ravel()]
    offset = np.arange(length.sum()) - np.repeat(np.cumsum(length) - length, length)
    return np.repeat(start[draws.ravel()], length) + offset, np.repeat(np.arange(draws.size), length)


def simulated_contributions(hit, pred, unit, num_units, num_predicates, tail=()):
    """:class:`Contributions` of relations (``hit`` bool, ``pred``, ``unit`` arrays) with the keys R, mR (all
    predicates) and mR_tail (the ``tail`` predicates), image-averaged at K = 1."""
    rank = torch.where(torch.as_tensor(hit), 0, NO_HIT)
    pred, unit = torch.as_tensor(pred), torch.as_tensor(unit)
    c = Contributions(torch.arange(num_units))
    r = recall_block(c, rank, unit, [1], 'image')
    per_pred, presence = per_predicate_block(c, rank, pred, unit, num_predicates, [1], 'image')
    c.blocks.append((['R'], lambda t: 100 * r(t)))
    c.blocks.append((['mR'], lambda t: 100 * predicate_mean(per_pred, presence, range(num_predicates), 'all')(t)))
    if tail:
        c.blocks.append((['mR_tail'], lambda t: 100 * predicate_mean(per_pred, presence, tail, 'all')(t)))
    return c


def seed_batched_replicates(stats, num_samples, replicates, chunk=40):
    """``[{key: [S, B]}]`` for each of ``stats`` (built from S samples of n units each, unit s * n + i):
    B replicates of each sample, sample s resampled with the counts of seed s (the same counts for every
    stat: paired), all samples of a chunk in one batched product."""
    matrices = [st.matrix().float().view(num_samples, -1, st.matrix().shape[1]) for st in stats]
    n = matrices[0].shape[1]
    outs = [{} for _ in stats]
    for first in range(0, num_samples, chunk):
        seeds = range(first, min(first + chunk, num_samples))
        counts = torch.stack([next(resample_counts(n, replicates, s, chunk=replicates, dtype=torch.float32))
                              for s in seeds])
        for st, matrix, out in zip(stats, matrices, outs):
            totals = torch.bmm(counts, matrix[first:first + len(seeds)]).double().view(-1, matrix.shape[2])
            for key, value in st.evaluate(totals).items():
                out.setdefault(key, []).append(value.view(len(seeds), replicates))
    return [{key: torch.cat(v) for key, v in out.items()} for out in outs]


def test_interval_coverage_on_simulated_data():
    """400 samples of 300 images from a fixed population: the 95% percentile interval (1000 replicates)
    covers the true R and mR in 92-98% of them."""
    population, true_r, true_mr = simulated_population()
    seeds, n = 400, 300
    draws = np.random.default_rng(1).integers(0, population['sizes'].size, (seeds, n))
    rows, unit = drawn_rows(population, draws)
    stat = simulated_contributions(population['hit'][rows], population['pred'][rows], unit, draws.size, 6)
    values = seed_batched_replicates([stat], seeds, 1000)[0]
    for key, truth in (('R', true_r), ('mR', true_mr)):
        low, high = percentile_interval(values[key].t(), 0.95)
        coverage = float(((low <= truth) & (truth <= high)).double().mean())
        assert 0.92 <= coverage <= 0.98, (key, coverage)


def test_cli_bootstrap_flag_from_state_equals_a_direct_run(tmp_path):
    """``python -m mmsgg_eval.eval --from-state S --bootstrap N``: the intervals of a run with bootstrap=N."""
    import json
    from mmsgg_eval.eval import main
    samples, _ = random_dataset(9, 20, 'predcls')
    metric = SGMeanRecall(mode='predcls', save_state=str(tmp_path / 'mr.state'), bootstrap=80)
    metric.dataset_meta = GROUPED_META
    metric.process({}, samples)
    metric.evaluate(20)
    main(['--from-state', str(tmp_path / 'mr.state'), '--bootstrap', '80', '--work-dir', str(tmp_path / 'w')])
    saved = json.load(open(tmp_path / 'w' / 'metrics.json'))
    assert saved['predcls/intervals'] == pytest.approx(metric.last_report['intervals'])
    assert saved['predcls/bootstrap']['samples'] == 80


def test_grounding_intervals_in_its_tables(tmp_path):
    from tests.sgg_samples import grounding_sample, random_grounding_case
    rng = random.Random(2)
    metric = GroundingPr(report_dir=str(tmp_path), bootstrap=dict(samples=100, level=0.9))
    metric.process(None, [grounding_sample(random_grounding_case(rng), i, torch.float64) for i in range(30)])
    keys = metric.evaluate(30)
    summary = metric.last_report
    low, high = summary['intervals']['meanIoU']
    assert f'{keys["grounding/meanIoU"]:.4f} [{low:.3f}, {high:.3f}]' in open(
        summary['report_files']['markdown']).read()
    assert '90% bootstrap intervals (100 resamples of the 30 images' in summary['text']
