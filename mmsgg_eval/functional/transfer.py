"""Host values onto the device without making the host wait.

``torch.tensor(values, device='cuda')`` copies from pageable host memory and waits until the copy is done, that
is until every kernel queued before it has run: a host-device synchronisation. The per-pool tensors the metrics
build from host data (per-image lengths, bounds, image sizes, flags) go through :func:`host_tensor` instead:
built in host memory and, on a CUDA device, copied from pinned memory with ``non_blocking=True`` (PyTorch keeps
the pinned block alive until the copy has run). On the CPU it is a plain tensor of the values.
"""
import contextlib
from typing import Any, Iterator

import numpy as np
import torch
from torch import Tensor

_NUMPY = {torch.bool: np.bool_, torch.uint8: np.uint8, torch.int16: np.int16, torch.int32: np.int32,
          torch.int64: np.int64, torch.float32: np.float32, torch.float64: np.float64}


def host_tensor(values: Any, dtype: torch.dtype, device: torch.device) -> Tensor:
    """``torch.tensor(values, dtype=dtype)`` on ``device`` (values: numbers or nested lists of them; dtype one of
    bool, uint8, int16, int32, int64, float32, float64), copied without a host-device synchronisation."""
    host = torch.from_numpy(np.asarray(values, dtype=_NUMPY[dtype]))
    device = torch.device(device)
    if device.type == 'cpu':
        return host
    if device.type == 'cuda':
        host = host.pin_memory()
    return host.to(device, non_blocking=True)


#: Run the accelerators' synchronisation-free ways on the CPU too (see :func:`sync_free`; tests).
SYNC_FREE_ON_CPU = False


def sync_free(device: torch.device) -> bool:
    """Whether code on ``device`` takes the ways that never make the host wait for the device, at the price of
    some more device work (whole-batch score layouts, dense matching, arg-maxes of every listed row): on CUDA and
    other accelerators; not on the CPU, where reading a value costs nothing and the sparse ways are faster (unless
    :data:`SYNC_FREE_ON_CPU`, set by :func:`sync_free_paths`, asks for the accelerators' ways there). A speed
    choice only: both ways give the same numbers."""
    return torch.device(device).type != 'cpu' or SYNC_FREE_ON_CPU


@contextlib.contextmanager
def sync_free_paths() -> Iterator[None]:
    """Inside this block the CPU takes the ways an accelerator takes (:func:`sync_free`): tests count their host
    synchronisations and compare their numbers on the CPU."""
    global SYNC_FREE_ON_CPU
    saved, SYNC_FREE_ON_CPU = SYNC_FREE_ON_CPU, True
    try:
        yield
    finally:
        SYNC_FREE_ON_CPU = saved


def known_nonzero(mask: Tensor, count: int) -> Tensor:
    """[count] int64 positions of the True entries of the 1-D ``mask``, which holds ``count`` of them (a number the
    host knows, e.g. the sum of per-image lengths): ``nonzero_static`` needs no host synchronisation (on the CPU and
    CUDA; other devices take ``nonzero``)."""
    if mask.device.type in ('cpu', 'cuda'):
        return torch.nonzero_static(mask, size=int(count)).squeeze(1)
    return mask.nonzero().squeeze(1)
