"""One base for every mmsgg_eval metric: pooled ``process()``, per-sample row tables, ONE cross-rank reduce,
and one epoch-end sequence.

A metric built on :class:`RowMetric` declares three things and nothing else:

* :meth:`~RowMetric.row_schema`: its tables of small per-sample rows (``{table: {column: (dtype, shape)}}``);
* :meth:`~RowMetric.compute_rows`: how a pool of data samples becomes rows (validation, ranking, matching);
* :meth:`~RowMetric.summarize`: how the reduced, de-duplicated tables become a summary whose ``'metrics'``
  hold every key (and optionally :meth:`~RowMetric.select_keys`, :meth:`~RowMetric.format_report`,
  :meth:`~RowMetric.write_outfile`, :meth:`~RowMetric.write_reports`, :meth:`~RowMetric.extra_results`).

Everything else is here, once:

* ``process()`` pools samples across calls (``pool_samples``; 1 = every call on its own) and turns each pool
  into rows held by a :class:`~mmsgg_eval.metrics.accumulator.RowAccumulator` (no prediction is kept);
* ``evaluate(size)`` runs: flush the last pool -> reduce the rows of all ranks once (one length exchange,
  which also compares what the rows depend on across ranks: :meth:`RowMetric.rank_fingerprint`; one byte
  buffer) and drop sampler padding by ``sample_idx`` -> summarise -> log the report -> write the
  files (``outfile_prefix``, ``report_dir``) on the MAIN RANK only, once. The numbers are logged before any
  file is written; a file that cannot be written is reported as an error and does not stop the evaluation
  (the other metrics of the evaluator still run). Output directories are checked for writability at the
  first ``process()`` of an epoch, so a bad path fails before the model has run over the dataset;
* ``evaluate()`` called again without new samples returns the previous result (with a warning);
* what reaches the runner is scalars only (``{prefix}/{key}: float``); tables (the per-predicate recalls)
  are in the logged report, the report files and :meth:`RowMetric.extra_results`, which
  :func:`extra_results_of` gathers for ``metrics.json``.

Relation to MMEngine's ``BaseMetric``. ``BaseMetric.evaluate`` gathers ``self.results`` (a list of
arbitrary per-sample objects) with ``collect_results``, calls ``compute_metrics(results)`` on rank 0 and
broadcasts the keys. Here the per-sample state is a set of typed row tables gathered with one all-gather on
every rank (so every rank computes the same keys and no broadcast is needed); ``self.results`` stays empty.
``compute_metrics`` keeps its meaning - collected results in, unprefixed keys out - with the reduced tables
as its input. ``collect_device`` is accepted for config compatibility; the rows travel on the device of the
samples. Definitions and conventions of the keys: ``docs/metrics.md``.

Sharing work between metrics of equal settings: :class:`~mmsgg_eval.metrics.compute_group.ComputeGroup`.
Output file names (no metric of a run overwrites another's files): :class:`~mmsgg_eval.metrics.file_claims.FileClaims`.
"""
import logging
import os
import warnings
from abc import abstractmethod
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence, Tuple

from mmengine.evaluator import BaseMetric
from torch import Tensor

from ..functional.overlap import Staged, beside_background, overlap_wanted
from ..functional.threads import compute_threads
from ..reports import check_writable
from ..user_messages import warn_user
from .accumulator import RankFingerprint, RowAccumulator, Schema, Tables
from .compute_group import ComputeGroup, resolve_deferred
from .file_claims import FileClaims, file_stem_candidates, split_ending
from .options import with_base_options
from .state import save_state
from .bootstrap import add_intervals, format_intervals
from .samples import first_occurrences


def ensure_writable_dir(path: str, owner: str, argument: str) -> None:
    """Create ``path`` if needed and check that files can be written in it; raise ``OSError`` naming the
    metric, the argument and the path otherwise (:func:`mmsgg_eval.reports.check_writable`)."""
    check_writable(path, f'{owner}: {argument} directory')


