"""The declared key families (:mod:`mmsgg_eval.keys`) turned into numbers, two ways from the one declaration:
:func:`summary_keys` (the summary of ``SGRecall`` / ``SGMeanRecall``, percent) and :func:`key_contributions`
(the per-image summands of the same keys for the bootstrap intervals and the paired comparison,
:mod:`mmsgg_eval.metrics.bootstrap`). Both walk :func:`key_instances`, so a key exists in one exactly when it
exists in the other, with the same name, the same subset of GT relations and the same averaging."""
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..functional.recall import hit_within, mean_recall, per_predicate_recalls, rank_limit, recalls_from_ranks
from ..keys import ERROR_FAMILIES, SCENE_GRAPH_FAMILIES, KeyFamily
from ..functional import error_causes
from ..functional.bootstrap import ratio
from ..functional.limits import K_ALL
from .bootstrap import Contributions, Tables, per_predicate_block, predicate_mean, put, recall_block


#: every declared family a scene-graph metric computes, in the summary's order
ALL_FAMILIES: Tuple[KeyFamily, ...] = SCENE_GRAPH_FAMILIES + ERROR_FAMILIES


@dataclass
class ErrorRows:
    """What the error analysis' families (:data:`~mmsgg_eval.keys.ERROR_FAMILIES`) read besides the ranks
    (``rank_pair_loc`` ... in ``Relations.ranks``): per GT relation ``cause`` [G] (the code when missed,
    :mod:`~mmsgg_eval.functional.error_causes`) and ``no_prediction`` [G] (its image is counted without any
    predicted pair); per image (or unit) of ``Relations.image_of`` [num_images]: ``num_gt`` GT relations,
    ``evaluated``, ``predicted`` (its prediction is not missing), ``found`` ``{'inst_loc' | 'inst_det': GT objects
    overlapped / detected}``, ``num_gt_objects``; ``causes`` the reported causes, ``ng_topk`` the metric's."""
    cause: Tensor
    no_prediction: Tensor
    num_gt: Tensor
    evaluated: Tensor
    predicted: Tensor
    found: Dict[str, Tensor]
    num_gt_objects: Tensor
    causes: Tuple[str, ...]
    ng_topk: int


@dataclass
class Relations:
    """The evaluated GT relations a summary (or a bootstrap) reads: ``ranks`` ``{column: [G] long}``
    (``rank_gc``, ``rank_ngc``, ``rank_pair``, ``rank_rel``), ``predicate`` [G], ``image_of`` [G] (the evaluated
    image, or the resampling unit, of each) among ``num_images``; ``masks`` ``{subset: [G] bool}`` (``zeroshot``
    and the open-vocabulary subsets present), ``novel`` the open-vocabulary split (or None), ``groups`` the
    predicate groups ``{name: [predicate indices]}``."""
    ranks: Dict[str, Tensor]
    predicate: Tensor
    image_of: Tensor
    num_images: int
    masks: Dict[str, Tensor]
    novel: Optional[Dict[str, Any]]
    groups: Dict[str, Sequence[int]]
    novel_subsets: Tuple[str, ...] = ()
    tables: Dict[Any, Any] = field(default_factory=dict)  # per-predicate tables, computed once
    selected: Dict[Any, Tensor] = field(default_factory=dict)  # the columns of a subset, selected once
    errors: Optional[ErrorRows] = None  #: the error analysis' rows (None: no error analysis, no such keys)


