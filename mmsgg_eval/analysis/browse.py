"""A static, self-contained HTML report of per-image hits and misses (``tools/analysis/browse_results.py``).

Input: the per-image records of a scene-graph metric (:mod:`mmsgg_eval.metrics.per_image`), from a
``per_image_out`` file or from an offline evaluation of saved predictions run here. Output folder::

    index.html                 summary table, per-predicate chart, confusion heat map, image table
    images/<sample_idx>.html   one page per drawn image; images/<sample_idx>.jpg its picture
    predicates/<n>.html        one page per predicate
    per_predicate.png, confusion.png
    changes.html, changes.md, changes.json   given another run (``--compare-to``): the GT relations gained and lost

No server and no network: inline CSS and vanilla JavaScript, relative links, so ``index.html`` opens from
disk. The numbers are computed from the records with the metric's own aggregation
(:func:`~mmsgg_eval.functional.recall_from_ranks`, :func:`~mmsgg_eval.functional.per_predicate_recall`), so
the index's R@K equal the evaluation's (``metrics.json``) for the recall average given (``image``, the
default, or ``micro``). Pictures are drawn from the records by
:func:`~mmsgg_eval.visualization.drawing.draw_record`, as ``SceneGraphLocalVisualizer`` draws them (boxes
only: masks are drawn by ``--show-dir``, which has the data samples); an image file that
cannot be read is replaced by a grey canvas.
"""
import html
import json
import os
import os.path as osp
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..functional import per_predicate_recall, recall_from_ranks
from ..functional.limits import K_ALL, NO_HIT

CSS = """
body{font-family:sans-serif;margin:1em 2em;color:#222}
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;padding:2px 6px;text-align:left}
th{background:#eee;cursor:pointer}tr.hit td.s{color:#080}tr.miss td.s{color:#c00}
.hit{color:#080}.miss{color:#c00}.thumbs img{width:180px;margin:2px;border:1px solid #aaa}
img.pic{max-width:100%}nav a{margin-right:1em}.hidden{display:none}
pre.answer{white-space:pre-wrap;background:#f6f6f6;border:1px solid #ccc;padding:4px;max-height:30em;overflow:auto}
"""

SORT_JS = """
function sortTable(th){var t=th.closest('table'),b=t.tBodies[0],i=Array.prototype.indexOf.call(th.parentNode.children,th);
var asc=th.dataset.asc!=='1';th.dataset.asc=asc?'1':'0';var rows=Array.prototype.slice.call(b.rows);
rows.sort(function(x,y){var a=x.cells[i].dataset.v!==undefined?x.cells[i].dataset.v:x.cells[i].textContent,
c=y.cells[i].dataset.v!==undefined?y.cells[i].dataset.v:y.cells[i].textContent,p=parseFloat(a),q=parseFloat(c);
var r=(!isNaN(p)&&!isNaN(q))?p-q:a.localeCompare(c);return asc?r:-r;});rows.forEach(function(r){b.appendChild(r);});}
document.querySelectorAll('th.sortable').forEach(function(th){th.addEventListener('click',function(){sortTable(th);});});
"""

FILTER_JS = """
function applyFilter(){var p=document.getElementById('pred').value,k=document.getElementById('kval').value,
s=document.getElementById('split').value,n=0;document.querySelectorAll('#images tbody tr').forEach(function(r){
var missed=(r.dataset['missed'+k]||'').split('|'),show=(!p||missed.indexOf(p)>=0)&&(!s||r.dataset.split===s);
r.classList.toggle('hidden',!show);if(show)n++;});document.getElementById('shown').textContent=n;}
['pred','kval','split'].forEach(function(id){document.getElementById(id).addEventListener('change',applyFilter);});
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _page(title: str, body: str, script: str = '') -> str:
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{_e(title)}</title><style>{CSS}</style>'
            f'</head><body>{body}' + (f'<script>{script}</script>' if script else '') + '</body></html>\n')


def _fmt(value: Optional[float]) -> str:
    """Two decimals; ``–`` for no value (None, NaN: a predicate or subset without GT), as the report tables."""
    return '–' if value is None or value != value or value in (float('inf'), float('-inf')) else f'{value:.2f}'


#: The K label of a K-free recall (the VLM metric's ``Recall`` / ``mRecall``: every predicted triplet counts).
ALL = 'all'


def record_key(family: str, k: Any) -> Optional[str]:
    """The name of a family's key at K in the records and the metric's results: ``('R', 50) -> 'R@50'``,
    ``('R', 'all') -> 'Recall'``, ``('mR', 'all') -> 'mRecall'`` (no ngR without K: None)."""
    if k == ALL:
        return {'R': 'Recall', 'mR': 'mRecall'}.get(family)
    return f'{family}@{k}'


def found_within(rank: Optional[int], k: Any) -> bool:
    """A GT relation whose first hit is at ``rank`` (None: never) is found at K (``'all'``: at any rank)."""
    return rank is not None and (k == ALL or rank < k)


def _k_value(k: Any) -> int:
    return K_ALL if k == ALL else int(k)


def record_ks(records: Sequence[Dict[str, Any]]) -> List[Any]:
    """The K of the records' recall fields: ``'all'`` first for a K-free ``Recall`` (VLM), then the ints of
    their ``R@K`` fields (in their order)."""
    for r in records:
        ks = [int(k[2:]) for k in r if k.startswith('R@') and k[2:].isdigit()]
        ks = ([ALL] if 'Recall' in r else []) + ks
        if ks:
            return ks
    return []


def report_k(records: Sequence[Dict[str, Any]]) -> Any:
    """The report's default K: 50 when the records have it (or have no K), else their largest K (``'all'`` for
    the VLM's K-free records)."""
    ks = record_ks(records)
    return 50 if 50 in ks or not ks else ks[-1]


#: the key families the page shows (their formulas: the declarations of :mod:`mmsgg_eval.keys`)
PAGE_FAMILIES = ('R', 'ngR', 'mR')


