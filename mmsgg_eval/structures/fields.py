"""Field access and tensor conversion for every kind of data sample the package reads.

A data sample may be an MMEngine/MMDetection data element (``DetDataSample``, ``InstanceData``), its
``to_dict()`` form, a plain dict (offline evaluation, JSONL / VLM readers), or a legacy
Scene-Graph-Benchmark ``BoxList`` (or its dict form). :func:`get_field` finds a field in all of them,
:func:`to_tensor` converts any array-like value, and both name the sample and the field when they fail.
"""
import warnings
from collections.abc import Mapping
from numbers import Integral
from typing import Any, List, Optional

import numpy as np
import torch
from torch import Tensor

_MISSING = object()
_NESTED = ('metainfo', 'extra_fields')  # where a field may also live: data-element meta, legacy BoxList extras


def get_field(obj: Any, key: str, default: Any = None) -> Any:
    """Value of field ``key`` of ``obj``, or ``default`` when it has none (or ``obj`` is None).

    Looked up, in this order:

    * mappings: the key itself, then the nested mappings ``obj['metainfo']`` and ``obj['extra_fields']``
      (a data sample written as ``{'metainfo': {...}, ...}``; a legacy BoxList saved as a dict);
    * other objects: a legacy BoxList's ``extra_fields`` (``labels``, ``pred_rel_scores``, ...), then the
      attribute (data elements expose their data and metainfo fields as attributes), then ``obj.metainfo``.

    A key that is present with the value None returns None.
    """
    if obj is None:
        return default
    if type(obj) is dict or isinstance(obj, Mapping):  # the common case first (hot path)
        value = obj.get(key, _MISSING)
        if value is not _MISSING:
            return value
        for nested in _NESTED:
            inner = obj.get(nested)
            # (None, the usual absence, is no mapping: skip the abstract-class check, the cost of a missing field)
            if inner is not None and (type(inner) is dict or isinstance(inner, Mapping)) and key in inner:
                return inner[key]
        return default
    extra = getattr(obj, 'extra_fields', None)
    if isinstance(extra, Mapping) and key in extra:
        return extra[key]
    value = getattr(obj, key, _MISSING)
    if value is not _MISSING:
        return value
    meta = getattr(obj, 'metainfo', None)
    if isinstance(meta, Mapping) and key in meta:
        return meta[key]
    return default


def sample_name(sample: Any) -> str:
    """Human-readable identity of a sample for error messages: ``sample(sample_idx=3, img_id=2343)``."""
    idx = get_field(sample, 'sample_idx')
    img_id = get_field(sample, 'img_id')
    parts = []
    if idx is not None:
        parts.append(f'sample_idx={idx!r}' if isinstance(idx, str) else f'sample_idx={idx}')
    if img_id is not None:
        parts.append(f'img_id={img_id}')
    return 'sample(' + (', '.join(parts) or 'unidentified') + ')'


def sample_index(sample: Any) -> Optional[int]:
    """The sample's ``sample_idx`` (its index in the dataset) as an int, or None when it has none.

    Accepted: a non-negative Python / numpy integer or a one-element integer tensor. A float (even 3.0),
    a string (even ``'3'``), a bool or a negative value is a ValueError naming the sample: ``sample_idx``
    identifies samples across ranks, so a value that only looks like an index is refused rather than
    guessed.
    """
    idx = get_field(sample, 'sample_idx')
    if type(idx) is int and idx >= 0:  # the common case (a bool is not an int here)
        return idx
    if idx is None:
        return None
    if isinstance(idx, Tensor) and idx.numel() == 1 and not idx.is_floating_point() and idx.dtype != torch.bool:
        idx = int(idx.item())
    if isinstance(idx, bool) or not isinstance(idx, Integral):
        raise ValueError(f'{sample_name(sample)}: `sample_idx` must be a non-negative integer (the index of the '
                         f'sample in the dataset), got {type(idx).__name__} {idx!r}')
    idx = int(idx)
    if idx < 0:
        raise ValueError(f'{sample_name(sample)}: `sample_idx` must be a non-negative integer (the index of the '
                         f'sample in the dataset), got {idx}')
    return idx


def detached(value: Any) -> Any:
    """The reading rule of every reader (:func:`to_tensor`, the field-wise batch reader of
    :mod:`~mmsgg_eval.structures.reader`): a tensor that requires a gradient (a model output computed outside
    ``torch.no_grad()``) is read detached; anything else is returned as it is."""
    return value.detach() if isinstance(value, Tensor) and value.requires_grad else value


_SHARED_KINDS = frozenset('biuf')  # numpy dtype kinds read in place: bool, signed, unsigned, float