@dataclass(frozen=True)
class KeyInstance:
    """One concrete block of keys ``{family.name}@{label}{suffix}`` of a family."""
    family: KeyFamily
    labels: Tuple[Any, ...]  #: the K labels of the keys (ints, or 'rel')
    ks: Tuple[int, ...]  #: the K each label counts hits within (1 for 'rel' on the relative ranks)
    suffix: str
    mask: Optional[str]  #: the subset of GT relations counted (a key of ``Relations.masks``), None = all
    members: Optional[Tuple[int, ...]]  #: the predicates averaged over ('predicates' families), None = all
    outcome: Optional[str] = None  #: the cause counted ('causes' families)

    @property
    def names(self) -> List[str]:
        if self.family.ks == 'none':
            return [f'{self.family.name}{self.suffix}']
        return [f'{self.family.name}@{label}{self.suffix}' for label in self.labels]

    @property
    def rank(self) -> str:
        return 'rank_rel' if self.family.ks == 'rel' else self.family.rank


def _instances(family: KeyFamily, metric: Any, rels: Relations, subset: Optional[str]) -> Iterator[KeyInstance]:
    ks = tuple(metric.topk)
    labels, kvals = {'rel': (('rel',), (1,)), 'none': ((None,), ()),
                     'topk_inf': (ks + ('inf',), ks + (K_ALL,))}.get(family.ks, (ks, ks))
    if family.subset == 'zeroshot' and 'zeroshot' not in rels.masks:
        return
    if family.subset == 'novel_pred' and 'novel_pred' not in rels.novel_subsets:
        return
    mask = subset if family.subset == 'novel' else family.subset
    if family.kind == 'predicates' and family.subset == family.members:
        mask = None  # a predicate's recall is the same over its own subset of relations: the whole table serves
    suffix = f'_{subset}' if subset else ''
    if family.members == 'groups':
        for name, members in rels.groups.items():
            yield KeyInstance(family, labels, kvals, f'_{name}', mask, tuple(members))
        return
    if family.members == 'novel_pred':
        yield KeyInstance(family, labels, kvals, '_novel_pred', mask, tuple(rels.novel['predicates']))
        return
    yield KeyInstance(family, labels, kvals, suffix, mask, None)


def key_instances(metric: Any, rels: Relations,
                  families: Sequence[KeyFamily] = ALL_FAMILIES) -> Iterator[Sequence[KeyInstance]]:
    """The key blocks of ``metric`` (its mode) on ``rels``, in the summary's order: consecutive families over the
    open-vocabulary subsets are walked subset by subset, consecutive combined families K by K (so
    ``R@K_novel_obj, ngR@K_novel_obj, R@K_base, ...`` and ``F@20, AVG@20, F@50, ...``); the error analysis'
    families only with ``rels.errors``. Yields lists: one instance, the run of combined families (computed
    together) or a causes family's instances, one per reported cause (computed together)."""
    def joins(first: KeyFamily, nxt: KeyFamily) -> bool:
        return (first.subset == nxt.subset == 'novel') or (first.kind == nxt.kind == 'combined')
    i = 0
    while i < len(families):
        family = families[i]
        run = [family]
        while i + len(run) < len(families) and joins(family, families[i + len(run)]):
            run.append(families[i + len(run)])
        i += len(run)
        run = [f for f in run if metric.mode in f.modes]
        if not run or (family in ERROR_FAMILIES and rels.errors is None):
            continue
        if family.kind == 'causes':
            ks = tuple(metric.topk)
            yield [KeyInstance(family, ks, ks, f'_{name}', None, None, name)
                   for name in rels.errors.causes + ('predicate_ng',)]
        elif family.kind == 'combined':
            yield [KeyInstance(f, tuple(metric.topk), tuple(metric.topk), '', None, None) for f in run]
        elif family.subset == 'novel':
            for subset in rels.novel_subsets:
                for f in run:
                    yield from ([inst] for inst in _instances(f, metric, rels, subset))
        else:
            yield from ([inst] for inst in _instances(family, metric, rels, None))


def _selected(rels: Relations, inst: KeyInstance) -> Tuple[Tensor, Tensor, Tensor]:
    """(rank, predicate, image) of the GT relations an instance counts (a subset's columns selected once)."""
    if inst.mask is None:
        return rels.ranks[inst.rank], rels.predicate, rels.image_of
    return _subset(rels, inst.rank, inst.mask), _subset(rels, 'predicate', inst.mask), \
        _subset(rels, 'image_of', inst.mask)