def summarize_records(records: Sequence[Dict[str, Any]], predicates: Sequence[str], ks: Sequence[Any],
                      average: str = 'image', mr_average: str = 'all') -> Dict[str, Any]:
    """R@K / ngR@K / mR@K, per-predicate recall and the predicate confusion over GT pairs of the evaluated
    images, computed from the key declarations as the metric's summary computes them
    (:func:`~mmsgg_eval.metrics.key_values.summary_keys` on the records' ranks: :data:`PAGE_FAMILIES`):
    ``average`` / ``mr_average``: the metric's ``recall_average`` / ``mr_average``. A predicate without GT in
    the evaluated images has no recall (None, shown ``–``)."""
    from types import SimpleNamespace
    from ..keys import SCENE_GRAPH_FAMILIES
    from ..metrics.key_values import Relations, predicate_table, summary_keys
    index = {p: i for i, p in enumerate(predicates)}
    evaluated = [r for r in records if r['evaluated']]
    ranks = {'rank_gc': [], 'rank_ngc': []}
    preds, image_of = [], []
    num_p = len(predicates)
    confusion = np.zeros((num_p, num_p + 1), dtype=np.int64)  # column P: nothing ranked on the pair
    for i, r in enumerate(evaluated):
        for g in r['gt_relations']:
            for column in ranks:
                ranks[column].append(NO_HIT if g[column] is None else g[column])
            p = index[g['predicate']]
            preds.append(p)
            image_of.append(i)
            confusion[p, index.get(g.get('pair_predicate'), num_p) if g.get('pair_predicate') else num_p] += 1
    n = len(evaluated)
    out: Dict[str, Any] = {'num_images': n, 'num_records': len(records), 'num_gt_relations': len(preds),
                           'metrics': {}, 'confusion': confusion}
    values = tuple(_k_value(k) for k in ks)
    metric = SimpleNamespace(topk=values, recall_average=average, mr_average=mr_average, predicates=predicates,
                             mode='sgdet')
    rels = Relations({c: torch.tensor(v, dtype=torch.long) for c, v in ranks.items()},
                     torch.tensor(preds, dtype=torch.long), torch.tensor(image_of, dtype=torch.long), n, {}, None, {})
    families = [f for f in SCENE_GRAPH_FAMILIES if f.name in PAGE_FAMILIES and f.subset is None
                and f.members == 'all' and f.ks == 'topk']
    keys = summary_keys(metric, rels, families)
    for family in PAGE_FAMILIES:
        for k, v in zip(ks, values):
            if record_key(family, k):
                out['metrics'][record_key(family, k)] = keys[f'{family}@{v}']
    table = predicate_table(metric, rels)
    present = rels.tables[('rank_gc', None, values)][1]
    counts = np.bincount(np.asarray(preds, dtype=np.int64), minlength=num_p) if preds else np.zeros(num_p, int)
    out['per_predicate'] = {p: {**{record_key('R', k): 100.0 * float(table[j, i]) if counts[i] else None
                                   for j, k in enumerate(ks)}, 'num_gt': int(counts[i])}
                            for i, p in enumerate(predicates)}
    out['present'] = present.tolist()
    return out


def metric_values(summary: Dict[str, Any], results: Optional[Dict[str, Any]], prefix: Optional[str]) -> int:
    """Replace the summary's keys and per-predicate recalls by the evaluation's own (``results``: the content of
    ``metrics.json``, keys ``{prefix}/{key}``, tables ``{prefix}/per_predicate_recall``) where it has them; the
    records' recomputation (the same functions) stays for the rest. Returns how many values were read."""
    if not results or not prefix:
        return 0
    read = 0
    for key in list(summary['metrics']):
        value = results.get(f'{prefix}/{key}')
        if isinstance(value, (int, float)) or value is None and f'{prefix}/{key}' in results:
            summary['metrics'][key] = float('nan') if value is None else float(value)
            read += 1
    table = results.get(f'{prefix}/per_predicate_recall')
    if isinstance(table, dict):
        for name, row in summary['per_predicate'].items():
            theirs = table.get(name) or {}
            for key in row:
                if key != 'num_gt' and key in theirs:
                    row[key] = theirs[key] if row['num_gt'] and theirs[key] is not None else None
                    read += 1
    return read


