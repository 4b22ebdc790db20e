"""``python -m mmsgg_eval.compare``'s verdict line, ``--names``, predicates in the reports' order, and
the evaluation logs of prediction files kept off the console before the comparison."""
import json
import os.path as osp

import pytest

from mmsgg_eval.compare import main
from mmsgg_eval.metrics import SGMeanRecall, SGRecall
from tests.sgg_samples import perturbed, random_dataset
from tests.metrics.test_bootstrap import META
from tests.compare.test_compare import NUM

#: training frequencies in the reverse of the predicate order: the reports list p4 first
REVERSED = dict(META, predicate_counts=[10, 20, 30, 40, 50])


def write_states(directory, samples):
    for cls in (SGRecall, SGMeanRecall):
        metric = cls(mode='predcls', save_state=osp.join(directory, f'{cls.__name__}.state'))
        metric.dataset_meta = REVERSED
        metric.process({}, samples)
        metric.evaluate(NUM)
    return list(metric.last_report['per_predicate'])


@pytest.fixture(scope='module')
def states(tmp_path_factory):
    root = tmp_path_factory.mktemp('compare44')
    samples, _ = random_dataset(8, NUM, 'predcls')
    order = write_states(str(root / 'a'), samples)
    write_states(str(root / 'b'), perturbed(samples, 1))
    return dict(root=root, a=str(root / 'a'), b=str(root / 'b'), order=order)


def test_names_verdict_and_predicate_order(states, capsys):
    result = main([states['a'], states['b'], '--names', 'baseline', 'ours', '--samples', '200',
                   '--out-dir', str(states['root'] / 'out')])
    printed = capsys.readouterr().out
    comp = result['comparisons'][0]
    assert (comp['a'], comp['b']) == ('baseline', 'ours')
    verdict = next(line for line in printed.splitlines() if line.startswith('**Verdict**'))
    assert verdict.startswith('**Verdict** (ours vs baseline, α = 0.05): R@50 ') and '; mR@50 ' in verdict
    assert 'not corrected across the' in verdict and 'exploratory' in verdict
    keys = {m['metric']: m['keys'] for m in comp['metrics']}['SGRecall (predcls)']
    assert f'R@50 {keys["R@50"]["delta"]:+.2f}' in verdict
    pp = next(m['per_predicate'] for m in comp['metrics'] if m['per_predicate'])
    assert states['order'] == ['p4', 'p3', 'p2', 'p1', 'p0']
    assert [r['predicate'] for r in pp['rows']] == states['order']
    assert '| baseline | ours |' in printed


def test_names_must_match_the_runs(states, capsys):
    for names in (['one'], ['same', 'same']):
        with pytest.raises(SystemExit) as info:
            main([states['a'], states['b'], '--names', *names, '--out-dir', str(states['root'] / 'bad')])
        assert info.value.code == 2
    assert '--names: give 2 different names' in capsys.readouterr().err


def test_prediction_files_are_evaluated_quietly(tmp_path):
    """The two runs' evaluation reports (the SGG eval lines, the per-predicate tables) are written to files,
    not printed before the comparison."""
    from mmsgg_eval.datasets import VG150Dataset
    from mmsgg_eval.testing import make_sample_data
    from mmsgg_eval.testing.predictions import sgdet_records, write_jsonl
    from tests.tool_runs import ROOT, run_tool
    make_sample_data(str(tmp_path), datasets=['vg150'])
    root = str(tmp_path / 'vg150') + '/'
    dataset = VG150Dataset(data_root=root, split='test', num_val_images=8, pipeline=[])
    for seed in (0, 1):
        write_jsonl(str(tmp_path / f'run{seed}.jsonl'), sgdet_records(dataset, seed))
    config = osp.join(ROOT, 'configs', 'demo', 'freq_predcls_vg150_sample.py')
    proc = run_tool(['-m', 'mmsgg_eval.compare', str(tmp_path / 'run0.jsonl'), str(tmp_path / 'run1.jsonl'),
                     '--config', config, '--samples', '100', '--cfg-options',
                     f'test_dataloader.dataset.data_root={root}', 'test_evaluator.0.mode=sgdet',
                     'test_evaluator.1.mode=sgdet', '--out-dir', str(tmp_path / 'out')],
                    check=True)
    printed = proc.stdout + proc.stderr
    assert 'SGG eval' not in printed and 'Per-predicate recall (' not in printed
    assert printed.count('evaluated with') == 2 and '**Verdict**' in printed
    assert json.load(open(tmp_path / 'out' / 'runs' / '0.run0.jsonl' / 'metrics.json'))['sgdet/R@50'] > 0
