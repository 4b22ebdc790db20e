"""What the scene-graph metrics (``SceneGraphMetric``, ``OIRelationMetric``) read from a sample around the padded
batch: its predicted pair count (the pool's weight), its image sizes (the box-frame diagnostics), the explicitly
empty prediction a sample marked ``prediction_missing`` is read as, and the reading of a pool itself
(:func:`read_pool_stages`)."""
from typing import Any, Generator, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..functional.scores import ScoreWorkspace
from ..functional.transfer import host_tensor
from ..structures import ObjectCounts, SceneGraphBatch, collate_stages, get_field
from .samples import first_occurrences, prediction_missing


def score_rows(sample: Any) -> int:
    """Number of predicted pairs of a sample (0 when unreadable: the pool's reader reports that)."""
    scores = get_field(get_field(sample, 'pred_relations'), 'scores')
    shape = getattr(scores, 'shape', None)
    return int(shape[0]) if shape else 0


def image_sizes(samples: Sequence[Any], device: torch.device) -> Tuple[Tensor, Tensor]:
    """(original [B, 2], resized [B, 2]) (width, height) pixels of each sample from its ``ori_shape`` (H, W) and
    ``img_shape`` (H, W) or ``scale_factor`` (w, h) metainfo; NaN where unknown."""
    nan = float('nan')
    original, resized = [], []
    for sample in samples:
        ori = get_field(sample, 'ori_shape')
        if ori is None or len(ori) < 2:
            original.append((nan, nan))
            resized.append((nan, nan))
            continue
        h, w = float(ori[0]), float(ori[1])
        original.append((w, h))
        img, scale = get_field(sample, 'img_shape'), get_field(sample, 'scale_factor')
        if img is not None and len(img) >= 2:
            resized.append((float(img[1]), float(img[0])))
        elif scale is not None:
            scale = [float(v) for v in (scale if hasattr(scale, '__len__') else (scale,))]
            resized.append((w * scale[0], h * scale[-1]))
        else:
            resized.append((nan, nan))
    return (host_tensor(original, torch.float32, device).reshape(-1, 2),
            host_tensor(resized, torch.float32, device).reshape(-1, 2))


def as_unpredicted(sample: Any, num_predicates: int) -> Any:
    """A sample marked ``prediction_missing`` with an explicitly empty prediction that every mode reads
    (objects on the GT, no predicted pair): its GT relations are all missed. Data elements pass unchanged."""
    if not isinstance(sample, dict):
        return sample
    labels = get_field(get_field(sample, 'gt_instances'), 'labels')
    boxes = get_field(get_field(sample, 'gt_instances'), 'bboxes')
    if labels is None or boxes is None:
        return sample  # the reader names the missing GT field
    device = getattr(labels, 'device', torch.device('cpu'))
    out = dict(sample)
    out['pred_instances'] = {'bboxes': boxes, 'labels': labels, 'scores': torch.ones(len(labels), device=device)}
    out['pred_relations'] = {'pair_idxs': torch.zeros((0, 2), dtype=torch.long, device=device),
                             'scores': torch.zeros((0, num_predicates + 1), device=device)}
    out.pop('pred_mode', None)
    return out


def read_pool_stages(samples: List[Any], mode: str, num_classes: int, num_predicates: int, *,
                     counts: ObjectCounts, workspace: ScoreWorkspace, pass_outputs: List[ScoreWorkspace],
                     score_layout: str, ranking: Optional[Tuple[int, ...]], background: bool = False,
                     with_masks: bool = False) -> Generator[bool, None, Tuple[SceneGraphBatch, List[bool], List[Any]]]:
    """A pool of a scene-graph metric read in two stages (:func:`~mmsgg_eval.structures.reader.collate_stages`):
    the first sample of each ``sample_idx`` (a repeat within the pool counts once), a sample marked
    ``prediction_missing`` read as an explicitly empty prediction (:func:`as_unpredicted`), the compiled pass (with
    ``ranking``) writing to the buffer of ``pass_outputs`` that the previous pool's did not (the two are swapped:
    that pool's batch lives in the other while this pass runs). Returns ``(batch, missing flags [B], samples read)``
    in batch order."""
    samples = first_occurrences(samples)
    missing = [prediction_missing(s) for s in samples]
    if any(missing):
        samples = [as_unpredicted(s, num_predicates) if m else s for s, m in zip(samples, missing)]
    pass_outputs.reverse()
    batch = yield from collate_stages(samples, mode, num_classes, num_predicates, with_masks=with_masks,
                                      counts=counts, workspace=workspace, score_layout=score_layout, ranking=ranking,
                                      background=background, pass_workspace=pass_outputs[0])
    return batch, missing, samples
