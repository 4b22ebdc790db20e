"""Report files of scene-graph evaluations: metrics.json, per-predicate PNG, Markdown tables."""
import contextlib
import io
import json
import math

import pytest
import torch

from mmsgg_eval.vocabularies import VG150_PREDICATES
from mmsgg_eval.metrics.scene_graph import SGMeanRecall, SGRecall
from mmsgg_eval.reports import (format_markdown_tables, format_scene_graph_report, plot_per_predicate_recall,
                                recall_key, write_scene_graph_reports)

CLASSES = [f'class{i}' for i in range(20)]


def vg150_meta():
    counts = [float(1000 // (i + 1)) for i in range(len(VG150_PREDICATES))]  # any frequency order
    return dict(classes=CLASSES, predicates=list(VG150_PREDICATES), predicate_counts=counts, dataset_name='VG150',
                iou_plus_one=True)


def synthetic_samples(n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    samples = []
    for i in range(n):
        num = 6
        xy = torch.rand(num, 2, generator=g) * 300
        boxes = torch.cat([xy, xy + 20 + torch.rand(num, 2, generator=g) * 80], 1)
        labels = torch.randint(0, len(CLASSES), (num,), generator=g)
        pairs = torch.randint(0, num, (5, 2), generator=g)
        predicates = torch.randint(0, 50, (5,), generator=g)
        rel_pairs = torch.cat([pairs, torch.randint(0, num, (20, 2), generator=g)])
        scores = torch.rand(25, 51, generator=g)
        scores[torch.arange(5), predicates + 1] += torch.rand(5, generator=g) * 1.5
        samples.append(dict(sample_idx=i, gt_instances=dict(bboxes=boxes, labels=labels),
                            gt_relations=dict(pair_idxs=pairs, labels=predicates),
                            pred_relations=dict(pair_idxs=rel_pairs, scores=scores)))
    return samples


@pytest.fixture(scope='module')
def summary():
    metric = SGMeanRecall(mode='predcls')
    metric.dataset_meta = vg150_meta()
    metric.process(None, synthetic_samples())
    with contextlib.redirect_stdout(io.StringIO()):
        metric.evaluate(12)
    return metric.last_report


def parse_markdown_tables(text):
    """Markdown pipe tables -> list of (header cells, rows of cells)."""
    tables, current = [], None
    for line in text.splitlines():
        if line.startswith('|'):
            cells = [c.strip() for c in line.strip().strip('|').split('|')]
            if current is None:
                current = (cells, [])
            elif all(set(c) <= set('-:') and c for c in cells):
                continue
            else:
                current[1].append(cells)
        elif current is not None:
            tables.append(current)
            current = None
    if current is not None:
        tables.append(current)
    return tables


def test_write_reports(tmp_path, summary):
    ks = (20, 50, 100)
    paths = write_scene_graph_reports(summary, str(tmp_path), 'predcls', ks, 'VG150', 'predcls')
    assert set(paths) == {'json', 'png', 'markdown', 'latex', 'csv_main', 'csv_families', 'csv_groups',
                          'csv_per_predicate', 'csv_relative'}  # R@rel / mR@rel: always computed
    assert paths['json'].endswith('predcls.metrics.json')

    # metrics.json: every key and the per-predicate recalls
    saved = json.loads(open(paths['json'], encoding='utf-8').read())
    assert saved['dataset'] == 'VG150' and saved['mode'] == 'predcls' and saved['ks'] == ['20', '50', '100']
    assert saved['metrics'].keys() == summary['metrics'].keys()
    for key, value in summary['metrics'].items():
        assert saved['metrics'][key] == pytest.approx(value)
    assert list(saved['per_predicate']) == list(summary['per_predicate'])
    assert saved['per_predicate']['on']['R@50'] == pytest.approx(summary['per_predicate']['on']['R@50'])
    assert saved['groups'] == summary['groups'] and saved['num_images'] == 12

    # PNG: opens, right size, not blank
    from PIL import Image
    with Image.open(paths['png']) as img:
        img.load()
        width = max(8.0, 0.32 * 50 + 1.5)
        assert img.size == (int(round(width * 100)), 500)
        assert img.format == 'PNG'
        extrema = img.convert('L').getextrema()
        assert extrema[0] < 100 and extrema[1] > 200  # dark text/bars on a light background
        assert len(img.convert('RGB').getcolors(1 << 20)) > 10

    # Markdown: four tables that parse, with the right headers and numbers
    tables = parse_markdown_tables(open(paths['markdown'], encoding='utf-8').read())
    assert len(tables) == 5
    (head1, rows1), (head_f, rows_f), (head2, rows2), (head3, rows3), (head_rel, rows_rel) = tables
    assert head_rel == ['Dataset', 'Mode', 'R@rel', 'mR@rel']  # relative recall: its own table
    assert [float(c) for c in rows_rel[0][2:]] == pytest.approx([summary['metrics']['R@rel'],
                                                                  summary['metrics']['mR@rel']], abs=0.005)
    assert head_f == ['Family', 'Meaning', '@20', '@50', '@100']
    assert [r[0] for r in rows_f] == ['R', 'ngR', 'A', 'mR', 'ngmR', 'F', 'AVG']  # predcls, no zero-shot set
    for row in rows_f:
        assert [float(c) for c in row[2:]] == pytest.approx([summary['metrics'][f'{row[0]}@{k}'] for k in ks],
                                                            abs=0.005)
    assert head1 == ['Dataset', 'Mode', 'R@20', 'R@50', 'R@100', 'mR@20', 'mR@50', 'mR@100']
    assert rows1 == [['VG150', 'predcls'] + [f'{summary["metrics"][k]:.2f}' for k in head1[2:]]]
    assert head2[2:5] == ['mR@20 head', 'mR@20 body', 'mR@20 tail'] and len(head2) == 2 + 9
    for cell, col in zip(rows2[0][2:], head2[2:]):
        k, group = col.split()
        assert float(cell) == pytest.approx(summary['metrics'][f'{k}_{group}'], abs=0.005)
    assert head3 == ['Predicate', 'Group', '#GT', 'R@20', 'R@50', 'R@100']
    assert [r[0] for r in rows3] == list(summary['per_predicate'])
    assert len(rows3) == 50
    groups = {p: g for g, members in summary['groups'].items() for p in members}
    for row in rows3:
        ref = summary['per_predicate'][row[0]]
        assert row[1] == groups[row[0]] and int(row[2]) == ref['num_gt']
        if ref['num_gt'] == 0:  # no GT: no recall
            assert row[3:] == ['–'] * 3
            continue
        assert [float(c) for c in row[3:]] == pytest.approx([ref[f'R@{k}'] for k in (20, 50, 100)], abs=0.005)


def test_per_predicate_order_is_training_frequency(summary):
    counts = vg150_meta()['predicate_counts']
    order = sorted(range(50), key=lambda i: -counts[i])
    assert list(summary['per_predicate']) == [VG150_PREDICATES[i] for i in order]


def test_custom_chart_size_and_k(tmp_path, summary):
    path = plot_per_predicate_recall(summary, str(tmp_path / 'sub' / 'chart.png'), 20, 'VG150', 'predcls',
                                     figsize=(6, 3), dpi=50)
    from PIL import Image
    with Image.open(path) as img:
        assert img.size == (300, 150)


def test_reports_without_groups_and_with_nan(tmp_path):
    summary = {'metrics': {'R@10': 12.5, 'mR@10': float('nan')}, 'num_images': 2,
               'per_predicate': {'a': {'R@10': 10.0, 'num_gt': 3}, 'b': {'R@10': 0.0, 'num_gt': 1}},
               'groups': {}}
    paths = write_scene_graph_reports(summary, str(tmp_path), '', [10], 'toy', 'sgdet')
    assert paths['json'].endswith('/metrics.json')
    saved = json.loads(open(paths['json']).read())  # strict JSON: NaN -> null
    assert saved['metrics']['mR@10'] is None
    tables = parse_markdown_tables(open(paths['markdown']).read())
    assert len(tables) == 3 and tables[0][1][0][2:] == ['12.50', '–']
    assert tables[1][1] == [['R', 'Recall', '12.50'], ['mR', 'Mean recall', '–']]
    assert tables[2][1] == [['a', '', '3', '10.00'], ['b', '', '1', '0.00']]


def test_vlm_style_summary(tmp_path):
    summary = {'metrics': {'FailureRate': 10.0, 'Recall': 30.0, 'mRecall': 20.0, 'mRecall_head': 25.0,
                           'mRecall_tail': 5.0, 'AP@50': 40.0, 'R@20': 28.0, 'mR@20': 18.0},
               'per_predicate': {'on': {'Recall': 50.0, 'R@20': 40.0, 'num_gt': 4},
                                 'riding': {'Recall': 10.0, 'R@20': 10.0, 'num_gt': 2}},
               'groups': {'head': ['on'], 'tail': ['riding']}, 'num_images': 5, 'num_samples': 6}
    assert recall_key('mR', 'all', '_tail') == 'mRecall_tail' and recall_key('R', 20) == 'R@20'
    text = format_markdown_tables(summary, ['all', 20], 'PSG', 'sgdet (VLM)')
    tables = parse_markdown_tables(text)
    assert tables[0][0] == ['Dataset', 'Mode', 'Recall', 'R@20', 'mRecall', 'mR@20', 'AP@50', 'FailureRate']
    assert tables[0][1][0][2:] == ['30.00', '28.00', '20.00', '18.00', '40.00', '10.00']
    assert tables[1][0] == ['Family', 'Meaning', 'all', '@20']
    assert tables[1][1] == [['R', 'Recall', '30.00', '28.00'], ['mR', 'Mean recall', '20.00', '18.00']]
    assert tables[2][0][2:] == ['mRecall head', 'mRecall tail']
    assert tables[3][0] == ['Predicate', 'Group', '#GT', 'Recall', 'R@20']
    paths = write_scene_graph_reports(summary, str(tmp_path), 'vlm', ['all', 20], 'PSG', 'sgdet (VLM)')
    from PIL import Image
    with Image.open(paths['png']) as img:
        assert img.size == (800, 500)


def test_text_report_unchanged(summary):
    keys = {k: v for k, v in summary['metrics'].items() if k.split('@')[0] in ('mR',)}
    text = format_scene_graph_report(summary, keys, 'predcls', 'VG150', 'SGMeanRecall', (20, 50, 100))
    assert 'SGG eval:' in text and 'mode=predcls' in text and 'Per-predicate recall' in text
    assert not any(math.isnan(v) for v in summary['metrics'].values())


def test_sgrecall_summary_reports(tmp_path):
    metric = SGRecall(mode='sgcls', topk=(5, 10))
    metric.dataset_meta = vg150_meta()
    samples = synthetic_samples(4, seed=1)
    for s in samples:
        s['pred_instances'] = dict(labels=s['gt_instances']['labels'], scores=torch.ones(6))
    metric.process(None, samples)
    with contextlib.redirect_stdout(io.StringIO()):
        metric.evaluate(4)
    paths = write_scene_graph_reports(metric.last_report, str(tmp_path), 'sgcls', (5, 10), 'VG150', 'sgcls')
    tables = parse_markdown_tables(open(paths['markdown']).read())
    assert tables[0][0][2:] == ['R@5', 'R@10', 'mR@5', 'mR@10']