def confusion_png(confusion: np.ndarray, predicates: Sequence[str], path: str) -> str:
    """Heat map of the predicate confusion over GT pairs (rows: GT predicate, columns: what the model ranked
    highest on the pair; last column: nothing on the pair), row-normalised, for the predicates present."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    rows = [i for i in range(len(predicates)) if confusion[i].sum()]
    cols = sorted(set(rows) | {j for j in range(len(predicates)) if confusion[rows, j].sum()}) if rows else []
    labels_c = [predicates[j] for j in cols] + ['(none)']
    matrix = confusion[np.ix_(rows, cols + [len(predicates)])].astype(float) if rows else np.zeros((1, 1))
    matrix = matrix / np.maximum(matrix.sum(1, keepdims=True), 1)
    size = max(4.0, 0.28 * len(labels_c) + 2)
    fig = Figure(figsize=(size, max(3.0, 0.28 * max(len(rows), 1) + 2)), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(matrix, cmap='viridis', vmin=0, vmax=1, aspect='auto')
    ax.set_xticks(range(len(labels_c)))
    ax.set_xticklabels(labels_c, rotation=90, fontsize=7)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([predicates[i] for i in rows], fontsize=7)
    ax.set_xlabel('top predicate of the model on the GT pair')
    ax.set_ylabel('GT predicate')
    fig.colorbar(im, ax=ax, fraction=0.03)
    fig.tight_layout()
    fig.savefig(path)
    return path


def _read_image(path: Optional[str], record: Dict[str, Any]) -> np.ndarray:
    """The image (RGB) or a grey canvas that holds every box of the record."""
    if path and osp.isfile(path):
        import mmcv
        img = mmcv.imread(path, channel_order='rgb')
        if img is not None:
            return img
    extent = [1.0, 1.0]
    for item in record['gt_relations'] + record['predictions']:
        for box in (item['subject_box'], item['object_box']):
            if box is not None:  # a stand-in object (unknown name) has no box
                extent = [max(extent[0], box[2]), max(extent[1], box[3])]
    return np.full((int(extent[1]) + 10, int(extent[0]) + 10, 3), 128, dtype=np.uint8)


def draw_image_pages(records: Sequence[Dict[str, Any]], out_dir: str, k: Any, topk_drawn: int,
                     image_root: Optional[str], changes: Optional[Dict[str, Any]], progress: bool) -> set:
    """Draw each record's picture (``images/{sample_idx}.jpg``) and write its page (``images/{sample_idx}.html``,
    with its gained / lost relations when ``changes`` is given); returns the ``sample_idx`` drawn."""
    import mmcv

    from ..visualization.drawing import draw_record, relation_items
    drawn = set()
    changed = {image['sample_idx']: image for image in (changes or {}).get('images', ())}
    bar = None
    if progress and records:
        from mmengine.utils import ProgressBar
        bar = ProgressBar(len(records))
    for r in records:
        path = r.get('img_path')
        if path and image_root and not osp.isabs(path):
            path = osp.join(image_root, path)
        picture = draw_record(_read_image(path, r), r, _k_value(k), topk_drawn)  # 'all': any rank
        mmcv.imwrite(picture[..., ::-1], osp.join(out_dir, 'images', f'{r["sample_idx"]}.jpg'))
        _write(osp.join(out_dir, 'images', f'{r["sample_idx"]}.html'),
               image_page(r, k, topk_drawn, relation_items, changes, changed.get(r['sample_idx'])))
        drawn.add(r['sample_idx'])
        if bar is not None:
            bar.update()
    if bar is not None:
        print()
    return drawn


def write_report(records: List[Dict[str, Any]], out_dir: str, classes: Sequence[str], predicates: Sequence[str],
                 k: Any = None, topk_drawn: int = 20, max_images: Optional[int] = None,
                 average: Optional[str] = None, metrics: Optional[Dict[str, Any]] = None,
                 title: str = 'scene-graph results', image_root: Optional[str] = None, progress: bool = True,
                 split: str = '', mr_average: Optional[str] = None,
                 predicate_counts: Optional[Sequence[int]] = None,
                 changes: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Write the report of ``records`` into ``out_dir`` (see the module docstring); returns its summary.

    ``k``: hits within K (default: 50 when the records have it, else their largest K, ``'all'`` for the VLM's
    K-free records). ``max_images``: images drawn (the first by ``sample_idx``; default all); the index lists
    every image. ``average`` / ``mr_average``: the metric's ``recall_average`` / ``mr_average`` (default: the
    records' own, written in every line). ``metrics``: the evaluation's ``metrics.json``: its keys and
    per-predicate recalls are shown for the keys of the report (:func:`metric_values`), and all its keys as
    they are. ``image_root``: prefix of relative ``img_path``. ``predicate_counts``: training frequency of each
    predicate (``dataset_meta['predicate_counts']``): the per-predicate chart is sorted by it, else by the
    number of GT relations in the records (the chart and the index page say which, ``summary['chart_order']``).
    ``changes``: the GT relations these records' run gains and loses against another run
    (:func:`mmsgg_eval.compare.run_changes`, this run being B): listed in ``changes.html``
    (with ``changes.md`` / ``changes.json``), a section of the index and of each changed image's page."""
    os.makedirs(osp.join(out_dir, 'images'), exist_ok=True)
    os.makedirs(osp.join(out_dir, 'predicates'), exist_ok=True)
    records = sorted(records, key=lambda r: r['sample_idx'])
    first = records[0] if records else {}
    average = average or first.get('recall_average') or 'image'
    mr_average = mr_average or first.get('mr_average') or 'all'
    ks = record_ks(records)
    if k is None:
        k = report_k(records)
    if k not in ks:
        ks = ([ALL] if ALL in ks or k == ALL else []) + sorted({x for x in ks if x != ALL} | ({k} - {ALL}))
    summary = summarize_records(records, predicates, ks, average, mr_average)
    summary['values_read'] = metric_values(summary, metrics, first.get('prefix') or first.get('mode'))
    summary.update(recall_average=average, mr_average=mr_average)
    summary['causes'] = cause_summary(records, predicates, [x for x in ks if x != ALL], average)  # error_analysis=True records only
    limit = len(records) if max_images is None else max(0, int(max_images))
    drawn = draw_image_pages(records[:limit], out_dir, k, topk_drawn, image_root, changes, progress)
    pred_file = {p: f'{i}.html' for i, p in enumerate(predicates)}
    for i, p in enumerate(predicates):
        _write(osp.join(out_dir, 'predicates', pred_file[p]),
               predicate_page(p, i, summary, records, drawn, ks, k, predicates))
    chart = None
    order, summary['chart_order'] = chart_order(predicates, summary['per_predicate'], predicate_counts)
    try:
        from ..reports import plot_per_predicate_recall
        plot_per_predicate_recall({'per_predicate': {p: summary['per_predicate'][p] for p in order},
                                   'metrics': summary['metrics']},
                                  osp.join(out_dir, 'per_predicate.png'), k, title, records[0]['mode'] if records
                                  else '', order_note=summary['chart_order'])
        chart = 'per_predicate.png'
    except Exception:  # noqa: BLE001 - the chart is an extra; the tables hold the same numbers
        chart = None
    confusion_png(summary['confusion'], predicates, osp.join(out_dir, 'confusion.png'))
    if changes is not None:
        write_changes_files(changes, out_dir, drawn, title)
        summary['changes'] = {key: changes[key] for key in ('metric', 'a', 'b', 'k', 'num_gained', 'num_lost')}
    _write(osp.join(out_dir, 'index.html'),
           index_page(records, summary, ks, k, predicates, pred_file, drawn, metrics, title, chart, split, changes))
    summary['drawn'] = sorted(drawn)
    with open(osp.join(out_dir, 'summary.json'), 'w') as f:
        json.dump({key: v for key, v in summary.items() if key not in ('confusion',)}, f)
    return summary


