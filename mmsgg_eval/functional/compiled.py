"""The optional compiled CPU kernels over per-image score matrices (``mmsgg_eval._ext``, sources in
``mmsgg_eval/csrc/``, built at install time) and the switch that turns them off.

They compute exactly what the torch implementation computes (among others the row maxima on the float32 bit
patterns, the value check, the stable graph-constrained top-k and no-graph-constraint list, reading each image's
matrix in place, and the summary's recall counts); when they are not built, or are switched off
(``MMSGG_EVAL_COMPILED=0`` in the environment, or :func:`disabled`), the torch layouts run. A build that cannot be loaded (e.g. compiled against another torch)
is reported once as a warning.
"""
import contextlib
import os
import warnings
from typing import Iterator, Optional, Sequence

import torch
from torch import Tensor

from .limits import NO_HIT

_kernels = None
_loaded = False
_enabled = os.environ.get('MMSGG_EVAL_COMPILED', '1') != '0'


def _load():
    """The compiled module, or None when it is not built or cannot be loaded (imported once, on first use)."""
    global _kernels, _loaded
    if not _loaded:
        _loaded = True
        try:
            from .. import _ext
            _kernels = _ext
            if getattr(_ext, 'NO_HIT', None) != NO_HIT:
                raise ImportError(f'its NO_HIT sentinel is {getattr(_ext, "NO_HIT", None)}, functional.limits has '
                                  f'{NO_HIT} (a build of other sources)')
        except ModuleNotFoundError:  # not built: the torch implementation, as documented
            _kernels = None
        except ImportError as err:  # built, but not loadable here
            warnings.warn(f'mmsgg_eval._ext could not be loaded ({err}); the torch implementation runs instead '
                          f'(same numbers, slower). Rebuild it with `pip install --no-build-isolation -e .`')
            _kernels = None
    return _kernels


def kernels():
    """The compiled module, or None when it is not built or switched off."""
    return _load() if _enabled else None


def built() -> bool:
    """Whether the compiled kernels are importable (whatever the switch says)."""
    return _load() is not None


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Run the torch implementation inside this block (for comparisons and tests)."""
    global _enabled
    saved, _enabled = _enabled, False
    try:
        yield
    finally:
        _enabled = saved


def suits(raw: Sequence[Tensor], background: Sequence[int], single_label: Sequence[bool], num_predicates: int,
          device: Optional[torch.device] = None) -> bool:
    """Whether the compiled kernels can read a batch of score matrices in place: they are available, the matrices
    are contiguous float32 CPU tensors of one background convention, no image has single-label scores (those are
    checked on their given scores), there is at least one predicate column and no image has
    :data:`MAX_RANKED_ENTRIES` entries or more."""
    ops = kernels()
    if ops is None or num_predicates <= 0 or any(single_label) or len(set(background)) > 1:
        return False
    if device is not None and torch.device(device).type != 'cpu':
        return False
    try:  # one compiled call checks every matrix
        return ops.matrices_suit(raw if isinstance(raw, list) else list(raw), num_predicates, MAX_RANKED_ENTRIES)
    except TypeError:  # not all tensors: nothing the kernels can read in place
        return False


MAX_RANKED_ENTRIES = 1 << 32
"""The kernels rank at most this many (pair, predicate) entries of one image (their index shares a 64-bit key
with the value); larger images run the torch layouts."""
