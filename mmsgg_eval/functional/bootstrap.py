"""Image bootstrap as tensor algebra (pure torch): resampling-count matrices, weighted column totals, percentile
intervals, paired two-sided p-values and Holm's correction.

A bootstrap replicate resamples the N units (images) of an evaluation with replacement. Replicate b is fully
described by its count vector ``counts[b]`` ([N], how often each unit was drawn; it sums to N), so a statistic
that is a function of per-unit sums, ``f(sum_i counts[b, i] * x[i, :])``, is evaluated for B replicates at once
as ``f(counts @ x)`` with ``counts`` [B, N] and the per-unit contributions ``x`` [N, C]. The all-ones count
vector is the original sample.

Counts come from a seeded ``torch.Generator`` in fixed chunks of :data:`CHUNK` replicates, so the same
(N, samples, seed) always give the same matrix, whatever the machine, world size or memory.
"""
from typing import Iterator, Tuple

import torch
from torch import Tensor

#: replicates drawn (and multiplied) per chunk: fixed, so the drawn matrix never depends on anything else
CHUNK = 50


def resample_counts(num_units: int, samples: int, seed: int, chunk: int = CHUNK,
                    dtype: torch.dtype = torch.float64) -> Iterator[Tensor]:
    """Yield [b, N] resampling counts (b <= ``chunk``, ``samples`` rows in all, exact integers in ``dtype``):
    row b counts how often each of the ``num_units`` units is drawn in N draws with replacement (uniform).
    Deterministic in (``num_units``, ``samples``, ``seed``, ``chunk``)."""
    generator = torch.Generator().manual_seed(int(seed))
    done = 0
    while done < samples:
        b = min(chunk, samples - done)
        draws = torch.randint(num_units, (b, num_units), generator=generator) if num_units else \
            torch.zeros((b, 0), dtype=torch.long)
        yield torch.zeros((b, num_units), dtype=dtype).scatter_add_(1, draws, torch.ones((), dtype=dtype)
                                                                   .expand(b, num_units))
        done += b


def weighted_totals(counts: Tensor, contributions: Tensor) -> Tensor:
    """[b, C] float64 column totals of each replicate: ``counts`` [b, N] @ ``contributions`` [N, C], in the
    dtype of ``contributions`` (float32 halves the time of the product; integer counts and totals below 2**24
    stay exact, other totals carry a relative error of about 1e-6)."""
    return (counts.to(contributions.dtype) @ contributions).double()


def ratio(numerator: Tensor, denominator: Tensor, empty: float = 0.0) -> Tensor:
    """``numerator / denominator`` element-wise, ``empty`` where the denominator is 0 (no unit holds it)."""
    return torch.where(denominator > 0, numerator / denominator.clamp(min=1e-300),
                       torch.full_like(numerator, empty))


def percentile_interval(replicates: Tensor, level: float) -> Tuple[Tensor, Tensor]:
    """(low, high) percentile-bootstrap interval of each column of ``replicates`` [B, ...]: the
    (1 - level) / 2 and (1 + level) / 2 quantiles (linear interpolation between order statistics), NaN
    replicates ignored (NaN when all are)."""
    q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
    bounds = torch.nanquantile(replicates.double(), q, dim=0)
    return bounds[0], bounds[1]


def paired_p_value(delta_replicates: Tensor) -> Tensor:
    """Two-sided bootstrap p-value of "delta = 0" for each column of ``delta_replicates`` [B, ...] (replicates of
    B - A drawn with the SAME units for both runs): ``(1 + 2 min(#{d <= 0}, #{d >= 0})) / (B + 1)``, capped at 1
    (the percentile interval at level 1 - p just reaches 0; NaN replicates are left out)."""
    valid = ~torch.isnan(delta_replicates)
    below = ((delta_replicates <= 0) & valid).sum(0).double()
    above = ((delta_replicates >= 0) & valid).sum(0).double()
    total = valid.sum(0).double()
    p = (1 + 2 * torch.minimum(below, above)) / (total + 1)
    return torch.where(total > 0, p.clamp(max=1.0), torch.full_like(p, float('nan')))


def holm_adjust(p_values: Tensor) -> Tensor:
    """Holm's step-down adjusted p-values (family-wise error control) of [M] p-values (NaN kept out of the
    family and returned as NaN): the i-th smallest p is multiplied by (m - i), a running maximum keeps
    the order, capped at 1."""
    p = p_values.double()
    valid = (~torch.isnan(p)).nonzero().squeeze(1)
    out = torch.full_like(p, float('nan'))
    m = int(valid.numel())
    if not m:
        return out
    values, order = torch.sort(p.index_select(0, valid))
    scaled = values * torch.arange(m, 0, -1, dtype=torch.float64)
    adjusted = torch.cummax(scaled, 0).values.clamp(max=1.0)
    return out.index_copy_(0, valid.index_select(0, order), adjusted)