def chart_order(predicates: Sequence[str], per_predicate: Dict[str, Dict[str, Any]],
                predicate_counts: Optional[Sequence[int]] = None) -> Tuple[List[str], str]:
    """(predicates in the chart's order, the sentence saying which order): descending training frequency when
    ``predicate_counts`` is known (one count per predicate), else descending GT count in the report's images;
    ties keep the predicate order."""
    idx = list(range(len(predicates)))
    if predicate_counts is not None and len(predicate_counts) == len(predicates):
        idx.sort(key=lambda i: (-float(predicate_counts[i]), i))
        return [predicates[i] for i in idx], 'predicates sorted by training frequency'
    idx.sort(key=lambda i: (-int(per_predicate[predicates[i]].get('num_gt', 0)), i))
    return ([predicates[i] for i in idx],
            'predicates sorted by GT count in these images (training frequencies unknown)')


def _write(path: str, text: str) -> None:
    with open(path, 'w', encoding='utf-8') as f:
        f.write(text)


def _missed(r: Dict[str, Any], k: Any) -> List[str]:
    return sorted({g['predicate'] for g in r['gt_relations'] if not found_within(g['rank_gc'], k)})


def index_page(records, summary, ks, k, predicates, pred_file, drawn, metrics, title, chart, split,
               changes=None) -> str:
    m = summary['metrics']
    body = [f'<h1>{_e(title)}</h1>',
            f'<p id="counts">images: <span id="num-records">{summary["num_records"]}</span>, evaluated: '
            f'<span id="num-images">{summary["num_images"]}</span>, GT relations: '
            f'<span id="num-gt">{summary["num_gt_relations"]}</span>, drawn: {len(drawn)}</p>',
            '<h2>Summary</h2><table id="summary"><tr><th>key</th>' +
            ''.join(f'<th>@{kk}</th>' for kk in ks) + '</tr>']
    for family in ('R', 'ngR', 'mR'):
        if not any(record_key(family, kk) in m for kk in ks):
            continue
        body.append(f'<tr><td>{family}</td>' + ''.join(
            f'<td data-key="{_e(record_key(family, kk) or "")}">{_fmt(m.get(record_key(family, kk) or ""))}</td>'
            for kk in ks) + '</tr>')
    body.append('</table>')
    how = 'over pooled GT relations (micro)' if summary.get('recall_average') == 'micro' else 'per image'
    over = 'the predicates present' if summary.get('mr_average') == 'present' else 'all predicates'
    body.append(f'<p id="conventions">recall averaged {how}; mR over {over}; {summary.get("values_read", 0)} '
                f'values read from the evaluation (metrics.json), the others computed from the per-image records '
                f'with the metric\'s functions; – = no GT relation to measure</p>')
    body.append(cause_section(summary, k, drawn))
    if changes is not None:
        body.append(changes_section(changes, drawn))
    if metrics:
        body.append('<details><summary>all keys of the evaluation (metrics.json)</summary><table>' + ''.join(
            f'<tr><td>{_e(key)}</td><td>{_fmt(v) if isinstance(v, (int, float)) else _e(v)}</td></tr>'
            for key, v in metrics.items() if isinstance(v, (int, float, str))) + '</table></details>')
    body.append('<h2>Per predicate</h2>')
    if chart:
        body.append(f'<p class="note">{_e(summary.get("chart_order", ""))}</p>'
                    f'<img class="pic" src="{chart}" alt="per-predicate recall">')
    body.append('<table id="predicates"><thead><tr><th class="sortable">predicate</th><th class="sortable">GT</th>'
                + ''.join(f'<th class="sortable">{record_key("R", kk)}</th>' for kk in ks) + '</tr></thead><tbody>')
    for p in predicates:
        row = summary['per_predicate'][p]
        body.append(f'<tr><td><a href="predicates/{pred_file[p]}">{_e(p)}</a></td><td>{row["num_gt"]}</td>' +
                    ''.join(f'<td>{_fmt(row[record_key("R", kk)])}</td>' for kk in ks) + '</tr>')
    body.append('</tbody></table><h2>Predicate confusion over GT pairs</h2>'
                '<img class="pic" src="confusion.png" alt="predicate confusion heat map">')
    splits = sorted({str(r.get('split') or split) for r in records})
    body.append('<h2>Images</h2><p>images where <select id="pred"><option value="">(any predicate)</option>' +
                ''.join(f'<option value="{_e(p)}">{_e(p)}</option>' for p in predicates) +
                '</select> was missed at <select id="kval">' +
                ''.join(f'<option value="{kk}"{" selected" if kk == k else ""}>{kk}</option>' for kk in ks) +
                '</select>, split <select id="split"><option value="">(any)</option>' +
                ''.join(f'<option value="{_e(s)}">{_e(s)}</option>' for s in splits) +
                '</select>: <span id="shown">' + str(len(records)) + '</span> shown</p>')
    columns = [record_key(fam, kk) for fam in ('R', 'ngR') for kk in ks if record_key(fam, kk)]
    body.append('<table id="images"><thead><tr>' + ''.join(
        f'<th class="sortable">{h}</th>' for h in ['sample_idx', 'image', 'split', 'GT'] + columns)
        + '</tr></thead><tbody>')
    for r in records:
        attrs = ' '.join(f'data-missed{kk}="{_e("|".join(_missed(r, kk)))}"' for kk in ks)
        name = _e(r.get('img_id') if r.get('img_id') is not None else r['sample_idx'])
        link = f'<a href="images/{r["sample_idx"]}.html">{name}</a>' if r['sample_idx'] in drawn else name
        cells = ''.join(f'<td data-v="{-1 if r.get(key) is None else r[key]}">{_fmt(r.get(key))}</td>'
                        for key in columns)
        body.append(f'<tr {attrs} data-split="{_e(r.get("split") or split)}"><td>{r["sample_idx"]}</td>'
                    f'<td>{link}</td><td>{_e(r.get("split") or split)}</td><td>{r["num_gt"]}</td>{cells}</tr>')
    body.append('</tbody></table>')
    return _page(title, ''.join(body), SORT_JS + FILTER_JS)


