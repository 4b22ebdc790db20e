"""Where a run's metrics save their evaluation states (``--save-state DIR``): one path per metric, and the
dataset's ground-truth hash that states carry (so that shards and compared runs are checked to share the GT).
The state files themselves: :mod:`mmsgg_eval.metrics.state`."""
import hashlib
import json
import os.path as osp
from typing import Any, List, Sequence

from .state import STATE_SUFFIX

def dataset_gt_hash(dataset: Any) -> str:
    """SHA-256 (hex) of the GT of every sample of ``dataset`` (``get_data_info(i)``: ``img_id``, image size,
    instances' boxes, labels and ignore flags, relations, and a grounding query's text), in index order.
    File paths are left out, so copies of one dataset under different roots hash alike."""
    import numpy as np
    digest = hashlib.sha256()
    for i in range(len(dataset)):
        info = dataset.get_data_info(i)
        instances = info.get('instances', [])
        digest.update(json.dumps([info.get(k) for k in ('img_id', 'width', 'height', 'text')], default=str)
                      .encode())
        digest.update(np.asarray([inst.get('bbox', [0] * 4) for inst in instances], np.float64).tobytes())
        digest.update(np.asarray([[inst.get('bbox_label', -1), inst.get('ignore_flag', 0)] for inst in instances],
                                 np.int64).tobytes())
        digest.update(np.asarray(info.get('relations', np.zeros((0, 3))), np.int64).tobytes())
        digest.update(b'|')
    return digest.hexdigest()


def set_state_paths(metrics: Sequence[Any], directory: str, dataset: Any = None) -> List[str]:
    """``--save-state DIR``: every row metric of ``metrics`` writes its state to ``DIR/{prefix}[.{file_tag}]
    .state`` (numbered when two metrics would share a name) with the GT hash of ``dataset`` (main rank
    only: the hash is computed there). Returns the paths."""
    from mmengine.dist import is_main_process
    gt_hash = dataset_gt_hash(dataset) if dataset is not None and is_main_process() else None
    paths: List[str] = []
    for metric in metrics:
        if not callable(getattr(metric, 'tagged_stem', None)):  # not a row metric: it has no state
            continue
        stem = metric.tagged_stem()
        path, n = osp.join(directory, stem + STATE_SUFFIX), 2
        while path in paths:
            path, n = osp.join(directory, f'{stem}.{n}{STATE_SUFFIX}'), n + 1
        metric.save_state, metric.state_gt_hash, metric.state_position = path, gt_hash, len(paths)
        metric.state_num_samples = None if dataset is None else len(dataset)
        paths.append(path)
    return paths
