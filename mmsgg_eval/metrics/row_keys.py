"""The declared row keys (:class:`mmsgg_eval.keys.RowKey`) turned into numbers, two ways from the one declaration:
:func:`row_key_values` (the summary's values) and :func:`row_key_contributions` (their per-image summands for the
bootstrap intervals and the paired comparison, :mod:`mmsgg_eval.metrics.bootstrap`).

A metric with row keys declares them in ``row_keys()`` and derives the columns they read in
``key_columns(tables)`` (``{table: {column: [R] tensor}}``, every table with the ``sample_idx`` of its rows);
both halves read those same columns, so a key exists in one exactly when it exists in the other, over the same
rows with the same scale and empty value."""
import math
from typing import Dict, Sequence

import torch
from torch import Tensor

from ..functional.bootstrap import ratio
from ..keys import RowKey
from .bootstrap import Contributions

Columns = Dict[str, Dict[str, Tensor]]


def _counted(key: RowKey, columns: Columns, name: str) -> Tensor:
    """The column ``name`` of the rows ``key`` counts (float64)."""
    rows = columns[key.table]
    values = rows[name].double()
    return values if key.where is None else values[rows[key.where].bool()]


def row_key_value(key: RowKey, columns: Columns) -> float:
    """The summary's value of ``key`` (see :class:`~mmsgg_eval.keys.RowKey` for the arithmetic, bit for bit)."""
    rows = columns[key.table]
    if not int(rows['sample_idx'].numel()) and key.no_rows is not None:
        return key.no_rows
    values = _counted(key, columns, key.value)
    if key.summation == 'mean':
        return key.scale * float(values.mean()) if values.numel() else key.empty
    total = math.fsum(values.tolist())
    den = float(values.numel()) if key.over is None else math.fsum(_counted(key, columns, key.over).tolist())
    return key.scale * total / den if den > 0 else key.empty


def row_key_values(keys: Sequence[RowKey], columns: Columns) -> Dict[str, float]:
    """``{key name: value}`` of the declared ``keys``, in their order."""
    return {key.name: row_key_value(key, columns) for key in keys}


def row_key_contributions(c: Contributions, keys: Sequence[RowKey], columns: Columns) -> None:
    """Add each of ``keys`` to ``c``: per unit the sums of ``value`` and of ``over`` (or the number of counted
    rows) over its counted rows, two columns; the key is ``scale`` x the ratio of their totals."""
    for key in keys:
        rows = columns[key.table]
        where = rows[key.where].bool() if key.where is not None else \
            torch.ones(rows['sample_idx'].shape, dtype=torch.bool)
        unit = c.unit_of(rows['sample_idx'])[where]
        num = c.add(torch.bincount(unit, weights=rows[key.value][where].double(), minlength=c.num_units))
        count = torch.bincount(unit, minlength=c.num_units).double() if key.over is None else \
            torch.bincount(unit, weights=rows[key.over][where].double(), minlength=c.num_units)
        den = c.add(count)
        c.blocks.append(([key.name], lambda t, key=key, num=num, den=den:
                         key.scale * ratio(t[:, num], t[:, den], key.empty)))
