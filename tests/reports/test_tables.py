"""The report tables of every metric (every key family, "–" without GT, Markdown / CSV / LaTeX)."""
import contextlib
import csv
import io
import json
import os
import warnings

import pytest
import torch

from mmsgg_eval.metrics import GroundingPr
from mmsgg_eval.metrics.scene_graph import SGMeanRecall
from mmsgg_eval.metrics.sgbench import SGBenchMetric
from mmsgg_eval.metrics.vlm import VLMSceneGraphMetric
from mmsgg_eval.reports import (per_predicate_figure, scene_graph_tables, tables_latex, write_scene_graph_reports,
                                write_tables)
from tests.reports.test_report_files import parse_markdown_tables, synthetic_samples, vg150_meta
from tests.metrics.test_vlm import GT, META, VALID


def read_csv(path):
    with open(path, newline='', encoding='utf-8') as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def csv_values(paths):
    """{(table, row label, column): float} of every numeric CSV cell of a report."""
    out = {}
    for key, path in paths.items():
        if not key.startswith('csv_'):
            continue
        header, rows = read_csv(path)
        for row in rows:
            for col, cell in zip(header, row):
                try:
                    out[(key[4:], row[0], col)] = float(cell)
                except ValueError:
                    pass
    return out


@pytest.fixture(scope='module')
def predcls_summary():
    meta = vg150_meta()
    samples = synthetic_samples()
    labels, rels = samples[0]['gt_instances']['labels'], samples[0]['gt_relations']
    sub, obj = rels['pair_idxs'][0].tolist()
    zeroshot = [[int(labels[sub]), int(labels[obj]), int(rels['labels'][0])]]  # one GT triplet is zero-shot
    metric = SGMeanRecall(mode='predcls', zeroshot_triplets=zeroshot)
    metric.dataset_meta = meta
    metric.process(None, samples)
    with contextlib.redirect_stdout(io.StringIO()):
        metric.evaluate(len(samples))
    return metric.last_report


def test_tables_show_every_key_family(tmp_path, predcls_summary):
    summary = dict(predcls_summary, metrics=dict(predcls_summary['metrics'], **{'mAP': 12.5, 'AP@50': 25.0}))
    families = {k.split('@')[0] for k in summary['metrics'] if '@' in k}
    assert {'R', 'ngR', 'zR', 'ngzR', 'A', 'mR', 'ngmR', 'F', 'AVG', 'AP'} <= families
    paths = write_scene_graph_reports(summary, str(tmp_path), 'predcls', (20, 50, 100), 'VG150', 'predcls')
    tables = {t.name: t for t in scene_graph_tables(summary, (20, 50, 100), 'VG150', 'predcls')}
    assert list(tables) == ['main', 'families', 'groups', 'per_predicate', 'relative']
    assert tables['main'].header[-2:] == ['mAP', 'AP@50']  # DetectionAP's keys in the SGDet/PredCls row
    assert [r[0] for r in tables['families'].rows] == ['R', 'ngR', 'zR', 'ngzR', 'A', 'mR', 'ngmR', 'zmR', 'F',
                                                       'AVG']
    # every key of the summary is in some table, with the same number in the CSV files
    values = csv_values(paths)
    found = set()
    for key, value in summary['metrics'].items():
        hits = [v for v in values.values() if v == value]
        assert hits, key
        found.add(key)
    assert found == set(summary['metrics'])
    fam_header, fam_rows = read_csv(paths['csv_families'])
    assert fam_header == ['Family', 'Meaning', '@20', '@50', '@100']
    for row in fam_rows:
        for k, cell in zip((20, 50, 100), row[2:]):
            assert float(cell) == summary['metrics'][f'{row[0]}@{k}']  # full precision, parsed back exactly
    markdown = open(paths['markdown'], encoding='utf-8').read()
    for head, _ in parse_markdown_tables(markdown):
        assert head[0] in ('Dataset', 'Family', 'Predicate')
    assert '| zR | Zero-shot recall |' in markdown and '| A | Pair accuracy |' in markdown