class RowMetric(BaseMetric):
    """Base of the mmsgg_eval metrics (see the module docstring for the life cycle).

    Args:
        outfile_prefix: when set, :meth:`write_outfile` writes ``{outfile_prefix}.{prefix}[.{file_tag}].json``
            (main rank only).
        report_dir: when set, :meth:`write_reports` writes the report files there (main rank only;
            ``tools/test.py`` sets it to the work dir).
        pool_samples: samples pooled across ``process()`` calls before they become rows (1 = each call on
            its own). Results never depend on it.
        collect_device: accepted for MMEngine config compatibility (rows travel on the samples' device).
        prefix: key prefix (default :attr:`default_prefix`).
    """

    #: distinguishes the ``outfile_prefix`` files of metrics sharing a prefix (e.g. 'recall', 'mean_recall')
    file_tag: Optional[str] = None
    #: where the per-image results go (metrics that write them set it) and the sample names noted for them
    per_image_out: Optional[str] = None
    _image_names: Any = None
    #: path of the evaluation state written at ``evaluate()`` (main rank; ``save_state=PATH`` of every
    #: constructor, :mod:`mmsgg_eval.metrics.state`), and the GT hash it records (set by the tools)
    save_state: Optional[str] = None
    state_gt_hash: Optional[str] = None
    #: ``bootstrap=`` of every constructor (:func:`~mmsgg_eval.metrics.bootstrap.bootstrap_options`): percentile
    #: intervals of every key from image resamples, added to the summary after the reduce; None = off
    bootstrap: Optional[Dict[str, Any]] = None
    #: :meth:`compute_rows` itself counts a ``sample_idx`` repeated within a pool once (so :meth:`flush` need not
    #: look for repeats first, once per member of a compute group)
    compute_rows_dedupes = False
    #: metrics with equal :meth:`compute_key` share rows, reductions and summaries (:class:`ComputeGroup`)
    shares_work = False
    #: constructor arguments that only the summary reads (never the rows): left out of :meth:`compute_key`, part
    #: of :meth:`summary_key`. Every other argument is part of both unless it is output-only
    #: (:data:`~mmsgg_eval.metrics.settings.NOT_IN_WORK_KEYS`), so a new argument can never make two metrics share a
    #: wrong summary.
    summary_arguments: Tuple[str, ...] = ()
    #: :meth:`start_rows` gives the rows of a pool in two stages, the compiled pass in the background (see flush)
    overlaps_pools = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every constructor records its arguments and takes the keywords of
        :data:`~mmsgg_eval.metrics.options.BASE_OPTIONS` (``save_state``, ``bootstrap``):
        :func:`~mmsgg_eval.metrics.options.with_base_options`."""
        super().__init_subclass__(**kwargs)
        if '__init__' in cls.__dict__:
            cls.__init__ = with_base_options(cls.__dict__['__init__'])

    def __init__(self, outfile_prefix: Optional[str] = None, report_dir: Optional[str] = None,
                 pool_samples: int = 1, collect_device: str = 'cpu', prefix: Optional[str] = None) -> None:
        from .options import positive_int
        pool_samples = positive_int(pool_samples, 'pool_samples', type(self).__name__)
        super().__init__(collect_device=collect_device, prefix=prefix)
        self.outfile_prefix = outfile_prefix
        self.report_dir = report_dir
        self.pool_samples = int(pool_samples)
        self._pending: List[Any] = []
        self._pending_rows = 0
        self._in_flight: Optional[Staged] = None  # the pool whose rows are being computed (overlaps_pools)
        self._accumulator: Optional[RowAccumulator] = None
        self._group: Optional[ComputeGroup] = None
        self._group_epoch: Optional[int] = None  # the group's epoch when this metric's epoch started
        self._epoch_open = False  # a process() call since the last evaluate()
        self._last_metrics: Optional[Dict[str, float]] = None
        self._outfile_stem: Optional[str] = None  # claimed name of the outfile_prefix file (FileClaims)
        self._renamed: Dict[str, str] = {}  # argument -> the other path its file went to (warned once)
        self._last_report: Optional[Dict[str, Any]] = None

    @property
    def last_report(self) -> Optional[Dict[str, Any]]:
        """The whole summary of the last evaluation (None before one), its deferred tables computed."""
        return resolve_deferred(self._last_report)

    # ------------------------------------------------------------------ what a metric declares
    @abstractmethod
    def row_schema(self) -> Schema:
        """``{table: {column: (dtype, trailing shape)}}`` of the per-sample rows (``sample_idx`` implied)."""

    @abstractmethod
    def compute_rows(self, samples: List[Any]) -> Dict[str, Dict[str, Tensor]]:
        """Rows of a pool of data samples: ``{table: {'sample_idx': [n], column: [n, ...]}}``."""

    def start_rows(self, samples: List[Any]) -> Staged:
        """:meth:`compute_rows` with its first stage done and its compiled pass left running (``overlaps_pools``)."""
        raise NotImplementedError

    @abstractmethod
    def summarize(self, tables: Tables) -> Dict[str, Any]:
        """Summary of the reduced, de-duplicated tables: ``{'metrics': {key: float}, ...}``."""

    def select_keys(self, summary: Dict[str, Any]) -> Dict[str, float]:
        """The keys this metric returns (unprefixed); default every key of ``summary['metrics']``."""
        return dict(summary['metrics'])

    def format_report(self, summary: Dict[str, Any], keys: Dict[str, float]) -> str:
        """Text block logged at the end of ``evaluate()``."""
        return f'{type(self).__name__}: ' + '  '.join(f'{k}: {v:.4f}' for k, v in keys.items())

    def write_outfile(self, summary: Dict[str, Any], keys: Dict[str, float], tables: Tables) -> str:
        """Write the ``outfile_prefix`` file; default: the keys and the summary. Returns the path."""
        from ..reports import dump_metric_json, json_safe
        payload = {'keys': keys}
        payload.update({k: v for k, v in summary.items() if k not in ('metrics', 'text', 'report_files')})
        return dump_metric_json(self.outfile_prefix, self.file_stem(), json_safe(payload, nan_as_null=False))

    def write_reports(self, summary: Dict[str, Any], keys: Dict[str, float], stem: str) -> Dict[str, str]:
        """Write the report files into ``report_dir``; default ``{stem}.metrics.json`` (the summary)."""
        from ..reports import write_summary_json
        return {'json': write_summary_json(summary, self.report_dir, stem)}

    def extra_results(self) -> Dict[str, Any]:
        """Non-scalar results of the last ``evaluate()`` for ``metrics.json`` (prefixed keys), default none."""
        return {}

    def compute_key(self) -> Optional[Hashable]:
        """Exact key of everything :meth:`compute_rows` depends on, to share rows with equal metrics (see
        :class:`ComputeGroup`): derived when :attr:`shares_work` (:func:`~mmsgg_eval.metrics.settings.work_key`:
        the constructor arguments but the output-only and :attr:`summary_arguments` ones, the row schema and
        :meth:`row_facts`); None (default) = share nothing."""
        return self._work_key('rows') if self.shares_work else None

    def summary_key(self) -> Optional[Hashable]:
        """Exact key of the settings :meth:`summarize` depends on besides the tables and ``dataset_meta``: the
        compute key plus the :attr:`summary_arguments` (derived, as :meth:`compute_key`); None (default) = never
        reuse another member's summary."""
        return self._work_key('summary') if self.shares_work else None

    def _work_key(self, part: str) -> Optional[Hashable]:
        """:func:`~mmsgg_eval.metrics.settings.work_key` of ``part``, computed once per :meth:`evaluate` (nothing it
        reads changes during one: the arguments, ``dataset_meta``); outside evaluate() each call computes it."""
        from .settings import work_key
        memo = self.__dict__.get('_evaluate_keys')
        if memo is not None and part not in memo:
            memo[part] = work_key(self, part, rows=self._work_key('rows') if part == 'summary' else None)
        return work_key(self, part) if memo is None else memo[part]

    def row_facts(self) -> Tuple[Tuple[str, Any], ...]:
        """``(name, value)`` of what the rows depend on besides the constructor arguments: dataset facts
        (class and predicate names, zero-shot codes by content, ...) and values derived from a summary argument
        (e.g. the largest K); part of :meth:`compute_key`. Default none."""
        return ()

    def rank_fingerprint(self) -> Optional[RankFingerprint]:
        """What this rank's rows depend on (:func:`~mmsgg_eval.metrics.state.rows_description`), sent with the
        length exchange of the reduce: ranks whose metrics differ raise the same
        :class:`~mmsgg_eval.metrics.accumulator.RankMismatchError` (None when not distributed: nothing to
        compare with)."""
        from mmengine.dist import get_world_size
        if get_world_size() == 1:
            return None
        from .state import rows_description
        return RankFingerprint(f'{self.name} ({self.prefix})', lambda: rows_description(self))

    def pool_weight(self, samples: Sequence[Any]) -> int:
        """Memory weight of samples (e.g. predicted pairs); a pool is also flushed at :meth:`pool_capacity`."""
        return 0

    def pool_capacity(self) -> Optional[int]:
        """Weight at which a pool is flushed whatever its length (None = no limit)."""
        return None

    # ------------------------------------------------------------------ machinery
    @property
    def accumulator(self) -> RowAccumulator:
        """The row tables of this rank (built from :meth:`row_schema` on first use)."""
        if self._accumulator is None:
            self._accumulator = RowAccumulator(self.row_schema())
        return self._accumulator

    @property
    def name(self) -> str:
        return type(self).__name__

    def _meta(self, key: str, default: Any = None) -> Any:
        return (self.dataset_meta or {}).get(key, default)

    def file_stem(self) -> str:
        """``{prefix}`` or ``{prefix}.{file_tag}``: the name part of this metric's ``outfile_prefix`` file
        (with a number appended when another metric of the run already writes that name)."""
        if self._outfile_stem is not None:
            return self._outfile_stem
        return self.tagged_stem()

    def tagged_stem(self) -> str:
        """``{prefix}.{file_tag}`` (``{prefix}`` for a metric without a tag)."""
        return f'{self.prefix}.{self.file_tag}' if self.file_tag else str(self.prefix)

    def report_stem(self) -> str:
        """The ``report_dir`` file stem this metric asks for first (default ``{prefix}``; see :class:`FileClaims`)."""
        return str(self.prefix)

    def before_epoch(self) -> None:
        """Checks run at the first ``process()`` of an epoch: the output locations (:meth:`check_outputs`,
        main rank). Subclasses add theirs (e.g. ``dataset_meta``)."""
        from mmengine.dist import is_main_process
        if is_main_process():
            self.check_outputs()

    #: the arguments naming a file path: checked, and their names claimed (:class:`FileClaims`), before any work
    path_outputs: Tuple[str, ...] = ('per_image_out', 'save_state')

    def check_outputs(self) -> None:
        """Every location this metric writes is checked before any work (``OSError`` naming the metric, the
        argument and the path) and its file names are claimed (:meth:`output_path`): ``outfile_prefix``,
        ``report_dir``, ``per_image_out`` and ``save_state`` (a file path: an existing directory is refused)."""
        from ..reports import OutputNotWritableError
        if self.outfile_prefix:
            ensure_writable_dir(os.path.dirname(os.path.abspath(str(self.outfile_prefix))), self.name,
                                'outfile_prefix')
        if self.report_dir:
            ensure_writable_dir(str(self.report_dir), self.name, 'report_dir')
        for argument in self.path_outputs:
            value = getattr(self, argument, None)
            if not value:
                continue
            path = os.path.abspath(str(value))
            if os.path.isdir(path):
                raise OutputNotWritableError(f'{self.name}: {argument} {path} is a directory; it names the file '
                                             f'written there, so nothing was evaluated (give a file path)')
            ensure_writable_dir(os.path.dirname(path), self.name, argument)
            self.output_path(argument)

    def output_content(self, argument: str) -> Optional[Hashable]:
        """Exact key of the contents of the file of ``argument`` (``per_image_out``), when another metric may
        write the very same file (:class:`FileClaims`); None (default) = this metric's own file."""
        return None

    def output_path(self, argument: str) -> str:
        """The path this metric writes the file of ``argument`` (``per_image_out`` or ``save_state``) to: the
        path given, unless another live metric of the run claimed it for other contents; then
        ``{stem}.{prefix}[.{tag}]{ending}`` (numbered when needed), with a warning. Nothing is overwritten."""
        given = os.path.abspath(str(getattr(self, argument)))
        directory, name = os.path.split(given)
        stem, ending = split_ending(name)
        taken = FileClaims.claim('file', directory, file_stem_candidates(stem, f'{stem}.{self.tagged_stem()}'),
                                 self, self.output_content(argument))
        path = os.path.join(directory, taken + ending)
        if taken != stem and self._renamed.get(argument) != path:
            self._renamed[argument] = path
            warn_user(f'{self.name} ({self.prefix}): another metric of this run writes other contents to '
                      f'{argument}={given}; this metric writes {path} instead (nothing is overwritten)')
        return path

    def process(self, data_batch: Any, data_samples: Sequence[Any]) -> None:
        """Pool the samples; every ``pool_samples`` samples (or :meth:`pool_capacity` weight) turn them into
        rows. Pooled samples are referenced, not copied: do not modify them in place after ``process()``. With
        ``per_image_out`` set, the samples' ``img_id`` / ``img_path`` are first noted in ``_image_names`` (a
        :class:`~mmsgg_eval.metrics.per_image.ImageNames`, for the per-image file)."""
        if self.per_image_out and self._image_names is not None:
            self._image_names.note(data_samples)
        if not self._epoch_open:
            self.before_epoch()
            group = self._compute_group()
            self._group_epoch = None if group is None else group.epoch
            self._epoch_open = True
        self._pending.extend(data_samples)
        group = self._group if self._group is not None and self._epoch_open else None
        self._pending_rows += group.weight(data_samples, self.pool_weight) if group is not None else \
            self.pool_weight(data_samples)
        capacity = self.pool_capacity()
        if len(self._pending) >= self.pool_samples or (capacity is not None and self._pending_rows >= capacity):
            self.flush(overlap=True)

    def flush(self, overlap: bool = False) -> None:
        """Turn the pooled samples into rows now (shared with the compute group when it has them). A
        ``sample_idx`` repeated within the pool counts once, its first occurrence, as across pools and ranks
        (:class:`~mmsgg_eval.metrics.accumulator.RowAccumulator`): one rule for every metric. With two or more
        compute threads, a metric that ``overlaps_pools`` starts this pool's compiled pass in the background and
        meanwhile finishes the previous pool's rows, its own torch operations on one thread in both, and in
        joining the pass when the rows are wanted now (:func:`~mmsgg_eval.functional.overlap.beside_background`);
        with ``overlap`` (a pool filled in ``process()``) this pool's rows are left to the next flush
        (``evaluate()``'s included), else finished now.
        A value error the pass reads (relation scores, predicted pair indices) of a pool left in flight is raised
        by that next flush."""
        samples, self._pending, self._pending_rows = self._pending, [], 0
        if samples and not self.compute_rows_dedupes:
            samples = first_occurrences(samples)
        # the group chosen when the epoch opened, as process() weighs with it (its key walks every constructor
        # argument: once per epoch, not once per pool)
        group = self._group if self._epoch_open and self._group is not None else self._compute_group()
        grouped = group is not None and self._epoch_open
        with compute_threads():  # the thread policy of functional.threads (fewer threads on a busy machine)
            previous, started = self._in_flight, None
            overlapping = bool(samples) and self.overlaps_pools and overlap_wanted()
            with beside_background(overlapping or previous is not None):  # the caller on one thread: see the doc
                if overlapping:
                    started = group.rows(samples, self.start_rows, self._group_epoch, staged=True) if grouped \
                        else self.start_rows(samples)
                self._in_flight = started if started is not None and started.in_background else None
                if previous is not None:
                    self.accumulator.add(previous.result())
                if self._in_flight is not None and not overlap:  # its pass beside the caller, joined now
                    self._in_flight, samples = None, None
                    self.accumulator.add(started.result())
            if samples and (self._in_flight is None or not overlap):
                self._in_flight = None
                rows = started.result() if started is not None else \
                    group.rows(samples, self.compute_rows, self._group_epoch) if grouped else self.compute_rows(samples)
                self.accumulator.add(rows)

    def _compute_group(self) -> Optional[ComputeGroup]:
        key = self.compute_key()
        if key is None:
            self._group = None
        elif self._group is None or self._group.key != key:
            self._group = ComputeGroup.join(key)
        return self._group

    def summarize_for_keys(self, tables: Tables) -> Dict[str, Any]:
        """The summary :meth:`evaluate` keeps (:attr:`last_report`): :meth:`summarize`'s, where a metric may defer
        a table that only files and ``metrics.json`` show (:class:`~.compute_group.Deferred`)."""
        return self.summarize(tables)

    def compute_metrics(self, results: Tables) -> Dict[str, float]:
        """MMEngine's hook, fed the reduced row tables (instead of a list of per-sample results): the
        unprefixed keys this metric returns; the whole summary is kept in :attr:`last_report`."""
        group = self._group
        settings = self.summary_key()
        if group is not None and settings is not None:
            summary = group.summary(results, settings, self.dataset_meta, self.summarize_for_keys)
        else:
            summary = self.summarize_for_keys(results)
        self._last_report = summary
        return self.select_keys(summary)

    def evaluate(self, size: int) -> Dict[str, float]:
        """Flush -> reduce once -> summarise -> log -> write files (main rank); returns scalar keys."""
        if not self._epoch_open and self._last_metrics is not None:
            warn_user(f'{self.name}: evaluate() called again without new samples since the last call; returning '
                  f'the previous result')
            return dict(self._last_metrics)
        self._evaluate_keys: Optional[Dict[str, Hashable]] = {}  # the work keys, computed once (_work_key)
        try:
            return self._evaluate(size)
        finally:
            self._evaluate_keys = None

    def _evaluate(self, size: int) -> Dict[str, float]:
        self.flush()
        self._compute_group()
        # the reduce and the summary: many short ops, on one thread where the pools run their pass beside the caller
        with compute_threads(), beside_background(self.overlaps_pools and overlap_wanted()):
            if self._group is not None:
                tables = self._group.reduce(self.accumulator, size, self.name, self.rank_fingerprint)
            else:
                tables = self.accumulator.reduce_to_cpu(size, self.name, self.rank_fingerprint())
            keys = self.compute_metrics(tables)
        summary = self._last_report  # its deferred tables are computed for the files that show them
        metrics = {f'{self.prefix}/{k}': v for k, v in keys.items()}
        self._epoch_open = False
        self._last_metrics = dict(metrics)
        from ..reports import log_block
        if self.bootstrap:  # intervals of every key (the scalars returned stay as they are)
            add_intervals(self, tables, summary)
        report = self.format_report(summary, keys)
        summary['text'] = '\n'.join(filter(None, (report, format_intervals(summary, keys))))
        log_block(summary['text'])  # the numbers are in the log before any file is written
        from mmengine.dist import is_main_process
        if is_main_process():
            self._write_files(summary, keys, tables)
            if self.save_state:
                self._guarded('save_state', lambda: save_state(self, tables, self.output_path('save_state'), size))
        return metrics

    def _write_files(self, summary: Dict[str, Any], keys: Dict[str, float], tables: Tables) -> None:
        if self.outfile_prefix:
            tagged = self.tagged_stem()
            self._outfile_stem = FileClaims.claim('outfile', os.path.abspath(str(self.outfile_prefix)),
                                                  file_stem_candidates(tagged, tagged), self)
            self._note_renamed('outfile_prefix', tagged, self._outfile_stem)
            self._guarded('outfile_prefix', lambda: self.write_outfile(summary, keys, tables))
        if self.report_dir:
            resolve_deferred(summary)
            paths = self._guarded('report_dir', lambda: self._write_reports_once(summary, keys))
            if paths is not None:
                summary['report_files'] = paths

    def _write_reports_once(self, summary: Dict[str, Any], keys: Dict[str, float]) -> Dict[str, str]:
        """Report files, written once per group and target: a member with an equal summary reuses the files
        of the first; any other metric of the run writes under another name (``{prefix}.{file_tag}``, then
        numbered: :class:`FileClaims`), so nothing is overwritten; the log says which name it took."""
        group = self._group
        content = {k: v for k, v in summary.items() if k not in ('text', 'report_files')}
        directory = os.path.abspath(str(self.report_dir))
        target = (directory, str(self.prefix))
        if group is not None:
            done = group.written_reports(target, content)
            if done is not None:
                return done
        wanted = self.report_stem()
        stem = FileClaims.claim('report', directory, file_stem_candidates(wanted, self.tagged_stem()), self)
        self._note_renamed('report_dir', wanted, stem)
        paths = self.write_reports(summary, keys, stem)
        if group is not None:
            group.record_reports(target, content, paths)
        return paths

    def _note_renamed(self, what: str, wanted: str, taken: str) -> None:
        if taken != wanted:
            from mmengine.logging import print_log
            print_log(f'{self.name} ({self.prefix}): another metric of this run writes the {what} files named '
                      f'{wanted!r}; this metric writes {taken!r} instead (nothing is overwritten)',
                      logger='current', level=logging.WARNING)

    def _guarded(self, what: str, write: Callable[[], Any]) -> Any:
        """Run a file writer; an ``OSError`` is logged as an error (the numbers are already in the log and
        returned) instead of stopping the evaluation of this and the other metrics."""
        try:
            return write()
        except OSError as err:
            from mmengine.logging import print_log
            message = (f'{self.name}: could not write the {what} files ({type(err).__name__}: {err}); the '
                       f'results above are complete and are returned to the runner')
            print_log(message, logger='current', level=logging.ERROR)
            warnings.warn(message, UserWarning)
            return None


def extra_results_of(metrics: Sequence[Any]) -> Dict[str, Any]:
    """The non-scalar results (e.g. ``{prefix}/per_predicate_recall``) of the last ``evaluate()`` of each
    metric, merged: what ``metrics.json`` adds to the scalar keys an evaluator returns (with ``bootstrap=``,
    also ``{prefix}/intervals``, ``{prefix}/bootstrap`` and ``{prefix}/interval_warnings``: the keys whose
    interval is unreliable, ``{prefix}/interval_notes``: why)."""
    out: Dict[str, Any] = {}
    for metric in metrics:
        extra = getattr(metric, 'extra_results', None)
        if callable(extra):
            out.update(extra())
        report = getattr(metric, 'last_report', None) or {}
        if report.get('intervals'):  # bootstrap=: {prefix}/intervals {key: [low, high]} and its settings
            out[f'{metric.prefix}/intervals'] = report['intervals']
            out[f'{metric.prefix}/bootstrap'] = report['bootstrap']
            out[f'{metric.prefix}/interval_warnings'] = list(report.get('interval_warnings') or [])
            out[f'{metric.prefix}/interval_notes'] = dict(report.get('interval_notes') or {})
    return out
