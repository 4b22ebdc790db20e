"""Report tables as text files: Markdown, CSV and LaTeX (booktabs)."""
import os
from typing import Any, Dict, Sequence

from .values import _is_value
from .tables import ReportTable, scene_graph_tables


def markdown_cell(text: Any) -> str:
    """``text`` safe in one cell of a Markdown (GFM) table: ``|`` escaped as ``\\|`` (also after a backslash,
    which would otherwise escape the escape), line breaks as spaces. THE escaper of every Markdown writer
    (report tables, ``compare.md``, the relation-alignment report)."""
    text = str(text).replace('\r\n', ' ').replace('\n', ' ').replace('\r', ' ')
    return text.replace('\\|', '\\\\|').replace('|', '\\|') if '|' in text else text


_md_cell = markdown_cell


def tables_markdown(title: str, tables: Sequence[ReportTable]) -> str:
    """Markdown: ``### title``, then each table with its caption in italics."""
    lines = [f'### {title}']
    for table in tables:
        lines += ['', f'*{table.caption}*', '',
                  '| ' + ' | '.join(_md_cell(h) for h in table.header) + ' |',
                  '|' + '---|' * table.text_columns + '---:|' * (len(table.header) - table.text_columns)]
        for row in table.rows:
            lines.append('| ' + ' | '.join(_md_cell(table.cell(i, v)) for i, v in enumerate(row)) + ' |')
    return '\n'.join(lines) + '\n'


def table_csv(table: ReportTable) -> str:
    """CSV (``csv`` module, excel dialect): the header, then the rows; numbers at full precision (``repr``),
    no value = empty cell."""
    import csv
    import io
    out = io.StringIO()
    writer = csv.writer(out, lineterminator='\n')
    writer.writerow(table.header)
    for row in table.rows:
        writer.writerow([v if isinstance(v, str) else repr(v) if _is_value(v) else '' for v in row])
    return out.getvalue()


_LATEX_SPECIALS = {'\\': r'\textbackslash{}', '&': r'\&', '%': r'\%', '$': r'\$', '#': r'\#', '_': r'\_',
                   '{': r'\{', '}': r'\}', '~': r'\textasciitilde{}', '^': r'\textasciicircum{}',
                   '—': '---', '–': '--', 'τ': r'$\tau$', '≥': r'$\geq$', '×': r'$\times$',
                   '<': r'\textless{}', '>': r'\textgreater{}'}


def latex_escape(text: str) -> str:
    """Text safe in LaTeX: ``\\ & % $ # _ { } ~ ^ < >`` escaped, dashes as ``---`` / ``--``, τ ≥ × in math
    mode."""
    return ''.join(_LATEX_SPECIALS.get(ch, ch) for ch in str(text))


def tables_latex(title: str, tables: Sequence[ReportTable]) -> str:
    """LaTeX: one ``table`` environment per table, a booktabs ``tabular`` (``\\toprule`` / ``\\midrule`` /
    ``\\bottomrule``; needs ``\\usepackage{booktabs}``) captioned with the title and the table's caption."""
    lines = [f'% {latex_escape(title)}', '% needs \\usepackage{booktabs}']
    for table in tables:
        spec = 'l' * table.text_columns + 'r' * (len(table.header) - table.text_columns)
        lines += ['', r'\begin{table}[t]', r'\centering',
                  f'\\caption{{{latex_escape(title)}: {latex_escape(table.caption)}}}',
                  f'\\begin{{tabular}}{{{spec}}}', r'\toprule',
                  ' & '.join(latex_escape(h) for h in table.header) + r' \\', r'\midrule']
        for row in table.rows:
            lines.append(' & '.join(latex_escape(table.cell(i, v, missing='–')) for i, v in enumerate(row))
                         + r' \\')
        lines += [r'\bottomrule', r'\end{tabular}', r'\end{table}']
    return '\n'.join(lines) + '\n'


def write_tables(out_dir: str, stem: str, title: str, tables: Sequence[ReportTable]) -> Dict[str, str]:
    """Write ``{stem}.tables.md`` (Markdown), ``{stem}.tables.tex`` (LaTeX, booktabs) and one
    ``{stem}.tables.{table name}.csv`` per table into ``out_dir`` (``tables.*`` when ``stem`` is empty).

    Returns ``{'markdown': path, 'latex': path, 'csv_{name}': path, ...}``.
    """
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, f'{stem}.tables' if stem else 'tables')
    paths = {'markdown': base + '.md', 'latex': base + '.tex'}
    paths.update({f'csv_{t.name}': f'{base}.{t.name}.csv' for t in tables})
    with open(paths['markdown'], 'w', encoding='utf-8') as f:
        f.write(tables_markdown(title, tables))
    with open(paths['latex'], 'w', encoding='utf-8') as f:
        f.write(tables_latex(title, tables))
    for t in tables:
        with open(paths[f'csv_{t.name}'], 'w', encoding='utf-8', newline='') as f:
            f.write(table_csv(t))
    return paths


def _scene_graph_title(summary: Dict[str, Any], dataset: str, mode: str) -> str:
    return (f'{dataset} — {mode} ({summary.get("num_images", 0)} images evaluated'
            f'{", " + str(summary["num_samples"]) + " samples" if "num_samples" in summary else ""})')


def format_markdown_tables(summary: Dict[str, Any], ks: Sequence[Any], dataset: str, mode: str,
                           digits: int = 2, with_per_predicate: bool = True) -> str:
    """Markdown ready to paste into a paper (values in percent): the tables of :func:`scene_graph_tables`."""
    tables = scene_graph_tables(summary, ks, dataset, mode, with_per_predicate)
    for t in tables:
        t.digits = {i: digits for i in range(len(t.header))}
    return tables_markdown(_scene_graph_title(summary, dataset, mode), tables)