def shared_tensors(values: List[Any]) -> List[Any]:
    """``values`` (one field of a batch, one entry per sample) with its numeric numpy arrays as tensors
    (:func:`array_tensor`: their memory shared, nothing copied; the readers never write into a field); other
    entries as they are (memory-mapped arrays: read from their file as they are used). ``values`` itself when it
    holds no numpy array (one C-level pass over the entries' types)."""
    if not any(issubclass(kind, np.ndarray) for kind in set(map(type, values))):
        return values
    return [_shared(v) if isinstance(v, np.ndarray) else v for v in values]


def only_tensors(values: List[Any]) -> bool:
    """Whether every entry is a tensor (one C-level pass over their types). The compiled kernels are called only
    then: an argument they refuse costs the text of every argument in their error."""
    return set(map(type, values)) == _TENSOR_TYPE


_TENSOR_TYPE = {Tensor}


def _shared(array: np.ndarray) -> Any:
    """:func:`array_tensor` of a numeric array; ``array`` itself for other dtypes and those torch lacks."""
    if array.dtype.kind not in _SHARED_KINDS:
        return array
    try:
        return array_tensor(array)
    except TypeError:  # (float128, ...)
        return array


def array_tensor(array: np.ndarray) -> Tensor:
    """The tensor of a numpy array, sharing its memory; copied first only where torch cannot share it: another
    byte order (big-endian data read on a little-endian machine) or negative strides (``a[::-1]``)."""
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder('='))
    if array.flags.writeable or _READ_ONLY_TOLD[0]:
        return _from_numpy(array)
    with warnings.catch_warnings():  # torch's warning that writing into the tensor is undefined: nothing writes
        warnings.filterwarnings('ignore', message='The given NumPy array is not writable')
        tensor = _from_numpy(array)
    _READ_ONLY_TOLD[0] = True  # (torch says it once per process: later arrays need no filter)
    return tensor


def _from_numpy(array: np.ndarray) -> Tensor:
    try:
        return torch.from_numpy(array)
    except ValueError:  # negative strides
        return torch.from_numpy(array.copy())


_READ_ONLY_TOLD = [False]


def to_tensor(value: Any, sample: Any = None, field: str = 'value', device: Optional[torch.device] = None,
              dtype: Optional[torch.dtype] = None) -> Tensor:
    """Tensor of a field value: a tensor, numpy array, (nested) list or number, mmdet boxes (``.tensor``)
    or masks (``.to_ndarray()``). Moved to ``device`` / cast to ``dtype`` when given; tensors that need a
    gradient are detached. A value that is not array-like (ragged lists, strings, objects) is a ValueError
    naming the sample and ``field``."""
    if type(value) is not Tensor:
        if hasattr(value, 'tensor') and isinstance(getattr(value, 'tensor'), Tensor):  # mmdet BaseBoxes
            value = value.tensor
        elif hasattr(value, 'to_ndarray'):  # mmdet BitmapMasks / PolygonMasks
            value = value.to_ndarray()
        if not isinstance(value, Tensor):
            try:
                array = np.asarray(value)
                if array.dtype == object or array.dtype.kind in 'USV':
                    raise TypeError(f'values of type {array.dtype}')
                value = array_tensor(array)
            except (TypeError, ValueError) as err:
                where = f'{sample_name(sample)}: ' if sample is not None else ''
                raise ValueError(f'{where}field `{field}` is not array-like ({err})') from None
    value = detached(value)
    if (device is not None and value.device != device) or (dtype is not None and value.dtype != dtype):
        value = value.to(device=device, dtype=dtype)
    return value


def require(sample: Any, path: str, device: Optional[torch.device] = None) -> Tensor:
    """Tensor at a dotted ``path`` such as ``'pred_relations.pair_idxs'``; ValueError when missing."""
    *parents, key = path.split('.')
    container = sample
    for part in parents:
        container = get_field(container, part)
    return member(container, key, sample, path, device)


def member(container: Any, key: str, sample: Any, path: str, device: Optional[torch.device] = None) -> Tensor:
    """Tensor ``container.key`` (``path`` names it in errors; a None container counts as missing)."""
    value = get_field(container, key)
    if value is None:
        raise ValueError(f'{sample_name(sample)}: missing field `{path}`')
    if type(value) is Tensor and (device is None or value.device == device) and not value.requires_grad:
        return value
    return to_tensor(value, sample, path, device)


def optional(sample: Any, path: str, device: Optional[torch.device] = None) -> Optional[Tensor]:
    """Tensor at a dotted ``path``, or None when any part of it is absent."""
    obj = sample
    for part in path.split('.'):
        obj = get_field(obj, part)
        if obj is None:
            return None
    return to_tensor(obj, sample, path, device)
