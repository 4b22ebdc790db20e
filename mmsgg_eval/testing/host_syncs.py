"""Counting the operations that would make the host wait for a CUDA device, on any device (CPU included).

A validation loop on GPUs feeds CUDA tensors to ``process()``; every operation whose result the host needs
before it can go on (a Python number read from a tensor, an output whose size depends on the values, a copy
between host and device memory) stops the host until the device has finished all the work queued before it.
On the CPU nothing waits, but the same operations run: :class:`HostSyncCounter` (a ``TorchDispatchMode``, plus
hooks on the few ``Tensor`` methods that read host memory without dispatching on a CPU tensor) records each of
them with the line of ``mmsgg_eval`` that asked for it, so a test can bound their number per pool without a GPU.

Recorded kinds (what synchronises on CUDA):

* ``item``: ``aten._local_scalar_dense`` (``.item()``, ``int()`` / ``float()`` / ``bool()`` of a tensor, a
  tensor used as a Python index or in an ``if``);
* ``nonzero``: ``nonzero`` / ``argwhere`` / ``torch.where(mask)`` (one argument);
* ``boolean index``: indexing with, or ``index_put_`` through, a bool / uint8 mask (``x[mask]``,
  ``x[mask] = v``);
* ``masked_select``, ``unique`` (every ``unique`` variant, and ``isin`` where it takes its sorting path),
  ``bincount``, ``histc`` without a range, ``equal``;
* ``repeat_interleave``: with a tensor of repeats and no ``output_size``;
* ``to host``: ``Tensor.tolist()``, ``.numpy()``, ``.cpu()`` (a copy from the device to the host);
* ``to device``: ``torch.tensor(data)`` (``aten.lift_fresh``: host data copied to the device, a blocking
  copy unless pinned), except in :func:`mmsgg_eval.functional.transfer.host_tensor`, whose copy to a CUDA device
  is made from pinned memory with ``non_blocking=True`` (no wait), and for the Python number assigned by
  ``x[index] = number`` (made on the device: a fill, not a copy).
"""
import os
import traceback
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

_ALWAYS = {
    'item': ('_local_scalar_dense',),
    'nonzero': ('nonzero', 'nonzero_numpy', 'argwhere'),
    'masked_select': ('masked_select',),
    'unique': ('_unique', '_unique2', 'unique_dim', 'unique_consecutive', 'unique_dim_consecutive'),
    'bincount': ('bincount',),
    'equal': ('equal',),
    'to device': ('lift_fresh',),
}
_KIND_OF = {name: kind for kind, names in _ALWAYS.items() for name in names}
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_THIS = os.path.abspath(__file__)
_NON_BLOCKING = os.path.join(_PACKAGE, 'functional', 'transfer.py')  # host_tensor: pinned, non_blocking copies


