"""Result files of a run: checking output locations before evaluating, writing ``metrics.json``."""
import json
import os
import os.path as osp
import sys
import tempfile
from typing import Any, Dict, List, Optional


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
        raise OutputNotWritableError(f'{what} {path} is not writable: {reason}; nothing was evaluated '
                                     f'(choose another location)') from err
    return path


def _parents(path: str) -> List[str]:
    """``path`` and its ancestors, nearest first."""
    out = [path]
    while osp.dirname(out[-1]) != out[-1]:
        out.append(osp.dirname(out[-1]))
    return out


def write_metrics_json(metrics: Dict[str, Any], work_dir: str, name: Optional[str] = None) -> str:
    """Write ``metrics.json`` (all keys, per-predicate tables included) into ``work_dir``; return its path.

    The file is written next to its final name and renamed into place, so a failed write never leaves a
    truncated ``metrics.json``; on failure the metrics are printed to stderr as JSON before the error is
    raised, so the computed numbers are never lost.
    """
    from ..reports import json_safe
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
