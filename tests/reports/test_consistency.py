"""Every output shows the metric's own numbers: the HTML report (browse) equals metrics.json under every
convention, subsets / groups / families without GT have no value (NaN, '–', and the reason), Markdown cells
are escaped by one escaper in every writer, the VLM metric's padding and sentinels never reach an output,
and the HTML report tool reads partial prediction sets as the offline CLI does."""
import json
import math
import os.path as osp
import re
import warnings

import pytest
import torch

from mmsgg_eval.metrics import SGMeanRecall, SGRecall
from mmsgg_eval.metrics.per_image import read_per_image
from tests.sgg_samples import random_dataset
from tests.metrics.scene_graph.test_recall import META, NUM_PREDICATES

KS = (1, 3, 20)


def evaluate(cls, samples, meta=META, **kwargs):
    metric = cls(**kwargs)
    metric.dataset_meta = meta
    metric.process({}, samples)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        keys = metric.evaluate(len(samples))
    return metric, {k.split('/', 1)[1]: v for k, v in keys.items()}, [str(w.message) for w in caught]


def markdown_cells(line):
    """The cells of one Markdown table row, split as GFM does: on pipes not escaped by a backslash (a
    backslash escapes the next character, itself included)."""
    cells, cell, i = [], '', 0
    body = line.strip()[1:-1] if line.strip().startswith('|') and line.strip().endswith('|') else line
    while i < len(body):
        if body[i] == '\\' and i + 1 < len(body):
            cell += body[i:i + 2]
            i += 2
            continue
        if body[i] == '|':
            cells.append(cell)
            cell = ''
        else:
            cell += body[i]
        i += 1
    return cells + [cell]


def assert_tables_well_formed(text):
    """Every row of every Markdown table has as many cells as its header."""
    width = None
    tables = 0
    for line in text.splitlines():
        if not line.startswith('|'):
            width = None
            continue
        cells = markdown_cells(line)
        if width is None:
            width, tables = len(cells), tables + 1
        assert len(cells) == width, line
    assert tables


# ---------------------------------------------------------------------------------------------- item 4

@pytest.mark.parametrize('options', [dict(mr_average='present', recall_average='micro'),
                                     dict(mr_average='present'), dict(recall_average='micro'), {}])
def test_report_summary_is_the_metrics_own(tmp_path, options):
    """The HTML report averaged mR over every predicate whatever mr_average, and showed predicates without
    GT as 0.00."""
    from mmsgg_eval.analysis.browse import summarize_records, write_report
    samples, _ = random_dataset(3, 12, 'predcls', num_classes=4, num_predicates=NUM_PREDICATES)
    for s in samples:  # predicate 4 never in the GT: 'present' and 'all' differ
        labels = s['gt_relations']['labels']
        s['gt_relations']['labels'] = torch.where(labels == 4, torch.zeros_like(labels), labels)
    path = str(tmp_path / 'per_image.jsonl')
    _, keys, _ = evaluate(SGMeanRecall, samples, mode='predcls', topk=KS, per_image_out=path, **options)
    _, recall, _ = evaluate(SGRecall, samples, mode='predcls', topk=KS, **options)
    records = read_per_image(path)
    write_report(records, str(tmp_path / 'report'), META['classes'], META['predicates'], k=3, max_images=0,
                 progress=False)  # the conventions are read from the records
    index = open(tmp_path / 'report' / 'index.html', encoding='utf-8').read()
    for k in KS:
        for key, value in ((f'mR@{k}', keys[f'mR@{k}']), (f'R@{k}', recall[f'R@{k}'])):
            assert re.search(rf'data-key="{key}">([^<]*)<', index).group(1) == f'{value:.2f}', key
    p4 = re.search(r'>p4</a></td><td>0</td>((?:<td>[^<]*</td>)+)</tr>', index).group(1)
    assert p4 == '<td>–</td>' * len(KS)
    assert records[0]['mr_average'] == options.get('mr_average', 'all')
    summary = summarize_records(records, META['predicates'], list(KS), records[0]['recall_average'],
                                records[0]['mr_average'])
    for k in KS:  # the same functions: equal to the last bit
        assert summary['metrics'][f'mR@{k}'] == keys[f'mR@{k}'] and summary['metrics'][f'R@{k}'] == recall[f'R@{k}']
    assert summary['per_predicate']['p4'] == {'R@1': None, 'R@3': None, 'R@20': None, 'num_gt': 0}