def image_page(r: Dict[str, Any], k: int, topk_drawn: int, relation_items,
               changes: Optional[Dict[str, Any]] = None, changed: Optional[Dict[str, Any]] = None) -> str:
    idx = r['sample_idx']
    gt_items, pred_items = relation_items(r, _k_value(k), topk_drawn)  # 'all' (VLM Recall): any rank
    body = [f'<nav><a href="../index.html">index</a></nav><h1>image {_e(r.get("img_id", idx))} '
            f'(sample_idx {idx})</h1><p>{_e(r.get("img_path") or "")}</p>',
            '<p>' + '  '.join(f'{key}: {_fmt(r.get(key))}' for key in r
                              if key.startswith(('R@', 'ngR@')) or key == 'Recall') + '</p>',
            f'<img class="pic" src="{idx}.jpg" alt="GT | predictions">' + vlm_answer_section(r),
            f'<h2>GT relations (found at {k})</h2><table id="gt"><thead><tr><th class="sortable">#</th>'
            '<th>subject</th><th>predicate</th><th>object</th><th class="sortable">rank (0-based)</th>'
            '<th class="sortable">rank, no graph constraint</th><th>status</th>'
            '<th>model ranked highest on the pair instead</th></tr></thead><tbody>']
    for g, item in zip(r['gt_relations'], gt_items):
        status = 'found' if item['hit'] else 'missed'
        instead = g.get('pair_predicate') if not item['hit'] else ''
        body.append(f'<tr class="{"hit" if item["hit"] else "miss"}"><td>{item["number"]}</td>'
                    f'<td>{g["subject"]}:{_e(g["subject_label"])}</td><td>{_e(g["predicate"])}</td>'
                    f'<td>{g["object"]}:{_e(g["object_label"])}</td><td>{_rank(g["rank_gc"])}</td>'
                    f'<td>{_rank(g["rank_ngc"])}</td><td class="s">{status}</td><td>{_e(instead or "")}</td></tr>')
    body.append('</tbody></table>' + cause_table(r, k))
    if changes is not None:
        body.append(image_changes(changes, changed))
    body.append(f'<h2>Top {len(pred_items)} predictions</h2><table id="pred"><thead><tr>'
                '<th class="sortable">rank (0-based)</th><th>subject</th><th>predicate</th><th>object</th>'
                '<th class="sortable">score</th><th>status</th></tr></thead><tbody>')
    for item, p in zip(pred_items, r['predictions']):
        status = ('hit GT ' + ', '.join(str(g + 1) for g in p['hits'])) if item['hit'] else 'miss'
        if p.get('unknown'):
            status += ' (a name unknown to the dataset)'
        body.append(f'<tr class="{"hit" if item["hit"] else "miss"}"><td>{item["number"]}</td>'
                    + ''.join(f'<td>{_e(part)}</td>' for part in _parts(p))
                    + f'<td>{p["score"]:.4f}</td><td class="s">{status}</td></tr>')
    body.append('</tbody></table>')
    return _page(f'image {idx}', ''.join(body), SORT_JS)


def vlm_answer_section(r: Dict[str, Any]) -> str:
    """The answer block of a VLM record (``failure_code`` present; empty otherwise): parse status, failure code
    and reason, the names unknown to the dataset and the raw answer as the model gave it, all HTML-escaped."""
    if 'failure_code' not in r:
        return ''
    code = r.get('failure_code')
    reason = r.get('failure_reason') or ''
    unknown = r.get('unknown_words') or []
    answer = r.get('answer')
    rows = [('parse status', r.get('parse_status', '')),
            ('failure code', code + (f' ({reason})' if reason and code != 'ok' else '')),
            ('relations with a name unknown to the dataset', r.get('num_unknown_relations', 0)),
            ('unknown names', '; '.join(str(w) for w in unknown) if unknown else 'none')]
    table = ''.join(f'<tr><th>{_e(name)}</th><td class="s">{_e(value)}</td></tr>' for name, value in rows)
    raw = (f'<pre class="answer">{_e(answer)}</pre>' if answer is not None else
           '<p>(no raw answer: none given, or the answer was parsed before evaluation)</p>')
    return f'<h2>VLM answer</h2><table id="vlm">{table}</table><h3>raw answer</h3>{raw}'


def _parts(p: Dict[str, Any]) -> Tuple[str, str, str]:
    """(subject, predicate, object) cells of a prediction: ``index:class``, or for a stand-in object (a name
    unknown to the dataset, :func:`~mmsgg_eval.metrics.per_image.is_placeholder_box`) the model's words marked
    unknown (``?`` without them): never the stand-in's index or class."""
    words = p.get('words') or [None, None, None]

    def end(name: str, word: Optional[str]) -> str:
        if p.get(name) is None:
            return f'unknown: {word}' if word is not None else '?'
        return f'{p[name]}:{p[f"{name}_label"]}'
    predicate = p['predicate'] if p.get('predicate') is not None else \
        (f'unknown: {words[1]}' if words[1] is not None else '?')
    return end('subject', words[0]), predicate, end('object', words[2])


def _rank(value: Optional[int]) -> str:
    """A first-hit rank as per_image.jsonl holds it (0-based: found at K when below K); '–' = not hit."""
    return '–' if value is None else str(value)


