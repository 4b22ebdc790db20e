"""Writing the report folder: :func:`write_report` summarises the records (:mod:`.summary`), draws each
image (:func:`~mmsgg_eval.visualization.drawing.draw_record`, a grey canvas when the image file cannot be
read) and writes the pages (:mod:`.pages`), the per-predicate chart, the confusion heat map, the changes
files and ``summary.json``."""
import json
import os
import os.path as osp
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from .causes import cause_summary
from .changes import write_changes_files
from .markup import write_text
from .pages import image_page, index_page, predicate_page
from .summary import ALL, chart_order, k_value, metric_values, record_ks, report_k, summarize_records


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

    from ...visualization.drawing import draw_record, relation_items
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
        picture = draw_record(_read_image(path, r), r, k_value(k), topk_drawn)  # 'all': any rank
        mmcv.imwrite(picture[..., ::-1], osp.join(out_dir, 'images', f'{r["sample_idx"]}.jpg'))
        write_text(osp.join(out_dir, 'images', f'{r["sample_idx"]}.html'),
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
        write_text(osp.join(out_dir, 'predicates', pred_file[p]),
               predicate_page(p, i, summary, records, drawn, ks, k, predicates))
    chart = None
    order, summary['chart_order'] = chart_order(predicates, summary['per_predicate'], predicate_counts)
    try:
        from ...reports import plot_per_predicate_recall
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
    write_text(osp.join(out_dir, 'index.html'),
           index_page(records, summary, ks, k, predicates, pred_file, drawn, metrics, title, chart, split, changes))
    summary['drawn'] = sorted(drawn)
    with open(osp.join(out_dir, 'summary.json'), 'w') as f:
        json.dump({key: v for key, v in summary.items() if key not in ('confusion',)}, f)
    return summary
