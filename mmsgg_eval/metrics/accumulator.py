"""Per-sample row tables, reduced across ranks once, with sampler-padding de-duplication.

Metrics (:class:`~mmsgg_eval.metrics.base.RowMetric`) declare tables of small per-sample rows (e.g. one row
per image, one row per GT relation holding its first-hit ranks), append rows in ``process()`` on the samples'
device, and call :meth:`reduce` once in ``evaluate()``. Every row carries the ``sample_idx`` of the sample it belongs to. MMEngine's
``DefaultSampler`` pads the last round with repeated samples, so one ``sample_idx`` can be processed on
several ranks (or twice on one): :meth:`reduce` keeps, for each ``sample_idx``, only the rows of its first
occurrence (lowest rank, then earliest ``add`` call). What crosses ranks is one length exchange and one
byte buffer per rank: its size depends on the number of samples and GT rows, never on predictions.

The length exchange also carries a fingerprint of what the rows depend on (:class:`RankFingerprint`: one
64-bit digest per component - metric and settings, protocol and conventions, ``dataset_meta``, row
schema). Ranks whose metrics were built differently (another ``topk``, another predicate list) would
otherwise reduce each other's rows without a word; every rank then raises the same
:class:`RankMismatchError` naming the component, the values and the ranks, before any byte of rows is read.
"""
import hashlib
import json
import logging
from collections import OrderedDict
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..functional.limits import AUTO_SAMPLE_ID_BASE

#: The row tables of a metric (``{table: {column: (dtype, trailing shape)}}``) and their values.
Schema = Dict[str, Dict[str, Tuple[torch.dtype, Tuple[int, ...]]]]
Tables = Dict[str, Dict[str, Tensor]]

Columns = Dict[str, Tensor]


class RankMismatchError(ValueError):
    """Ranks whose rows depend on different settings, protocols, ``dataset_meta`` or row schemas (raised
    identically on every rank; the message names the difference and the ranks)."""


def _digest(value: Any) -> int:
    """A 63-bit digest of a JSON-ready value (keys sorted; anything else by ``str``)."""
    text = json.dumps(value, sort_keys=True, default=str, allow_nan=True)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], 'little') & ((1 << 63) - 1)


class RankFingerprint:
    """What a metric's rows depend on, by component, as sent with the length exchange of
    :meth:`RowAccumulator.reduce`.

    Args:
        owner: the metric, as messages name it.
        describe: returns ``{component: JSON-ready value}`` (e.g. ``settings``, ``protocol``,
            ``dataset_meta``, ``row tables``); called once per reduce, and its values are exchanged whole only
            when the digests differ (to name the difference).
    """

    def __init__(self, owner: str, describe: Callable[[], Dict[str, Any]]) -> None:
        self.owner = owner
        self.components = describe()
        self.words = [_digest(v) for v in self.components.values()]

    def check(self, gathered: Tensor, world: int) -> None:
        """Raise :class:`RankMismatchError` when the fingerprints ``gathered`` [world, components] differ (the
        same decision on every rank: every rank holds the same gathered tensor)."""
        if bool((gathered == gathered[0]).all()):
            return
        from mmengine import dist
        everyone = dist.all_gather_object(self.components)  # the error path only: name the difference
        groups: Dict[Tuple[int, ...], List[int]] = {}
        for r in range(world):
            groups.setdefault(tuple(gathered[r].tolist()), []).append(r)
        ranks = list(groups.values())
        first = ranks[0][0]
        lines = []
        for others in ranks[1:]:
            other = others[0]
            diff = components_difference(everyone[first], everyone[other], f'rank {first}', f'rank {other}')
            lines.append(f'{diff} (ranks {_ranks(ranks[0])} vs ranks {_ranks(others)})')
        raise RankMismatchError(f'{self.owner}: the ranks were given metrics built differently and their rows '
                                f'cannot be reduced together: ' + '; '.join(lines) + '; every rank must build '
                                f'its metrics from the same config and dataset_meta')


def _ranks(ranks: Sequence[int]) -> str:
    return ', '.join(str(r) for r in ranks)


def components_difference(a: Dict[str, Any], b: Dict[str, Any], name_a: str, name_b: str) -> str:
    """A sentence naming the components of two descriptions that differ (for dict components: the keys that
    differ with both values; for ``dataset_meta``: the entries, by length when they have one)."""
    out = []
    for what in [k for k in a if k in b] + [k for k in b if k not in a] + [k for k in a if k not in b]:
        va, vb = a.get(what), b.get(what)
        if _digest(va) == _digest(vb):
            continue
        if isinstance(va, dict) and isinstance(vb, dict):
            keys = sorted(k for k in set(va) | set(vb)
                          if _digest(va.get(k, _ABSENT_TEXT)) != _digest(vb.get(k, _ABSENT_TEXT)))
            if what == 'dataset_meta':
                detail = ', '.join(f'{k}: {_size(va.get(k))} on {name_a} vs {_size(vb.get(k))} on {name_b}'
                                   for k in keys)
            else:
                detail = '; '.join(f'{k}: {_shown(va.get(k, _ABSENT_TEXT))} on {name_a} vs '
                                   f'{_shown(vb.get(k, _ABSENT_TEXT))} on {name_b}' for k in keys)
            out.append(f'different {what} ({detail})')
        else:
            out.append(f'different {what} ({_shown(va)} on {name_a} vs {_shown(vb)} on {name_b})')
    return '; '.join(out) or 'different fingerprints'


_ABSENT_TEXT = '<not given>'


def _shown(value: Any) -> str:
    text = value if value == _ABSENT_TEXT else repr(value)
    return text if len(text) <= 120 else text[:117] + '...'