def _is_mask(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype in (torch.bool, torch.uint8)


def _isin_sorts(args: Tuple[Any, ...]) -> bool:
    """Whether ``isin(elements, test_elements)`` takes the sorting path of its CUDA kernel (which calls
    ``unique``): ``test_elements.numel() >= 10 * elements.numel() ** 0.145``, as in ATen."""
    elements, test = args[0], args[1]
    if not isinstance(elements, torch.Tensor) or not isinstance(test, torch.Tensor):
        return False
    return test.numel() >= 10.0 * (max(elements.numel(), 1) ** 0.145)


def sync_kind(func: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Optional[str]:
    """The kind of host-device synchronisation the aten overload ``func`` makes on CUDA with these arguments
    (see the module docstring), or None when it makes none."""
    name = func._schema.name.split('::')[-1]
    kind = _KIND_OF.get(name)
    if kind is not None:
        return kind
    if name == 'index' and len(args) > 1:
        return 'boolean index' if any(_is_mask(i) for i in args[1] if i is not None) else None
    if name in ('index_put', 'index_put_', '_index_put_impl', '_index_put_impl_') and len(args) > 1:
        return 'boolean index' if any(_is_mask(i) for i in args[1] if i is not None) else None
    if name == 'repeat_interleave':  # output_size is keyword-only in both tensor-repeats overloads
        tensor_repeats = func._overloadname in ('Tensor', 'self_Tensor')
        return 'repeat_interleave' if tensor_repeats and kwargs.get('output_size') is None else None
    if name == 'isin' and _isin_sorts(args):
        return 'unique'
    if name == 'histc':
        low = kwargs.get('min', args[2] if len(args) > 2 else 0)
        high = kwargs.get('max', args[3] if len(args) > 3 else 0)
        return 'histc' if low == high else None
    return None


def _caller() -> str:
    """``path:line`` of the innermost frame of the package (outside this module) on the stack."""
    for frame in reversed(traceback.extract_stack()):
        path = os.path.abspath(frame.filename)
        if path.startswith(_PACKAGE) and path != _THIS:
            return f'{os.path.relpath(path, os.path.dirname(_PACKAGE))}:{frame.lineno}'
    return '<outside mmsgg_eval>'


class HostSyncCounter(TorchDispatchMode):
    """Records every operation that would synchronise host and device on CUDA (see the module docstring).

    Use as a context manager: ``with HostSyncCounter() as syncs: ...``; then ``syncs.total``, ``syncs.kinds``
    (a Counter by kind) and ``syncs.sites`` (a Counter by (kind, ``path:line``)). Works on any device: on CUDA it
    counts what ``torch.cuda.set_sync_debug_mode('warn')`` would warn about, and a little more (host reads of
    CPU tensors cannot be told apart from device reads, so ``.tolist()`` of a CPU tensor counts too).
    """

    _HOOKED = {'tolist': 'to host', 'numpy': 'to host', 'cpu': 'to host'}

    def __init__(self) -> None:
        super().__init__()
        self.kinds: Counter = Counter()
        self.sites: Counter = Counter()
        self._assigning = False  # inside Tensor.__setitem__
        self._saved: Dict[str, Callable] = {}

    @property
    def total(self) -> int:
        return sum(self.kinds.values())

    def record(self, kind: str) -> None:
        if kind == 'to device' and self._assigning:
            return
        if kind == 'to device' and any(os.path.abspath(f.filename) == _NON_BLOCKING
                                       for f in traceback.extract_stack(limit=6)):
            return
        self.kinds[kind] += 1
        self.sites[(kind, _caller())] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = sync_kind(func, args, kwargs)
        if kind is not None:
            self.record(kind)
        return func(*args, **kwargs)

    def __enter__(self) -> 'HostSyncCounter':
        for method, kind in self._HOOKED.items():
            original = getattr(torch.Tensor, method)
            self._saved[method] = original
            setattr(torch.Tensor, method, self._hook(original, kind))
        self._saved['__setitem__'] = torch.Tensor.__setitem__
        torch.Tensor.__setitem__ = self._assignment(torch.Tensor.__setitem__)
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            return super().__exit__(*exc)
        finally:
            for method, original in self._saved.items():
                setattr(torch.Tensor, method, original)
            self._saved = {}

    def _hook(self, original: Callable, kind: str) -> Callable:
        counter = self

        def hooked(tensor, *args, **kwargs):
            counter.record(kind)
            return original(tensor, *args, **kwargs)
        hooked.__name__ = getattr(original, '__name__', 'hooked')
        return hooked

    def _assignment(self, original: Callable) -> Callable:
        counter = self

        def setitem(tensor, index, value):
            saved, counter._assigning = counter._assigning, not isinstance(value, torch.Tensor)
            try:
                return original(tensor, index, value)
            finally:
                counter._assigning = saved
        return setitem

    def report(self, limit: int = 40) -> str:
        """The recorded sites, most frequent first, one per line (``count kind path:line``)."""
        lines = [f'{n:5d} {kind:18s} {site}' for (kind, site), n in self.sites.most_common(limit)]
        return f'{self.total} host syncs: {dict(self.kinds)}\n' + '\n'.join(lines)


def syncs_of(run: Callable[[], Any]) -> Tuple[Any, HostSyncCounter]:
    """``run()`` inside a :class:`HostSyncCounter`: its result and the counter."""
    with HostSyncCounter() as counter:
        result = run()
    return result, counter


__all__: List[str] = ['HostSyncCounter', 'sync_kind', 'syncs_of']
