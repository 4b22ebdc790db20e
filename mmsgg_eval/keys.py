"""Every key family, declared once: what it counts, how it averages, where it is reported.

A scene-graph key is a function of the reduced relation rows (one row per GT relation of an evaluated image: its
first-hit ranks, predicate, triplet code) and the image rows. A :class:`KeyFamily` says which one:

- ``kind='recall'``: the GT relations hit within K (``rank < K``, ``rank`` a column of the rows or a derived rank),
  averaged as the metric's ``recall_average`` (mean of per-image recalls, or micro: hits / relations);
- ``kind='pairs'``: the same hits, always micro over all GT relations (pair accuracy);
- ``kind='predicates'``: the per-predicate recall of those hits averaged over predicates as the metric's
  ``mr_average`` (all P predicates, an absent one counting 0, or the ones present);
- ``kind='combined'``: a function of two other families at the same K (F@K, AVG@K);
- the error analysis' kinds (metrics with ``error_analysis=True``): ``kind='causes'``, one key
  ``{name}@K_{cause}`` per reported cause (and ``_predicate_ng``): the GT relations whose outcome at K is that
  cause, averaged as R@K (``recall_average``); ``kind='stages'``: PySGG's stage-wise recall of the first-hit
  ranks ``rank`` (per image the relations found within K over its GT relations + 1e-5, the mean over the
  evaluated images); ``kind='instances'`` (``ks='none'``: one key ``{name}``, no K): PySGG's instance recall of
  the per-image count ``rank`` of GT objects found (over the GT objects + 1e-6, the mean over the images).

``subset`` restricts the GT relations (``'zeroshot'``: the zero-shot set; ``'novel'``: each open-vocabulary
subset, one key per subset, suffix ``_{subset}``; ``'novel_pred'``: the novel-predicate subset only;
``'first_pair'``: the first GT relation of each distinct GT (subject, object) pair, i.e. every pair once);
``members`` the predicates averaged over (``'all'``; ``'groups'``: each predicate group, suffix ``_{group}``;
``'novel_pred'``: the novel predicates). ``ks='topk'`` gives one key per K (``R@20``), ``ks='rel'`` one key
``R@rel`` at K = each image's number of GT relations, ``ks='none'`` one key without K, ``ks='topk_inf'`` one key per K
and ``{name}@inf`` over every predicted triplet (``SGBenchMetric``).

From these declarations alone come: the summary of ``SGRecall`` / ``SGMeanRecall`` (and ``SGBenchMetric``'s
recall families, :data:`SGBENCH_FAMILIES`)
(:func:`mmsgg_eval.metrics.key_values.summary_keys`), their bootstrap contributions, hence their intervals and
the paired comparison (:func:`mmsgg_eval.metrics.key_values.key_contributions`), which metric of the pair returns
a key (``reported_by``), the report families with their titles and order (:data:`FAMILY_TITLES`,
:data:`FAMILY_ORDER`) and the HTML report's numbers (``analysis.browse.summarize_records``). Adding a family here
adds all of them; ``docs/metrics.md`` holds the definitions in words.

The keys of the other metrics (grounding, RelCLIPScore, the VLM metric's failure rate, ``SGBenchMetric``'s InstR
and PRank, the OI protocol's R@K) average per-row values of one of their row tables: each is one :class:`RowKey`
of its metric (``row_keys()``), from which :mod:`mmsgg_eval.metrics.row_keys` gives both the summary value and
the bootstrap contributions. The keys that are no function of per-image sums (the AP keys) are recomputed on
each bootstrap replicate's rows by the one function that gives their summary value.
"""
from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, Optional, Tuple

#: the summation orders of a :class:`RowKey`
SUMMATIONS = ('fsum', 'mean')