def predicate_page(p: str, i: int, summary, records, drawn, ks, k, predicates) -> str:
    row = summary['per_predicate'][p]
    confusion = summary['confusion'][i]
    total = int(confusion.sum())
    order = [j for j in np.argsort(-confusion, kind='stable') if confusion[j] and j != i][:8]
    names = list(predicates) + ['(nothing on the pair)']
    hits, misses = [], []
    for r in records:
        if r['sample_idx'] not in drawn:
            continue
        rels = [g for g in r['gt_relations'] if g['predicate'] == p]
        if any(found_within(g['rank_gc'], k) for g in rels):
            hits.append(r['sample_idx'])
        if any(not found_within(g['rank_gc'], k) for g in rels):
            misses.append(r['sample_idx'])

    def thumbs(ids: List[int]) -> str:
        return '<div class="thumbs">' + ''.join(
            f'<a href="../images/{s}.html"><img src="../images/{s}.jpg" alt="{s}"></a>' for s in ids[:12]) + '</div>'
    body = [f'<nav><a href="../index.html">index</a></nav><h1>predicate {_e(p)}</h1>',
            f'<p>GT relations: {row["num_gt"]}</p><table id="recall"><tr>' +
            ''.join(f'<th>{record_key("R", kk)}</th>' for kk in ks) + '</tr><tr>' +
            ''.join(f'<td>{_fmt(row[record_key("R", kk)])}</td>' for kk in ks) + '</tr></table>',
            f'<h2>Confused with (top predicate of the model on its {total} GT pairs)</h2><table id="confused">'
            f'<tr><th>predicate</th><th>GT pairs</th></tr>',
            f'<tr><td>{_e(p)} (correct)</td><td>{int(confusion[i])}</td></tr>' +
            ''.join(f'<tr><td>{_e(names[j])}</td><td>{int(confusion[j])}</td></tr>' for j in order) + '</table>',
            f'<h2>Found at {k} ({len(hits)} drawn images)</h2>' + thumbs(hits),
            f'<h2>Missed at {k} ({len(misses)} drawn images)</h2>' + thumbs(misses)]
    return _page(f'predicate {p}', ''.join(body))


def dataset_facts(dataset: Any) -> Tuple[List[str], List[str], Dict[int, str], str]:
    """(classes, predicates, sample_idx -> img_path, split name) of a dataset."""
    meta = dataset.metainfo
    paths = {}
    for i in range(len(dataset)):
        info = dataset.get_data_info(i)
        paths[i] = info.get('img_path')
    split = str(getattr(dataset, 'split', '') or meta.get('split', '') or '')
    return list(meta['classes']), list(meta['predicates']), paths, split


# ------------------------------------------------------------------------- where recall is lost (error analysis)
CAUSE_COLORS = {'hit': '#2a2', 'subject_loc': '#d33', 'object_loc': '#e77', 'subject_cls': '#d80',
                'object_cls': '#fb5', 'pair': '#75c', 'predicate': '#39c', 'rank': '#999', 'no_prediction': '#333'}


def cause_summary(records: Sequence[Dict[str, Any]], predicates: Sequence[str], ks: Sequence[int],
                  average: str = 'image') -> Optional[Dict[str, Any]]:
    """Where recall@K is lost, from the records' ``outcome`` fields (metrics run with ``error_analysis=True``;
    None without them), with the metric's aggregation: ``'overall'`` ``{K: {outcome: percent}}`` averaged as R@K
    (so 'hit' is R@K), ``'per_predicate'`` ``{predicate: {K: {outcome: percent}}}`` averaged as mR@K's per-predicate
    recall (predicates with GT relations only), ``'images'`` ``{K: {cause: [sample_idx, ...]}}``: the images with
    a GT relation missed for that cause."""
    from ..functional.error_causes import CAUSES, as_rank
    evaluated = [r for r in records if r['evaluated']]
    if not any('outcome' in g for r in evaluated for g in r['gt_relations']):
        return None
    names = ('hit',) + CAUSES
    index = {p: i for i, p in enumerate(predicates)}
    image_of, preds, outcomes = [], [], {k: [] for k in ks}
    images: Dict[int, Dict[str, List[int]]] = {k: {c: [] for c in CAUSES} for k in ks}
    for i, r in enumerate(evaluated):
        for g in r['gt_relations']:
            image_of.append(i)
            preds.append(index[g['predicate']])
            for k in ks:
                outcomes[k].append(names.index(g['outcome'][str(k)]))
        for k in ks:
            for c in sorted({g['outcome'][str(k)] for g in r['gt_relations']} - {'hit'}):
                images[k][c].append(r['sample_idx'])
    n, img, pred = len(evaluated), torch.tensor(image_of, dtype=torch.long), torch.tensor(preds, dtype=torch.long)
    overall, per_pred = {}, {p: {} for i, p in enumerate(predicates) if i in set(preds)}
    for k in ks:
        code = torch.tensor(outcomes[k], dtype=torch.long)
        overall[k] = {}
        for j, name in enumerate(names):
            selected = as_rank(code == j)
            overall[k][name] = 100.0 * float(recall_from_ranks(selected, img, n, (1,), average=average)[0])
            table, _ = per_predicate_recall(selected, pred, img, n, len(predicates), (1,), average)
            for p in per_pred:
                per_pred[p].setdefault(k, {})[name] = 100.0 * float(table[0, index[p]])
    return {'overall': overall, 'per_predicate': per_pred, 'images': images}


