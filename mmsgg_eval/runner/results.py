"""Result files of a run: checking output locations before evaluating, writing ``metrics.json``."""
import json
import os
import os.path as osp
import sys
from typing import Any, Dict, Optional

from ..reports import OutputNotWritableError, check_writable, json_safe  # noqa: F401  (first two re-exported)


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
