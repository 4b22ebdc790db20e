"""Where recall is lost (records of a metric run with ``error_analysis=True``): the shares of each outcome
overall, per predicate and the images by cause, computed with the metric's own functions
(:func:`~mmsgg_eval.functional.error_causes.cause_shares` and ``per_predicate_cause_shares``, so the bars
equal ``metrics.json``'s ``miss@K_{cause}``), and their HTML: the index's stacked bars and the image
page's "why missed" table."""
from typing import Any, Dict, List, Optional, Sequence

import torch

from ...functional.error_causes import CAUSES, HIT, as_rank, cause_shares, per_predicate_cause_shares
from .markup import esc


CAUSE_COLORS = {'hit': '#2a2', 'subject_loc': '#d33', 'object_loc': '#e77', 'subject_cls': '#d80',
                'object_cls': '#fb5', 'pair': '#75c', 'predicate': '#39c', 'rank': '#999', 'no_prediction': '#333'}


def cause_summary(records: Sequence[Dict[str, Any]], predicates: Sequence[str], ks: Sequence[int],
                  average: str = 'image') -> Optional[Dict[str, Any]]:
    """Where recall@K is lost, from the records' ``outcome`` fields (metrics run with ``error_analysis=True``;
    None without them), with the functions of the metric's summary (:func:`~.error_causes.cause_shares`,
    :func:`~.error_causes.per_predicate_cause_shares`: the numbers of ``metrics.json``'s ``miss@K_{cause}`` and
    of the per-predicate cause table): ``'overall'`` ``{K: {outcome: percent}}`` averaged as R@K
    (so 'hit' is R@K), ``'per_predicate'`` ``{predicate: {K: {outcome: percent}}}`` averaged as mR@K's per-predicate
    recall (predicates with GT relations only), ``'images'`` ``{K: {cause: [sample_idx, ...]}}``: the images with
    a GT relation missed for that cause."""
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
    for k in ks:  # the outcome at K as a cause code at K = 1 (HIT: found), shared by the metric's summary
        code = torch.tensor(outcomes[k], dtype=torch.long)
        rank = as_rank(code == HIT)
        shares = cause_shares(rank, code, img, n, (1,), average)
        table = per_predicate_cause_shares(rank, code, pred, img, n, len(predicates), (1,), average)
        overall[k] = {name: 100.0 * float(shares[name][0]) for name in names}
        for p in per_pred:
            per_pred[p][k] = {name: 100.0 * float(table[name][0, index[p]]) for name in names}
    return {'overall': overall, 'per_predicate': per_pred, 'images': images}


def stacked_bar(shares: Dict[str, float], label: str = '') -> str:
    """One horizontal bar of the outcome shares (percent, widths proportional), with a legend in its title."""
    title = ', '.join(f'{name} {value:.1f}' for name, value in shares.items() if value > 0)
    cells = ''.join(f'<span title="{esc(name)} {value:.1f}%" style="display:inline-block;height:1em;width:{value:.3f}%;'
                    f'background:{CAUSE_COLORS.get(name, "#ccc")}"></span>' for name, value in shares.items() if value > 0)
    return (f'<div class="bar" title="{esc(title)}"><span style="display:inline-block;width:12em">{esc(label)}</span>'
            f'<span style="display:inline-block;width:60%;border:1px solid #aaa;line-height:0">{cells}</span> '
            f'<small>{esc(title)}</small></div>')


def cause_section(summary: Dict[str, Any], k: int, drawn: Optional[set] = None) -> str:
    """The index block "where recall@K is lost": the whole set and each predicate as stacked bars, and the
    images listed by cause (empty without an error analysis), linked to their pages when drawn (``drawn``: the
    drawn sample_idx; None: all)."""
    causes = summary.get('causes')
    if not causes or k not in causes['overall']:
        return ''
    legend = ' '.join(f'<span style="background:{c};color:#fff;padding:0 4px">{esc(n)}</span>'
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
            body.append(f'<tr data-cause="{esc(cause)}"><td>{esc(cause)}</td><td>{links}{more}</td></tr>')
    body.append('</table>')
    return ''.join(body)


def cause_table(r: Dict[str, Any], k: int) -> str:
    """The image page's "why missed at K" table: each missed GT relation's cause and its evidence (the best IoU
    of any predicted object with its subject / object, that object's class and score); empty without outcomes."""
    rows = [g for g in r['gt_relations'] if 'outcome' in g and g['outcome'].get(str(k), 'hit') != 'hit']
    if not rows:
        return ''

    def evidence(e: Optional[Dict[str, Any]]) -> str:
        return '–' if not e else f'IoU {e["best_iou"]:.2f}, {esc(e["label"])} ({e["score"]:.2f})'
    body = [f'<h2>Why missed at {k}</h2><table id="causes"><tr><th>#</th><th>relation</th><th>cause</th>'
            '<th>best detection on the subject</th><th>best detection on the object</th></tr>']
    for g in rows:
        ev = g.get('evidence') or {}
        body.append(f'<tr class="miss"><td>{g["index"] + 1}</td><td>{esc(g["subject_label"])} {esc(g["predicate"])} '
                    f'{esc(g["object_label"])}</td><td class="s">{esc(g["outcome"][str(k)])}</td>'
                    f'<td>{evidence(ev.get("subject"))}</td><td>{evidence(ev.get("object"))}</td></tr>')
    body.append('</table>')
    return ''.join(body)