def stacked_bar(shares: Dict[str, float], label: str = '') -> str:
    """One horizontal bar of the outcome shares (percent, widths proportional), with a legend in its title."""
    title = ', '.join(f'{name} {value:.1f}' for name, value in shares.items() if value > 0)
    cells = ''.join(f'<span title="{_e(name)} {value:.1f}%" style="display:inline-block;height:1em;width:{value:.3f}%;'
                    f'background:{CAUSE_COLORS.get(name, "#ccc")}"></span>' for name, value in shares.items() if value > 0)
    return (f'<div class="bar" title="{_e(title)}"><span style="display:inline-block;width:12em">{_e(label)}</span>'
            f'<span style="display:inline-block;width:60%;border:1px solid #aaa;line-height:0">{cells}</span> '
            f'<small>{_e(title)}</small></div>')


def cause_section(summary: Dict[str, Any], k: int, drawn: Optional[set] = None) -> str:
    """The index block "where recall@K is lost": the whole set and each predicate as stacked bars, and the
    images listed by cause (empty without an error analysis), linked to their pages when drawn (``drawn``: the
    drawn sample_idx; None: all)."""
    causes = summary.get('causes')
    if not causes or k not in causes['overall']:
        return ''
    legend = ' '.join(f'<span style="background:{c};color:#fff;padding:0 4px">{_e(n)}</span>'
                      for n, c in CAUSE_COLORS.items())
    body = [f'<h2 id="causes">Where recall@{k} is lost</h2><p>{legend}</p>',
            stacked_bar(causes['overall'][k], 'all GT relations')]
    body += [stacked_bar(shares[k], p) for p, shares in causes['per_predicate'].items() if k in shares]
    body.append('<h3>Images by cause</h3><table id="cause-images"><tr><th>cause</th><th>images</th></tr>')
    for cause, idxs in causes['images'][k].items():
        if idxs:
            links = ' '.join(f'<a href="images/{i}.html">{i}</a>' if drawn is None or i in drawn else str(i)
                             for i in idxs[:200])
            more = f' ... ({len(idxs)} images)' if len(idxs) > 200 else f' ({len(idxs)})'
            body.append(f'<tr data-cause="{_e(cause)}"><td>{_e(cause)}</td><td>{links}{more}</td></tr>')
    body.append('</table>')
    return ''.join(body)


def cause_table(r: Dict[str, Any], k: int) -> str:
    """The image page's "why missed at K" table: each missed GT relation's cause and its evidence (the best IoU
    of any predicted object with its subject / object, that object's class and score); empty without outcomes."""
    rows = [g for g in r['gt_relations'] if 'outcome' in g and g['outcome'].get(str(k), 'hit') != 'hit']
    if not rows:
        return ''

    def evidence(e: Optional[Dict[str, Any]]) -> str:
        return '–' if not e else f'IoU {e["best_iou"]:.2f}, {_e(e["label"])} ({e["score"]:.2f})'
    body = [f'<h2>Why missed at {k}</h2><table id="causes"><tr><th>#</th><th>relation</th><th>cause</th>'
            '<th>best detection on the subject</th><th>best detection on the object</th></tr>']
    for g in rows:
        ev = g.get('evidence') or {}
        body.append(f'<tr class="miss"><td>{g["index"] + 1}</td><td>{_e(g["subject_label"])} {_e(g["predicate"])} '
                    f'{_e(g["object_label"])}</td><td class="s">{_e(g["outcome"][str(k)])}</td>'
                    f'<td>{evidence(ev.get("subject"))}</td><td>{evidence(ev.get("object"))}</td></tr>')
    body.append('</table>')
    return ''.join(body)


# ------------------------------------------------------------------ against another run (browse_results.py --compare-to)
def _change_rank(rank: Optional[int]) -> str:
    return '–' if rank is None else str(rank)


def change_rows(changes: Dict[str, Any], images: Sequence[Dict[str, Any]], drawn: set, prefix: str = '') -> str:
    """Table rows of the changed GT relations of ``images`` (items of ``changes['images']``): lost first, then
    gained; each with its image (linked to its page when drawn; ``prefix``: the path to the report's root), the
    image's net change, the relation (# from 1, as the image page numbers it), both first-hit ranks (0-based,
    ``–``: not found) and the cause of the miss on the losing side (``–``: that run has no error analysis)."""
    out = []
    for image in images:
        idx = image['sample_idx']
        name = _e(image['img_id'] if image.get('img_id') is not None else idx)
        link = f'<a href="{prefix}images/{idx}.html">{name}</a>' if idx in drawn else name
        for what in ('lost', 'gained'):
            for g in image[what]:
                cause = g['cause'] or '–'
                out.append(f'<tr class="{what} {"miss" if what == "lost" else "hit"}" data-sample="{idx}" '
                           f'data-change="{what}" data-cause="{_e(cause)}"><td>{idx}</td><td>{link}</td>'
                           f'<td data-v="{image["net"]}">{image["net"]:+d}</td><td class="s">{what}</td>'
                           f'<td>{g["index"] + 1}</td><td>{_e(g["subject_label"])} {_e(g["predicate"])} '
                           f'{_e(g["object_label"])}</td><td data-v="{-1 if g["rank_a"] is None else g["rank_a"]}">'
                           f'{_change_rank(g["rank_a"])}</td><td data-v="{-1 if g["rank_b"] is None else g["rank_b"]}">'
                           f'{_change_rank(g["rank_b"])}</td><td>{_e(cause)}</td></tr>')
    return ''.join(out)


def _change_header(changes: Dict[str, Any]) -> str:
    a, b = _e(changes['a']), _e(changes['b'])
    return ('<thead><tr>' + ''.join(f'<th class="sortable">{h}</th>' for h in (
        'sample_idx', 'image', 'net', 'change', '#', 'relation', f'rank {a}', f'rank {b}',
        'cause of the miss (losing run)')) + '</tr></thead>')


def _change_notes(changes: Dict[str, Any]) -> str:
    """The caveats of a list of changes: a run without error analysis (its causes unknown), and the settings in
    which the two runs differ."""
    notes = [f'<p class="note">Run {_e(changes[side])} was evaluated without <code>error_analysis=True</code>: the '
             f'causes of its misses are unknown (–).</p>' for side, known in changes['causes_known'].items()
             if not known]
    if changes.get('settings_differences'):
        notes.append('<p class="note" id="settings-differences">The runs were evaluated with different settings: '
                     + '; '.join(_e(d) for d in changes['settings_differences']) + '</p>')
    return ''.join(notes)


