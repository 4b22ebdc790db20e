"""Offline evaluation of a grounding predictions file through :class:`~mmsgg_eval.metrics.GroundingPr`.

File format: a JSON list (or ``{"predictions": [...]}``) of entries

``{"sample_idx": 12, "bbox": [x1, y1, x2, y2], "score": 0.9}`` or ``{"img_id": "00001", "bbox": [...]}``

* ``sample_idx`` is the index in the dataset; ``img_id`` is matched against ``get_data_info(i)['img_id']``
  (compared as strings). When several samples share an image (RSVGD has several queries per image), the
  entry must also carry the query ``text`` (matched against ``get_data_info(i)['text']``) or use
  ``sample_idx``.
* ``bbox`` is in original image pixels, xyxy by default (see ``bbox_format`` / ``coord_scale``).
* ``score`` is optional; with several entries for one sample the highest score wins (the first entry on
  ties or without scores), exactly as in the metric.
* Samples of the dataset without an entry count as IoU 0.
"""
import json
from collections import defaultdict
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from .metrics.grounding import GroundingPr

PredictionsLike = Union[str, Sequence[Dict[str, Any]], Dict[str, Any]]


def load_grounding_predictions(predictions: PredictionsLike) -> List[Dict[str, Any]]:
    """Entries of a predictions file (path) or of an already loaded list / ``{"predictions": [...]}``."""
    if isinstance(predictions, str):
        with open(predictions) as f:
            predictions = json.load(f)
    if isinstance(predictions, dict):
        if 'predictions' not in predictions:
            raise ValueError('a predictions dict must have a "predictions" list')
        predictions = predictions['predictions']
    if not isinstance(predictions, (list, tuple)):
        raise ValueError(f'predictions must be a JSON list of {{sample_idx or img_id, bbox}}, '
                         f'got {type(predictions).__name__}')
    for k, entry in enumerate(predictions):
        if not isinstance(entry, dict) or 'bbox' not in entry or \
                ('sample_idx' not in entry and 'img_id' not in entry):
            raise ValueError(f'prediction entry #{k} must be a dict with "bbox" and "sample_idx" or "img_id", '
                             f'got {entry!r}')
    return list(predictions)


def _convert_box(bbox: Any, fmt: str, coord_scale: Optional[float], width: Optional[float],
                 height: Optional[float], where: str) -> List[float]:
    box = np.asarray(bbox, dtype=np.float64).reshape(-1)
    if box.size != 4:
        raise ValueError(f'{where}: "bbox" must have 4 numbers, got {bbox!r}')
    if fmt == 'xywh':
        box = np.array([box[0], box[1], box[0] + box[2], box[1] + box[3]])
    if coord_scale is not None:
        if width is None or height is None:
            raise ValueError(f'{where}: coord_scale needs the image width/height in get_data_info()')
        box = box * np.array([width, height, width, height], dtype=np.float64) / float(coord_scale)
    return box.tolist()


def _index_samples(dataset: Any, entries: List[Dict[str, Any]]) -> List[int]:
    """Dataset index of every entry (``sample_idx`` directly, ``img_id`` [+ ``text``] by lookup)."""
    n = len(dataset)
    by_img: Dict[str, List[int]] = {}
    infos: Dict[int, Dict[str, Any]] = {}
    if any('sample_idx' not in e for e in entries):
        by_img = defaultdict(list)
        for i in range(n):
            info = dataset.get_data_info(i)
            infos[i] = info
            by_img[str(info.get('img_id'))].append(i)
    out = []
    for k, e in enumerate(entries):
        if 'sample_idx' in e:
            idx = e['sample_idx']
            if isinstance(idx, bool) or not isinstance(idx, (int, np.integer)) or not 0 <= idx < n:
                raise ValueError(f'prediction entry #{k}: sample_idx {idx!r} is not an index of the dataset '
                                 f'(length {n})')
            out.append(int(idx))
            continue
        candidates = by_img.get(str(e['img_id']), [])
        if not candidates:
            raise ValueError(f'prediction entry #{k}: img_id {e["img_id"]!r} is not in the dataset')
        if len(candidates) > 1:
            text = e.get('text')
            matches = [i for i in candidates if text is not None and infos[i].get('text') == text]
            if len(matches) != 1:
                raise ValueError(f'prediction entry #{k}: img_id {e["img_id"]!r} has {len(candidates)} samples '
                                 f'(queries); give "sample_idx" or the query "text" to identify the sample')
            candidates = matches
        out.append(candidates[0])
    return out


