"""``SceneGraphDetector``: a scene-graph model on any MMDetection 3.x detector plus a relation head.

Per mode, the objects whose pairs the relation head scores:

* ``sgdet``: the detector's detections (NMS-ed, rescaled to the original image frame, as mmdet's
  ``predict(rescale=True)``); candidate pairs = all ordered pairs of them.
* ``sgcls``: the GT boxes, mapped into the network input frame (``x scale_factor``), classified by the
  detector's RoI head (class = argmax of the foreground class scores, score = its probability), mapped back
  to the original frame; those returned boxes are what the legacy evaluator matches.
* ``predcls``: the GT boxes and labels with scores 1 (the detector runs only if the head needs features).

The relation head (interface in :mod:`mmsgg_eval.models.relation_heads.base`) returns [R, P+1] scores per
pair; pairs are ranked by max predicate probability x subject score x object score (stable) and packed as
``pred_relations`` (``pair_idxs`` [R, 2], ``scores`` [R, P+1], column 0 = no relation) next to
``pred_instances`` (``bboxes`` xyxy original pixels, ``labels`` 0-based, ``scores``), on the model's device.

Checkpoints: a plain detector checkpoint (e.g. from ``tools/train.py`` on a detector config, keys
``backbone.*``, ``roi_head.*``...) loads into ``detector``; a checkpoint of the whole model loads as is.
"""
import copy
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from mmengine.logging import print_log
from mmengine.model import BaseModel
from mmengine.structures import InstanceData
from torch import Tensor

from ..registry import MODELS
from ..structures import get_field, sample_name
from .relation_heads.base import all_ordered_pairs, rank_pairs

MODES = ('sgdet', 'sgcls', 'predcls')


def _scale_factor(sample: Any, device: torch.device) -> Tensor:
    """(w, h, w, h) factor from original pixels to the network input frame (mmdet's ``scale_factor``)."""
    factor = sample.metainfo.get('scale_factor', (1.0, 1.0))
    return torch.tensor(tuple(factor), dtype=torch.float32, device=device).repeat(2)