def test_predicates_without_gt_show_a_dash(tmp_path, predcls_summary):
    no_gt = [p for p, row in predcls_summary['per_predicate'].items() if row['num_gt'] == 0]
    with_gt = [p for p, row in predcls_summary['per_predicate'].items() if row['num_gt'] > 0]
    assert no_gt and with_gt
    paths = write_scene_graph_reports(predcls_summary, str(tmp_path), 'predcls', (20, 50, 100), 'VG150', 'predcls')
    tables = parse_markdown_tables(open(paths['markdown'], encoding='utf-8').read())
    rows = {r[0]: r for r in next(rows for head, rows in tables if head[0] == 'Predicate')}
    assert rows[no_gt[0]][2:] == ['0', '–', '–', '–']
    assert all(c != '–' for c in rows[with_gt[0]][3:])
    header, csv_rows = read_csv(paths['csv_per_predicate'])
    assert {r[0]: r for r in csv_rows}[no_gt[0]][3:] == ['', '', '']  # no value, not 0
    # the chart: no bar and a dash for the predicate without GT
    fig = per_predicate_figure(predcls_summary, 100, 'VG150', 'predcls')
    ax = fig.axes[0]
    names = list(predcls_summary['per_predicate'])
    dashes = sorted(round(t.get_position()[0]) for t in ax.texts if t.get_text() == '–')
    assert dashes == sorted(names.index(p) for p in no_gt)
    heights = [bar.get_height() for bar in ax.patches[:len(names)]]
    assert all(heights[names.index(p)] == 0 for p in no_gt)


@pytest.mark.parametrize('average, phrase', [('image', 'image-averaged'), ('micro', 'pooled')])
def test_per_predicate_table_says_how_recall_is_averaged(average, phrase):
    metric = SGMeanRecall(mode='predcls', recall_average=average)
    metric.dataset_meta = vg150_meta()
    metric.process(None, synthetic_samples(4))
    with contextlib.redirect_stdout(io.StringIO()):
        metric.evaluate(4)
    tables = {t.name: t for t in scene_graph_tables(metric.last_report, (20, 50, 100), 'VG150', 'predcls')}
    table = tables['per_predicate']
    assert phrase in table.caption
    assert phrase in metric.last_report['text']  # the logged per-predicate table says it too
    chart_title = per_predicate_figure(metric.last_report, 20, 'VG150', 'predcls').axes[0].get_title()
    assert phrase in chart_title


def test_latex_uses_booktabs_and_escapes():
    summary = {'metrics': {'R@20': 12.5, 'mR@20': 50.0}, 'num_images': 2,
               'per_predicate': {'on_top & 50%': {'R@20': 10.0, 'num_gt': 3}, 'b': {'R@20': 0.0, 'num_gt': 0}},
               'groups': {}}
    tex = tables_latex('VG_150 & co', scene_graph_tables(summary, [20], 'VG_150 & co', 'sgdet'))
    for rule in (r'\toprule', r'\midrule', r'\bottomrule'):
        assert tex.count(rule) == 3  # main, families, per-predicate
    assert r'on\_top \& 50\%' in tex and r'VG\_150 \& co' in tex
    assert 'on_top' not in tex.replace(r'on\_top', '') and ' & 50%' not in tex
    assert r'b & -- & 0 & --' not in tex and r'b &  & 0 & --' in tex  # no group, no value: --
    assert tex.count(r'\begin{tabular}') == tex.count(r'\end{tabular}') == 3


def test_write_tables_round_trip(tmp_path):
    from mmsgg_eval.reports import ReportTable
    table = ReportTable('main', 'x', ['Name', 'a', 'b'], [['r1', 1 / 3, None], ['r,2 "q"', 2.5, float('nan')]])
    paths = write_tables(str(tmp_path), 'demo', 'Demo', [table])
    assert sorted(os.listdir(tmp_path)) == ['demo.tables.main.csv', 'demo.tables.md', 'demo.tables.tex']
    header, rows = read_csv(paths['csv_main'])
    assert header == ['Name', 'a', 'b'] and rows == [['r1', repr(1 / 3), ''], ['r,2 "q"', '2.5', '']]
    assert float(rows[0][1]) == 1 / 3


def evaluate_quietly(metric, samples):
    metric.process(None, samples)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter('ignore')
        metric.evaluate(len(samples))
    return metric.last_report


def test_vlm_metric_writes_every_report_file(tmp_path):
    metric = VLMSceneGraphMetric(report_dir=str(tmp_path), topk=(1,), iou_plus_one=False)
    metric.dataset_meta = META
    report = evaluate_quietly(metric, [dict(GT, sample_idx=0, pred_text=VALID), dict(GT, sample_idx=1, pred_text='x')])
    files = report['report_files']
    assert {'json', 'png', 'markdown', 'latex', 'csv_main', 'csv_families', 'csv_per_predicate'} <= set(files)
    assert all(os.path.isfile(p) for p in files.values())
    header, rows = read_csv(files['csv_main'])
    assert header[2:] == ['Recall', 'R@1', 'mRecall', 'mR@1', 'AP@50', 'FailureRate']
    assert float(rows[0][header.index('FailureRate')]) == 50.0


