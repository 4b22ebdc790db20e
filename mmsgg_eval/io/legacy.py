"""Re-scoring predictions dumped by the legacy Scene-Graph-Benchmark.pytorch evaluator.

What the legacy code writes
    ``maskrcnn_benchmark/data/datasets/evaluation/vg/vg_eval.py::save_output`` stores
    ``torch.save({'groundtruths': [BoxList], 'predictions': [BoxList]}, 'eval_results.pytorch')`` in the
    output folder of ``tools/relation_test_net.py``; entry ``i`` of both lists is dataset image ``i`` (the
    order of ``VGDataset``, the same as our VG150 wrapper for the same split and filters). Predictions have
    already been resized to the original image size. A ``BoxList`` pickles as an object with ``bbox``
    (float32 [N, 4]), ``size`` ((width, height)), ``mode`` ('xyxy' or 'xywh') and ``extra_fields``:

    ============================ =========================================================================
    prediction field             content
    ============================ =========================================================================
    ``pred_labels``              int64 [N], 1-based object class (0 = background)
    ``pred_scores``              float [N], object score
    ``rel_pair_idxs``            int64 [R, 2], (subject, object) indices into the boxes, sorted by triplet score
    ``pred_rel_scores``          float [R, P+1], softmax over predicates, column 0 = background
    ``pred_rel_labels``          int64 [R], 1-based argmax (not needed: recomputed from the scores)
    ``labels``                   (PredCls/SGCls, GT proposals) int64 [N], 1-based GT classes
    ============================ =========================================================================

    ground-truth fields: ``labels`` (1-based), ``relation_tuple`` int64 [G, 3] = (subject, object,
    1-based predicate), duplicates kept; ``relation`` (an [N, N] matrix) is a fallback when the tuple is absent.

Conversion (:func:`legacy_to_data_sample`)
    Boxes are converted to xyxy (``xywh`` uses the legacy +1 convention: x2 = x1 + w - 1), labels and
    predicates become 0-based, ``pred_rel_scores`` is kept WITH its background column (our [R, P+1] format,
    which the metrics rank exactly as the legacy evaluator does). Objects predicted as background (label 0,
    which can never match a GT object) keep their slot but get a box far outside the image
    (:data:`mmsgg_eval.io.samples.PLACEHOLDER_BOX`) and label 0, so that they still never match (SGDet/PhrDet; in
    SGCls the boxes are the GT boxes and such a label is an error). ``sample_idx`` = list position.

Safe loading (:func:`load_legacy_results`, unpicklers in :mod:`mmsgg_eval.io.pickles`)
    Pickles can run arbitrary code. By default ``torch.load(weights_only=True)`` is used with ONE extra allowed
    class: ``maskrcnn_benchmark.structures.bounding_box.BoxList`` is rebuilt as the inert :class:`LegacyBoxList`
    (attributes only, no code from the file runs). Plain pickle files (``.pkl``) go through a restricted
    unpickler that allows builtin containers, numpy arrays and torch tensors (their storages again through
    ``torch.load(weights_only=True)``). ``unsafe=True`` unpickles anything (only for files you trust); the
    BoxList class is still mapped to :class:`LegacyBoxList`, so maskrcnn_benchmark need not be installed.
"""
import os
import pickle
import re
import zipfile
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence

import torch

from ..structures import get_field, to_tensor
from .errors import InputFileError, UnsafePickleError
from .pickles import BOXLIST_PATH, LegacyBoxList, RemappingPickleModule, torch_safe_load, unpickler
from .samples import PLACEHOLDER_BOX

__all__ = ['LegacyBoxList', 'load_legacy_results', 'legacy_to_data_sample', 'legacy_gt_to_fields',
           'convert_legacy_results', 'iter_legacy_samples', 'legacy_records', 'BOXLIST_PATH']

_TORCH_LEGACY_MAGIC = 0x1950a86a20f9469cfc6c