@dataclass(frozen=True)
class KeyFamily:
    """One family of keys ``{name}@{K}{suffix}`` (see the module docstring for the fields' values)."""
    name: str  #: key prefix before ``@``
    title: str  #: its meaning, in the reports
    kind: str = 'recall'  #: 'recall' | 'pairs' | 'predicates' | 'combined' | 'causes' | 'stages' | 'instances'
    #: | 'other' (computed by its metric)
    rank: str = 'rank_gc'  #: the rank column of the relation rows (or 'rank_rel', derived); 'instances': the
    #: per-image count column
    subset: Optional[str] = None  #: None | 'zeroshot' | 'novel' | 'novel_pred' | 'first_pair'
    members: str = 'all'  #: the predicates a 'predicates' family averages over: 'all' | 'groups' | 'novel_pred'
    ks: str = 'topk'  #: 'topk' (one key per K), 'rel' (one key, K = each image's GT relations), 'none' (one key)
    #: or 'topk_inf' (one key per K and ``@inf``)
    modes: Tuple[str, ...] = ('predcls', 'sgcls', 'sgdet', 'phrdet')  #: the modes that have it
    combine: Optional[str] = None  #: 'harmonic' | 'mean' of ``of`` (kind 'combined')
    of: Tuple[str, ...] = ()  #: the two families a combined family is computed from
    reported_by: str = 'recall'  #: 'recall' (SGRecall), 'mean_recall' (SGMeanRecall) or 'sgbench'

    @property
    def empty(self) -> float:
        """The value when no GT relation is counted: 0 for the whole set of relations (or of distinct pairs) or
        predicates (warned), NaN (no value) for a subset or a predicate group."""
        whole = self.subset in (None, 'first_pair') and self.members == 'all'
        return 0.0 if whole else float('nan')


#: the scene-graph families in the order of the summary (and of every report built from it)
SCENE_GRAPH_FAMILIES: Tuple[KeyFamily, ...] = (
    KeyFamily('R', 'Recall'),
    KeyFamily('R', 'Recall at K = the image\'s GT relations', ks='rel'),
    KeyFamily('ngR', 'No-graph-constraint recall', rank='rank_ngc'),
    KeyFamily('zR', 'Zero-shot recall', subset='zeroshot'),
    KeyFamily('ngzR', 'No-graph-constraint zero-shot recall', rank='rank_ngc', subset='zeroshot'),
    KeyFamily('A', 'Pair accuracy', kind='pairs', rank='rank_pair', modes=('predcls', 'sgcls')),
    KeyFamily('R', 'Recall of an open-vocabulary subset', subset='novel'),
    KeyFamily('ngR', 'No-graph-constraint recall of an open-vocabulary subset', rank='rank_ngc', subset='novel'),
    KeyFamily('mR', 'Mean recall', kind='predicates', reported_by='mean_recall'),
    KeyFamily('mR', 'Mean recall at K = the image\'s GT relations', kind='predicates', ks='rel',
              reported_by='mean_recall'),
    KeyFamily('ngmR', 'No-graph-constraint mean recall', kind='predicates', rank='rank_ngc',
              reported_by='mean_recall'),
    KeyFamily('mR', 'Mean recall of a predicate group', kind='predicates', members='groups',
              reported_by='mean_recall'),
    KeyFamily('mR', 'Mean recall of the novel predicates', kind='predicates', subset='novel_pred',
              members='novel_pred', reported_by='mean_recall'),
    KeyFamily('ngmR', 'No-graph-constraint mean recall of the novel predicates', kind='predicates',
              rank='rank_ngc', subset='novel_pred', members='novel_pred', reported_by='mean_recall'),
    KeyFamily('zmR', 'Zero-shot mean recall', kind='predicates', subset='zeroshot', reported_by='mean_recall'),
    KeyFamily('F', 'F (2 R mR / (R + mR))', kind='combined', combine='harmonic', of=('R', 'mR'),
              reported_by='mean_recall'),
    KeyFamily('AVG', 'AVG ((R + mR) / 2)', kind='combined', combine='mean', of=('R', 'mR'),
              reported_by='mean_recall'),
)

#: the modes with an error analysis (not phrdet: its union-box matching has no object to locate)
ERROR_MODES: Tuple[str, ...] = ('predcls', 'sgcls', 'sgdet')

#: the error analysis' families (keys only with ``error_analysis=True``), in the summary's order after
#: :data:`SCENE_GRAPH_FAMILIES`; the stage-wise names are PySGG's
ERROR_FAMILIES: Tuple[KeyFamily, ...] = (
    KeyFamily('miss', 'Recall lost, by cause', kind='causes', modes=ERROR_MODES),
    *(KeyFamily(f'stage_{s}', f'stage_{s}', kind='stages', rank=f'rank_{s}', modes=ERROR_MODES)
      for s in ('pair_loc', 'pair_det', 'pred_cls')),
    *(KeyFamily(f'stage_{s}', f'stage_{s}', kind='instances', rank=s, ks='none', modes=ERROR_MODES)
      for s in ('inst_loc', 'inst_det')),
)