def _change_sentence(changes: Dict[str, Any]) -> str:
    a, b = _e(changes['a']), _e(changes['b'])
    return (f'<span id="num-gained">{changes["num_gained"]}</span> GT relations found at {changes["k"]} by {b} '
            f'and not by {a} (gained), <span id="num-lost">{changes["num_lost"]}</span> found by {a} and not by '
            f'{b} (lost), on <span id="num-changed">{len(changes["images"])}</span> images; cause: why the losing '
            f'run misses the relation ({b}\'s cause for a loss, {a}\'s for a gain).')


def changes_section(changes: Dict[str, Any], drawn: set) -> str:
    """The index block "against A": the counts, the causes of the lost and gained relations, and the changed
    images from the largest net loss to the largest net gain, linked to their pages and to ``changes.html``."""
    a = _e(changes['a'])
    body = [f'<h2 id="changes">Against {a}: GT relations gained and lost at {changes["k"]}</h2>'
            f'<p>{_change_sentence(changes)} Every changed relation: <a href="changes.html">changes.html</a>.</p>',
            _change_notes(changes)]
    counts: Dict[str, List[int]] = {}
    for image in changes['images']:
        for j, what in enumerate(('lost', 'gained')):
            for g in image[what]:
                counts.setdefault(g['cause'] or '–', [0, 0])[j] += 1
    if counts:
        from ..functional.error_causes import CAUSES
        order = [c for c in CAUSES if c in counts] + sorted(c for c in counts if c not in CAUSES)
        body.append(f'<table id="change-causes"><tr><th>cause of the miss</th><th>lost ({_e(changes["b"])}\'s '
                    f'cause)</th><th>gained ({a}\'s cause)</th></tr>' + ''.join(
                        f'<tr data-cause="{_e(c)}"><td>{_e(c)}</td><td>{counts[c][0]}</td><td>{counts[c][1]}</td></tr>'
                        for c in order) + '</table>')
    body.append('<table id="changed-images"><thead><tr>' + ''.join(
        f'<th class="sortable">{h}</th>' for h in ('sample_idx', 'image', 'net', 'gained', 'lost',
                                                  'causes of the lost relations')) + '</tr></thead><tbody>')
    for image in changes['images']:
        idx = image['sample_idx']
        name = _e(image['img_id'] if image.get('img_id') is not None else idx)
        link = f'<a href="images/{idx}.html">{name}</a>' if idx in drawn else name
        lost: Dict[str, int] = {}
        for g in image['lost']:
            lost[g['cause'] or '–'] = lost.get(g['cause'] or '–', 0) + 1
        body.append(f'<tr data-sample="{idx}"><td>{idx}</td><td>{link}</td><td data-v="{image["net"]}">'
                    f'{image["net"]:+d}</td><td>{len(image["gained"])}</td><td>{len(image["lost"])}</td><td>'
                    + _e(', '.join(f'{c} {n}' for c, n in lost.items())) + '</td></tr>')
    body.append('</tbody></table>')
    return ''.join(body)


def changes_page(changes: Dict[str, Any], drawn: set, title: str) -> str:
    """``changes.html``: every GT relation gained or lost against the other run, by image (largest net loss
    first), each with the cause of the miss on the losing side."""
    body = [f'<nav><a href="index.html">index</a></nav><h1>{_e(changes["b"])} against {_e(changes["a"])}: GT '
            f'relations gained and lost at {changes["k"]}</h1><p>{_e(title)} ({_e(changes.get("metric", ""))})</p>',
            f'<p>{_change_sentence(changes)}</p>', _change_notes(changes)]
    if not changes['images']:
        body.append('<p id="no-changes">No GT relation changes.</p>')
    body.append(f'<table id="changes">{_change_header(changes)}<tbody>'
                + change_rows(changes, changes['images'], drawn) + '</tbody></table>')
    return _page(f'{changes["b"]} against {changes["a"]}', ''.join(body), SORT_JS)


def image_changes(changes: Dict[str, Any], image: Optional[Dict[str, Any]]) -> str:
    """The image page's "against A" block: its GT relations gained and lost (empty table note when none)."""
    head = (f'<h2>Against {_e(changes["a"])} at {changes["k"]}</h2>'
            f'<p><a href="../changes.html">every change</a>; cause: why the losing run misses the relation</p>')
    if image is None:
        return head + '<p id="no-changes">No GT relation of this image is gained or lost.</p>'
    return head + (f'<table id="changes">{_change_header(changes)}<tbody>'
                   + change_rows(changes, [image], {image['sample_idx']}, '../') + '</tbody></table>')


def write_changes_files(changes: Dict[str, Any], out_dir: str, drawn: set, title: str) -> None:
    """``changes.html``, and ``changes.md`` / ``changes.json`` as ``python -m mmsgg_eval.compare --report`` writes
    them (:func:`mmsgg_eval.analysis.relation_changes.changes_markdown`)."""
    from ..reports import json_safe
    from .relation_changes import changes_markdown
    _write(osp.join(out_dir, 'changes.html'), changes_page(changes, drawn, title))
    listed = [{key: v for key, v in changes.items() if key != 'settings_differences'}]
    text = changes_markdown(listed)
    if changes.get('settings_differences'):
        text += '\nDifferent settings: ' + '; '.join(changes['settings_differences']) + '\n'
    _write(osp.join(out_dir, 'changes.md'), text)
    with open(osp.join(out_dir, 'changes.json'), 'w') as f:
        json.dump(json_safe({'changes': listed, 'not_listed': [],
                             'settings_differences': changes.get('settings_differences', [])}), f, indent=1)
