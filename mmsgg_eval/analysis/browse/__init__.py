"""A static, self-contained HTML report of per-image hits and misses (``tools/analysis/browse_results.py``).

Input: the per-image records of a scene-graph metric (:mod:`mmsgg_eval.metrics.per_image`), from a
``per_image_out`` file or from an offline evaluation of saved predictions run here. Output folder::

    index.html                 summary table, per-predicate chart, confusion heat map, image table
    images/<sample_idx>.html   one page per drawn image; images/<sample_idx>.jpg its picture
    predicates/<n>.html        one page per predicate
    per_predicate.png, confusion.png
    changes.html, changes.md, changes.json   given another run (``--compare-to``): the GT relations gained and lost

No server and no network: inline CSS and vanilla JavaScript, relative links, so ``index.html`` opens from
disk. The numbers are computed from the records with the metric's own functions (the key declarations through
:func:`~mmsgg_eval.metrics.key_values.summary_keys`, the cause shares through
:func:`~mmsgg_eval.functional.error_causes.cause_shares`), so the index's R@K equal the evaluation's (``metrics.json``) for the recall average given (``image``, the
default, or ``micro``). Pictures are drawn from the records by
:func:`~mmsgg_eval.visualization.drawing.draw_record`, as ``SceneGraphLocalVisualizer`` draws them (boxes
only: masks are drawn by ``--show-dir``, which has the data samples); an image file that
cannot be read is replaced by a grey canvas.

The package by concern: :mod:`.summary` (the numbers), :mod:`.causes` (where recall is lost),
:mod:`.changes` (against another run), :mod:`.pages` (the HTML pages), :mod:`.markup` (shared HTML pieces)
and :mod:`.report` (writing the folder).
"""
from .causes import CAUSE_COLORS, cause_section, cause_summary, cause_table, stacked_bar
from .changes import change_rows, changes_page, changes_section, image_changes, write_changes_files
from .markup import CSS, FILTER_JS, SORT_JS
from .pages import image_page, index_page, predicate_page, vlm_answer_section
from .report import confusion_png, draw_image_pages, write_report
from .summary import (ALL, PAGE_FAMILIES, chart_order, dataset_facts, found_within, metric_values, record_key,
                      record_ks, report_k, summarize_records)

__all__ = ['ALL', 'CAUSE_COLORS', 'CSS', 'FILTER_JS', 'PAGE_FAMILIES', 'SORT_JS', 'cause_section', 'cause_summary',
           'cause_table', 'change_rows', 'changes_page', 'changes_section', 'chart_order', 'confusion_png',
           'dataset_facts', 'draw_image_pages', 'found_within', 'image_changes', 'image_page', 'index_page',
           'metric_values', 'predicate_page', 'record_key', 'record_ks', 'report_k', 'stacked_bar',
           'summarize_records', 'vlm_answer_section', 'write_changes_files', 'write_report']
