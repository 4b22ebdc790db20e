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
    (:data:`mmsgg_eval.vlm.PLACEHOLDER_BOX`) and label 0, so that they still never match (SGDet/PhrDet; in
    SGCls the boxes are the GT boxes and such a label is an error). ``sample_idx`` = list position.

Safe loading (:func:`load_legacy_results`)
    Pickles can run arbitrary code. By default ``torch.load(weights_only=True)`` is used with ONE extra allowed
    class: ``maskrcnn_benchmark.structures.bounding_box.BoxList`` is rebuilt as the inert :class:`LegacyBoxList`
    (attributes only, no code from the file runs). Plain pickle files (``.pkl``) go through a restricted
    unpickler that allows builtin containers, numpy arrays and torch tensors (their storages again through
    ``torch.load(weights_only=True)``). ``unsafe=True`` unpickles anything (only for files you trust); the
    BoxList class is still mapped to :class:`LegacyBoxList`, so maskrcnn_benchmark need not be installed.
"""
import io
import pickle
import zipfile
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence

import numpy as np
import torch

from .vlm import PLACEHOLDER_BOX

__all__ = ['LegacyBoxList', 'load_legacy_results', 'legacy_to_data_sample', 'legacy_gt_to_fields',
           'convert_legacy_results', 'iter_legacy_samples', 'BOXLIST_PATH']

#: Import path under which the legacy code pickled its boxes.
BOXLIST_PATH = 'maskrcnn_benchmark.structures.bounding_box.BoxList'


class LegacyBoxList:
    """Inert stand-in for the legacy ``BoxList``: ``bbox``, ``size`` (W, H), ``mode``, ``extra_fields``."""

    def __init__(self, bbox: Any = None, image_size: Any = None, mode: str = 'xyxy'):
        self.bbox = bbox
        self.size = image_size
        self.mode = mode
        self.extra_fields: Dict[str, Any] = {}
        self.triplet_extra_fields: List[str] = []

    def get_field(self, name: str) -> Any:
        return self.extra_fields[name]

    def has_field(self, name: str) -> bool:
        return name in self.extra_fields

    def fields(self) -> List[str]:
        return list(self.extra_fields)

    def __len__(self) -> int:
        return int(self.bbox.shape[0]) if self.bbox is not None else 0

    def __repr__(self) -> str:
        return f'LegacyBoxList(num_boxes={len(self)}, image_size={self.size}, mode={self.mode}, ' \
               f'fields={self.fields()})'


# ---------------------------------------------------------------------------------------------- loading
def _safe_load_from_bytes(data: bytes) -> Any:
    """Replacement of ``torch.storage._load_from_bytes`` (how plain pickles store tensor storages)."""
    return torch.load(io.BytesIO(data), weights_only=True, map_location='cpu')


def _numpy_globals() -> Dict[str, Any]:
    out = {'numpy.ndarray': np.ndarray, 'numpy.dtype': np.dtype}
    for mod_name in ('numpy.core.multiarray', 'numpy._core.multiarray'):
        try:
            mod = __import__(mod_name, fromlist=['_reconstruct', 'scalar'])
        except ImportError:
            continue
        out[f'{mod_name}._reconstruct'] = mod._reconstruct
        out[f'{mod_name}.scalar'] = mod.scalar
    return out


def _safe_globals() -> Dict[str, Any]:
    import collections
    import torch._utils as tu
    allowed: Dict[str, Any] = {
        'builtins.set': set, 'builtins.frozenset': frozenset, 'builtins.slice': slice, 'builtins.range': range,
        'builtins.complex': complex, 'builtins.bytearray': bytearray,
        'collections.OrderedDict': collections.OrderedDict,
        'torch._utils._rebuild_tensor_v2': tu._rebuild_tensor_v2,
        'torch._utils._rebuild_tensor': tu._rebuild_tensor,
        'torch.storage._load_from_bytes': _safe_load_from_bytes,
        'torch.Size': torch.Size,
        BOXLIST_PATH: LegacyBoxList,
    }
    if hasattr(tu, '_rebuild_parameter'):
        allowed['torch._utils._rebuild_parameter'] = tu._rebuild_parameter
    allowed.update(_numpy_globals())
    return allowed


class SafeUnpickler(pickle.Unpickler):
    """Unpickler that resolves only allow-listed globals (numpy dtypes by their class names too)."""

    def find_class(self, module: str, name: str) -> Any:
        full = f'{module}.{name}'
        allowed = _safe_globals()
        if full in allowed:
            return allowed[full]
        if module in ('numpy.dtypes',) and name.endswith('DType'):  # numpy >= 1.25 dtype classes
            import numpy.dtypes as nd
            cls = getattr(nd, name, None)
            if cls is not None:
                return cls
        raise pickle.UnpicklingError(
            f'refusing to load {full!r} from an untrusted pickle (safe mode); pass unsafe=True only for a file '
            f'you trust')


class _RemappingUnpickler(pickle.Unpickler):
    """Unrestricted unpickler (``unsafe=True``) that maps the legacy BoxList to :class:`LegacyBoxList`."""

    def find_class(self, module: str, name: str) -> Any:
        if f'{module}.{name}' == BOXLIST_PATH:
            return LegacyBoxList
        return super().find_class(module, name)


class _RemappingPickleModule:
    """``pickle_module`` for ``torch.load(weights_only=False)`` with the BoxList mapping."""
    Unpickler = _RemappingUnpickler
    __name__ = 'mmsgg_eval_legacy_pickle'

    @staticmethod
    def load(f, **kwargs):
        return _RemappingUnpickler(f, **kwargs).load()


def _torch_safe_load(path: str) -> Any:
    entry = (LegacyBoxList, BOXLIST_PATH)
    try:
        ctx = torch.serialization.safe_globals([entry])
    except (AttributeError, TypeError):  # pragma: no cover - torch < 2.5
        shim = type('BoxList', (LegacyBoxList,), {'__module__': BOXLIST_PATH.rsplit('.', 1)[0]})
        torch.serialization.add_safe_globals([shim])
        return torch.load(path, map_location='cpu', weights_only=True)
    with ctx:
        return torch.load(path, map_location='cpu', weights_only=True)


_TORCH_LEGACY_MAGIC = 0x1950a86a20f9469cfc6c


def load_legacy_results(path: str, unsafe: bool = False) -> Any:
    """Load a legacy dump (``eval_results.pytorch``, ``*.pth``/``*.pt`` or a plain pickle).

    Safe by default (see the module docstring); ``unsafe=True`` runs the full unpickler: only for files you
    trust. Returns the stored object (typically ``{'groundtruths': [...], 'predictions': [...]}``).
    """
    if not zipfile.is_zipfile(path):
        # a plain pickle, or the pre-1.6 torch format whose first pickle is a magic number
        with open(path, 'rb') as f:
            first = (_RemappingUnpickler(f) if unsafe else SafeUnpickler(f)).load()
        if not (isinstance(first, int) and first == _TORCH_LEGACY_MAGIC):
            return first
    if unsafe:
        return torch.load(path, map_location='cpu', weights_only=False, pickle_module=_RemappingPickleModule)
    try:
        return _torch_safe_load(path)
    except pickle.UnpicklingError as err:
        raise pickle.UnpicklingError(
            f'{path}: safe loading (torch.load(weights_only=True)) refused this file: {err}\n'
            f'If you trust the file, pass unsafe=True.') from None


# ---------------------------------------------------------------------------------------------- conversion
def _field(record: Any, name: str, default: Any = None) -> Any:
    """A BoxList extra field, a dict key, or an attribute."""
    extra = getattr(record, 'extra_fields', None)
    if isinstance(extra, Mapping) and name in extra:
        return extra[name]
    if isinstance(record, Mapping):
        if name in record:
            return record[name]
        extra = record.get('extra_fields')
        if isinstance(extra, Mapping) and name in extra:
            return extra[name]
        return default
    return getattr(record, name, default)


def _as_tensor(value: Any, dtype: torch.dtype) -> torch.Tensor:
    t = value.detach().cpu() if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))
    return t.to(dtype)


def _xyxy(record: Any, what: str) -> torch.Tensor:
    bbox = _field(record, 'bbox')
    if bbox is None:
        bbox = _field(record, 'boxes')
    if bbox is None:
        raise ValueError(f'{what}: no `bbox` (BoxList) or `boxes` field')
    boxes = _as_tensor(bbox, torch.float32).reshape(-1, 4)
    mode = _field(record, 'mode', 'xyxy') or 'xyxy'
    if mode == 'xywh':  # legacy BoxList convention: x2 = x1 + (w - 1).clamp(0)
        x1, y1, w, h = boxes.unbind(1)
        boxes = torch.stack([x1, y1, x1 + (w - 1).clamp(min=0), y1 + (h - 1).clamp(min=0)], 1)
    elif mode != 'xyxy':
        raise ValueError(f'{what}: unknown box mode {mode!r}')
    return boxes


def _image_size(record: Any) -> Optional[tuple]:
    size = _field(record, 'size')
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
    labels = _as_tensor(_field(gt, 'labels'), torch.long).reshape(-1)
    if labels.numel() and labels.min() < 1:
        raise ValueError(f'{what}: GT labels must be 1-based (got {int(labels.min())})')
    tuples = _field(gt, 'relation_tuple')
    if tuples is None and _field(gt, 'relation') is not None:
        matrix = _as_tensor(_field(gt, 'relation'), torch.long)
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
                          img_id: Any = None) -> Dict[str, Any]:
    """One legacy prediction record (BoxList / dict, see the module docstring) -> data-sample dict.

    ``gt``: the legacy GT record of the same image (converted too) or a dict that already holds
    ``gt_instances``/``gt_relations`` (e.g. from our dataset wrapper), or None (add GT later).
    """
    what = f'legacy prediction {sample_idx if sample_idx is not None else ""}'.strip()
    boxes = _xyxy(pred, what)
    num = boxes.shape[0]
    labels = _field(pred, 'pred_labels')
    if labels is None:
        raise ValueError(f'{what}: no `pred_labels` field')
    labels = _as_tensor(labels, torch.long).reshape(-1)
    scores = _field(pred, 'pred_scores')
    scores = torch.ones(num) if scores is None else _as_tensor(scores, torch.float32).reshape(-1)
    pairs = _field(pred, 'rel_pair_idxs')
    rel_scores = _field(pred, 'pred_rel_scores')
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
            sample.update(legacy_gt_to_fields(gt, f'legacy groundtruth {sample_idx}'))
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


def _records(obj: Any) -> tuple:
    """(predictions, groundtruths or None) of a loaded legacy object."""
    if isinstance(obj, Mapping) and 'predictions' in obj:
        return list(obj['predictions']), (list(obj['groundtruths']) if obj.get('groundtruths') is not None
                                          else None)
    if isinstance(obj, Mapping):  # {image index: BoxList} (compute_on_dataset before accumulation)
        keys = sorted(obj)
        return [obj[k] for k in keys], None
    if isinstance(obj, Sequence):
        return list(obj), None
    raise ValueError(f'unrecognised legacy results object of type {type(obj).__name__}; expected '
                     f"{{'predictions': [...], 'groundtruths': [...]}} or a list of BoxList")


def iter_legacy_samples(obj: Any, mode: str = 'sgdet', gts: Optional[Sequence[Any]] = None,
                        with_gt: bool = True) -> Iterator[Dict[str, Any]]:
    """Yield data-sample dicts (``sample_idx`` = position) from a loaded legacy object or a file path.

    GT comes from ``gts`` when given (e.g. our dataset's samples, same order), else from the file's
    ``groundtruths`` when ``with_gt``.
    """
    if isinstance(obj, str):
        obj = load_legacy_results(obj)
    preds, file_gts = _records(obj)
    if gts is None and with_gt:
        gts = file_gts
    if gts is not None and len(gts) != len(preds):
        raise ValueError(f'{len(preds)} predictions but {len(gts)} ground-truth records')
    for i, pred in enumerate(preds):
        yield legacy_to_data_sample(pred, gts[i] if gts is not None else None, sample_idx=i, mode=mode)


def convert_legacy_results(path_or_obj: Any, mode: str = 'sgdet', unsafe: bool = False,
                           gts: Optional[Sequence[Any]] = None, with_gt: bool = True) -> List[Dict[str, Any]]:
    """Load (safely unless ``unsafe``) and convert a whole legacy dump to a list of data-sample dicts."""
    obj = load_legacy_results(path_or_obj, unsafe=unsafe) if isinstance(path_or_obj, str) else path_or_obj
    return list(iter_legacy_samples(obj, mode=mode, gts=gts, with_gt=with_gt))
