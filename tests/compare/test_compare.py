"""``python -m mmsgg_eval.compare``: paired comparison of runs from their evaluation states (outputs, refusals,
the same run against itself) and the statistics of the paired test on simulated runs (level under the null,
power against a planted improvement of the tail predicates)."""
import csv
import json
import os.path as osp

import numpy as np
import pytest

from mmsgg_eval.compare import CompareError, compare_runs, load_run, main
from mmsgg_eval.functional.bootstrap import paired_p_value
from mmsgg_eval.metrics import SGMeanRecall, SGRecall
from tests.sgg_samples import perturbed, random_dataset
from tests.metrics.test_bootstrap import GROUPED_META, drawn_rows, seed_batched_replicates, simulated_contributions, \
    simulated_population

NUM = 24


def write_run(directory, samples, indices=None, **kwargs):
    """States of SGRecall + SGMeanRecall (predcls) on ``samples`` (all, or ``indices``); returns the keys."""
    keep = [samples[i] for i in (indices if indices is not None else range(len(samples)))]
    keys = {}
    for cls in (SGRecall, SGMeanRecall):
        metric = cls(mode='predcls', save_state=osp.join(directory, f'{cls.__name__}.state'), **kwargs)
        metric.dataset_meta = GROUPED_META
        metric.process({}, keep)
        keys.update(metric.evaluate(NUM))
    return keys


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp('compare')
    samples, _ = random_dataset(8, NUM, 'predcls')
    keys_a = write_run(str(root / 'a'), samples)
    keys_b = write_run(str(root / 'b'), perturbed(samples, 1))
    return dict(root=root, samples=samples, a=str(root / 'a'), b=str(root / 'b'), keys_a=keys_a, keys_b=keys_b)


def test_cli_table_csv_json_and_chart(runs, capsys):
    out_dir = str(runs['root'] / 'out')
    result = main([runs['a'], runs['b'], '--samples', '300', '--out-dir', out_dir])
    printed = capsys.readouterr().out
    comp = result['comparisons'][0]
    assert (comp['a'], comp['b']) == ('a', 'b')
    by_metric = {m['metric']: m for m in comp['metrics']}
    recall, mean = by_metric['SGRecall (predcls)'], by_metric['SGMeanRecall (predcls)']
    for m in (recall, mean):
        assert m['num_images'] == NUM and not m['settings_differences']
        for key, r in m['keys'].items():
            assert r['a'] == pytest.approx(runs['keys_a'][f'predcls/{key}'])
            assert r['b'] == pytest.approx(runs['keys_b'][f'predcls/{key}'])
            assert r['delta'] == pytest.approx(r['b'] - r['a']) and r['low'] <= r['high'] and 0 < r['p'] <= 1
    assert 'R@50' in recall['keys'] and 'mR@50' in mean['keys'] and 'mR@50' not in recall['keys']
    tables = [m['per_predicate'] for m in (recall, mean) if m['per_predicate']]
    assert len(tables) == 1  # one per-predicate table per prefix
    pp = tables[0]
    assert pp['key'] == 'R@100' and len(pp['rows']) == 5
    assert 'Holm' in pp['correction'] and 'Holm correction over the' in printed
    assert '| R@50 |' in printed and 'CI of Δ' in printed
    paths = result['outputs']
    rows = list(csv.reader(open(paths['csv'])))
    assert rows[0][:4] == ['a', 'b', 'metric', 'key'] and len(rows) == 1 + len(recall['keys']) + len(mean['keys'])
    assert len(list(csv.reader(open(paths['per_predicate_csv'])))) == 1 + 5
    assert json.load(open(paths['json']))['bootstrap']['samples'] == 300
    assert open(paths['chart'], 'rb').read(8) == b'\x89PNG\r\n\x1a\n'


def test_a_run_against_itself_changes_nothing(runs):
    run = load_run(runs['a'])
    result = compare_runs([run, load_run(runs['a'])], ['a', 'a2'], samples=200)
    for m in result['comparisons'][0]['metrics']:
        for r in m['keys'].values():
            assert r['delta'] == 0 and r['low'] == 0 and r['high'] == 0 and r['p'] == 1
        if m['per_predicate']:
            assert m['per_predicate']['significant'] == []


def test_different_images_refused_unless_intersect(runs, tmp_path):
    write_run(str(tmp_path / 'c'), perturbed(runs['samples'], 2), indices=range(3, NUM))
    with pytest.raises(CompareError, match=r'different images: 3 only in a, 0 only in c \(21 in both\)'):
        compare_runs([load_run(runs['a']), load_run(str(tmp_path / 'c'))], ['a', 'c'], samples=50)
    result = compare_runs([load_run(runs['a']), load_run(str(tmp_path / 'c'))], ['a', 'c'], samples=50,
                          intersect=True)
    expected = write_run(str(tmp_path / 'a_common'), runs['samples'], indices=range(3, NUM))
    for m in result['comparisons'][0]['metrics']:
        assert m['num_images'] == 21
        for key, r in m['keys'].items():
            assert r['a'] == pytest.approx(expected[f'predcls/{key}'])


