"""A parsed answer becomes a data-sample dict (CPU tensors) that the scene-graph metrics score."""
from typing import Any, Dict, Optional

import numpy as np
import torch

from ..samples import PLACEHOLDER_BOX, gt_fields
from .result import ParseResult

__all__ = ['to_data_sample', 'failed_data_sample']


def to_data_sample(result: ParseResult, gt: Any = None, sample_idx: Optional[int] = None,
                   img_id: Any = None) -> Dict[str, Any]:
    """Data sample (plain dict of CPU tensors) of one parsed answer, scored by
    ``SGRecall``/``SGMeanRecall(mode='sgdet', rank='given', skip_empty_predictions=False)``.

    ``pred_instances``: the objects of known class (``bboxes``, ``labels``, ``scores``); ``pred_relations``:
    EVERY relation in output order, single-label (``pair_idxs``, ``labels``, 1-D ``scores``). A relation whose
    subject class, object class or predicate is unknown keeps its rank slot but points at a trailing
    placeholder object (:data:`PLACEHOLDER_BOX`, label 0, score 1) with predicate 0, so it can never match; its
    score is the float32 product relation score x subject score x object score, so ``rank='score'`` ranks it
    where the original triplet would be. A failed result (``ok=False``) gives 0 objects and 0 relations.
    ``gt``: a data sample / dict with ``gt_instances`` and ``gt_relations`` or an mmdet data-info dict
    (``instances``, ``relations``); its ``sample_idx``/``img_id``/``ori_shape`` are copied. The key ``vlm``
    holds ``ok``, ``code``, ``reason`` and the unknown-name counts. The key ``open_vocab`` holds EVERY parsed
    object and relation in the model's own words (for ``RelCLIPScore``): ``pred_instances`` (``bboxes``,
    ``scores``) and ``pred_relations`` (``pair_idxs``, 1-D ``scores``, ``labels`` (-1 = not a dataset
    predicate) and ``texts``: one (subject, predicate, object) triplet of words per relation).
    """
    sample = gt_fields(gt)
    if sample_idx is not None:
        sample['sample_idx'] = int(sample_idx)
    if img_id is not None:
        sample['img_id'] = img_id
    known_obj = result.labels >= 0 if result.ok else np.zeros(0, bool)
    new_index = np.cumsum(known_obj) - 1
    boxes = result.bboxes[known_obj] if result.ok else np.zeros((0, 4), np.float32)
    labels = result.labels[known_obj] if result.ok else np.zeros(0, np.int64)
    scores = result.scores[known_obj] if result.ok else np.zeros(0, np.float32)
    if result.ok and result.num_relations:
        known_rel = result.known_relations
        pairs = result.pair_idxs.copy()
        rel_labels = result.rel_labels.copy()
        rel_scores = result.rel_scores.astype(np.float32).copy()
        pairs[known_rel] = new_index[pairs[known_rel]]
        if (~known_rel).any():
            placeholder = boxes.shape[0]
            unknown = ~known_rel
            sub_s = result.scores[result.pair_idxs[unknown, 0]].astype(np.float32)
            obj_s = result.scores[result.pair_idxs[unknown, 1]].astype(np.float32)
            rel_scores[unknown] = (rel_scores[unknown] * sub_s) * obj_s
            pairs[unknown] = placeholder
            rel_labels[unknown] = 0
            boxes = np.concatenate([boxes, np.asarray([PLACEHOLDER_BOX], np.float32)])
            labels = np.concatenate([labels, np.zeros(1, np.int64)])
            scores = np.concatenate([scores, np.ones(1, np.float32)])
    else:
        pairs = np.zeros((0, 2), np.int64)
        rel_labels = np.zeros(0, np.int64)
        rel_scores = np.zeros(0, np.float32)
    sample['pred_instances'] = {'bboxes': torch.from_numpy(np.ascontiguousarray(boxes, np.float32)).reshape(-1, 4),
                                'labels': torch.from_numpy(np.ascontiguousarray(labels, np.int64)),
                                'scores': torch.from_numpy(np.ascontiguousarray(scores, np.float32))}
    sample['pred_relations'] = {'pair_idxs': torch.from_numpy(np.ascontiguousarray(pairs, np.int64)).reshape(-1, 2),
                                'labels': torch.from_numpy(np.ascontiguousarray(rel_labels, np.int64)),
                                'scores': torch.from_numpy(np.ascontiguousarray(rel_scores, np.float32))}

    def array(value: np.ndarray, dtype) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(value, dtype))

    words = result.object_words
    sample['open_vocab'] = {
        'pred_instances': {'bboxes': array(result.bboxes, np.float32).reshape(-1, 4),
                           'scores': array(result.scores, np.float32)},
        'pred_relations': {'pair_idxs': array(result.pair_idxs, np.int64).reshape(-1, 2),
                           'scores': array(result.rel_scores, np.float32),
                           'labels': array(result.rel_labels, np.int64),
                           'texts': [(words[i], w, words[j]) for (i, j), w in
                                     zip(result.pair_idxs.tolist(), result.predicate_words)]}}
    sample['vlm'] = {'ok': result.ok, 'code': result.code, 'reason': result.reason,
                     'num_objects': result.num_objects, 'num_relations': result.num_relations,
                     'num_unknown_objects': result.num_unknown_objects if result.ok else 0,
                     'num_unknown_relations': result.num_unknown_relations if result.ok else 0}
    return sample


def failed_data_sample(gt: Any = None, sample_idx: Optional[int] = None, reason: str = 'no output') -> Dict:
    """Empty prediction for a sample without any usable output (it counts as recall 0, never dropped)."""
    return to_data_sample(ParseResult.failure('no_json', reason), gt, sample_idx)

