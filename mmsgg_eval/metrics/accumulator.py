"""Per-sample row tables, reduced across ranks once, with sampler-padding de-duplication.

Metrics (:class:`~mmsgg_eval.metrics.base.RowMetric`) declare tables of small per-sample rows (e.g. one row
per image, one row per GT relation holding its first-hit ranks), append rows in ``process()`` on the samples'
device, and call :meth:`reduce` once in ``evaluate()``. Every row carries the ``sample_idx`` of the sample it belongs to. MMEngine's
``DefaultSampler`` pads the last round with repeated samples, so one ``sample_idx`` can be processed on
several ranks (or twice on one): :meth:`reduce` keeps, for each ``sample_idx``, only the rows of its first
occurrence (lowest rank, then earliest ``add`` call). What crosses ranks is one length exchange and one
byte buffer per rank: its size depends on the number of samples and GT rows, never on predictions.
"""
import logging
from collections import OrderedDict
import warnings
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..functional.limits import AUTO_SAMPLE_ID_BASE

Columns = Dict[str, Tensor]


def same_objects(a: Optional[Sequence[object]], b: Optional[Sequence[object]]) -> bool:
    """True when ``a`` and ``b`` hold the very same objects in the same order (identity, not equality)."""
    return a is not None and b is not None and len(a) == len(b) and all(x is y for x, y in zip(a, b))


class RowAccumulator:
    """Tables of per-sample rows, declared once like torchmetrics states.

    Args:
        schema: ``{table: {column: (dtype, trailing_shape)}}``. Columns ``sample_idx`` and ``occurrence``
            are added to every table automatically.
    """

    def __init__(self, schema: Dict[str, Dict[str, Tuple[torch.dtype, Tuple[int, ...]]]]):
        self.schema = OrderedDict((t, OrderedDict(cols)) for t, cols in schema.items())
        self.reset()

    def reset(self) -> None:
        self._chunks: Dict[str, List[Columns]] = {t: [] for t in self.schema}
        self._calls = 0
        self._auto_ids = 0
        self._sources: List[object] = []

    def number_missing(self, idx: Tensor, owner: str) -> Tensor:
        """Replace missing ``sample_idx`` (-1) in place by ids in processing order (single process only).

        Distributed de-duplication needs the dataset index of every sample, so a missing one is an error
        when several ranks run; ``owner`` names the metric in messages.
        """
        missing = idx < 0
        count = int(missing.sum())
        if not count:
            return idx
        from mmengine.dist import get_world_size
        if get_world_size() > 1:
            raise ValueError(f'{owner}: data samples carry no `sample_idx` metainfo; it is required to '
                             f'de-duplicate sampler padding across ranks (mmengine datasets set it)')
        if self._auto_ids == 0:
            warnings.warn(f'{owner}: data samples carry no `sample_idx`; numbering them in processing order')
        idx[missing] = torch.arange(count, device=idx.device) + self._auto_ids + AUTO_SAMPLE_ID_BASE
        self._auto_ids += count
        return idx

    def reduce_to_cpu(self, size: Optional[int], owner: str) -> Dict[str, Columns]:
        """:meth:`reduce`, then :meth:`reset`; tables on the CPU. Warns when the number of distinct samples
        differs from ``size`` (the dataset length given to ``evaluate``)."""
        tables = self.reduce()
        self.reset()
        tables = {t: {n: c.cpu() for n, c in cols.items()} for t, cols in tables.items()}
        num = int(next(iter(tables.values()))['sample_idx'].numel()) if tables else 0
        if size is not None and num != size:
            from mmengine.logging import print_log
            print_log(f'{owner}: {num} distinct samples were evaluated, the dataset has {size}',
                      logger='current', level=logging.WARNING)
        return tables

    def __len__(self) -> int:
        return sum(int(c['sample_idx'].numel()) for c in self._chunks[next(iter(self.schema))])

    def add(self, rows: Dict[str, Columns]) -> None:
        """Append one call's rows: ``{table: {'sample_idx': [n] int64, column: [n, ...]}}``."""
        for table, columns in rows.items():
            spec = self.schema[table]
            idx = columns['sample_idx'].long()
            chunk = {'sample_idx': idx,
                     'occurrence': torch.full(idx.shape, self._calls, dtype=torch.int32, device=idx.device)}
            for name, (dtype, shape) in spec.items():
                value = columns[name]
                if tuple(value.shape) != (idx.numel(),) + tuple(shape):
                    raise ValueError(f'table {table!r} column {name!r}: shape {list(value.shape)} '
                                     f'!= {[idx.numel(), *shape]}')
                chunk[name] = value.to(dtype)
            self._chunks[table].append(chunk)
        self._calls += 1
        self._sources.append(rows)

    def holds_same_rows(self, sources: Optional[List[object]]) -> bool:
        """True when this accumulator was fed exactly the row objects ``sources`` (see :attr:`sources`), in
        order: its :meth:`reduce` would then return the same tables."""
        return same_objects(sources, self._sources)

    @property
    def sources(self) -> List[object]:
        """The row dicts given to :meth:`add` since the last reset (kept alive with their chunks)."""
        return self._sources

    def payload_bytes(self) -> int:
        """Bytes this rank sends at :meth:`reduce` (row payload plus the length exchange)."""
        total = 8 * len(self.schema)
        for chunks in self._chunks.values():
            for chunk in chunks:
                total += sum(c.numel() * _elem_bytes(c.dtype) for c in chunk.values())
        return total

    def local(self) -> Dict[str, Columns]:
        """This rank's rows, concatenated per table (on the device of the first chunk, else CPU)."""
        out = {}
        for table, spec in self.schema.items():
            chunks = self._chunks[table]
            device = chunks[0]['sample_idx'].device if chunks else torch.device('cpu')
            cols = OrderedDict()
            for name, dtype in (('sample_idx', torch.long), ('occurrence', torch.int32)):
                cols[name] = torch.cat([c[name].to(device) for c in chunks]) if chunks else \
                    torch.zeros(0, dtype=dtype, device=device)
            for name, (dtype, shape) in spec.items():
                cols[name] = torch.cat([c[name].to(device) for c in chunks]) if chunks else \
                    torch.zeros((0,) + tuple(shape), dtype=dtype, device=device)
            out[table] = cols
        return out

    def reduce(self) -> Dict[str, Columns]:
        """Gather every rank's rows (one collective of lengths, one of bytes) and de-duplicate.

        Returns the same tables on every rank, rows sorted by ``sample_idx`` (stable within a sample), with
        exactly one occurrence of each ``sample_idx``: results are bit-identical for any world size.
        """
        local = self.local()
        gathered = all_gather_tables(local)
        return deduplicate(gathered)


