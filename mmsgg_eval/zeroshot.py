"""Zero-shot triplet sets: the legacy VG150 file (1-based subject, object, predicate) or a set derived from the data.

Internally a zero-shot set is an int64 tensor [T, 3] of 0-based (subject class, object class, predicate).
The legacy VG150 file ``zeroshot_triplet.pytorch`` stores the same columns 1-based.
"""
import hashlib
import os
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch
from torch import Tensor


def load_legacy_zeroshot_file(path: str) -> Tensor:
    """Load the legacy Scene-Graph-Benchmark zero-shot file and convert it to 0-based [T, 3] int64.

    The file holds a 1-based int64 tensor [T, 3] with columns (subject class, object class, predicate),
    saved in torch's legacy (pre-zipfile) format; it loads with ``weights_only=True`` on modern torch.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f'zero-shot triplet file not found: {path}')
    try:
        data = torch.load(path, map_location='cpu', weights_only=True)
    except Exception as err:  # noqa: BLE001 - re-raised with context
        raise ValueError(f'cannot read zero-shot triplet file {path}: {err}') from err
    triplets = torch.as_tensor(np.asarray(data)).long()
    if triplets.dim() != 2 or triplets.shape[1] != 3:
        raise ValueError(f'zero-shot triplet file {path}: expected an integer array [T, 3] '
                         f'(subject, object, predicate), got shape {list(triplets.shape)}')
    if triplets.numel() and triplets.min() < 1:
        raise ValueError(f'zero-shot triplet file {path}: entries must be 1-based (found {int(triplets.min())})')
    return triplets - 1


def as_zeroshot_triplets(value: Union[None, str, Sequence, np.ndarray, Tensor]) -> Optional[Tensor]:
    """Normalise a user value: a path to a legacy file, or 0-based (subject, object, predicate) triplets."""
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        return load_legacy_zeroshot_file(str(value))
    triplets = torch.as_tensor(np.asarray(value)).long().reshape(-1, 3)
    if triplets.numel() and triplets.min() < 0:
        raise ValueError('zeroshot_triplets must be 0-based (subject class, object class, predicate)')
    return triplets


def derive_zeroshot(eval_triplets: Tensor, train_triplets: Tensor) -> Tensor:
    """Triplets present in the evaluated split and absent from the training split (unique, sorted)."""
    ev = torch.unique(eval_triplets.long().reshape(-1, 3), dim=0)
    tr = torch.unique(train_triplets.long().reshape(-1, 3), dim=0)
    if tr.numel() == 0:
        return ev
    both = torch.cat([ev, tr])
    _, inverse, counts = torch.unique(both, dim=0, return_inverse=True, return_counts=True)
    return ev[counts[inverse[:ev.shape[0]]] == 1]


def triplet_set_digest(triplets: Any) -> str:
    """Short, order-independent hash of a triplet set (for reproducible reports)."""
    arr = np.unique(np.asarray(torch.as_tensor(np.asarray(triplets)).long().reshape(-1, 3)), axis=0)
    return hashlib.sha1(np.ascontiguousarray(arr, dtype=np.int64).tobytes()).hexdigest()[:12]


def check_zeroshot_indices(triplets: Tensor, num_classes: int, num_predicates: int, source: str) -> None:
    """Refuse a zero-shot set with an index outside the dataset (a 1-based list given as 0-based, or the set of
    another dataset), naming ``source`` and the first offending row: its codes would alias real triplets."""
    bounds = torch.tensor([num_classes, num_classes, num_predicates])
    bad = ((triplets < 0) | (triplets >= bounds)).any(1)
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise ValueError(
            f'zero-shot triplets ({source}): row {row} = (subject, object, predicate) {triplets[row].tolist()} '
            f'(0-based) is outside the dataset ({num_classes} classes, {num_predicates} predicates; '
            f'{int(bad.sum())} of {triplets.shape[0]} rows are); a list of triplets must be 0-based, the legacy file '
            f'(a path) 1-based')
