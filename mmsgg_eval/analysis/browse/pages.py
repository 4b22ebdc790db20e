"""The report's pages as HTML text: the index (summary table, per-predicate table, image table with its
filters), one page per image (GT relations, top predictions, the VLM answer) and one per predicate
(recall, confusion, found and missed thumbnails). They show the numbers of :mod:`.summary` and
:mod:`.causes`; they compute none."""
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .causes import cause_section, cause_table
from .changes import changes_section, image_changes
from .markup import FILTER_JS, SORT_JS, esc, fmt, page
from .summary import found_within, k_value, record_key


def _missed(r: Dict[str, Any], k: Any) -> List[str]:
    return sorted({g['predicate'] for g in r['gt_relations'] if not found_within(g['rank_gc'], k)})


def index_page(records, summary, ks, k, predicates, pred_file, drawn, metrics, title, chart, split,
               changes=None) -> str:
    m = summary['metrics']
    body = [f'<h1>{esc(title)}</h1>',
            f'<p id="counts">images: <span id="num-records">{summary["num_records"]}</span>, evaluated: '
            f'<span id="num-images">{summary["num_images"]}</span>, GT relations: '
            f'<span id="num-gt">{summary["num_gt_relations"]}</span>, drawn: {len(drawn)}</p>',
            '<h2>Summary</h2><table id="summary"><tr><th>key</th>' +
            ''.join(f'<th>@{kk}</th>' for kk in ks) + '</tr>']
    for family in ('R', 'ngR', 'mR'):
        if not any(record_key(family, kk) in m for kk in ks):
            continue
        body.append(f'<tr><td>{family}</td>' + ''.join(
            f'<td data-key="{esc(record_key(family, kk) or "")}">{fmt(m.get(record_key(family, kk) or ""))}</td>'
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
            f'<tr><td>{esc(key)}</td><td>{fmt(v) if isinstance(v, (int, float)) else esc(v)}</td></tr>'
            for key, v in metrics.items() if isinstance(v, (int, float, str))) + '</table></details>')
    body.append('<h2>Per predicate</h2>')
    if chart:
        body.append(f'<p class="note">{esc(summary.get("chart_order", ""))}</p>'
                    f'<img class="pic" src="{chart}" alt="per-predicate recall">')
    body.append('<table id="predicates"><thead><tr><th class="sortable">predicate</th><th class="sortable">GT</th>'
                + ''.join(f'<th class="sortable">{record_key("R", kk)}</th>' for kk in ks) + '</tr></thead><tbody>')
    for p in predicates:
        row = summary['per_predicate'][p]
        body.append(f'<tr><td><a href="predicates/{pred_file[p]}">{esc(p)}</a></td><td>{row["num_gt"]}</td>' +
                    ''.join(f'<td>{fmt(row[record_key("R", kk)])}</td>' for kk in ks) + '</tr>')
    body.append('</tbody></table><h2>Predicate confusion over GT pairs</h2>'
                '<img class="pic" src="confusion.png" alt="predicate confusion heat map">')
    splits = sorted({str(r.get('split') or split) for r in records})
    body.append('<h2>Images</h2><p>images where <select id="pred"><option value="">(any predicate)</option>' +
                ''.join(f'<option value="{esc(p)}">{esc(p)}</option>' for p in predicates) +
                '</select> was missed at <select id="kval">' +
                ''.join(f'<option value="{kk}"{" selected" if kk == k else ""}>{kk}</option>' for kk in ks) +
                '</select>, split <select id="split"><option value="">(any)</option>' +
                ''.join(f'<option value="{esc(s)}">{esc(s)}</option>' for s in splits) +
                '</select>: <span id="shown">' + str(len(records)) + '</span> shown</p>')
    columns = [record_key(fam, kk) for fam in ('R', 'ngR') for kk in ks if record_key(fam, kk)]
    body.append('<table id="images"><thead><tr>' + ''.join(
        f'<th class="sortable">{h}</th>' for h in ['sample_idx', 'image', 'split', 'GT'] + columns)
        + '</tr></thead><tbody>')
    for r in records:
        attrs = ' '.join(f'data-missed{kk}="{esc("|".join(_missed(r, kk)))}"' for kk in ks)
        name = esc(r.get('img_id') if r.get('img_id') is not None else r['sample_idx'])
        link = f'<a href="images/{r["sample_idx"]}.html">{name}</a>' if r['sample_idx'] in drawn else name
        cells = ''.join(f'<td data-v="{-1 if r.get(key) is None else r[key]}">{fmt(r.get(key))}</td>'
                        for key in columns)
        body.append(f'<tr {attrs} data-split="{esc(r.get("split") or split)}"><td>{r["sample_idx"]}</td>'
                    f'<td>{link}</td><td>{esc(r.get("split") or split)}</td><td>{r["num_gt"]}</td>{cells}</tr>')
    body.append('</tbody></table>')
    return page(title, ''.join(body), SORT_JS + FILTER_JS)


def image_page(r: Dict[str, Any], k: int, topk_drawn: int, relation_items,
               changes: Optional[Dict[str, Any]] = None, changed: Optional[Dict[str, Any]] = None) -> str:
    idx = r['sample_idx']
    gt_items, pred_items = relation_items(r, k_value(k), topk_drawn)  # 'all' (VLM Recall): any rank
    body = [f'<nav><a href="../index.html">index</a></nav><h1>image {esc(r.get("img_id", idx))} '
            f'(sample_idx {idx})</h1><p>{esc(r.get("img_path") or "")}</p>',
            '<p>' + '  '.join(f'{key}: {fmt(r.get(key))}' for key in r
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
                    f'<td>{g["subject"]}:{esc(g["subject_label"])}</td><td>{esc(g["predicate"])}</td>'
                    f'<td>{g["object"]}:{esc(g["object_label"])}</td><td>{_rank(g["rank_gc"])}</td>'
                    f'<td>{_rank(g["rank_ngc"])}</td><td class="s">{status}</td><td>{esc(instead or "")}</td></tr>')
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
                    + ''.join(f'<td>{esc(part)}</td>' for part in _parts(p))
                    + f'<td>{p["score"]:.4f}</td><td class="s">{status}</td></tr>')
    body.append('</tbody></table>')
    return page(f'image {idx}', ''.join(body), SORT_JS)


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
    table = ''.join(f'<tr><th>{esc(name)}</th><td class="s">{esc(value)}</td></tr>' for name, value in rows)
    raw = (f'<pre class="answer">{esc(answer)}</pre>' if answer is not None else
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
    body = [f'<nav><a href="../index.html">index</a></nav><h1>predicate {esc(p)}</h1>',
            f'<p>GT relations: {row["num_gt"]}</p><table id="recall"><tr>' +
            ''.join(f'<th>{record_key("R", kk)}</th>' for kk in ks) + '</tr><tr>' +
            ''.join(f'<td>{fmt(row[record_key("R", kk)])}</td>' for kk in ks) + '</tr></table>',
            f'<h2>Confused with (top predicate of the model on its {total} GT pairs)</h2><table id="confused">'
            f'<tr><th>predicate</th><th>GT pairs</th></tr>',
            f'<tr><td>{esc(p)} (correct)</td><td>{int(confusion[i])}</td></tr>' +
            ''.join(f'<tr><td>{esc(names[j])}</td><td>{int(confusion[j])}</td></tr>' for j in order) + '</table>',
            f'<h2>Found at {k} ({len(hits)} drawn images)</h2>' + thumbs(hits),
            f'<h2>Missed at {k} ({len(misses)} drawn images)</h2>' + thumbs(misses)]
    return page(f'predicate {p}', ''.join(body))
