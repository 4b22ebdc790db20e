"""The predicted (subject, object) pairs of a batch, padded only when something asks for the padded form.

SGDet with all ordered pairs of 20-80 detections gives images of 380-6,320 pairs: a [B, R, 2] int64 padding of
a pool to its longest image writes about twice the pairs' own bytes. The compiled CPU kernels read each image's
pairs where they are (:attr:`RelationPairs.kernel_input`), so the reader keeps the per-image tensors when they
are contiguous int64 CPU tensors and pads them on first use of :attr:`RelationPairs.padded` (torch paths,
per-image results, other metrics). Indices are 0-based into the image's object list; padding pairs are (0, 0).
"""
from typing import List, Optional, Sequence

import torch
from torch import Tensor

from ..functional import compiled
from ..functional.scores import pad_rows


class RelationPairs:
    """The pairs of B images: ``rows`` (B contiguous int64 CPU tensors [R_b, 2], kept as given) or ``padded``
    ([B, R, 2], any integer dtype as read; padding 0). ``lengths``: the R_b (None: every image has R)."""

    def __init__(self, padded: Optional[Tensor] = None, rows: Optional[Sequence[Tensor]] = None,
                 lengths: Optional[List[int]] = None) -> None:
        if (padded is None) == (rows is None):
            raise ValueError('RelationPairs takes either the padded pairs or the per-image rows')
        self._padded = padded
        self.rows = list(rows) if rows is not None else None
        self.lengths = lengths

    @property
    def padded(self) -> Tensor:
        """[B, R, 2] with zero padding (built once from the rows when needed)."""
        if self._padded is None:
            self._padded = _pad_pairs(self.rows, self.lengths)
        return self._padded

    @property
    def kernel_input(self) -> List[Tensor]:
        """What the compiled kernels read: the per-image rows, or ``[padded]`` (one [B, R, 2] int64 tensor)."""
        return self.rows if self.rows is not None else [self.padded.long()]

    @property
    def batch_size(self) -> int:
        return len(self.rows) if self.rows is not None else self._padded.shape[0]

    @property
    def width(self) -> int:
        """R: the longest image's pair count."""
        if self.rows is not None:
            return max((int(t.shape[0]) for t in self.rows), default=0)
        return self._padded.shape[1] if self._padded.dim() > 1 else 0

    @property
    def device(self) -> torch.device:
        return self.rows[0].device if self.rows else self._padded.device

    def index_range(self):
        """(min [B], max [B]) of each image's kept pair indices (0, -1 without pairs), or None for padded pairs."""
        kernels = compiled.kernels()
        if self.rows is None or kernels is None:
            return None
        read = kernels.pad_int64_rows(self.rows, 0, pad=False)
        if read is None:
            return None
        return read[1], read[2]

    def take(self, pair: Tensor) -> Tensor:
        """[B, K, 2] int64 (subject, object) of pair ``pair[b, k]`` of each image b (indices below its pair
        count; images without pairs give zeros), read from the per-image rows where they are kept (no padded copy
        of every pair)."""
        if self.rows is None:
            return self.padded.long().gather(1, pair[..., None].expand(-1, -1, 2))
        out = torch.zeros(pair.shape + (2,), dtype=torch.long, device=pair.device)
        for b, rows in enumerate(self.rows):
            if rows.numel():
                out[b] = rows.reshape(-1, 2).index_select(0, pair[b])
        return out

    def well_formed(self) -> bool:
        """Integer [B, R, 2] pairs (per-image rows are checked when kept)."""
        if self.rows is not None:
            return True
        p = self._padded
        return p.dim() == 3 and p.shape[2] == 2 and not p.is_floating_point()

    def to(self, device: torch.device) -> 'RelationPairs':
        if torch.device(device) == self.device:
            return self
        return RelationPairs(padded=self.padded.to(device), lengths=self.lengths)

    def long(self) -> 'RelationPairs':
        """The pairs as int64 (kept rows already are)."""
        if self.rows is not None or self._padded.dtype == torch.long:
            return self
        return RelationPairs(padded=self._padded.long(), lengths=self.lengths)


def _pad_pairs(rows: List[Tensor], lengths: Optional[List[int]]) -> Tensor:
    """[B, R, 2] int64 zero-padded from contiguous int64 CPU rows [R_b, 2] (empty ones of any shape)."""
    if not rows:
        return torch.zeros((0, 0, 2), dtype=torch.long)
    kernels = compiled.kernels()
    shaped = [t if t.dim() == 2 else t.reshape(0, 2) for t in rows]
    if kernels is not None:
        padded = kernels.pad_int64_rows(shaped, 0)
        if padded is not None:
            return padded[0]
    return pad_rows(shaped, 0, [int(t.shape[0]) for t in shaped] if lengths is None else list(lengths))