def test_sgbench_metric_writes_tables_with_its_keys(tmp_path):
    from tests.sgg_samples import random_dataset
    from tests.metrics.scene_graph.test_recall import META as SG_META
    samples, _ = random_dataset(3, 8, 'sgdet')
    metric = SGBenchMetric(mode='sgdet', topk=(5, 10), report_dir=str(tmp_path))
    metric.dataset_meta = SG_META
    report = evaluate_quietly(metric, samples)
    files = report['report_files']
    assert all(os.path.isfile(files[k]) for k in ('json', 'png', 'markdown', 'latex', 'csv_main', 'csv_families'))
    header, rows = read_csv(files['csv_main'])
    assert header[2:] == ['R@5', 'R@10', 'R@inf', 'mR@5', 'mR@10', 'mR@inf', 'InstR', 'PRank']
    fam_header, fam_rows = read_csv(files['csv_families'])
    assert fam_header[2:] == ['@5', '@10', '@inf'] and [r[0] for r in fam_rows] == ['R', 'PairR', 'mR']
    for row in fam_rows:
        for k, cell in zip(('5', '10', 'inf'), row[2:]):
            assert float(cell) == report['metrics'][f'{row[0]}@{k}']
    _, pp_rows = read_csv(files['csv_per_predicate'])
    assert len(pp_rows) == len(SG_META['predicates'])


def test_grounding_metric_writes_tables(tmp_path):
    metric = GroundingPr(report_dir=str(tmp_path), thresholds=(0.5, 0.75))
    metric.dataset_meta = {'dataset_name': 'DIOR_RSVG'}
    samples = [{'sample_idx': i, 'ori_shape': (100, 100), 'gt_instances': {'bboxes': torch.tensor([[0., 0., 10, 10]])},
                'pred_instances': {'bboxes': torch.tensor([[0., 0., w, 10]])}} for i, w in enumerate((5, 8, 10))]
    report = evaluate_quietly(metric, samples)
    files = report['report_files']
    assert set(files) == {'json', 'markdown', 'latex', 'csv_main', 'csv_thresholds'}
    header, rows = read_csv(files['csv_main'])
    assert header == ['Dataset', 'Protocol', 'Pr@0.5', 'Pr@0.75', 'meanIoU', 'cumIoU']
    assert rows[0][:2] == ['DIOR_RSVG', 'exact']
    assert [float(c) for c in rows[0][2:]] == [report['metrics'][k] for k in header[2:]]
    _, hit_rows = read_csv(files['csv_thresholds'])
    assert hit_rows == [['0.5', '3', repr(100.0)], ['0.75', '2', repr(200 / 3)]]
    tex = open(files['latex'], encoding='utf-8').read()
    assert r'DIOR\_RSVG' in tex and r'\toprule' in tex
    assert '| DIOR_RSVG | exact |' in open(files['markdown'], encoding='utf-8').read()


def test_detection_ap_keys_join_the_sgdet_tables(tmp_path):
    from tests.sgg_samples import random_dataset
    from tests.metrics.test_base import build_evaluator, feed
    samples, _ = random_dataset(5, 9, 'sgdet')
    evaluator = build_evaluator(*[dict(type=t, mode='sgdet', report_dir=str(tmp_path))
                                  for t in ('SGRecall', 'SGMeanRecall')], dict(type='DetectionAP'))
    evaluator.metrics[2].report_dir = str(tmp_path)  # as tools/test.py sets it on every metric that has it
    feed(evaluator, samples, 4)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter('ignore')
        out = evaluator.evaluate(len(samples))
    header, rows = read_csv(tmp_path / 'sgdet.tables.main.csv')
    assert header[-2:] == ['mAP', 'AP@50']
    assert [float(c) for c in rows[0][-2:]] == [out['sgdet/mAP'], out['sgdet/AP@50']]
    assert float(rows[0][header.index('R@50')]) == out['sgdet/R@50']
    assert '| mAP | AP@50 |' in open(tmp_path / 'sgdet.tables.md', encoding='utf-8').read()
    assert r'mAP & AP@50 \\' in open(tmp_path / 'sgdet.tables.tex', encoding='utf-8').read()
    det_header, det_rows = read_csv(tmp_path / 'sgdet.detection.tables.main.csv')
    assert det_header == ['Dataset', 'Mode', 'mAP', 'AP@50'] and float(det_rows[0][2]) == out['sgdet/mAP']
    saved = json.load(open(tmp_path / 'sgdet.detection.metrics.json'))
    assert saved['metrics']['AP@50'] == out['sgdet/AP@50'] and saved['num_images'] == 9