def evaluate_grounding_predictions(predictions: PredictionsLike, dataset: Any, bbox_format: str = 'xyxy',
                                   coord_scale: Optional[float] = None, batch_size: int = 1024,
                                   **metric_kwargs: Any) -> Dict[str, float]:
    """Evaluate a predictions file against a dataset with :class:`GroundingPr` (one process).

    Args:
        predictions: path of a JSON predictions file, or its loaded content (see module docstring).
        dataset: any object with ``__len__``, ``get_data_info(i)`` (mmdet-style dict with ``img_id``,
            ``instances`` [{'bbox': xyxy pixels, 'ignore_flag'}], ``width``, ``height``) and optionally
            ``metainfo``; e.g. :class:`mmsgg_eval.datasets.RSVGDDataset`.
        bbox_format: 'xyxy' (default) or 'xywh' for the predicted boxes.
        coord_scale: None (boxes in pixels) or S when boxes are on a [0, S] canvas (1 = normalised,
            1000 = the usual VLM canvas): x is scaled by width / S and y by height / S.
        batch_size: samples per ``process()`` call.
        **metric_kwargs: ``GroundingPr`` arguments (thresholds, strict, multiple_gt, prefix, ...).

    Returns:
        The metric's dict, e.g. ``{'grounding/Pr@0.5': 81.2, ..., 'grounding/cumIoU': 0.78}``.
    """
    if bbox_format not in ('xyxy', 'xywh'):
        raise ValueError(f"bbox_format must be 'xyxy' or 'xywh', got {bbox_format!r}")
    entries = load_grounding_predictions(predictions)
    owners = _index_samples(dataset, entries)
    per_sample: Dict[int, List[Dict[str, Any]]] = defaultdict(list)
    for k, (entry, idx) in enumerate(zip(entries, owners)):
        per_sample[idx].append(dict(entry, _k=k))
    metric = GroundingPr(**metric_kwargs)
    meta = getattr(dataset, 'metainfo', None)
    metric.dataset_meta = dict(meta) if meta else {}
    n = len(dataset)
    for start in range(0, n, batch_size):
        samples = []
        for i in range(start, min(start + batch_size, n)):
            info = dataset.get_data_info(i)
            width, height = info.get('width'), info.get('height')
            gt = [inst['bbox'] for inst in info.get('instances', []) if not inst.get('ignore_flag', 0)]
            sample: Dict[str, Any] = dict(sample_idx=i, img_id=info.get('img_id'),
                                          gt_instances=dict(bboxes=np.asarray(gt, np.float64).reshape(-1, 4)))
            if width is not None and height is not None:
                sample['ori_shape'] = (int(height), int(width))
            preds = per_sample.get(i, [])
            if preds:
                boxes = [_convert_box(p['bbox'], bbox_format, coord_scale, width, height,
                                      f'prediction entry #{p["_k"]} (sample_idx={i})') for p in preds]
                scored = ['score' in p and p['score'] is not None for p in preds]
                pred = dict(bboxes=np.asarray(boxes, np.float64).reshape(-1, 4))
                if all(scored):
                    pred['scores'] = np.asarray([float(p['score']) for p in preds], np.float64)
                elif any(scored):
                    raise ValueError(f'sample_idx={i}: some prediction entries have a "score" and some do not')
                sample['pred_instances'] = pred
            samples.append(sample)
        metric.process(None, samples)
    return metric.evaluate(n)
