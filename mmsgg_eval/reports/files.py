"""Report files on disk: the scene-graph / detection / grounding report sets, ``metrics.json`` conversion, the
``outfile_prefix`` JSON, and the writability checks of output directories."""
import json
import os
import os.path as osp
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .values import _k_label, json_safe, _chart_k
from .tables import scene_graph_tables, grounding_tables
from .formats import write_tables, _scene_graph_title
from .chart import plot_per_predicate_recall


def write_scene_graph_reports(summary: Dict[str, Any], out_dir: str, prefix: str, ks: Sequence[Any],
                              dataset: str, mode: str, chart_k: Any = None,
                              figsize: Optional[Sequence[float]] = None, dpi: int = 100) -> Dict[str, str]:
    """Write the report files of one scene-graph evaluation into ``out_dir``.

    * ``{prefix}.metrics.json`` (``metrics.json`` when ``prefix`` is empty): dataset, mode, ks and the whole
      summary — every key (``metrics``), the per-predicate recalls, groups, counts (NaN -> null);
    * ``{prefix}.per_predicate.png``: :func:`plot_per_predicate_recall` at ``chart_k`` (default: ``'all'`` if in
      ``ks``, else the largest K);
    * ``{prefix}.tables.md`` / ``.tables.tex`` / ``.tables.{name}.csv``: :func:`scene_graph_tables` written by
      :func:`write_tables`.

    Returns ``{'json': path, 'png': path, 'markdown': path, 'latex': path, 'csv_main': path, ...}``.
    """
    os.makedirs(out_dir, exist_ok=True)
    stem = f'{prefix}.' if prefix else ''
    ks = list(ks)
    paths = {'json': os.path.join(out_dir, f'{stem}metrics.json'),
             'png': os.path.join(out_dir, f'{stem}per_predicate.png')}
    payload = {'dataset': dataset, 'mode': mode, 'ks': [_k_label(k) for k in ks]}
    payload.update(summary)
    _write_json(paths['json'], payload)
    plot_per_predicate_recall(summary, paths['png'], _chart_k(ks, chart_k), dataset, mode, figsize, dpi)
    paths.update(write_tables(out_dir, prefix, _scene_graph_title(summary, dataset, mode),
                              scene_graph_tables(summary, ks, dataset, mode)))
    _SCENE_GRAPH_TABLES[(os.path.abspath(out_dir), prefix)] = (summary, ks, dataset, mode)
    return paths


# (directory, stem) -> (summary, ks, dataset, mode) of the last scene-graph tables written there and not yet
# completed by add_detection_keys
_SCENE_GRAPH_TABLES: Dict[Tuple[str, str], Tuple[Dict[str, Any], List[Any], str, str]] = {}


def add_detection_keys(out_dir: str, stem: str, keys: Dict[str, float]) -> Optional[Dict[str, str]]:
    """Rewrite the tables of the scene-graph report last written to ``out_dir`` under ``stem`` (in this
    process, and not completed yet) with ``keys`` (DetectionAP's ``mAP`` / ``AP@50``) added to its main table;
    returns the table paths, or None when there is no such report. The summary's own keys are never replaced."""
    entry = _SCENE_GRAPH_TABLES.pop((os.path.abspath(out_dir), stem), None)
    if entry is None:
        return None
    summary, ks, dataset, mode = entry
    summary = dict(summary, metrics={**keys, **summary.get('metrics', {})})
    return write_tables(out_dir, stem, _scene_graph_title(summary, dataset, mode),
                        scene_graph_tables(summary, ks, dataset, mode))