def _subset(rels: Relations, column: str, mask: str) -> Tensor:
    """The rank ``column`` (or ``'predicate'``, ``'image_of'``) of the GT relations of the subset ``mask``."""
    key = (column, mask)
    if key not in rels.selected:
        values = rels.predicate if column == 'predicate' else rels.image_of if column == 'image_of' else \
            rels.ranks[column]
        rels.selected[key] = values[rels.masks[mask]]
    return rels.selected[key]


def per_predicate_table(metric: Any, rels: Relations, inst: KeyInstance) -> Tuple[Tensor, Tensor]:
    """([K, P] per-predicate recall, [P] presence) of the relations of ``inst`` (computed once per rank, subset
    and K: mR@K and its groups read one table; :func:`fill_tables`)."""
    key = (inst.rank, inst.mask, inst.ks)
    if key not in rels.tables:
        fill_tables(metric, rels, [inst])
    return rels.tables[key]


def fill_tables(metric: Any, rels: Relations, instances: Sequence[KeyInstance]) -> None:
    """Put the per-predicate tables of ``instances`` that ``rels.tables`` lacks there, keyed ``(rank, subset,
    ks)``: one :func:`~mmsgg_eval.functional.recall.per_predicate_recalls` pass per subset of GT relations, for
    every rank column and K of it at once (the counts per image and predicate read once)."""
    missing: Dict[Optional[str], Dict[Tuple[Any, ...], KeyInstance]] = {}
    for inst in instances:
        key = (inst.rank, inst.mask, inst.ks)
        if key not in rels.tables:
            missing.setdefault(inst.mask, {})[key] = inst
    for mask, wanted in missing.items():
        first = next(iter(wanted.values()))
        _, pred, image = _selected(rels, first)
        columns = [(_selected(rels, inst)[0], inst.ks) for inst in wanted.values()]
        tables, present = per_predicate_recalls(columns, pred, image, rels.num_images, len(metric.predicates),
                                                metric.recall_average)
        rels.tables.update({key: (table, present) for key, table in zip(wanted, tables)})


def predicate_table(metric: Any, rels: Relations, families: Sequence[KeyFamily] = SCENE_GRAPH_FAMILIES) -> Tensor:
    """[K, P] per-predicate recall of every GT relation at each K of the first mean-recall family of ``families``
    (the graph-constrained ranks): the summary's per-predicate table."""
    family = next(f for f in families if f.kind == 'predicates')
    return per_predicate_table(metric, rels, next(_instances(family, metric, rels, None)))[0]


def _recall_values(metric: Any, rels: Relations, instances: Sequence[KeyInstance]) -> Dict[int, Tensor]:
    """``{id(instance): [K] recall}`` of the 'recall' instances: one
    :func:`~mmsgg_eval.functional.recall.recalls_from_ranks` pass per subset of GT relations (and empty value)."""
    groups: Dict[Tuple[Optional[str], str], List[KeyInstance]] = {}
    for inst in instances:
        groups.setdefault((inst.mask, repr(inst.family.empty)), []).append(inst)  # (NaN != NaN)
    out: Dict[int, Tensor] = {}
    for members in groups.values():
        image = _selected(rels, members[0])[2]
        values = recalls_from_ranks([(_selected(rels, inst)[0], inst.ks) for inst in members], image, rels.num_images,
                                    metric.recall_average, members[0].family.empty)
        out.update({id(inst): v for inst, v in zip(members, values)})
    return out


def _combined(family: KeyFamily, r: float, mr: float) -> float:
    if family.combine == 'harmonic':
        return 2 * r * mr / (r + mr) if r + mr > 0 else 0.0
    return (r + mr) / 2


