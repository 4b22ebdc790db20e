"""What the metrics read of a pool's data samples before their rows: a prediction marked missing, and the first
occurrence of each ``sample_idx``."""
from typing import Any, Callable, List, Optional, Sequence

import torch
from torch import Tensor

from ..structures import get_field, sample_index


def prediction_missing(sample: Any) -> bool:
    """True when the sample is an image the user did not predict (metainfo ``prediction_missing=True``,
    set by the readers of prediction files when a dataset sample has no prediction)."""
    return bool(get_field(sample, 'prediction_missing'))


def first_occurrences(samples: List[Any], index_of: Callable[[Any], Optional[int]] = sample_index) -> List[Any]:
    """``samples`` without repeated ``sample_idx`` (the first occurrence is kept; samples without one are
    all kept); the list itself when nothing repeats. ``index_of`` reads the index of an item."""
    seen, keep = set(), []
    for sample in samples:
        idx = index_of(sample)
        if idx is None or idx not in seen:
            keep.append(sample)
            if idx is not None:
                seen.add(idx)
    return keep if len(keep) < len(samples) else samples


def missing_flags(samples: Sequence[Any], device: torch.device) -> Tensor:
    """[N] bool: :func:`prediction_missing` of each sample."""
    return torch.tensor([prediction_missing(s) for s in samples], dtype=torch.bool, device=device)