#: ``SGBenchMetric``'s recall families (instance matching: distinct GT triplets), K = each ``topk`` and inf
SGBENCH_FAMILIES: Tuple[KeyFamily, ...] = (
    KeyFamily('R', 'Recall', ks='topk_inf', modes=ERROR_MODES, reported_by='sgbench'),
    KeyFamily('mR', 'Mean recall', kind='predicates', ks='topk_inf', modes=ERROR_MODES, reported_by='sgbench'),
    KeyFamily('PairR', 'Pair recall (predicate ignored)', rank='rank_pair', subset='first_pair', ks='topk_inf',
              modes=ERROR_MODES, reported_by='sgbench'),
)
#: the families of the report tables beside the scene-graph ones (their titles)
OTHER_FAMILIES: Tuple[KeyFamily, ...] = SGBENCH_FAMILIES


def _first_titles() -> Dict[str, str]:
    titles: Dict[str, str] = {}
    for family in SCENE_GRAPH_FAMILIES + OTHER_FAMILIES + ERROR_FAMILIES:
        if family.ks != 'rel':  # the first declaration of a name is its plain family
            titles.setdefault(family.name, family.title)
    return titles


#: ``{family: title}`` of the report tables (the plain family of each name)
FAMILY_TITLES: Dict[str, str] = _first_titles()

#: the order of the report's family table: the recall families, the other metrics' (PairR), the mean-recall ones
FAMILY_ORDER: Tuple[str, ...] = tuple(
    [n for n in FAMILY_TITLES if n in {f.name for f in SCENE_GRAPH_FAMILIES if f.reported_by == 'recall'}]
    + [n for n in FAMILY_TITLES if n in {f.name for f in OTHER_FAMILIES} - {f.name for f in SCENE_GRAPH_FAMILIES}]
    + [n for n in FAMILY_TITLES if n in {f.name for f in SCENE_GRAPH_FAMILIES if f.reported_by == 'mean_recall'}])


@lru_cache(maxsize=None)
def subset_families(subset: str) -> Tuple[str, ...]:
    """The family names counting only the GT relations of ``subset`` (``'zeroshot'``: zR, ngzR, zmR)."""
    return tuple(dict.fromkeys(f.name for f in SCENE_GRAPH_FAMILIES if f.subset == subset))


@lru_cache(maxsize=None)
def reported_families(reported_by: str) -> Tuple[str, ...]:
    """The family names (the part of a key before ``@``) one metric of the pair returns: ``'recall'``
    (SGRecall: its families and the error analysis') or ``'mean_recall'`` (SGMeanRecall)."""
    names = [f.name for f in SCENE_GRAPH_FAMILIES if f.reported_by == reported_by]
    if reported_by == 'recall':
        names += [f.name for f in ERROR_FAMILIES]
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class RowKey:
    """One key averaging per-row values of one table of its metric's key columns (``key_columns(tables)``: the
    reduced rows and the columns the metric derives from them, each table with ``sample_idx``).

    Value: ``scale`` x (sum of ``value`` over the counted rows) / (sum of ``over`` over them, or their number when
    ``over`` is None); the counted rows are those where the bool column ``where`` holds (all when None).
    ``summation`` fixes the arithmetic, bit for bit: ``'fsum'``: ``scale * fsum(value) / fsum(over)`` (or ``/ n``;
    :func:`math.fsum`, correctly rounded, so independent of the row order); ``'mean'``: ``scale * mean(value)``
    (torch's mean of the counted rows in table order; needs ``over`` None). ``empty``: the value when the
    denominator is 0 (no row counted); ``no_rows``: when the table has no row at all (None: ``empty``).
    The bootstrap contributions of the key are, per image, the sums of ``value`` and of ``over`` (or the count)
    over its counted rows; a replicate's value is ``scale`` x the ratio of their totals (``empty`` when 0).
    """
    name: str  #: the key (without the metric prefix)
    table: str  #: the table of key columns whose rows are averaged
    value: str  #: the column of per-row values (the numerator's summands)
    over: Optional[str] = None  #: the column of per-row denominator summands; None: each counted row counts 1
    where: Optional[str] = None  #: the bool column of the counted rows; None: every row
    scale: float = 100.0  #: 100 for a percentage, 1 for a fraction or a raw number
    empty: float = float('nan')  #: the value when nothing is counted
    summation: str = 'fsum'  #: 'fsum' | 'mean' (see the class docstring)
    no_rows: Optional[float] = None  #: the value when the table is empty (None: ``empty``)

    def __post_init__(self) -> None:
        if self.summation not in SUMMATIONS:
            raise ValueError(f'RowKey {self.name}: summation must be one of {SUMMATIONS}, got {self.summation!r}')
        if self.summation == 'mean' and self.over is not None:
            raise ValueError(f"RowKey {self.name}: summation='mean' averages rows; a ratio of sums ('over') needs "
                             f"'fsum'")
