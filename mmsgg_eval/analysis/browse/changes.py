"""The report against another run (``browse_results.py --compare-to``): the GT relations this run gains and
loses (:func:`mmsgg_eval.compare.run_changes` computes them; this module only shows them) as the index's
section, ``changes.html`` (with ``changes.md`` / ``changes.json`` as ``compare --report`` writes them) and
the image page's block."""
import json
import os.path as osp
from typing import Any, Dict, List, Optional, Sequence

from .markup import SORT_JS, esc, page, write_text


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
        name = esc(image['img_id'] if image.get('img_id') is not None else idx)
        link = f'<a href="{prefix}images/{idx}.html">{name}</a>' if idx in drawn else name
        for what in ('lost', 'gained'):
            for g in image[what]:
                cause = g['cause'] or '–'
                out.append(f'<tr class="{what} {"miss" if what == "lost" else "hit"}" data-sample="{idx}" '
                           f'data-change="{what}" data-cause="{esc(cause)}"><td>{idx}</td><td>{link}</td>'
                           f'<td data-v="{image["net"]}">{image["net"]:+d}</td><td class="s">{what}</td>'
                           f'<td>{g["index"] + 1}</td><td>{esc(g["subject_label"])} {esc(g["predicate"])} '
                           f'{esc(g["object_label"])}</td><td data-v="{-1 if g["rank_a"] is None else g["rank_a"]}">'
                           f'{_change_rank(g["rank_a"])}</td><td data-v="{-1 if g["rank_b"] is None else g["rank_b"]}">'
                           f'{_change_rank(g["rank_b"])}</td><td>{esc(cause)}</td></tr>')
    return ''.join(out)


def _change_header(changes: Dict[str, Any]) -> str:
    a, b = esc(changes['a']), esc(changes['b'])
    return ('<thead><tr>' + ''.join(f'<th class="sortable">{h}</th>' for h in (
        'sample_idx', 'image', 'net', 'change', '#', 'relation', f'rank {a}', f'rank {b}',
        'cause of the miss (losing run)')) + '</tr></thead>')


def _change_notes(changes: Dict[str, Any]) -> str:
    """The caveats of a list of changes: a run without error analysis (its causes unknown), and the settings in
    which the two runs differ."""
    notes = [f'<p class="note">Run {esc(changes[side])} was evaluated without <code>error_analysis=True</code>: the '
             f'causes of its misses are unknown (–).</p>' for side, known in changes['causes_known'].items()
             if not known]
    if changes.get('settings_differences'):
        notes.append('<p class="note" id="settings-differences">The runs were evaluated with different settings: '
                     + '; '.join(esc(d) for d in changes['settings_differences']) + '</p>')
    return ''.join(notes)


def _change_sentence(changes: Dict[str, Any]) -> str:
    a, b = esc(changes['a']), esc(changes['b'])
    return (f'<span id="num-gained">{changes["num_gained"]}</span> GT relations found at {changes["k"]} by {b} '
            f'and not by {a} (gained), <span id="num-lost">{changes["num_lost"]}</span> found by {a} and not by '
            f'{b} (lost), on <span id="num-changed">{len(changes["images"])}</span> images; cause: why the losing '
            f'run misses the relation ({b}\'s cause for a loss, {a}\'s for a gain).')