def test_different_settings_refused_unless_allowed(runs, tmp_path, capsys):
    write_run(str(tmp_path / 'micro'), runs['samples'], recall_average='micro')
    expected = "different settings.*recall_average: '<default>' vs 'micro'.*conventions recall"
    with pytest.raises(CompareError, match=expected):
        compare_runs([load_run(runs['a']), load_run(str(tmp_path / 'micro'))], ['a', 'micro'], samples=50)
    main([runs['a'], str(tmp_path / 'micro'), '--samples', '50', '--allow-different-settings',
          '--out-dir', str(tmp_path / 'out')])
    assert '**Different settings (--allow-different-settings):**' in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([runs['a'], str(tmp_path / 'micro'), '--samples', '50', '--out-dir', str(tmp_path / 'out2')])
    assert 'different settings' in capsys.readouterr().err


def write_run_on_gt(directory, samples, gt_hash, meta=None):
    """States of SGRecall + SGMeanRecall as the tools write them: with the GT hash of the dataset."""
    for cls in (SGRecall, SGMeanRecall):
        metric = cls(mode='predcls', save_state=osp.join(directory, f'{cls.__name__}.state'))
        metric.dataset_meta = meta or GROUPED_META
        metric.state_gt_hash = gt_hash
        metric.process({}, samples)
        metric.evaluate(NUM)


def test_runs_on_different_ground_truth_are_refused(runs, tmp_path, capsys):
    """A test-split run and a val-split run over the same sample_idx range are not paired (whatever the
    options): the GT hash, the dataset or its dataset_meta differ, named as merging names them."""
    other_split, _ = random_dataset(9, NUM, 'predcls')
    write_run_on_gt(str(tmp_path / 'test'), runs['samples'], 'hash-of-test')
    write_run_on_gt(str(tmp_path / 'val'), other_split, 'hash-of-val')
    write_run_on_gt(str(tmp_path / 'test2'), perturbed(runs['samples'], 3), 'hash-of-test')
    with pytest.raises(CompareError, match=r"different ground truth: different GT \(hash of the dataset "
                                           r"annotations\) \('hash-of-test' vs 'hash-of-val'\)"):
        compare_runs([load_run(str(tmp_path / 'test')), load_run(str(tmp_path / 'val'))], ['test', 'val'],
                     samples=20, allow_different_settings=True, intersect=True)
    renamed = dict(GROUPED_META, predicates=[f'{p}_' for p in GROUPED_META['predicates']])
    write_run_on_gt(str(tmp_path / 'renamed'), runs['samples'], 'hash-of-test', renamed)
    with pytest.raises(CompareError, match=r'different dataset_meta \(entries predicates'):
        compare_runs([load_run(str(tmp_path / 'test')), load_run(str(tmp_path / 'renamed'))], ['t', 'r'],
                     samples=20)
    with pytest.raises(SystemExit) as info:
        main([str(tmp_path / 'test'), str(tmp_path / 'val'), '--samples', '20', '--out-dir', str(tmp_path / 'o')])
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert 'different ground truth' in err and "'hash-of-test' vs 'hash-of-val'" in err
    # the same GT with other predictions is compared
    result = compare_runs([load_run(str(tmp_path / 'test')), load_run(str(tmp_path / 'test2'))], ['t', 't2'],
                          samples=20)
    assert result['comparisons'][0]['metrics']


def test_prediction_files_need_a_config(runs):
    with pytest.raises(CompareError, match='give --config'):
        load_run(str(runs['root'] / 'predictions.pkl'))


# ---------------------------------------------------------------------------------------------- statistics

TAIL = (3, 4, 5)


def paired_p_values(seeds, n, planted=0.0, seed=0):
    """p-values of R, mR and mR_tail of run B - run A on S samples of n images: both runs hit each GT relation
    independently with its population probability (the null), B plus ``planted`` (absolute, on the tail
    predicates: a missed tail relation of A becomes a hit of B with probability planted / (1 - p))."""
    population, _, _ = simulated_population()
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, population['sizes'].size, (seeds, n))
    rows, unit = drawn_rows(population, draws)
    prob, pred = population['prob'][rows], population['pred'][rows]
    hit_a = rng.random(rows.size) < prob
    if planted:
        extra = np.isin(pred, TAIL) & (rng.random(rows.size) < planted / (1 - prob))
        hit_b = hit_a | extra
    else:
        hit_b = rng.random(rows.size) < prob
    stats = [simulated_contributions(h, pred, unit, draws.size, 6, TAIL) for h in (hit_a, hit_b)]
    rep_a, rep_b = seed_batched_replicates(stats, seeds, 1000)
    return {key: paired_p_value((rep_b[key] - rep_a[key]).t()) for key in ('R', 'mR', 'mR_tail')}


def test_paired_test_level_under_the_null():
    """Two runs from the same distribution: p < 0.05 in 3-8% of 400 seeds, for R, mR and mR_tail."""
    for key, p in paired_p_values(400, 300).items():
        rate = float((p < 0.05).double().mean())
        assert 0.03 <= rate <= 0.08, (key, rate)


def test_paired_test_detects_a_planted_tail_improvement():
    """+3 points of recall on the tail predicates (about 14% of the GT relations): mR_tail's change is
    significant (p < 0.05) in most of 100 seeds of 300 images (93% here)."""
    p = paired_p_values(100, 300, planted=0.03, seed=1)
    assert float((p['mR_tail'] < 0.05).double().mean()) > 0.8
