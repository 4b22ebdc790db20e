"""Result files of a run: checking output locations before evaluating, writing ``metrics.json``.

One writer for both command lines: ``tools/test.py`` (:mod:`.cli`) and the offline CLI
(:mod:`mmsgg_eval.eval`) call :func:`write_run_metrics`, so the two ``metrics.json`` of the same predictions
have the same keys:

* every scalar key the evaluator returned (``{prefix}/{key}``);
* the metrics' tables (:func:`~mmsgg_eval.metrics.extra_results_of`, e.g. ``{mode}/per_predicate_recall``);
* ``{prefix}/num_missing_predictions`` for every metric prefix: dataset samples without a prediction
  (scored as empty predictions; 0 in a ``tools/test.py`` run, where the model predicts every sample);
* ``provenance`` (:func:`run_provenance`): what produced the numbers (package version and git commit,
  config, checkpoint or prediction file with size and SHA-256, dataset, each metric's protocol and
  conventions, UTC date), in one key so that the metric keys stay flat.
"""
import datetime
import json
import os
import os.path as osp
import subprocess
import sys
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from ..io.filehash import BLOCK_BYTES, sha256_file
from ..reports import OutputNotWritableError, check_writable, json_safe  # noqa: F401  (first two re-exported)

#: Seconds a ``git`` call may take before the commit is recorded as unknown.
GIT_TIMEOUT_S = 10.0
#: Installed distributions whose versions are recorded (read from their metadata: nothing is imported).
RECORDED_DISTRIBUTIONS = ('torch', 'mmengine', 'mmdet', 'mmcv', 'numpy')


def write_metrics_json(metrics: Dict[str, Any], work_dir: str, name: Optional[str] = None) -> str:
    """Write ``metrics.json`` (all keys, per-predicate tables included) into ``work_dir``; return its path.

    The file is written next to its final name and renamed into place, so a failed write never leaves a
    truncated ``metrics.json``; on failure the metrics are printed to stderr as JSON before the error is
    raised, so the computed numbers are never lost.
    """
    text = json.dumps(json_safe(metrics, nan_as_null=False), indent=2)
    path = osp.join(work_dir, name or 'metrics.json')
    tmp = f'{path}.tmp{os.getpid()}'
    try:
        os.makedirs(work_dir, exist_ok=True)
        with open(tmp, 'w') as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as err:
        print(f'could not write {path} ({err.strerror or err}); the metrics were:\n{text}', file=sys.stderr,
              flush=True)
        if osp.exists(tmp):
            os.remove(tmp)
        raise
    return path


def set_report_dirs(metrics: Sequence[Any], work_dir: str) -> None:
    """Give every metric that has a ``report_dir`` attribute left at None the work dir (its report files:
    ``{prefix}.metrics.json``, charts, tables); an explicit ``report_dir`` is kept."""
    for metric in metrics:
        if hasattr(metric, 'report_dir') and metric.report_dir is None:
            metric.report_dir = work_dir


def metrics_file_content(scalars: Mapping[str, Any], metrics: Sequence[Any], provenance: Dict[str, Any],
                         num_missing: int = 0) -> Dict[str, Any]:
    """What ``metrics.json`` holds (see the module docstring).

    Args:
        scalars: the keys the evaluator returned (``{prefix}/{key}: float``).
        metrics: the evaluator's metric objects, after ``evaluate()``.
        provenance: :func:`run_provenance`.
        num_missing: dataset samples without a prediction, for the metrics whose summary does not count them.
    """
    from ..metrics import extra_results_of
    out: Dict[str, Any] = dict(scalars)
    out.update(extra_results_of(metrics))
    for metric in metrics:
        prefix = getattr(metric, 'prefix', None)
        if not prefix or not any(k.startswith(f'{prefix}/') for k in scalars):
            continue  # not an evaluation metric (e.g. the --out prediction dump)
        report = getattr(metric, 'last_report', None) or {}
        out.setdefault(f'{prefix}/num_missing_predictions', int(report.get('num_missing_predictions', num_missing)))
    out['provenance'] = provenance
    return out


def write_run_metrics(scalars: Mapping[str, Any], metrics: Sequence[Any], work_dir: str,
                      provenance: Dict[str, Any], num_missing: int = 0) -> Tuple[str, Dict[str, Any]]:
    """Write ``WORK_DIR/metrics.json`` of a run (:func:`metrics_file_content`, atomically); return its path
    and content."""
    content = metrics_file_content(scalars, metrics, provenance, num_missing)
    return write_metrics_json(content, work_dir), content


# ---------------------------------------------------------------------------------------------- provenance

def file_fingerprint(path: str, chunk_bytes: int = BLOCK_BYTES) -> Dict[str, Any]:
    """``{'path': absolute path, 'size': bytes, 'sha256': hex digest}`` of a file, hashed in chunks of
    ``chunk_bytes`` (memory does not grow with the file), or the digest taken while the prediction stream reader
    read the same file whole (:func:`mmsgg_eval.io.readahead.known_sha256`: no second pass)."""
    from ..io.readahead import known_sha256
    digest = known_sha256(path) or sha256_file(path, chunk_bytes)
    return {'path': osp.abspath(path), 'size': osp.getsize(path), 'sha256': digest}