def changes_section(changes: Dict[str, Any], drawn: set) -> str:
    """The index block "against A": the counts, the causes of the lost and gained relations, and the changed
    images from the largest net loss to the largest net gain, linked to their pages and to ``changes.html``."""
    a = esc(changes['a'])
    body = [f'<h2 id="changes">Against {a}: GT relations gained and lost at {changes["k"]}</h2>'
            f'<p>{_change_sentence(changes)} Every changed relation: <a href="changes.html">changes.html</a>.</p>',
            _change_notes(changes)]
    counts: Dict[str, List[int]] = {}
    for image in changes['images']:
        for j, what in enumerate(('lost', 'gained')):
            for g in image[what]:
                counts.setdefault(g['cause'] or '–', [0, 0])[j] += 1
    if counts:
        from ...functional.error_causes import CAUSES
        order = [c for c in CAUSES if c in counts] + sorted(c for c in counts if c not in CAUSES)
        body.append(f'<table id="change-causes"><tr><th>cause of the miss</th><th>lost ({esc(changes["b"])}\'s '
                    f'cause)</th><th>gained ({a}\'s cause)</th></tr>' + ''.join(
                        f'<tr data-cause="{esc(c)}"><td>{esc(c)}</td><td>{counts[c][0]}</td><td>{counts[c][1]}</td></tr>'
                        for c in order) + '</table>')
    body.append('<table id="changed-images"><thead><tr>' + ''.join(
        f'<th class="sortable">{h}</th>' for h in ('sample_idx', 'image', 'net', 'gained', 'lost',
                                                  'causes of the lost relations')) + '</tr></thead><tbody>')
    for image in changes['images']:
        idx = image['sample_idx']
        name = esc(image['img_id'] if image.get('img_id') is not None else idx)
        link = f'<a href="images/{idx}.html">{name}</a>' if idx in drawn else name
        lost: Dict[str, int] = {}
        for g in image['lost']:
            lost[g['cause'] or '–'] = lost.get(g['cause'] or '–', 0) + 1
        body.append(f'<tr data-sample="{idx}"><td>{idx}</td><td>{link}</td><td data-v="{image["net"]}">'
                    f'{image["net"]:+d}</td><td>{len(image["gained"])}</td><td>{len(image["lost"])}</td><td>'
                    + esc(', '.join(f'{c} {n}' for c, n in lost.items())) + '</td></tr>')
    body.append('</tbody></table>')
    return ''.join(body)


def changes_page(changes: Dict[str, Any], drawn: set, title: str) -> str:
    """``changes.html``: every GT relation gained or lost against the other run, by image (largest net loss
    first), each with the cause of the miss on the losing side."""
    body = [f'<nav><a href="index.html">index</a></nav><h1>{esc(changes["b"])} against {esc(changes["a"])}: GT '
            f'relations gained and lost at {changes["k"]}</h1><p>{esc(title)} ({esc(changes.get("metric", ""))})</p>',
            f'<p>{_change_sentence(changes)}</p>', _change_notes(changes)]
    if not changes['images']:
        body.append('<p id="no-changes">No GT relation changes.</p>')
    body.append(f'<table id="changes">{_change_header(changes)}<tbody>'
                + change_rows(changes, changes['images'], drawn) + '</tbody></table>')
    return page(f'{changes["b"]} against {changes["a"]}', ''.join(body), SORT_JS)


def image_changes(changes: Dict[str, Any], image: Optional[Dict[str, Any]]) -> str:
    """The image page's "against A" block: its GT relations gained and lost (empty table note when none)."""
    head = (f'<h2>Against {esc(changes["a"])} at {changes["k"]}</h2>'
            f'<p><a href="../changes.html">every change</a>; cause: why the losing run misses the relation</p>')
    if image is None:
        return head + '<p id="no-changes">No GT relation of this image is gained or lost.</p>'
    return head + (f'<table id="changes">{_change_header(changes)}<tbody>'
                   + change_rows(changes, [image], {image['sample_idx']}, '../') + '</tbody></table>')


def write_changes_files(changes: Dict[str, Any], out_dir: str, drawn: set, title: str) -> None:
    """``changes.html``, and ``changes.md`` / ``changes.json`` as ``python -m mmsgg_eval.compare --report`` writes
    them (:func:`mmsgg_eval.analysis.relation_changes.changes_markdown`)."""
    from ...reports import json_safe
    from ..relation_changes import changes_markdown
    write_text(osp.join(out_dir, 'changes.html'), changes_page(changes, drawn, title))
    listed = [{key: v for key, v in changes.items() if key != 'settings_differences'}]
    text = changes_markdown(listed)
    if changes.get('settings_differences'):
        text += '\nDifferent settings: ' + '; '.join(changes['settings_differences']) + '\n'
    write_text(osp.join(out_dir, 'changes.md'), text)
    with open(osp.join(out_dir, 'changes.json'), 'w') as f:
        json.dump(json_safe({'changes': listed, 'not_listed': [],
                             'settings_differences': changes.get('settings_differences', [])}), f, indent=1)