def write_detection_reports(keys: Dict[str, float], counts: Dict[str, Any], out_dir: str, prefix: str,
                            dataset: str, mode: str, stem: Optional[str] = None) -> Dict[str, str]:
    """Report files of ``DetectionAP`` (keys in percent, unprefixed): ``{stem}.metrics.json`` (keys and
    counts), its tables ``{stem}.tables.*`` (``| Dataset | Mode | mAP | AP@50 |``; ``stem`` default
    ``{prefix}.detection``), and the keys added to the main table of the scene-graph report written under
    ``{prefix}`` just before (:func:`add_detection_keys`; keys ``merged_markdown`` ...)."""
    stem = stem or (f'{prefix}.detection' if prefix else 'detection')
    summary = {'metrics': dict(keys), **counts}
    paths = {'json': write_summary_json(summary, out_dir, stem)}
    paths.update(write_tables(out_dir, stem, f'{dataset} — {mode} detections ({counts.get("num_images", 0)} images)',
                              scene_graph_tables(summary, [], dataset, mode)))
    merged = add_detection_keys(out_dir, prefix, keys)
    paths.update({f'merged_{k}': v for k, v in (merged or {}).items()})
    return paths


def write_grounding_reports(summary: Dict[str, Any], out_dir: str, prefix: str, dataset: str) -> Dict[str, str]:
    """Report files of a ``GroundingPr`` evaluation: ``{prefix}.metrics.json`` (the summary, per-sample IoUs
    included) and the tables of :func:`grounding_tables` (``{prefix}.tables.md`` / ``.tex`` / ``.{name}.csv``)."""
    paths = {'json': write_summary_json(summary, out_dir, prefix)}
    title = (f'{dataset} — grounding ({summary.get("num_samples", 0)} samples, '
             f'{summary.get("num_without_prediction", 0)} without prediction)')
    paths.update(write_tables(out_dir, prefix, title, grounding_tables(summary, dataset)))
    return paths


def _write_json(path: str, payload: Dict[str, Any]) -> None:
    """``payload`` as strict JSON (NaN -> null), without the logged text and the list of report files."""
    payload = {k: v for k, v in payload.items() if k not in ('text', 'report_files')}
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(json_safe(payload), f, indent=2, allow_nan=False)


def write_summary_json(summary: Dict[str, Any], out_dir: str, prefix: str) -> str:
    """Write ``{prefix}.metrics.json`` (``metrics.json`` when ``prefix`` is empty): a metric's whole summary
    (every key under ``metrics``, counts, NaN -> null) into ``out_dir``; returns the path."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f'{prefix}.metrics.json' if prefix else 'metrics.json')
    _write_json(path, summary)
    return path


def dump_metric_json(outfile_prefix: str, prefix: str, payload: Dict[str, Any]) -> str:
    """Write ``{outfile_prefix}.{prefix}.json`` (a metric's ``outfile_prefix`` dump); returns the path."""
    path = f'{outfile_prefix}.{prefix}.json'
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(payload, f, indent=2)
    return path


class OutputNotWritableError(OSError):
    """An output location (work dir, ``--out`` file's directory, a metric's report prefix) is not writable."""


def check_writable(directory: str, what: str) -> str:
    """Create ``directory`` if needed and write (then remove) a probe file in it; return its absolute path.

    Run it before evaluating, so that a run never computes its numbers only to fail saving them.
    ``what`` names the location in the error (e.g. ``'work dir (--work-dir)'``).
    """
    path = osp.abspath(directory)
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix='.mmsgg_eval_write_check_'):
            pass
    except OSError as err:
        blocked = next((p for p in _parents(path) if osp.exists(p) and not osp.isdir(p)), None)
        reason = f'{blocked} is a file, not a directory' if blocked else (err.strerror or str(err))
        raise OutputNotWritableError(f'{what} {path} is not writable ({reason}): files cannot be written there, so '
                                     f'nothing was evaluated (choose another location)') from err
    return path


def _parents(path: str) -> List[str]:
    """``path`` and its ancestors, nearest first."""
    out = [path]
    while osp.dirname(out[-1]) != out[-1]:
        out.append(osp.dirname(out[-1]))
    return out


# ---------------------------------------------------------------------------------------------- error analysis