def _git(directory: str, *args: str) -> Optional[str]:
    """Stdout of ``git -C directory ARGS``; None when git is absent, fails or takes too long."""
    try:
        out = subprocess.run(['git', '-C', directory, *args], capture_output=True, text=True,
                             timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_state(directory: Optional[str] = None) -> Optional[Dict[str, Any]]:
    """``{'commit': sha, 'dirty': bool}`` of the git checkout holding the mmsgg_eval package (or
    ``directory``); None when git or the repository is absent, or when the package's files are not tracked
    there (an installed copy inside another project's repository). ``dirty``: tracked package files differ
    from the commit."""
    directory = directory or osp.dirname(osp.dirname(osp.abspath(__file__)))
    if not osp.isdir(directory) or _git(directory, 'ls-files', '--error-unmatch', '--', '.') is None:
        return None
    commit = _git(directory, 'rev-parse', 'HEAD')
    if not commit:
        return None
    status = _git(directory, 'status', '--porcelain', '--untracked-files=no', '--', '.')
    return {'commit': commit, 'dirty': None if status is None else bool(status)}


def distribution_versions(names: Sequence[str] = RECORDED_DISTRIBUTIONS) -> Dict[str, Optional[str]]:
    """Installed versions of ``names`` (None when not installed), from the package metadata."""
    from importlib import metadata
    out: Dict[str, Optional[str]] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _dataset_field(dataset: Any, dataset_cfg: Optional[Mapping[str, Any]], name: str) -> Any:
    value = getattr(dataset, name, None)
    if value in (None, '') and dataset_cfg is not None:
        value = dataset_cfg.get(name)
    if value in (None, ''):
        return None
    return value if isinstance(value, (str, int, float, bool)) else str(value)


def dataset_provenance(dataset: Any, dataset_cfg: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Name (``metainfo['dataset_name']``), type, split, annotation file, data root and number of samples
    (images for scene graphs, (image, query) pairs for grounding) of the evaluated dataset; a field the
    dataset does not have is taken from its config ``dataset_cfg``, else None."""
    meta = dict(getattr(dataset, 'metainfo', None) or {})
    cfg_type = dataset_cfg.get('type') if dataset_cfg is not None else None
    return {'name': meta.get('dataset_name'),
            'type': type(dataset).__name__ if dataset is not None else cfg_type,
            'split': _dataset_field(dataset, dataset_cfg, 'split'),
            'ann_file': _dataset_field(dataset, dataset_cfg, 'ann_file'),
            'data_root': _dataset_field(dataset, dataset_cfg, 'data_root'),
            'num_samples': len(dataset) if dataset is not None else None}


def metric_provenance(metric: Any) -> Dict[str, Any]:
    """Type, prefix, mode, protocol and conventions of one metric (the conventions of its last summary,
    which knows the dataset's IoU convention, else its own :attr:`conventions`)."""
    report = getattr(metric, 'last_report', None) or {}
    conventions = report.get('conventions')
    if conventions is None:
        conventions = getattr(metric, 'conventions', None)
    protocol = getattr(metric, 'protocol', None)
    return {'type': type(metric).__name__, 'prefix': getattr(metric, 'prefix', None),
            'mode': getattr(metric, 'mode', None), 'protocol': getattr(protocol, 'name', protocol),
            'conventions': conventions}


def run_provenance(tool: str, config: str, metrics: Sequence[Any], dataset: Any = None,
                   dataset_cfg: Optional[Mapping[str, Any]] = None, checkpoint: Optional[str] = None,
                   predictions: Optional[str] = None, predictions_format: Optional[str] = None,
                   work_dir: Optional[str] = None, options: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The ``provenance`` entry of ``metrics.json``.

    Args:
        tool: the command that ran (``'tools/test.py'``, ``'mmsgg_eval.eval'``).
        config: path of the config file.
        metrics: the evaluator's metrics (their protocol and conventions); the ``--out`` dump is left out.
        dataset: the evaluated dataset (name, split, number of samples), its config ``dataset_cfg``.
        checkpoint: the model file (``tools/test.py``), hashed; None offline.
        predictions: the prediction file read (offline) or written (``tools/test.py --out``), hashed,
            with its ``predictions_format``.
        options: the run's options (``--cfg-options``, mode, protocol, ...), recorded as given.

    Same keys for every tool; file entries are ``{'path', 'size', 'sha256'}`` (:func:`file_fingerprint`).
    """
    from ..metrics.dump import DumpSceneGraphPredictions
    from ..version import __version__
    files = {}
    for name, path in (('checkpoint', checkpoint), ('predictions', predictions)):
        files[name] = file_fingerprint(path) if path and osp.isfile(path) else None
    if files['predictions'] is not None:
        files['predictions']['format'] = predictions_format
    return {
        'tool': tool,
        'date': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ'),
        'mmsgg_eval_version': __version__,
        'git': git_state(),
        'versions': distribution_versions(),
        'config': osp.abspath(config),
        'work_dir': osp.abspath(work_dir) if work_dir else None,
        **files,
        'dataset': dataset_provenance(dataset, dataset_cfg),
        'metrics': [metric_provenance(m) for m in metrics if not isinstance(m, DumpSceneGraphPredictions)],
        'options': dict(options or {}),
    }
