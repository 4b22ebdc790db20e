"""The declared keys of the metrics beside SGRecall / SGMeanRecall (GroundingPr, RelCLIPScore, VLMSceneGraphMetric,
OIRelationMetric, SGBenchMetric): every key of their summaries comes from a declaration (a ``RowKey`` of the
metric's ``row_keys()``, a declared family, or the one function of an AP key), each row key's summary value and
bootstrap point estimate equal a loop over its rows written from the declaration, every declared key gets an
interval and a paired-comparison row, and a key added to the declarations alone reaches all of them."""
import math
import os.path as osp
import random
import warnings

import pytest
import torch

from mmsgg_eval.compare import compare_runs
from mmsgg_eval.functional.oi import OI_AP_KEYS
from mmsgg_eval.keys import SGBENCH_FAMILIES, RowKey
from mmsgg_eval.metrics import OIRelationMetric
from mmsgg_eval.metrics.bootstrap import bootstrap_summary, contributions_of
from mmsgg_eval.metrics.grounding import GroundingPr
from mmsgg_eval.metrics.key_values import key_instances
from mmsgg_eval.metrics.row_keys import row_key_value
from mmsgg_eval.metrics.sgbench import SGBenchMetric
from mmsgg_eval.metrics.state import load_state
from mmsgg_eval.metrics.vlm import vlm_name
from mmsgg_eval.functional.recall import evaluated_image_rows
from mmsgg_eval.reports import grounding_tables
from tests.compare.test_compare import perturbed
from tests.metrics.test_bootstrap import GROUPED_META, grounding_case, reduced_tables, relclip_case, vlm_case
from tests.sgg_samples import grounding_sample, random_dataset, random_grounding_case


def same(a, b, rel=1e-9):
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def graph_case(cls, mode, **kwargs):
    samples, _ = random_dataset(5, 24, mode)
    metric = cls(mode=mode, **kwargs)
    metric.dataset_meta = GROUPED_META
    return metric, reduced_tables(metric, samples)


CASES = {
    'grounding': grounding_case,
    'grounding-strict-three': lambda: _grounding(dict(thresholds=(0.25, 0.5, 0.75), strict=True)),
    'relclip': relclip_case,
    'vlm': vlm_case,
    'oi-sgdet': lambda: graph_case(OIRelationMetric, 'sgdet', topk=(5, 50, 200)),
    'oi-predcls': lambda: graph_case(OIRelationMetric, 'predcls'),
    'sgbench-sgcls-micro': lambda: graph_case(SGBenchMetric, 'sgcls', recall_average='micro', mr_average='all'),
    'sgbench-sgdet': lambda: graph_case(SGBenchMetric, 'sgdet', skip_empty_predictions=False),
}


def _grounding(kwargs, n=30, seed=3):
    rng = random.Random(seed)
    metric = GroundingPr(**kwargs)
    return metric, reduced_tables(metric, [grounding_sample(random_grounding_case(rng), i, torch.float64)
                                           for i in range(n)])


def loop_reference(key: RowKey, columns) -> float:
    """A row key's value from its declaration, by loops: per image the sums of ``value`` and of ``over`` (or the
    number of rows) over its counted rows, then ``scale`` x the ratio of their totals; ``empty`` when nothing is
    counted, ``no_rows`` for an empty table."""
    rows = columns[key.table]
    ids = rows['sample_idx'].tolist()
    if not ids and key.no_rows is not None:
        return key.no_rows
    per_image = {}
    for i, sample in enumerate(ids):
        if key.where is not None and not bool(rows[key.where][i]):
            continue
        num, den = per_image.get(sample, (0.0, 0.0))
        per_image[sample] = (num + float(rows[key.value][i]),
                             den + (1.0 if key.over is None else float(rows[key.over][i])))
    num, den = sum(v[0] for v in per_image.values()), sum(v[1] for v in per_image.values())
    return key.scale * num / den if den > 0 else key.empty


def key_columns(metric, tables):
    if isinstance(metric, SGBenchMetric):
        return metric.key_columns(tables, metric._evaluated_images(tables['images'], quiet=True))
    return metric.key_columns(tables)