def test_report_reads_the_evaluations_values(tmp_path):
    """With the evaluation's metrics.json the report shows its values (read, not recomputed)."""
    from mmsgg_eval.analysis.browse import write_report
    samples, _ = random_dataset(4, 8, 'predcls', num_classes=4, num_predicates=NUM_PREDICATES)
    path = str(tmp_path / 'p.jsonl')
    evaluate(SGMeanRecall, samples, mode='predcls', topk=KS, per_image_out=path)
    metrics = {'predcls/mR@3': 12.345, 'predcls/R@3': 54.321, 'predcls/R@1': float('nan'),
               'predcls/per_predicate_recall': {'p1': {'R@3': 99.0, 'num_gt': 3}}}
    summary = write_report(read_per_image(path), str(tmp_path / 'r'), META['classes'], META['predicates'], k=3,
                           max_images=0, progress=False, metrics=metrics)
    index = open(tmp_path / 'r' / 'index.html', encoding='utf-8').read()
    assert 'data-key="mR@3">12.35<' in index and 'data-key="R@3">54.32<' in index and 'data-key="R@1">–<' in index
    assert summary['values_read'] >= 4


# ---------------------------------------------------------------------------------------------- item 5

def test_subsets_without_gt_have_no_value(tmp_path):
    """With every predicate novel, R@K_base was 0.0 as if measured."""
    samples, _ = random_dataset(5, 10, 'predcls', num_classes=4, num_predicates=NUM_PREDICATES)
    kwargs = dict(mode='predcls', topk=KS, novel_predicates=list(META['predicates']), report_dir=str(tmp_path),
                  predicate_groups={'head': ['p0', 'p1', 'p2', 'p3'], 'tail': ['p4']},
                  zeroshot_triplets=[[0, 0, 0]])
    for s in samples:  # no p4 and no zero-shot triplet (c0, c0, p0) in the GT
        labels = s['gt_relations']['labels'].clone()
        pairs, classes = s['gt_relations']['pair_idxs'], s['gt_instances']['labels']
        labels[labels == 4] = 1
        zs = (labels == 0) & (classes[pairs[:, 0]] == 0) & (classes[pairs[:, 1]] == 0) if len(pairs) else labels > 9
        labels[zs] = 2
        s['gt_relations']['labels'] = labels
    metric, keys, caught = evaluate(SGRecall, samples, **kwargs)
    mean, mkeys, mcaught = evaluate(SGMeanRecall, samples, **kwargs)
    for k in KS:
        assert math.isnan(keys[f'R@{k}_base']) and math.isnan(keys[f'ngR@{k}_base'])
        assert math.isnan(keys[f'zR@{k}']) and math.isnan(keys[f'ngzR@{k}'])
        assert math.isnan(mkeys[f'mR@{k}_tail']) and not math.isnan(mkeys[f'mR@{k}_head'])
        assert keys[f'R@{k}_novel_pred'] == keys[f'R@{k}'] and not math.isnan(keys[f'R@{k}'])
    reasons = {tuple(e['keys']): e['why'] for e in metric.last_report['no_value']}
    assert 'no evaluated GT relation is in the base subset' in reasons[('R@1_base', 'R@3_base', 'R@20_base',
                                                                        'ngR@1_base', 'ngR@3_base', 'ngR@20_base')]
    assert any('zero-shot set (1 triplets' in why for why in reasons.values())
    assert any('tail group' in e['why'] for e in mean.last_report['no_value'])
    assert any('R@20_base' in w and 'no value' in w for w in caught)
    tables = open(tmp_path / 'predcls.tables.md', encoding='utf-8').read()
    assert 'Keys without a value' in tables and 'base subset' in tables
    assert '| R@20_base | – |' in tables
    # the whole evaluation keeps its documented value, and 'all' keeps the legacy denominator inside groups
    legacy, lkeys, _ = evaluate(SGMeanRecall, samples, mode='predcls', topk=KS)
    assert all(not math.isnan(v) for v in lkeys.values())