def _to_bytes(t: Tensor) -> Tensor:
    t = t.contiguous()
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return t.reshape(-1).view(torch.uint8) if t.numel() else torch.zeros(0, dtype=torch.uint8, device=t.device)


def _from_bytes(buf: Tensor, dtype: torch.dtype, shape: Sequence[int]) -> Tensor:
    storage = torch.uint8 if dtype == torch.bool else dtype
    # clone(): a slice of the shared buffer may be misaligned for wider dtypes
    t = buf.clone().view(storage).reshape(tuple(shape)) if buf.numel() else torch.zeros(tuple(shape), dtype=storage,
                                                                                  device=buf.device)
    return t.bool() if dtype == torch.bool else t


def all_gather_tables(local: Dict[str, Columns]) -> Dict[str, Columns]:
    """Concatenate the tables of all ranks (rank order); adds a ``rank`` column. No-op when not distributed."""
    from mmengine import dist

    world = dist.get_world_size()
    rank = dist.get_rank()
    if world == 1:
        for cols in local.values():
            cols['rank'] = torch.zeros_like(cols['sample_idx'])
        return local
    device = next(iter(local.values()))['sample_idx'].device
    layout = [(t, n, c.dtype, tuple(c.shape[1:])) for t, cols in local.items() for n, c in cols.items()]
    lengths = torch.tensor([local[t]['sample_idx'].numel() for t in local], dtype=torch.long, device=device)
    all_lengths = torch.stack(dist.all_gather(lengths)).cpu()  # [world, tables]
    payload = torch.cat([_to_bytes(local[t][n]) for t, n, _, _ in layout]) if layout else \
        torch.zeros(0, dtype=torch.uint8, device=device)
    sizes = [int(_row_bytes(layout, all_lengths[r])) for r in range(world)]
    padded = torch.zeros(max(sizes), dtype=torch.uint8, device=device)
    padded[:payload.numel()] = payload
    buffers = dist.all_gather(padded)
    tables = list(local)
    result: Dict[str, Dict[str, List[Tensor]]] = {t: {} for t in tables}
    for r, buf in enumerate(buffers):
        offset = 0
        for t, n, dtype, shape in layout:
            count = int(all_lengths[r, tables.index(t)])
            width = _elem_bytes(dtype) * _prod(shape)
            chunk = buf[offset:offset + count * width]
            offset += count * width
            result[t].setdefault(n, []).append(_from_bytes(chunk, dtype, (count,) + shape))
        for t in tables:
            count = int(all_lengths[r, tables.index(t)])
            result[t].setdefault('rank', []).append(torch.full((count,), r, dtype=torch.long, device=device))
    del rank
    return {t: OrderedDict((n, torch.cat(parts)) for n, parts in cols.items()) for t, cols in result.items()}


def _prod(shape: Sequence[int]) -> int:
    out = 1
    for s in shape:
        out *= int(s)
    return out


def _elem_bytes(dtype: torch.dtype) -> int:
    return 1 if dtype == torch.bool else torch.empty((), dtype=dtype).element_size()


def _row_bytes(layout, lengths: Tensor) -> int:
    tables = []
    for t, _, _, _ in layout:
        if t not in tables:
            tables.append(t)
    return sum(int(lengths[tables.index(t)]) * _elem_bytes(d) * _prod(s) for t, _, d, s in layout)


def deduplicate(tables: Dict[str, Columns]) -> Dict[str, Columns]:
    """Keep, for each ``sample_idx``, only the rows of its first occurrence (min rank, then min add call)."""
    if not tables:
        return tables
    keys = [(cols['rank'] << 40) + cols['occurrence'].long() for cols in tables.values()]
    idx_all = torch.cat([cols['sample_idx'] for cols in tables.values()])
    if idx_all.numel() == 0:
        return tables
    key_all = torch.cat(keys)
    uniq, inverse = torch.unique(idx_all, return_inverse=True)
    first = torch.full((uniq.numel(),), torch.iinfo(torch.long).max, dtype=torch.long, device=idx_all.device)
    first = first.scatter_reduce(0, inverse, key_all, reduce='amin')
    out = OrderedDict()
    start = 0
    for (table, cols), key in zip(tables.items(), keys):
        n = key.numel()
        kept = (key == first[inverse[start:start + n]]).nonzero().squeeze(1)
        start += n
        # canonical order (by sample_idx, stable within a sample): sums do not depend on the world size
        rows = kept.index_select(0, torch.sort(cols['sample_idx'].index_select(0, kept), stable=True).indices)
        out[table] = OrderedDict((name, col.index_select(0, rows)) for name, col in cols.items())
    return out