def summary_keys(metric: Any, rels: Relations,
                 families: Sequence[KeyFamily] = ALL_FAMILIES) -> Dict[str, float]:
    """Every declared key of ``metric`` (percent) from the evaluated relations, in the declaration order
    (``families``: a selection of the declarations, e.g. the ones the HTML report shows)."""
    m: Dict[str, float] = {}
    blocks = list(key_instances(metric, rels, families))
    fill_tables(metric, rels, [inst for block in blocks for inst in block if inst.family.kind == 'predicates'])
    recalls = _recall_values(metric, rels, [block[0] for block in blocks if block[0].family.kind == 'recall'])
    for block in blocks:
        family = block[0].family
        if family.kind == 'combined':
            for k in metric.topk:
                for inst in block:
                    a, b = (m[f'{name}@{k}'] for name in inst.family.of)
                    m[f'{inst.family.name}@{k}'] = _combined(inst.family, a, b)
            continue
        if family.kind in ('causes', 'stages', 'instances'):
            m.update(_error_values(metric, rels, block))
            continue
        inst = block[0]
        if family.kind == 'recall':
            values = recalls[id(inst)].tolist()
        elif family.kind == 'pairs':  # micro over every GT relation
            rank, _, _ = _selected(rels, inst)
            total = float(rank.numel())
            m.update({name: 100.0 * float(hit_within(rank, k).sum()) / total if total else 0.0
                      for name, k in zip(inst.names, inst.ks)})
            continue
        else:
            table, present = per_predicate_table(metric, rels, inst)
            members = range(len(metric.predicates)) if inst.members is None else inst.members
            values = mean_recall(table, present, members, metric.mr_average, family.empty).tolist()
        for name, v in zip(inst.names, values):
            m[name] = 100.0 * v
    return m


def _error_values(metric: Any, rels: Relations, block: Sequence[KeyInstance]) -> Dict[str, float]:
    """The summary's keys (percent) of one error-analysis block (:mod:`~..functional.error_causes`)."""
    e, inst = rels.errors, block[0]
    out: Dict[str, float] = {}
    if inst.family.kind == 'causes':  # every outcome at once, one bincount per K
        shares = error_causes.cause_shares(rels.ranks['rank_gc'], e.cause, rels.image_of, rels.num_images, inst.ks,
                                           metric.recall_average, e.no_prediction, rels.ranks['rank_ngc'], e.ng_topk)
        for i in block:
            out.update({name: 100.0 * v for name, v in zip(i.names, shares[i.outcome].tolist())})
    elif inst.family.kind == 'stages':
        values = error_causes.stage_recall(rels.ranks[inst.rank], rels.image_of, rels.num_images, e.num_gt, inst.ks)
        out.update({name: 100.0 * v for name, v in zip(inst.names, values.tolist())})
    else:  # a missing prediction detects nothing (its rows hold the GT objects)
        found = e.found[inst.family.rank]
        found = torch.where(e.predicted, found, torch.zeros_like(found))
        out[inst.names[0]] = 100.0 * float(error_causes.instance_recall(found, e.num_gt_objects))
    return out


