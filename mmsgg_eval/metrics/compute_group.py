"""Work shared between the metrics of one evaluator that compute the same rows (:class:`ComputeGroup`).

``SGRecall`` and ``SGMeanRecall`` of one evaluator rank and match the same samples with the same settings. A
metric whose :meth:`~mmsgg_eval.metrics.base.RowMetric.compute_key` is not None joins the group of metrics with
an EQUAL key (every setting the rows depend on, compared exactly: zero-shot codes by their full contents). The
keys are derived, never hand-listed (:attr:`~mmsgg_eval.metrics.base.RowMetric.shares_work`,
:func:`~mmsgg_eval.metrics.settings.work_key`): every recorded constructor argument but the output-only ones, with
the arguments only the summary reads declared in ``RowMetric.summary_arguments``, plus the row schema and the
dataset facts of ``RowMetric.row_facts()``; a new argument is part of both keys unless declared. Within a group,
a pool's rows are computed once and reused by a member whose pool holds the very same sample objects in the same
order (mmengine's ``Evaluator`` passes one list to all its metrics), and the reduced tables are reused by a member
whose accumulator holds the very same row objects: the second metric adds no ranking and sends no byte across
ranks. A val and a test evaluator never share (their samples are different objects); two metrics with different
settings never share (different keys). Both decisions depend only on what the rank itself was fed, identically
for every member on every rank, so no rank skips a collective that another rank enters.
"""
import weakref
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence, Tuple

from ..functional.overlap import Staged
from .accumulator import RankFingerprint, RowAccumulator, Tables, same_objects


class Deferred:
    """A summary entry computed when the summary is first read (:attr:`RowMetric.last_report
    <mmsgg_eval.metrics.base.RowMetric.last_report>`, report files), not when the keys are: for tables that
    only files and ``metrics.json`` show. Computed once, whichever copy of the summary reads it first."""
    __slots__ = ('_compute', '_value')

    def __init__(self, compute: Callable[[], Any]) -> None:
        self._compute, self._value = compute, None

    def value(self) -> Any:
        if self._compute is not None:
            self._value, self._compute = self._compute(), None
        return self._value