@MODELS.register_module(force=True)  # replaces the lazy placeholder of mmsgg_eval.models
class SceneGraphDetector(BaseModel):
    """A detector (any mmdet 3.x config) + a relation head, evaluated in SGDet, SGCls or PredCls.

    Args:
        detector: mmdet detector config (e.g. Faster R-CNN R50-FPN). Its ``data_preprocessor`` becomes this
            model's unless ``data_preprocessor`` is given.
        relation_head: relation head config (e.g. ``dict(type='FrequencyRelationHead', ...)``).
        mode: 'sgdet' | 'sgcls' | 'predcls'.
        max_pairs: keep at most this many ranked pairs per image (None = all).
        max_objects: SGDet: keep at most this many (highest-scored) detections before forming pairs
            (None = all the detector returns, i.e. its ``test_cfg`` ``max_per_img``).
    """

    def __init__(self, detector: dict, relation_head: dict, mode: str = 'sgdet', max_pairs: Optional[int] = None,
                 max_objects: Optional[int] = None, data_preprocessor: Optional[dict] = None,
                 init_cfg: Optional[dict] = None) -> None:
        if mode not in MODES:
            raise ValueError(f'SceneGraphDetector: mode must be one of {MODES}, got {mode!r}')
        detector = copy.deepcopy(dict(detector))
        detector_preprocessor = detector.pop('data_preprocessor', None)
        super().__init__(data_preprocessor=data_preprocessor or detector_preprocessor, init_cfg=init_cfg)
        self.detector = MODELS.build(detector)
        self.relation_head = MODELS.build(relation_head)
        self.mode = mode
        self.max_pairs = max_pairs
        self.max_objects = max_objects
        self._register_load_state_dict_pre_hook(self._accept_detector_checkpoint)

    # ------------------------------------------------------------------ checkpoints
    def _accept_detector_checkpoint(self, state_dict: Dict[str, Tensor], prefix: str, *args: Any) -> None:
        """Move the keys of a plain detector checkpoint under ``detector.``."""
        if any(k.startswith(prefix + 'detector.') for k in state_dict):
            return
        own = set(self.detector.state_dict().keys())
        moved = [k for k in list(state_dict) if k.startswith(prefix) and k[len(prefix):] in own]
        for key in moved:
            state_dict[prefix + 'detector.' + key[len(prefix):]] = state_dict.pop(key)
        if moved:
            print_log(f'SceneGraphDetector: loaded a detector checkpoint ({len(moved)} tensors) into `detector`',
                      logger='current')

    # ------------------------------------------------------------------ forward
    def forward(self, inputs: Tensor, data_samples: Optional[List[Any]] = None, mode: str = 'predict') -> Any:
        if mode == 'predict':
            return self.predict(inputs, data_samples)
        if mode == 'tensor':
            return self.detector.extract_feat(inputs)
        raise RuntimeError('SceneGraphDetector is an evaluation template: train the detector with its own config '
                           '(tools/train.py configs/vg150/faster-rcnn_r50_fpn_vg150.py) and load that checkpoint; '
                           'a trainable relation head brings its own training loop')

    def predict(self, inputs: Tensor, data_samples: List[Any]) -> List[Any]:
        """Attach ``pred_instances``, ``pred_relations`` and metainfo ``pred_mode`` to every data sample."""
        feats = None
        if self.mode != 'predcls' or self.relation_head.needs_features:
            feats = self.detector.extract_feat(inputs)
        if self.mode == 'sgdet':
            objects = self.detect(feats, data_samples)
        elif self.mode == 'sgcls':
            objects = self.classify_gt_boxes(feats, data_samples)
        else:
            objects = [self._gt_objects(s) for s in data_samples]
        pairs = [all_ordered_pairs(len(obj), obj.labels.device) for obj in objects]
        rel_scores = self.relation_head.predict(feats, objects, pairs, data_samples)
        if len(rel_scores) != len(objects):
            raise ValueError(f'{type(self.relation_head).__name__}.predict returned {len(rel_scores)} score '
                             f'tensors for {len(objects)} images')
        width = self.relation_head.num_predicates + 1
        for sample, obj, pair, scores in zip(data_samples, objects, pairs, rel_scores):
            if tuple(scores.shape) != (pair.shape[0], width):
                raise ValueError(f'{sample_name(sample)}: {type(self.relation_head).__name__}.predict returned '
                                 f'scores of shape {list(scores.shape)}, expected [{pair.shape[0]}, {width}] '
                                 f'(column 0 = no relation)')
            pair, scores = rank_pairs(pair, scores, obj.scores, self.max_pairs)
            sample.pred_instances = InstanceData(bboxes=obj.bboxes, labels=obj.labels, scores=obj.scores)
            sample.pred_relations = InstanceData(pair_idxs=pair, scores=scores)
            sample.set_metainfo({'pred_mode': self.mode})
        return data_samples

    # ------------------------------------------------------------------ objects per mode
    def detect(self, feats: Sequence[Tensor], data_samples: List[Any]) -> List[InstanceData]:
        """The detector's detections (original frame), with ``feat_bboxes`` in the network input frame."""
        det = self.detector
        if getattr(det, 'with_rpn', False) or hasattr(det, 'roi_head'):  # two-stage (mmdet TwoStageDetector)
            if data_samples[0].get('proposals', None) is None:
                proposals = det.rpn_head.predict(feats, data_samples, rescale=False)
            else:
                proposals = [s.proposals for s in data_samples]
            results = det.roi_head.predict(feats, proposals, data_samples, rescale=True)
        elif hasattr(det, 'bbox_head'):  # single-stage (mmdet SingleStageDetector)
            results = det.bbox_head.predict(feats, data_samples, rescale=True)
        else:
            raise TypeError(f'SceneGraphDetector: {type(det).__name__} is neither a two-stage (rpn_head + roi_head) '
                            f'nor a single-stage (bbox_head) mmdet detector')
        objects = []
        for sample, res in zip(data_samples, results):
            boxes = res.bboxes.tensor if hasattr(res.bboxes, 'tensor') else res.bboxes
            labels, scores = res.labels.long(), res.scores.float()
            if self.max_objects is not None and labels.numel() > self.max_objects:
                keep = torch.sort(scores, descending=True, stable=True).indices[:self.max_objects]
                boxes, labels, scores = boxes[keep], labels[keep], scores[keep]
            boxes = boxes.float()
            objects.append(InstanceData(bboxes=boxes, feat_bboxes=boxes * _scale_factor(sample, boxes.device),
                                        labels=labels, scores=scores))
        return objects

    def classify_gt_boxes(self, feats: Sequence[Tensor], data_samples: List[Any]) -> List[InstanceData]:
        """SGCls objects: the GT boxes classified by the detector's (standard) RoI head."""
        from mmdet.structures.bbox import bbox2roi
        roi_head = getattr(self.detector, 'roi_head', None)
        if roi_head is None or not hasattr(roi_head, '_bbox_forward'):
            raise TypeError(f'SceneGraphDetector(mode="sgcls") classifies the GT boxes with the detector\'s RoI '
                            f'head; {type(self.detector).__name__} has no standard RoI head (roi_head._bbox_forward)')
        feat_boxes = []
        for sample in data_samples:
            if sample.metainfo.get('flip', False):
                raise ValueError(f'{sample_name(sample)}: SGCls does not support flipped test inputs')
            gt = self._gt_boxes(sample)
            feat_boxes.append(gt * _scale_factor(sample, gt.device))
        rois = bbox2roi(feat_boxes)
        cls_score = roi_head._bbox_forward(feats, rois)['cls_score']
        bbox_head = roi_head.bbox_head
        if getattr(bbox_head, 'custom_cls_channels', False):
            probs = bbox_head.loss_cls.get_activation(cls_score)
        else:
            probs = torch.softmax(cls_score, dim=-1)
        num_classes = bbox_head.num_classes
        probs = probs[:, :num_classes]  # mmdet puts background last
        best = probs.max(-1) if probs.numel() else (probs.new_zeros(0), probs.new_zeros(0, dtype=torch.long))
        scores, labels = best[0], best[1]
        objects, start = [], 0
        for sample, fb in zip(data_samples, feat_boxes):
            n = fb.shape[0]
            boxes = fb / _scale_factor(sample, fb.device)  # back to the original frame (the returned boxes)
            objects.append(InstanceData(bboxes=boxes, feat_bboxes=fb, labels=labels[start:start + n].long(),
                                        scores=scores[start:start + n].float()))
            start += n
        return objects

    @staticmethod
    def _gt_boxes(sample: Any) -> Tensor:
        gt = get_field(sample, 'gt_instances')
        boxes = get_field(gt, 'bboxes')
        if boxes is None:
            raise ValueError(f'{sample_name(sample)}: SGCls / PredCls need the GT boxes in `gt_instances` (the '
                             f'test pipeline must load annotations: LoadSceneGraphAnnotations + PackSceneGraphInputs)')
        boxes = boxes.tensor if hasattr(boxes, 'tensor') else boxes
        return boxes.float().reshape(-1, 4)

    def _gt_objects(self, sample: Any) -> InstanceData:
        boxes = self._gt_boxes(sample)
        labels = get_field(sample.gt_instances, 'labels')
        if labels is None:
            raise ValueError(f'{sample_name(sample)}: PredCls needs `gt_instances.labels`')
        labels = labels.long().to(boxes.device)
        return InstanceData(bboxes=boxes, feat_bboxes=boxes * _scale_factor(sample, boxes.device), labels=labels,
                            scores=torch.ones(labels.shape[0], device=boxes.device))


__all__: Tuple[str, ...] = ('SceneGraphDetector',)