def _error_contributions(c: Contributions, metric: Any, rels: Relations, block: Sequence[KeyInstance],
                         shared: Dict[str, slice]) -> None:
    """Add the keys of one error-analysis block to ``c`` (``shared['den']``: the column of the evaluated units,
    added once, before the first stage-wise key)."""
    e, inst, unit = rels.errors, block[0], rels.image_of
    if inst.family.kind == 'causes':
        rank_gc, rank_ngc = rels.ranks['rank_gc'], rels.ranks['rank_ngc']
        for k in inst.ks:
            outcome = error_causes.outcome_codes(rank_gc, e.cause, k, e.no_prediction)
            selections = {name: outcome == code for code, name in enumerate(error_causes.CAUSES, start=1)}
            selections['predicate_ng'] = (outcome == error_causes.PREDICATE) & (rank_ngc < min(int(k), int(e.ng_topk)))
            for i in block:
                put(c, i.family.name, [k], recall_block(c, error_causes.as_rank(selections[i.outcome]), unit, (1,),
                                                        metric.recall_average), i.suffix)
        return
    if 'den' not in shared:
        shared['den'] = c.add(e.evaluated.double())
    den = shared['den']
    if inst.family.kind == 'stages':
        denominator = e.num_gt.double() + error_causes.STAGE_REL_EPS
        rank = rels.ranks[inst.rank]
        for name, k in zip(inst.names, inst.ks):
            found = torch.bincount(unit[rank < rank_limit(k)], minlength=rels.num_images).double()
            num = c.add(torch.where(e.evaluated, found / denominator, torch.zeros_like(found)))
            c.blocks.append(([name], lambda t, num=num: 100.0 * ratio(t[:, num], t[:, den])))
        return
    objects = e.num_gt_objects.double() + error_causes.STAGE_OBJ_EPS
    found = e.found[inst.family.rank].double()
    num = c.add(torch.where(e.evaluated & e.predicted, found / objects, torch.zeros_like(found)))
    c.blocks.append((inst.names, lambda t, num=num: 100.0 * ratio(t[:, num], t[:, den])))


def key_contributions(c: Contributions, metric: Any, rels: Relations,
                      families: Sequence[KeyFamily] = ALL_FAMILIES) -> Dict[Any, Any]:
    """Add every declared key of ``metric`` (of ``families``) to ``c`` (``rels.image_of``: the unit of each
    relation); returns the per-predicate blocks ``{(rank, subset, ks): block}`` (for the per-predicate tables of
    ``compare``)."""
    blocks: Dict[Any, Any] = {}
    presence: Dict[Any, slice] = {}
    shared: Dict[str, slice] = {}
    for block in key_instances(metric, rels, families):
        family = block[0].family
        if family.kind in ('causes', 'stages', 'instances'):
            _error_contributions(c, metric, rels, block, shared)
            continue
        if family.kind == 'combined':  # (the closure holds the K, not the metric: it outlives the call)
            ks = tuple(metric.topk)
            c.derived.append(lambda v, block=block, ks=ks: {f'{i.family.name}@{k}': _combined_tensor(i.family, *(
                v[f'{name}@{k}'] for name in i.family.of)) for k in ks for i in block})
            c.depends.update({f'{i.family.name}@{k}': [f'{name}@{k}' for name in i.family.of]
                              for k in ks for i in block})
            continue
        inst = block[0]
        rank, pred, unit = _selected(rels, inst)
        if family.kind in ('recall', 'pairs'):
            average = 'micro' if family.kind == 'pairs' else metric.recall_average
            put(c, family.name, inst.labels, recall_block(c, rank, unit, inst.ks, average, empty=family.empty),
                inst.suffix)
            continue
        key = (inst.rank, inst.mask, inst.ks)
        if key not in blocks:
            blocks[key], presence[key[1:]] = per_predicate_block(
                c, rank, pred, unit, len(metric.predicates), inst.ks, metric.recall_average, presence.get(key[1:]))
        members = range(len(metric.predicates)) if inst.members is None else inst.members
        put(c, family.name, inst.labels, predicate_mean(blocks[key], presence[key[1:]], members, metric.mr_average,
                                                        family.empty), inst.suffix)
    return blocks


def _combined_tensor(family: KeyFamily, r: Tensor, mr: Tensor) -> Tensor:
    total = r + mr
    if family.combine == 'harmonic':  # 0 when both are 0
        return torch.where(total > 0, 2 * r * mr / total.clamp(min=1e-300), torch.zeros_like(total))
    return total / 2


