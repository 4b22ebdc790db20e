"""The interface between :class:`~mmsgg_eval.models.SceneGraphDetector` and a relation head.

A relation head scores candidate (subject, object) pairs of the objects the template found:

``predict(feats, objects, pair_idxs, data_samples) -> List[Tensor]``

* ``feats``: the detector's multi-level features (``detector.extract_feat``; tensors [B, C, H_l, W_l] in the
  network input frame), or None when the head sets ``needs_features = False`` and no detector ran
  (PredCls).
* ``objects``: one ``InstanceData`` per image with ``bboxes`` float [N, 4] (xyxy, ORIGINAL image pixels),
  ``feat_bboxes`` float [N, 4] (the same boxes in the network input frame, the frame of ``feats``, e.g. for
  RoI pooling), ``labels`` int64 [N] (0-based classes) and ``scores`` float [N].
* ``pair_idxs``: one int64 [R, 2] tensor per image, (subject, object) indices into ``objects``.
* ``data_samples``: the batch's data samples (metainfo ``img_shape``, ``scale_factor``, ``ori_shape``...).
* returns one float [R, P+1] tensor per image: predicate scores (probabilities) per pair, column 0 = no
  relation, on the device of the inputs.

Everything else (running the detector, forming pairs, ranking, packing ``pred_instances`` /
``pred_relations``) is the template's. A head trained by gradient descent also implements
``loss(feats, objects, pair_idxs, data_samples) -> dict`` of loss tensors.
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from mmengine.model import BaseModule
from torch import Tensor


def all_ordered_pairs(num_objects: int, device: Optional[torch.device] = None) -> Tensor:
    """All ordered pairs (i, j), i != j, of ``num_objects`` objects, row-major: int64 [n (n - 1), 2]."""
    grid = ~torch.eye(num_objects, dtype=torch.bool, device=device)
    return torch.stack(grid.nonzero(as_tuple=True), 1)


def rank_pairs(pair_idxs: Tensor, rel_scores: Tensor, obj_scores: Tensor,
               max_pairs: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """Sort pairs by max predicate probability (column 0 excluded) x subject score x object score, stable,
    descending (the order the scene-graph metrics rank by), keeping at most ``max_pairs``."""
    if pair_idxs.shape[0]:
        key = rel_scores[:, 1:].max(-1).values * obj_scores[pair_idxs[:, 0]] * obj_scores[pair_idxs[:, 1]]
    else:
        key = rel_scores[:, 0]
    order = torch.sort(key, descending=True, stable=True).indices
    if max_pairs is not None:
        order = order[:max_pairs]
    return pair_idxs[order], rel_scores[order]


class BaseRelationHead(BaseModule):
    """Base class of relation heads (see the module docstring for the interface).

    Args:
        num_classes: object classes C (without background).
        num_predicates: predicates P (without background); ``predict`` returns [R, P+1] scores.
    """

    needs_features: bool = True

    def __init__(self, num_classes: int, num_predicates: int, init_cfg: Optional[dict] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        self.num_classes = int(num_classes)
        self.num_predicates = int(num_predicates)

    def predict(self, feats: Optional[Sequence[Tensor]], objects: List[Any], pair_idxs: List[Tensor],
                data_samples: Sequence[Any]) -> List[Tensor]:
        raise NotImplementedError(f'{type(self).__name__} must implement predict()')

    def loss(self, feats: Optional[Sequence[Tensor]], objects: List[Any], pair_idxs: List[Tensor],
             data_samples: Sequence[Any]) -> Dict[str, Tensor]:
        raise NotImplementedError(f'{type(self).__name__} is not trained by gradient descent (no loss())')