def test_no_value_keys_keep_bootstrap_quiet():
    """A NaN key is reproduced by its per-image decomposition (no 'no bootstrap interval' warning)."""
    samples, _ = random_dataset(5, 10, 'predcls', num_classes=4, num_predicates=NUM_PREDICATES)
    _, keys, caught = evaluate(SGRecall, samples, mode='predcls', topk=KS, novel_predicates=list(META['predicates']),
                               bootstrap=dict(samples=20))
    assert math.isnan(keys['R@3_base'])
    assert not [w for w in caught if 'no bootstrap interval' in w]


# ---------------------------------------------------------------------------------------------- item 10

NAMES = dict(META, predicates=['on|top', 'p1\\|x', 'p2', 'next\nto', 'p4'])


def test_markdown_writers_escape_cells(tmp_path):
    """compare.md broke on a '|' in a predicate name (the report tables escaped it, compare did not)."""
    from mmsgg_eval.analysis.relation_alignment import alignment_markdown
    from mmsgg_eval.compare import main as compare
    from mmsgg_eval.reports import markdown_cell
    assert markdown_cell('a|b') == 'a\\|b' and markdown_cell('a\\|b') == 'a\\\\\\|b'
    assert markdown_cells('| ' + markdown_cell('x\\|y|z') + ' | 2 |') == [' x\\\\\\|y\\|z ', ' 2 ']
    samples, _ = random_dataset(6, 16, 'predcls', num_classes=4, num_predicates=NUM_PREDICATES)
    for run, seed in (('a|1', 0), ('b|2', 1)):
        g = torch.Generator().manual_seed(seed)
        for cls in (SGRecall, SGMeanRecall):
            metric = cls(mode='predcls', save_state=str(tmp_path / run / f'{cls.__name__}.state'),
                         report_dir=str(tmp_path / run))
            metric.dataset_meta = NAMES
            chunk = [dict(s, pred_relations=dict(s['pred_relations'], scores=s['pred_relations']['scores'][
                torch.randperm(s['pred_relations']['scores'].shape[0], generator=g)])) for s in samples]
            metric.process({}, chunk)
            metric.evaluate(len(samples))
        assert_tables_well_formed(open(tmp_path / run / 'predcls.tables.md', encoding='utf-8').read())
    compare([str(tmp_path / 'a|1'), str(tmp_path / 'b|2'), '--samples', '30', '--out-dir', str(tmp_path / 'out')])
    text = open(tmp_path / 'out' / 'compare.md', encoding='utf-8').read()
    assert_tables_well_formed(text)
    assert 'on\\|top' in text and 'next to' in text
    summary = {'dataset': {'num_relations': 3, 'Score': 1.0, 'Precision': 0.5, 'theta': 0.1},
               'per_predicate': {'on|top': {'num_relations': 1, 'Score': 1.0, 'Precision': 1.0, 'theta': 0.2}},
               'confused': [{'groundtruth': 'a -on|top-> b', 'confused': 'a -p2-> b', 'count': 2}]}
    assert_tables_well_formed(alignment_markdown(summary))


# ---------------------------------------------------------------------------------------------- item 15

def test_vlm_padding_never_reaches_an_output(tmp_path):
    """A relation with an unknown predicate was written as '6:airplane -above-> 6:airplane' with boxes at
    -100000, and the per-image keys were named R@1000000000."""
    from mmsgg_eval.analysis.browse import write_report
    from mmsgg_eval.metrics import VLMSceneGraphMetric
    from tests.metrics.test_vlm import GT, HAT, HORSE, META as VLM_META, PERSON, RIDING, VALID, graph
    floating = {'subject': 'person.1', 'predicate': 'floating over', 'object': 'horse.2'}
    text = graph([PERSON, HORSE, HAT], [floating, RIDING])
    for rank in ('given', 'score'):
        path = tmp_path / f'{rank}.jsonl'
        metric = VLMSceneGraphMetric(iou_plus_one=False, per_image_out=str(path), topk=(1, 5), rank=rank)
        metric.dataset_meta = VLM_META
        metric.process(None, [dict(GT, sample_idx=0, pred_text=text), dict(GT, sample_idx=1, pred_text=VALID)])
        out = metric.evaluate(2)
        raw = path.read_text()
        assert '1000000000' not in raw and '-100000' not in raw
        lines = read_per_image(str(path))
        assert {k for k in lines[0] if '@' in k or k == 'Recall'} == {'Recall', 'R@1', 'R@5'}
        assert lines[0]['Recall'] == pytest.approx(50.0) and out['vlm/Recall'] == pytest.approx(75.0)
        unknown = [p for p in lines[0]['predictions'] if p.get('unknown')]
        assert len(unknown) == 1
        assert unknown[0]['words'] == ['person', 'floating over', 'horse']
        assert unknown[0]['subject'] is None and unknown[0]['subject_box'] is None and unknown[0]['predicate'] is None
        known = [p for p in lines[0]['predictions'] if not p.get('unknown')]
        assert [(p['subject_label'], p['predicate'], p['object_label']) for p in known] == \
            [('person', 'riding', 'horse')]
        report = tmp_path / f'report_{rank}'
        write_report(lines, str(report), VLM_META['classes'], VLM_META['predicates'], progress=False)
        pages = [open(p, encoding='utf-8').read() for p in [report / 'index.html', report / 'images' / '0.html']]
        assert not any('1000000000' in page or '-100000' in page for page in pages)
        assert '<th>@all</th>' in pages[0] and 'unknown: floating over' in pages[1]
        assert 'unknown: person' in pages[1]


