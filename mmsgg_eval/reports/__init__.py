"""Human-readable reports: the legacy-style ``SGG eval`` text block, per-predicate tables, and report files
(``metrics.json``, a per-predicate bar chart PNG, the tables as Markdown, LaTeX (booktabs) and CSV) written by
:func:`write_scene_graph_reports` / :func:`write_grounding_reports`.

One module per output: :mod:`.values` (shared labels and formatting), :mod:`.text` (logged blocks),
:mod:`.tables` (the tables of a summary), :mod:`.formats` (Markdown / CSV / LaTeX), :mod:`.chart` (the long-tail
PNG) and :mod:`.files` (report files, ``metrics.json``, writability checks)."""
from .values import (GROUP_ORDER, HEADLINE_EXTRA, MISSING, recall_key, json_safe, recall_average_of, Estimate,
    summary_values)  # noqa: F401
from .text import format_scene_graph_report, format_per_predicate_table, log_block, format_recall_lost  # noqa: F401
from .tables import ReportTable, scene_graph_tables, grounding_tables, cause_tables  # noqa: F401
from .formats import (markdown_cell, tables_markdown, table_csv, latex_escape, tables_latex, write_tables,
    format_markdown_tables)  # noqa: F401
from .chart import GROUP_COLORS, plot_per_predicate_recall, per_predicate_figure  # noqa: F401
from .files import (write_scene_graph_reports, add_detection_keys, write_detection_reports, write_grounding_reports,
    write_summary_json, dump_metric_json, OutputNotWritableError, check_writable)  # noqa: F401
from ..keys import FAMILY_ORDER, FAMILY_TITLES  # noqa: F401  (declared with the keys)

__all__ = [
    'GROUP_ORDER', 'HEADLINE_EXTRA', 'MISSING', 'recall_key', 'json_safe', 'recall_average_of', 'Estimate',
    'summary_values', 'format_scene_graph_report', 'format_per_predicate_table', 'log_block', 'format_recall_lost',
    'ReportTable', 'scene_graph_tables', 'grounding_tables', 'cause_tables', 'markdown_cell', 'tables_markdown',
    'table_csv', 'latex_escape', 'tables_latex', 'write_tables', 'format_markdown_tables', 'GROUP_COLORS',
    'plot_per_predicate_recall', 'per_predicate_figure', 'write_scene_graph_reports', 'add_detection_keys',
    'write_detection_reports', 'write_grounding_reports', 'write_summary_json', 'dump_metric_json',
    'OutputNotWritableError', 'check_writable', 'FAMILY_ORDER', 'FAMILY_TITLES']