def declared_names(metric, tables, summary):
    """The keys the declarations give, in the summary's order (the VLM metric's inner recall keys: every summary
    key that :func:`vlm_name` gives from a key of the inner scene-graph summary, checked value for value)."""
    rows = [k.name for k in metric.row_keys()]
    if isinstance(metric, GroundingPr) or type(metric).__name__ == 'RelCLIPScore':
        return rows
    if isinstance(metric, OIRelationMetric):
        return rows + list(OI_AP_KEYS)
    if isinstance(metric, SGBenchMetric):
        images, rels = tables['images'], tables['relations']
        evaluated = metric._evaluated_images(images, quiet=True)
        image_of, keep, num = evaluated_image_rows(images['sample_idx'], evaluated, rels['sample_idx'])
        counted = metric.bench_relations({n: c[keep] for n, c in rels.items()}, image_of, num)
        families = [n for block in key_instances(metric, counted, SGBENCH_FAMILIES) for i in block for n in i.names]
        return families + rows
    inner = metric.inner.summarize({'images': tables['images'], 'relations': tables['relations']})['metrics']
    renamed = {vlm_name(k): v for k, v in inner.items() if vlm_name(k) is not None}
    recalls = [k for k in summary['metrics'] if k not in rows and k != 'AP@50']
    assert recalls and set(recalls) <= set(renamed)
    assert all(same(summary['metrics'][k], renamed[k], rel=0) for k in recalls)  # the very numbers
    return [k for k in summary['metrics'] if k in rows + ['AP@50'] + recalls]


@pytest.mark.parametrize('name', list(CASES))
def test_every_key_comes_from_a_declaration_and_gets_an_interval(name):
    metric, tables = CASES[name]()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        summary = metric.summarize(tables)
    assert list(summary['metrics']) == declared_names(metric, tables, summary)
    columns = key_columns(metric, tables)
    point = contributions_of(metric, tables).point()
    for key in metric.row_keys():
        value = summary['metrics'][key.name]
        assert value == row_key_value(key, columns) or (math.isnan(value) and math.isnan(row_key_value(key, columns)))
        assert same(value, loop_reference(key, columns), rel=1e-12), (key.name, value)
        assert same(float(point[key.name][0]), value), key.name
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        intervals = bootstrap_summary(metric, tables, summary, dict(samples=30, seed=1, level=0.9))['intervals']
    assert set(summary['metrics']) <= set(intervals)
    assert any(not math.isnan(v) for v in summary['metrics'].values())


def _evaluate(build, samples, path, meta):
    metric = build(save_state=path)
    if meta is not None:
        metric.dataset_meta = meta
    for start in range(0, len(samples), 4):
        metric.process({}, samples[start:start + 4])
    return metric.evaluate(len(samples))


def _compared(tmp_path, build, a, b, meta=None):
    """``({key: value} of run a, {metric: {key: row}})`` of two runs compared from their saved states."""
    keys = {}
    for run, data in (('a', a), ('b', b)):
        out = _evaluate(build, data, osp.join(str(tmp_path), run, 'x.state'), meta)
        keys = keys or {k.split('/', 1)[1]: v for k, v in out.items()}
    runs = [[load_state(osp.join(str(tmp_path), r, 'x.state'))] for r in 'ab']
    result = compare_runs(runs, ['a', 'b'], samples=30, seed=2)['comparisons'][0]['metrics']
    return keys, {m['metric']: m['keys'] for m in result}


def _grounding_runs(n=24):
    rng = random.Random(8)
    a = [grounding_sample(random_grounding_case(rng), i, torch.float64) for i in range(n)]
    b = [dict(s, pred_instances={**s['pred_instances'], 'bboxes': s['pred_instances']['bboxes'] + 1.0}) for s in a]
    return a, b