def test_legacy_background_objects_are_not_shown_as_objects(tmp_path):
    """Objects predicted as background in a legacy dump stand on a placeholder box: never a drawn triplet."""
    from mmsgg_eval.io.samples import PLACEHOLDER_BOX
    from mmsgg_eval.metrics.per_image import is_placeholder_box
    assert is_placeholder_box(list(PLACEHOLDER_BOX)) and not is_placeholder_box([0, 0, 1, 1])
    samples, _ = random_dataset(7, 6, 'sgdet', num_classes=4, num_predicates=NUM_PREDICATES)
    for s in samples:
        if len(s['pred_instances']['bboxes']):
            s['pred_instances']['bboxes'][0] = torch.tensor(PLACEHOLDER_BOX)
    path = tmp_path / 'p.jsonl'
    evaluate(SGRecall, samples, mode='sgdet', topk=KS, per_image_out=str(path), per_image_topk=100)
    assert '-100000' not in path.read_text()
    lines = read_per_image(str(path))
    marked = [p for r in lines for p in r['predictions'] if p.get('unknown')]
    assert marked and all(p['subject'] is None or p['object'] is None for p in marked)


# ---------------------------------------------------------------------------------------------- item 17

@pytest.mark.slow
def test_browse_tool_on_a_partial_prediction_set(tmp_path):
    """browse_results.py ended in a traceback on a partial prediction set and had no --allow-missing."""
    pytest.importorskip('mmdet.datasets')
    from mmsgg_eval.datasets import VG150Dataset
    from mmsgg_eval.testing import make_sample_data
    from tests.offline.test_eval_cli import CONFIG, predictions_for
    from tests.tool_runs import run_tool
    make_sample_data(str(tmp_path / 'data'), datasets=['vg150'])
    root = str(tmp_path / 'data' / 'vg150') + '/'
    dataset = VG150Dataset(data_root=root, split='test', num_val_images=8, pipeline=[])
    preds = tmp_path / 'partial.jsonl'
    preds.write_text('\n'.join(json.dumps(r) for r in predictions_for(dataset, drop={0, 3})))
    tool = osp.join('tools', 'analysis', 'browse_results.py')
    args = [tool, CONFIG, str(preds), '--no-progress', '--max-images', '2', '--cfg-options',
            f'test_dataloader.dataset.data_root={root}']
    refused = run_tool(args + ['--out-dir', str(tmp_path / 'refused')])
    assert refused.returncode == 1 and 'Traceback' not in refused.stderr
    assert 'without a prediction' in refused.stderr or 'missing' in refused.stderr
    assert refused.stderr.strip().count('\n') <= 1
    done = run_tool(args + ['--out-dir', str(tmp_path / 'report'), '--allow-missing'], check=True)
    assert 'report of' in done.stdout
    metrics = json.load(open(tmp_path / 'report' / 'eval' / 'metrics.json'))
    assert metrics['predcls/num_missing_predictions'] == 2
    index = open(tmp_path / 'report' / 'index.html', encoding='utf-8').read()
    for k in (20, 50, 100):
        assert f'data-key="R@{k}">{metrics[f"predcls/R@{k}"]:.2f}<' in index