def resolve_deferred(summary: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """``summary`` with its :class:`Deferred` entries replaced by their values (in place)."""
    if summary:
        for name, entry in list(summary.items()):
            if isinstance(entry, Deferred):
                summary[name] = entry.value()
    return summary


class ComputeGroup:
    """Work shared by the live metrics whose :meth:`RowMetric.compute_key` are equal (see the module docs).

    A group holds the rows of its last computed pool (with the pooled sample objects, so their identity is
    safe to compare), its last reduced tables (with the row objects they were reduced from), its last
    summaries and the report files written from them. Groups are found through a registry of weak
    references: a group lives as long as one of its members.

    Epochs: :attr:`epoch` counts the reductions computed by the group. A member records it when its own
    epoch starts (first ``process()``), and pool rows are reused only between members of the same epoch, so
    samples modified in place and fed again after an ``evaluate()`` are always ranked afresh.
    """

    _registry: 'weakref.WeakValueDictionary[Hashable, ComputeGroup]' = weakref.WeakValueDictionary()
    #: every field of a group (nothing else can be set on one, from inside or outside)
    __slots__ = ('key', 'epoch', '_pool', '_weighed', '_reduced', '_summaries', '_written', '_bootstrap', '_per_image',
                 '__weakref__')

    def __init__(self, key: Hashable) -> None:
        self.key = key  # the members' compute key
        self.epoch = 0  # reductions computed so far
        self._pool: Optional[Tuple[int, List[Any], Dict[str, Any]]] = None  # (epoch, samples, rows) of the last pool
        self._weighed: Optional[Tuple[List[Any], int]] = None  # the last samples weighed and their weight
        self._reduced: Optional[Tuple[List[object], Optional[int], Tables]] = None  # (row objects, size, tables)
        self._summaries: List[Tuple[Hashable, Any, Dict[str, Any]]] = []  # (summary key, dataset_meta, summary)
        self._written: Dict[Tuple[str, ...], Tuple[Dict[str, Any], Dict[str, str]]] = {}  # report files
        self._bootstrap: Optional[Tuple[Hashable, Tables, Dict[str, Any]]] = None  # (key, tables, intervals)
        self._per_image: Optional[Tuple[Any, ...]] = None  # (path, tables id, content) of the per-image file

    @classmethod
    def join(cls, key: Hashable) -> 'ComputeGroup':
        group = cls._registry.get(key)
        if group is None:
            group = cls(key)
            cls._registry[key] = group
        return group

    def rows(self, samples: List[Any], compute: Callable[[List[Any]], Any], epoch: Optional[int],
             staged: bool = False) -> Any:
        """The rows of ``samples``: reused when the last pool of the same epoch held the very same objects in
        the same order, else computed. ``staged``: ``compute`` gives them in two stages (a
        :class:`~mmsgg_eval.functional.overlap.Staged`, what is returned then; rows found already are one)."""
        if self._pool is not None and self._pool[0] == epoch and same_objects(self._pool[1], samples):
            found = self._pool[2]
        else:
            found = compute(samples)
            self._pool = (epoch, samples, found)
        if staged:
            return found if isinstance(found, Staged) else Staged.done(found)
        return found.result() if isinstance(found, Staged) else found

    def weight(self, samples: Sequence[Any], weigh: Callable[[Sequence[Any]], int]) -> int:
        """``weigh(samples)``, reused when the last samples weighed were the very same objects in the same order
        (an evaluator hands the same samples to each of its metrics: the members weigh them once)."""
        last = self._weighed
        if last is not None and same_objects(last[0], samples):
            return last[1]
        weight = weigh(samples)
        self._weighed = (list(samples), weight)
        return weight

    def reduce(self, accumulator: RowAccumulator, size: Optional[int], owner: str,
               fingerprint: Optional[Callable[[], RankFingerprint]] = None) -> Tables:
        """Reduced tables of ``accumulator`` (resetting it): reused when the last reduction was of the very
        same row objects, else one collective (checking ``fingerprint()`` across ranks)."""
        sources = accumulator.sources
        last = self._reduced
        if last is not None and last[0] and last[1] == size and accumulator.holds_same_rows(last[0]):
            accumulator.reset()
            return last[2]
        tables = accumulator.reduce_to_cpu(size, owner, None if fingerprint is None else fingerprint())
        self._reduced = (sources, size, tables)
        self._summaries, self._written, self._bootstrap, self._per_image = [], {}, None, None
        self.epoch += 1
        return tables

    def summary(self, tables: Tables, settings: Hashable, meta: Any,
                compute: Callable[[Tables], Dict[str, Any]]) -> Dict[str, Any]:
        """``compute(tables)``, reused for the same reduced tables, equal summary settings and the same
        ``dataset_meta`` object (a copy of the summary dict is returned)."""
        if self._reduced is not None and tables is self._reduced[2]:
            for key, cached_meta, summary in self._summaries:
                if key == settings and cached_meta is meta:
                    return dict(summary)
            summary = compute(tables)
            self._summaries.append((settings, meta, dict(summary)))
            return summary
        return compute(tables)

    def written_reports(self, target: Tuple[str, ...], summary: Dict[str, Any]) -> Optional[Dict[str, str]]:
        """Paths of report files already written to ``target`` from an equal summary, or None."""
        done = self._written.get(target)
        if done is not None and done[0] == summary:
            return done[1]
        return None

    def record_reports(self, target: Tuple[str, ...], summary: Dict[str, Any], paths: Dict[str, str]) -> None:
        self._written.setdefault(target, (summary, paths))

    def bootstrap_result(self, key: Hashable, tables: Tables) -> Optional[Dict[str, Any]]:
        """The intervals a member computed from these very ``tables`` with an equal ``key``, or None."""
        done = self._bootstrap
        return done[2] if done is not None and done[0] == key and done[1] is tables else None

    def record_bootstrap(self, key: Hashable, tables: Tables, result: Dict[str, Any]) -> None:
        self._bootstrap = (key, tables, result)

    def per_image_written(self, done: Tuple[Any, ...]) -> bool:
        """Whether a member wrote the per-image file ``done`` = (path, id of the tables, content) already."""
        return self._per_image == done

    def record_per_image(self, done: Tuple[Any, ...]) -> None:
        self._per_image = done