def load_legacy_results(path: str, unsafe: bool = False) -> Any:
    """Load a legacy dump (``eval_results.pytorch``, ``*.pth``/``*.pt`` or a plain pickle).

    Safe by default (see the module docstring); ``unsafe=True`` runs the full unpickler: only for files you
    trust. Returns the stored object (typically ``{'groundtruths': [...], 'predictions': [...]}``).
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f'legacy results file not found: {os.path.abspath(path)}')
    if not zipfile.is_zipfile(path):
        # a plain pickle, or the pre-1.6 torch format whose first pickle is a magic number
        with open(path, 'rb') as f:
            try:
                first = unpickler(f, unsafe).load()
            except UnsafePickleError as err:
                raise err.located(path) from None
            except (EOFError, pickle.UnpicklingError, ValueError, TypeError) as err:
                raise InputFileError(path, f'is neither a torch file nor a readable pickle '
                                           f'({type(err).__name__}: {err})') from None
        if not (isinstance(first, int) and first == _TORCH_LEGACY_MAGIC):
            return first
    if unsafe:
        return torch.load(path, map_location='cpu', weights_only=False, pickle_module=RemappingPickleModule)
    try:
        return torch_safe_load(path)
    except pickle.UnpicklingError as err:
        found = re.search(r'(?:Unsupported global: GLOBAL|unsupported GLOBAL) ([\w.]+)', str(err))
        what = f'refuses to build {found.group(1)!r}' if found else 'refused the file (it holds more than tensors, ' \
            'arrays, builtin containers and the legacy BoxList)'
        raise UnsafePickleError(path, f'safe loading (torch.load(weights_only=True)) {what}') from None


# ---------------------------------------------------------------------------------------------- conversion
def boxlist_value(record: Any, name: str, default: Any = None) -> Any:
    """A BoxList extra field (``extra_fields[name]``), else the key or attribute ``name`` of the record."""
    extra = get_field(record, 'extra_fields')
    if isinstance(extra, Mapping) and name in extra:
        return extra[name]
    return get_field(record, name, default)


def _as_tensor(value: Any, dtype: torch.dtype, what: str = '') -> torch.Tensor:
    return to_tensor(value, None, what, torch.device('cpu')).to(dtype)


def _xyxy(record: Any, what: str) -> torch.Tensor:
    bbox = boxlist_value(record, 'bbox')
    if bbox is None:
        bbox = boxlist_value(record, 'boxes')
    if bbox is None:
        raise ValueError(f'{what}: no `bbox` (BoxList) or `boxes` field')
    boxes = _as_tensor(bbox, torch.float32).reshape(-1, 4)
    mode = boxlist_value(record, 'mode', 'xyxy') or 'xyxy'
    if mode == 'xywh':  # legacy BoxList convention: x2 = x1 + (w - 1).clamp(0)
        x1, y1, w, h = boxes.unbind(1)
        boxes = torch.stack([x1, y1, x1 + (w - 1).clamp(min=0), y1 + (h - 1).clamp(min=0)], 1)
    elif mode != 'xyxy':
        raise ValueError(f'{what}: unknown box mode {mode!r}')
    return boxes


def _image_size(record: Any) -> Optional[tuple]:
    size = boxlist_value(record, 'size')
    if size is None:
        return None
    try:
        w, h = (int(v) for v in size)
    except (TypeError, ValueError):
        return None
    return w, h


def legacy_gt_to_fields(gt: Any, what: str = 'groundtruth') -> Dict[str, Any]:
    """``gt_instances`` / ``gt_relations`` (0-based) from a legacy GT BoxList or dict."""
    boxes = _xyxy(gt, what)
    labels = _as_tensor(boxlist_value(gt, 'labels'), torch.long).reshape(-1)
    if labels.numel() and labels.min() < 1:
        raise ValueError(f'{what}: GT labels must be 1-based (got {int(labels.min())})')
    tuples = boxlist_value(gt, 'relation_tuple')
    if tuples is None and boxlist_value(gt, 'relation') is not None:
        matrix = _as_tensor(boxlist_value(gt, 'relation'), torch.long)
        nz = matrix.nonzero()
        tuples = torch.cat([nz, matrix[nz[:, 0], nz[:, 1]][:, None]], 1)
    if tuples is None:
        raise ValueError(f'{what}: no `relation_tuple` (or `relation`) field')
    tuples = _as_tensor(tuples, torch.long).reshape(-1, 3)
    out = {'gt_instances': {'bboxes': boxes, 'labels': labels - 1},
           'gt_relations': {'pair_idxs': tuples[:, :2].contiguous(), 'labels': tuples[:, 2] - 1}}
    size = _image_size(gt)
    if size is not None:
        out['ori_shape'] = (size[1], size[0])
    return out


def legacy_to_data_sample(pred: Any, gt: Any = None, sample_idx: Optional[int] = None, mode: str = 'sgdet',
                          img_id: Any = None, source: str = 'legacy') -> Dict[str, Any]:
    """One legacy prediction record (BoxList / dict, see the module docstring) -> data-sample dict.

    ``gt``: the legacy GT record of the same image (converted too) or a dict that already holds
    ``gt_instances``/``gt_relations`` (e.g. from our dataset wrapper), or None (add GT later). ``source``
    (e.g. the file name) starts error messages.
    """
    number = f' #{sample_idx}' if sample_idx is not None else ''
    what = f'{source}: prediction{number}'
    boxes = _xyxy(pred, what)
    num = boxes.shape[0]
    labels = boxlist_value(pred, 'pred_labels')
    if labels is None:
        raise ValueError(f'{what}: no `pred_labels` field')
    labels = _as_tensor(labels, torch.long).reshape(-1)
    scores = boxlist_value(pred, 'pred_scores')
    scores = torch.ones(num) if scores is None else _as_tensor(scores, torch.float32).reshape(-1)
    pairs = boxlist_value(pred, 'rel_pair_idxs')
    rel_scores = boxlist_value(pred, 'pred_rel_scores')
    if pairs is None or rel_scores is None:
        raise ValueError(f'{what}: needs `rel_pair_idxs` and `pred_rel_scores` (relation head output)')
    pairs = _as_tensor(pairs, torch.long).reshape(-1, 2)
    rel_scores = _as_tensor(rel_scores, torch.float32)
    if rel_scores.dim() != 2 or rel_scores.shape[0] != pairs.shape[0]:
        raise ValueError(f'{what}: `pred_rel_scores` has shape {list(rel_scores.shape)} for {pairs.shape[0]} pairs')
    if labels.numel() != num or scores.numel() != num:
        raise ValueError(f'{what}: {num} boxes but {labels.numel()} labels / {scores.numel()} scores')
    background = labels < 1
    if background.any():
        if mode == 'sgcls':
            raise ValueError(f'{what}: SGCls prediction with background (0) object labels')
        if mode in ('sgdet', 'phrdet'):
            boxes = boxes.clone()
            boxes[background] = torch.tensor(PLACEHOLDER_BOX)
    labels = (labels - 1).clamp(min=0)
    sample: Dict[str, Any] = {}
    if gt is not None:
        if isinstance(gt, Mapping) and 'gt_instances' in gt:
            sample.update(gt)
        else:
            sample.update(legacy_gt_to_fields(gt, f'{source}: groundtruth{number}'))
    size = _image_size(pred)
    if size is not None and 'ori_shape' not in sample:
        sample['ori_shape'] = (size[1], size[0])
    if sample_idx is not None:
        sample['sample_idx'] = int(sample_idx)
    if img_id is not None:
        sample['img_id'] = img_id
    sample['pred_instances'] = {'bboxes': boxes, 'labels': labels, 'scores': scores}
    sample['pred_relations'] = {'pair_idxs': pairs, 'scores': rel_scores}
    return sample


def legacy_records(obj: Any) -> tuple:
    """(predictions, groundtruths or None) of a loaded legacy object."""
    if isinstance(obj, Mapping) and 'predictions' in obj:
        return list(obj['predictions']), (list(obj['groundtruths']) if obj.get('groundtruths') is not None
                                          else None)
    if isinstance(obj, Mapping):  # {image index: BoxList} (compute_on_dataset before accumulation)
        keys = sorted(obj)
        return [obj[k] for k in keys], None
    if isinstance(obj, Sequence):
        return list(obj), None
    raise InputFileError('legacy results', f'unrecognised object of type {type(obj).__name__}; expected '
                                             f"{{'predictions': [...], 'groundtruths': [...]}} or a list of BoxList")


def iter_legacy_samples(obj: Any, mode: str = 'sgdet', gts: Optional[Sequence[Any]] = None,
                        with_gt: bool = True, source: Optional[str] = None) -> Iterator[Dict[str, Any]]:
    """Yield data-sample dicts (``sample_idx`` = position) from a loaded legacy object or a file path.

    GT comes from ``gts`` when given (e.g. our dataset's samples, same order), else from the file's
    ``groundtruths`` when ``with_gt``. ``source`` names the input in messages (default: the path, or
    'legacy').
    """
    if isinstance(obj, str):
        source = source or obj
        obj = load_legacy_results(obj)
    source = source or 'legacy'
    preds, file_gts = legacy_records(obj)
    if gts is None and with_gt:
        gts = file_gts
    if gts is not None and len(gts) != len(preds):
        raise InputFileError(source, f'holds {len(preds)} predictions but {len(gts)} ground-truth records; '
                                     f'expected one of each per image')
    for i, pred in enumerate(preds):
        yield legacy_to_data_sample(pred, gts[i] if gts is not None else None, sample_idx=i, mode=mode,
                                    source=source)


def convert_legacy_results(path_or_obj: Any, mode: str = 'sgdet', unsafe: bool = False,
                           gts: Optional[Sequence[Any]] = None, with_gt: bool = True) -> List[Dict[str, Any]]:
    """Load (safely unless ``unsafe``) and convert a whole legacy dump to a list of data-sample dicts."""
    obj = load_legacy_results(path_or_obj, unsafe=unsafe) if isinstance(path_or_obj, str) else path_or_obj
    return list(iter_legacy_samples(obj, mode=mode, gts=gts, with_gt=with_gt))