def _size(value: Any) -> str:
    """A ``dataset_meta`` entry in a message: its length when it has one (``4 entries``), else its value."""
    if value is None:
        return 'absent'
    if isinstance(value, (list, tuple, dict)):
        return f'{len(value)} entries'
    return _shown(value)


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

    def reduce_to_cpu(self, size: Optional[int], owner: str,
                      fingerprint: Optional[RankFingerprint] = None) -> Dict[str, Columns]:
        """:meth:`reduce` (checking ``fingerprint`` across ranks), then :meth:`reset`; tables on the CPU. Warns
        when the number of distinct samples differs from ``size`` (the dataset length given to ``evaluate``)."""
        tables = self.reduce(fingerprint)
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
                if type(columns) is dict:  # cast once: a compute group's members add the very same row dicts
                    columns[name] = chunk[name]
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
        """Bytes this rank sends at :meth:`reduce` (row payload plus the length exchange: table count and
        lengths; with several ranks also the fingerprint digests, :class:`RankFingerprint`)."""
        total = 8 * (1 + max(LENGTH_SLOTS, len(self.schema)))
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

    def reduce(self, fingerprint: Optional[RankFingerprint] = None) -> Dict[str, Columns]:
        """Gather every rank's rows (one collective of lengths and fingerprints, one of bytes) and de-duplicate.

        Returns the same tables on every rank, rows sorted by ``sample_idx`` (stable within a sample), with
        exactly one occurrence of each ``sample_idx``: results are bit-identical for any world size. Ranks
        whose ``fingerprint`` differs raise :class:`RankMismatchError` (all of them, before the rows travel).
        """
        local = self.local()
        gathered = all_gather_tables(local, fingerprint)
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


#: Entries of the first exchange kept for table lengths (more only for a schema of more tables, equal on
#: every rank then): its size does not depend on the schema, so ranks of different schemas still meet.
LENGTH_SLOTS = 16


def all_gather_tables(local: Dict[str, Columns], fingerprint: Optional[RankFingerprint] = None
                      ) -> Dict[str, Columns]:
    """Concatenate the tables of all ranks (rank order); adds a ``rank`` column. No-op when not distributed.

    The first collective carries, per rank, ``fingerprint``'s digests, the number of tables and the table
    lengths; differing fingerprints raise :class:`RankMismatchError` on every rank."""
    from mmengine import dist

    world = dist.get_world_size()
    rank = dist.get_rank()
    if world == 1:
        for cols in local.values():
            cols['rank'] = torch.zeros_like(cols['sample_idx'])
        return local
    device = next(iter(local.values()))['sample_idx'].device
    layout = [(t, n, c.dtype, tuple(c.shape[1:])) for t, cols in local.items() for n, c in cols.items()]
    words = list(fingerprint.words) if fingerprint is not None else []
    counts = [local[t]['sample_idx'].numel() for t in local]
    slots = max(LENGTH_SLOTS, len(counts))
    header = torch.tensor(words + [len(counts)] + counts + [0] * (slots - len(counts)), dtype=torch.long,
                          device=device)
    gathered = torch.stack(dist.all_gather(header)).cpu()  # [world, words + 1 + slots]
    if fingerprint is not None:
        fingerprint.check(gathered[:, :len(words)], world)
    if bool((gathered[:, len(words)] != len(counts)).any()):  # without a fingerprint: tables of another schema
        raise RankMismatchError(f'ranks hold different numbers of row tables ({gathered[:, len(words)].tolist()} '
                                f'by rank): their metrics were built differently')
    all_lengths = gathered[:, len(words) + 1:len(words) + 1 + len(counts)]  # [world, tables]
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
    """Keep, for each ``sample_idx``, only the rows of its first occurrence (min rank, then min add call), in
    the canonical order: by ``sample_idx``, stable within a sample (sums then do not depend on the world size).
    A table already in that order with nothing to drop (one process fed each sample once, in order) is
    returned as it is."""
    if not tables:
        return tables
    keys = [(cols['rank'] << 40) + cols['occurrence'].long() for cols in tables.values()]
    idx_all = torch.cat([cols['sample_idx'] for cols in tables.values()])
    if idx_all.numel() == 0:
        return tables
    first, slot = _first_keys(idx_all, torch.cat(keys))
    out = OrderedDict()
    start = 0
    for (table, cols), key in zip(tables.items(), keys):
        n = key.numel()
        keep = key == first.index_select(0, slot[start:start + n])
        start += n
        idx = cols['sample_idx']
        if bool(keep.all()) and bool((idx[1:] >= idx[:-1]).all()):
            out[table] = cols
            continue
        kept = keep.nonzero().squeeze(1)
        rows = kept.index_select(0, torch.sort(idx.index_select(0, kept), stable=True).indices)
        out[table] = OrderedDict((name, col.index_select(0, rows)) for name, col in cols.items())
    return out


def _first_keys(idx: Tensor, key: Tensor) -> Tuple[Tensor, Tensor]:
    """``(first, slot)``: the least ``key`` of each ``sample_idx`` (``first[slot[i]]`` is that of row i's). Indexed
    by the ``sample_idx`` itself when the indices are small and non-negative (no sort), else by their rank among
    the distinct ones."""
    low, high = int(idx.min()), int(idx.max())
    if low >= 0 and high < 4 * idx.numel() + 4096:
        slot, size = idx, high + 1
    else:
        uniq, slot = torch.unique(idx, return_inverse=True)
        size = uniq.numel()
    first = torch.full((size,), torch.iinfo(torch.long).max, dtype=torch.long, device=idx.device)
    return first.scatter_reduce(0, slot, key, reduce='amin'), slot