@pytest.mark.parametrize('kind', ['grounding', 'oi', 'sgbench', 'vlm'])
def test_every_declared_key_gets_a_compare_row(tmp_path, kind):
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        if kind == 'grounding':
            a, b = _grounding_runs()
            keys, rows = _compared(tmp_path, lambda **kw: GroundingPr(**kw), a, b)
        elif kind == 'vlm':
            from mmsgg_eval.metrics.vlm import VLMSceneGraphMetric
            from tests.metrics.test_vlm import CORPUS, GT, META as VLM_META
            texts = [t for _, t, _ in CORPUS[:12]]
            a = [dict(GT, sample_idx=i, pred_text=t) for i, t in enumerate(texts)]
            b = [dict(GT, sample_idx=i, pred_text=t) for i, t in enumerate(reversed(texts))]
            keys, rows = _compared(tmp_path, lambda **kw: VLMSceneGraphMetric(topk=(1,), **kw), a, b, VLM_META)
        else:
            cls = OIRelationMetric if kind == 'oi' else SGBenchMetric
            samples, _ = random_dataset(6, 16, 'sgdet')
            keys, rows = _compared(tmp_path, lambda **kw: cls(mode='sgdet', **kw), samples, perturbed(samples, 3),
                                   GROUPED_META)
    (metric_rows,) = rows.values()
    assert list(keys) == list(metric_rows)  # every key, in the summary's order


def test_a_key_added_to_the_declarations_reaches_summary_intervals_compare_and_report(tmp_path, monkeypatch):
    """One RowKey more in ``GroundingPr.row_keys`` (the share of samples with a predicted box) and nothing else:
    its summary value (against its definition), its bootstrap interval, its paired-comparison row and its column
    in the report table."""
    declared = GroundingPr.row_keys
    monkeypatch.setattr(GroundingPr, 'row_keys',
                        lambda self: declared(self) + (RowKey('Predicted', 'samples', 'has_pred'),))
    metric, tables = _grounding(dict(), n=40, seed=9)
    summary = metric.summarize(tables)
    has = [bool(v) for v in tables['samples']['has_pred'].tolist()]
    assert 0 < sum(has) < len(has)
    assert summary['metrics']['Predicted'] == 100.0 * sum(has) / len(has)
    summary.update(bootstrap_summary(metric, tables, summary, dict(samples=30, seed=1, level=0.9)))
    low, high = summary['intervals']['Predicted']
    assert low <= summary['metrics']['Predicted'] <= high and low < high
    main = grounding_tables(summary, 'random')[0]
    assert 'Predicted' in main.header
    assert f"Predicted: {summary['metrics']['Predicted']:.4f}" in metric.format_report(summary, summary['metrics'])
    a, b = _grounding_runs()
    b = [dict(s, pred_instances={'bboxes': torch.zeros((0, 4))}) if i % 3 == 0 else s for i, s in enumerate(b)]
    keys, rows = _compared(tmp_path, lambda **kw: GroundingPr(**kw), a, b)
    row = rows['GroundingPr (grounding)']['Predicted']
    share = [100.0 * sum(s['pred_instances']['bboxes'].shape[0] > 0 for s in run) / len(run) for run in (a, b)]
    assert row['a'] == keys['Predicted'] == share[0] and row['b'] == share[1] and share[1] < share[0]
    assert row['low'] <= row['delta'] <= row['high'] and row['delta'] < 0


def test_the_declared_summation_fixes_the_arithmetic():
    """``fsum``: correctly rounded sums (``scale * fsum / n``); ``mean``: torch's mean in row order; a ratio of sums
    needs ``fsum``; unknown orders are refused."""
    values = torch.tensor([1e16, 1.0, -1e16], dtype=torch.float64)
    columns = {'t': {'sample_idx': torch.arange(3), 'v': values, 'w': torch.tensor([1.0, 2.0, 0.0])}}
    assert row_key_value(RowKey('k', 't', 'v'), columns) == 100.0 * 1.0 / 3
    assert row_key_value(RowKey('k', 't', 'v', summation='mean'), columns) == 100.0 * float(values.mean())
    assert row_key_value(RowKey('k', 't', 'v', summation='mean'), columns) != 100.0 * 1.0 / 3
    assert row_key_value(RowKey('k', 't', 'w', over='w', scale=1.0), columns) == 1.0
    empty = {'t': {n: c[:0] for n, c in columns['t'].items()}}
    assert row_key_value(RowKey('k', 't', 'w', over='w', empty=0.0, no_rows=float('nan')), empty) != 0.0
    assert row_key_value(RowKey('k', 't', 'w', empty=0.0), empty) == 0.0
    with pytest.raises(ValueError, match='ratio of sums'):
        RowKey('k', 't', 'v', over='w', summation='mean')
    with pytest.raises(ValueError, match='summation must be one of'):
        RowKey('k', 't', 'v', summation='pairwise')
