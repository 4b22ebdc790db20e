"""Restricted unpickling of saved predictions and legacy dumps.

Pickles can run arbitrary code. The readers of :mod:`mmsgg_eval.io` load them with :class:`SafeUnpickler`, which
resolves only an allow-list of globals: builtin containers, numpy arrays (protocol 5 buffers included) and dtypes,
torch tensors (their
storages through ``torch.load(weights_only=True)``), the legacy Scene-Graph-Benchmark ``BoxList``, rebuilt
as the inert :class:`LegacyBoxList` (attributes only; no code from the file runs and maskrcnn_benchmark need
not be installed), and OpenPSG's ``Result`` (``tools/test.py --out result.pkl``), rebuilt as the inert
:class:`PickledRecord` (its attributes only; openpsg need not be installed). Anything else raises
:class:`~mmsgg_eval.io.errors.UnsafePickleError`. ``unsafe=True`` (command line: ``--unsafe-load``) uses
:class:`RemappingUnpickler`, the full unpickler with the same two mappings: only for files you trust.
"""
import functools
import io
import pickle
from typing import Any, Dict, List

import numpy as np
import torch

from .errors import UnsafePickleError

#: Import path under which the legacy code pickled its boxes.
BOXLIST_PATH = 'maskrcnn_benchmark.structures.bounding_box.BoxList'
#: Import path under which OpenPSG pickles its per-image ``Result`` container
#: (openpsg/models/relation_heads/approaches/relation_util.py).
OPENPSG_RESULT_PATH = 'openpsg.models.relation_heads.approaches.relation_util.Result'


class PickledRecord:
    """Inert stand-in for a pickled plain container class (OpenPSG's ``Result``): the pickle's attributes are
    set on it (``__dict__``), nothing else; a missing attribute reads as None (``Result`` defaults every
    field to None)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith('__'):
            raise AttributeError(name)
        return None

    def __repr__(self) -> str:
        fields = sorted(k for k, v in self.__dict__.items() if v is not None)
        return f'PickledRecord(fields={fields})'


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


def _safe_load_from_bytes(data: bytes) -> Any:
    """Replacement of ``torch.storage._load_from_bytes`` (how plain pickles store tensor storages)."""
    return torch.load(io.BytesIO(data), weights_only=True, map_location='cpu')


def _latin1_bytes(text: str, encoding: str = 'latin1') -> bytes:
    """Replacement of ``_codecs.encode``, how pickle protocols 0-2 of Python 3 store ``bytes`` (numpy arrays
    dumped with ``protocol=2``, as ``mmcv.dump`` writes ``.pkl`` files): only the latin-1 encoding is accepted."""
    if encoding not in ('latin1', 'latin-1') or not isinstance(text, str):
        raise UnsafePickleError(None, f'safe loading accepts _codecs.encode only for latin-1 text, got '
                                      f'{type(text).__name__} with encoding {encoding!r}')
    return text.encode('latin1')


def _numpy_globals() -> Dict[str, Any]:
    out = {'numpy.ndarray': np.ndarray, 'numpy.dtype': np.dtype}
    for mod_name in ('numpy.core.multiarray', 'numpy._core.multiarray'):
        try:
            mod = __import__(mod_name, fromlist=['_reconstruct', 'scalar'])
        except ImportError:
            continue
        out[f'{mod_name}._reconstruct'] = mod._reconstruct
        out[f'{mod_name}.scalar'] = mod.scalar
    for mod_name in ('numpy.core.numeric', 'numpy._core.numeric'):  # arrays pickled with protocol 5
        try:
            mod = __import__(mod_name, fromlist=['_frombuffer'])
        except ImportError:
            continue
        if hasattr(mod, '_frombuffer'):
            out[f'{mod_name}._frombuffer'] = mod._frombuffer
    return out


@functools.lru_cache(maxsize=1)
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
        '_codecs.encode': _latin1_bytes,
        BOXLIST_PATH: LegacyBoxList,
        OPENPSG_RESULT_PATH: PickledRecord,
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
        raise UnsafePickleError(None, f'safe loading refuses to build {full!r} (only tensors, numpy arrays, '
                                      f'builtin containers, the legacy BoxList and OpenPSG\'s Result are '
                                      f'allowed)')


class RemappingUnpickler(pickle.Unpickler):
    """Unrestricted unpickler (``unsafe=True``) that maps the legacy BoxList to :class:`LegacyBoxList` and
    OpenPSG's ``Result`` to :class:`PickledRecord`."""

    def find_class(self, module: str, name: str) -> Any:
        if f'{module}.{name}' == BOXLIST_PATH:
            return LegacyBoxList
        if f'{module}.{name}' == OPENPSG_RESULT_PATH:
            return PickledRecord
        return super().find_class(module, name)


class RemappingPickleModule:
    """``pickle_module`` for ``torch.load(weights_only=False)`` with the BoxList mapping."""
    Unpickler = RemappingUnpickler
    __name__ = 'mmsgg_eval_legacy_pickle'

    @staticmethod
    def load(f, **kwargs):
        return RemappingUnpickler(f, **kwargs).load()


def torch_safe_load(path: str) -> Any:
    entry = (LegacyBoxList, BOXLIST_PATH)
    try:
        ctx = torch.serialization.safe_globals([entry])
    except (AttributeError, TypeError):  # pragma: no cover - torch < 2.5
        shim = type('BoxList', (LegacyBoxList,), {'__module__': BOXLIST_PATH.rsplit('.', 1)[0]})
        torch.serialization.add_safe_globals([shim])
        return torch.load(path, map_location='cpu', weights_only=True)
    with ctx:
        return torch.load(path, map_location='cpu', weights_only=True)


def unpickler(f: Any, unsafe: bool = False) -> pickle.Unpickler:
    """Unpickler of an open binary file: :class:`SafeUnpickler`, or :class:`RemappingUnpickler` if ``unsafe``."""
    return RemappingUnpickler(f) if unsafe else SafeUnpickler(f)