def scene_graph_contributions(metric: Any, tables: Tables, units: Optional[Tensor] = None) -> Contributions:
    """Every key of a :class:`~mmsgg_eval.metrics.scene_graph.SceneGraphMetric` (both presets), per image: the
    declared keys (:func:`key_contributions`, the error analysis' included) and the per-predicate tables ``R@K``."""
    from .predicate_groups import resolve_groups
    images, rows = tables['images'], tables['relations']
    c = Contributions(images['sample_idx'] if units is None else units)
    rel, unit = relation_units(c, metric, images, rows)
    at = c.unit_of(images['sample_idx'])
    num_gt = torch.zeros(c.num_units, dtype=torch.long)
    num_gt[at] = images['num_gt'].long()
    zs_mask = zeroshot_mask(metric, rows, rel)
    novel = metric.novel_indices()
    subsets = metric.novel_subsets(rel['triplet'], novel) if novel else {}
    groups = resolve_groups(metric.predicates, metric.user_groups, metric._meta('predicate_counts'))
    counted = metric.key_relations(rel, unit, c.num_units, num_gt, zs_mask, novel, subsets, groups)
    if getattr(metric, 'error_analysis', False):
        counted.errors = unit_error_rows(c, metric, images, rel, unit, counted)
    blocks = key_contributions(c, metric, counted)
    ks = tuple(metric.topk)
    per_pred = blocks[('rank_gc', None, ks)]
    for j, k in enumerate(ks):
        c.tables[f'R@{k}'] = lambda t, j=j: 100.0 * per_pred(t)[:, j]
    c.table_labels = list(metric.predicates)
    return c


def relation_units(c: Contributions, metric: Any, images: Dict[str, Tensor],
                   rels: Dict[str, Tensor]) -> Tuple[Dict[str, Tensor], Tensor]:
    """The relation rows of the images ``metric`` evaluates and the unit of each."""
    evaluated = torch.zeros(c.num_units, dtype=torch.bool)
    evaluated[c.unit_of(images['sample_idx'])] = metric._evaluated_images(images, quiet=True)
    unit = c.unit_of(rels['sample_idx'])
    keep = evaluated.index_select(0, unit)
    return {n: col[keep] for n, col in rels.items()}, unit[keep]


def zeroshot_mask(metric: Any, rels: Dict[str, Tensor], rel: Dict[str, Tensor]) -> Optional[Tensor]:
    """The zero-shot flags of the evaluated relations ``rel`` (of all relation rows ``rels``), as the metric's
    summary takes them (:meth:`~mmsgg_eval.metrics.scene_graph.SceneGraphMetric._zeroshot_relations`)."""
    return metric._zeroshot_relations(rels['triplet'], rel)[0]


def unit_error_rows(c: Contributions, metric: Any, images: Dict[str, Tensor], rel: Dict[str, Tensor], unit: Tensor,
                    counted: Relations) -> ErrorRows:
    """The error analysis' rows of the evaluated relations ``rel`` per resampling unit (their ``unit``; the
    images' columns scattered onto their units); adds the stage-wise rank columns to ``counted.ranks``."""
    at = c.unit_of(images['sample_idx'])

    def per_unit(values: Tensor) -> Tensor:
        out = torch.zeros(c.num_units, dtype=values.dtype)
        out[at] = values
        return out
    counted.ranks.update({column: rel[column].long() for _, column in error_causes.STAGE_RANKS})
    evaluated = torch.zeros(c.num_units, dtype=torch.bool)
    evaluated[at] = metric._evaluated_images(images, quiet=True)
    without = per_unit(((images['num_pred'] == 0) | images['missing']).long()).bool().index_select(0, unit)
    return ErrorRows(rel['cause'].long(), without, per_unit(images['num_gt'].long()), evaluated,
                     per_unit((~images['missing']).long()).bool(),
                     {name: per_unit(images[name].long()) for name in ('inst_loc', 'inst_det')},
                     per_unit(images['num_gt_objects'].long()), metric.reported_causes(images), metric.ng_topk)
