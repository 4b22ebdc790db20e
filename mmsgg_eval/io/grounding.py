"""Grounding predictions (JSON) for ``GroundingPr``: one predicted box per (image, query).

File format: a JSON list (or ``{"predictions": [...]}``) of entries

``{"sample_idx": 12, "bbox": [x1, y1, x2, y2], "score": 0.9}`` or ``{"img_id": "00001", "bbox": [...]}``

* ``sample_idx`` is the index in the dataset; ``img_id`` is matched against ``get_data_info(i)['img_id']``
  (compared as strings). When several samples share an image (RSVGD has several queries per image), the
  entry must also carry the query ``text`` (matched against ``get_data_info(i)['text']``) or use
  ``sample_idx``. An entry with both ``sample_idx`` and ``img_id`` must name the dataset's image at that index
  (an error naming both otherwise).
* ``bbox`` is in original image pixels, xyxy by default (``bbox_format='xywh'``: x, y, width, height;
  ``coord_scale=S``: coordinates on a [0, S] canvas, scaled by width / S and height / S).
* ``score`` is optional; with several entries for one sample the highest score wins (the first entry on
  ties or without scores), exactly as in the metric (all entries of the sample are passed on).

:func:`iter_grounding_samples` yields one data sample per predicted dataset sample (GT boxes float64 xyxy, the
instances without ``ignore_flag``; ``pred_instances.bboxes`` / ``scores``); the dataset samples without an
entry are handled by :class:`~mmsgg_eval.io.samples.CoveredSamples` (no prediction: IoU 0).
"""
import json
from collections import defaultdict
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np
import torch

from .errors import InputFileError, value_repr
from .samples import DatasetSamples, Located, is_sample_index

PredictionsLike = Union[str, Sequence[Dict[str, Any]], Dict[str, Any]]


def _entry(source: str, k: int) -> str:
    return f'{source} entry #{k}'


def load_grounding_predictions(predictions: PredictionsLike, source: Optional[str] = None) -> List[Dict[str, Any]]:
    """Entries of a predictions file (path) or of an already loaded list / ``{"predictions": [...]}``."""
    if isinstance(predictions, str):
        source = source or predictions
        try:
            with open(predictions, 'rb') as f:
                predictions = json.loads(f.read().decode('utf-8'))
        except UnicodeDecodeError as err:
            raise InputFileError(source, f'is not UTF-8 text (byte offset {err.start}); expected a JSON list of '
                                         f'{{sample_idx or img_id, bbox}}') from None
        except json.JSONDecodeError as err:
            raise InputFileError(f'{source}:{err.lineno}', f'is not valid JSON ({err.msg} at column {err.colno})') \
                from None
    source = source or 'grounding predictions'
    if isinstance(predictions, dict):
        if 'predictions' not in predictions:
            raise InputFileError(source, 'a predictions object must have a "predictions" list')
        predictions = predictions['predictions']
    if not isinstance(predictions, (list, tuple)):
        raise InputFileError(source, f'predictions must be a JSON list of {{sample_idx or img_id, bbox}}, '
                                     f'got {type(predictions).__name__}')
    for k, entry in enumerate(predictions):
        if not isinstance(entry, dict) or 'bbox' not in entry or \
                ('sample_idx' not in entry and 'img_id' not in entry):
            raise InputFileError(_entry(source, k), f'must be an object with "bbox" and "sample_idx" or "img_id", '
                                                    f'got {value_repr(entry)}')
    return list(predictions)


def _convert_box(bbox: Any, fmt: str, coord_scale: Optional[float], width: Optional[float],
                 height: Optional[float], where: str, sample: str) -> List[float]:
    try:
        box = np.asarray(bbox, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        box = np.zeros(0)
    if box.size != 4 or not np.isfinite(box).all():
        raise InputFileError(where, f'must be 4 finite numbers, got {value_repr(bbox)}', sample, 'bbox')
    if fmt == 'xywh':
        box = np.array([box[0], box[1], box[0] + box[2], box[1] + box[3]])
    if coord_scale is not None:
        if width is None or height is None:
            raise InputFileError(where, 'coord_scale needs the image width/height in get_data_info()', sample)
        box = box * np.array([width, height, width, height], dtype=np.float64) / float(coord_scale)
    return box.tolist()


def _index_entries(dataset: DatasetSamples, entries: List[Dict[str, Any]], source: str) -> List[int]:
    """Dataset index of every entry (``sample_idx`` directly, ``img_id`` [+ ``text``] by lookup)."""
    n = len(dataset)
    out = []
    for k, e in enumerate(entries):
        if 'sample_idx' in e:
            idx = e['sample_idx']
            if not is_sample_index(idx) or idx >= n:
                raise InputFileError(_entry(source, k), f'{value_repr(idx)} is not an index of the dataset '
                                                        f'(length {n})', field='sample_idx')
            dataset.check_identity(_entry(source, k), e)  # an img_id beside it must name the same image
            out.append(int(idx))
            continue
        candidates = dataset.indices_of_img_id(e['img_id'])
        if not candidates:
            raise InputFileError(_entry(source, k), f'{e["img_id"]!r} is not in the dataset', field='img_id')
        if len(candidates) > 1:
            text = e.get('text')
            matches = [i for i in candidates if text is not None and dataset.dataset.get_data_info(i).get('text')
                       == text]
            if len(matches) != 1:
                raise InputFileError(_entry(source, k), f'{e["img_id"]!r} has {len(candidates)} samples (queries); '
                                                        f'give "sample_idx" or the query "text" to identify the '
                                                        f'sample', field='img_id')
            candidates = matches
        out.append(candidates[0])
    return out


def grounding_gt(dataset: DatasetSamples, idx: int) -> Dict[str, Any]:
    """GT sample of dataset index ``idx`` for grounding (float64 boxes, ignored instances left out)."""
    return dataset.gt(idx, with_relations=False, drop_ignored=True, box_dtype=torch.float64)


def iter_grounding_samples(predictions: PredictionsLike, dataset: DatasetSamples, bbox_format: str = 'xyxy',
                           coord_scale: Optional[float] = None, source: Optional[str] = None) -> Iterator[Located]:
    """``(location, sample)`` for every dataset sample with at least one entry, in dataset order."""
    if bbox_format not in ('xyxy', 'xywh'):
        raise ValueError(f"bbox_format must be 'xyxy' or 'xywh', got {bbox_format!r}")
    source = source or (predictions if isinstance(predictions, str) else 'grounding predictions')
    entries = load_grounding_predictions(predictions, source)
    per_sample: Dict[int, List[int]] = defaultdict(list)
    for k, idx in enumerate(_index_entries(dataset, entries, source)):
        per_sample[idx].append(k)
    for idx in sorted(per_sample):
        ks = per_sample[idx]
        sample = grounding_gt(dataset, idx)
        info = dataset.dataset.get_data_info(idx)
        width, height = info.get('width'), info.get('height')
        name = f'sample_idx={idx}'
        boxes = [_convert_box(entries[k]['bbox'], bbox_format, coord_scale, width, height, _entry(source, k), name)
                 for k in ks]
        pred: Dict[str, Any] = {'bboxes': np.asarray(boxes, np.float64).reshape(-1, 4)}
        scored = [entries[k].get('score') is not None for k in ks]
        if all(scored):
            scores = [entries[k]['score'] for k in ks]
            for k, s in zip(ks, scores):
                if isinstance(s, bool) or not isinstance(s, (int, float)):
                    raise InputFileError(_entry(source, k), f'must be a number, got {value_repr(s)}', name, 'score')
            pred['scores'] = np.asarray(scores, np.float64)
        elif any(scored):
            raise InputFileError(_entry(source, ks[0]), 'some prediction entries of this sample have a "score" and '
                                                        'some do not', name, 'score')
        sample['pred_instances'] = pred
        yield _entry(source, ks[0]), sample
