"""The report's numbers from the per-image records: the K of the records, the summary keys and per-predicate
recall computed from the key declarations (:func:`~mmsgg_eval.metrics.key_values.summary_keys`, as the
metric's summary computes them), the evaluation's own values (``metrics.json``) read over them, the
per-predicate chart's order and the facts of a dataset the report needs. No HTML here."""
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ...functional.limits import K_ALL, NO_HIT


#: The K label of a K-free recall (the VLM metric's ``Recall`` / ``mRecall``: every predicted triplet counts).
ALL = 'all'


def record_key(family: str, k: Any) -> Optional[str]:
    """The name of a family's key at K in the records and the metric's results: ``('R', 50) -> 'R@50'``,
    ``('R', 'all') -> 'Recall'``, ``('mR', 'all') -> 'mRecall'`` (no ngR without K: None)."""
    if k == ALL:
        return {'R': 'Recall', 'mR': 'mRecall'}.get(family)
    return f'{family}@{k}'


def found_within(rank: Optional[int], k: Any) -> bool:
    """A GT relation whose first hit is at ``rank`` (None: never) is found at K (``'all'``: at any rank)."""
    return rank is not None and (k == ALL or rank < k)


def k_value(k: Any) -> int:
    return K_ALL if k == ALL else int(k)


def record_ks(records: Sequence[Dict[str, Any]]) -> List[Any]:
    """The K of the records' recall fields: ``'all'`` first for a K-free ``Recall`` (VLM), then the ints of
    their ``R@K`` fields (in their order)."""
    for r in records:
        ks = [int(k[2:]) for k in r if k.startswith('R@') and k[2:].isdigit()]
        ks = ([ALL] if 'Recall' in r else []) + ks
        if ks:
            return ks
    return []


def report_k(records: Sequence[Dict[str, Any]]) -> Any:
    """The report's default K: 50 when the records have it (or have no K), else their largest K (``'all'`` for
    the VLM's K-free records)."""
    ks = record_ks(records)
    return 50 if 50 in ks or not ks else ks[-1]


#: the key families the page shows (their formulas: the declarations of :mod:`mmsgg_eval.keys`)
PAGE_FAMILIES = ('R', 'ngR', 'mR')


def summarize_records(records: Sequence[Dict[str, Any]], predicates: Sequence[str], ks: Sequence[Any],
                      average: str = 'image', mr_average: str = 'all') -> Dict[str, Any]:
    """R@K / ngR@K / mR@K, per-predicate recall and the predicate confusion over GT pairs of the evaluated
    images, computed from the key declarations as the metric's summary computes them
    (:func:`~mmsgg_eval.metrics.key_values.summary_keys` on the records' ranks: :data:`PAGE_FAMILIES`):
    ``average`` / ``mr_average``: the metric's ``recall_average`` / ``mr_average``. A predicate without GT in
    the evaluated images has no recall (None, shown ``–``)."""
    from types import SimpleNamespace
    from ...keys import SCENE_GRAPH_FAMILIES
    from ...metrics.key_values import Relations, predicate_table, summary_keys
    index = {p: i for i, p in enumerate(predicates)}
    evaluated = [r for r in records if r['evaluated']]
    ranks = {'rank_gc': [], 'rank_ngc': []}
    preds, image_of = [], []
    num_p = len(predicates)
    confusion = np.zeros((num_p, num_p + 1), dtype=np.int64)  # column P: nothing ranked on the pair
    for i, r in enumerate(evaluated):
        for g in r['gt_relations']:
            for column in ranks:
                ranks[column].append(NO_HIT if g[column] is None else g[column])
            p = index[g['predicate']]
            preds.append(p)
            image_of.append(i)
            confusion[p, index.get(g.get('pair_predicate'), num_p) if g.get('pair_predicate') else num_p] += 1
    n = len(evaluated)
    out: Dict[str, Any] = {'num_images': n, 'num_records': len(records), 'num_gt_relations': len(preds),
                           'metrics': {}, 'confusion': confusion}
    values = tuple(k_value(k) for k in ks)
    metric = SimpleNamespace(topk=values, recall_average=average, mr_average=mr_average, predicates=predicates,
                             mode='sgdet')
    rels = Relations({c: torch.tensor(v, dtype=torch.long) for c, v in ranks.items()},
                     torch.tensor(preds, dtype=torch.long), torch.tensor(image_of, dtype=torch.long), n, {}, None, {})
    families = [f for f in SCENE_GRAPH_FAMILIES if f.name in PAGE_FAMILIES and f.subset is None
                and f.members == 'all' and f.ks == 'topk']
    keys = summary_keys(metric, rels, families)
    for family in PAGE_FAMILIES:
        for k, v in zip(ks, values):
            if record_key(family, k):
                out['metrics'][record_key(family, k)] = keys[f'{family}@{v}']
    table = predicate_table(metric, rels)
    present = rels.tables[('rank_gc', None, values)][1]
    counts = np.bincount(np.asarray(preds, dtype=np.int64), minlength=num_p) if preds else np.zeros(num_p, int)
    out['per_predicate'] = {p: {**{record_key('R', k): 100.0 * float(table[j, i]) if counts[i] else None
                                   for j, k in enumerate(ks)}, 'num_gt': int(counts[i])}
                            for i, p in enumerate(predicates)}
    out['present'] = present.tolist()
    return out


def metric_values(summary: Dict[str, Any], results: Optional[Dict[str, Any]], prefix: Optional[str]) -> int:
    """Replace the summary's keys and per-predicate recalls by the evaluation's own (``results``: the content of
    ``metrics.json``, keys ``{prefix}/{key}``, tables ``{prefix}/per_predicate_recall``) where it has them; the
    records' recomputation (the same functions) stays for the rest. Returns how many values were read."""
    if not results or not prefix:
        return 0
    read = 0
    for key in list(summary['metrics']):
        value = results.get(f'{prefix}/{key}')
        if isinstance(value, (int, float)) or value is None and f'{prefix}/{key}' in results:
            summary['metrics'][key] = float('nan') if value is None else float(value)
            read += 1
    table = results.get(f'{prefix}/per_predicate_recall')
    if isinstance(table, dict):
        for name, row in summary['per_predicate'].items():
            theirs = table.get(name) or {}
            for key in row:
                if key != 'num_gt' and key in theirs:
                    row[key] = theirs[key] if row['num_gt'] and theirs[key] is not None else None
                    read += 1
    return read


def chart_order(predicates: Sequence[str], per_predicate: Dict[str, Dict[str, Any]],
                predicate_counts: Optional[Sequence[int]] = None) -> Tuple[List[str], str]:
    """(predicates in the chart's order, the sentence saying which order): descending training frequency when
    ``predicate_counts`` is known (one count per predicate), else descending GT count in the report's images;
    ties keep the predicate order."""
    idx = list(range(len(predicates)))
    if predicate_counts is not None and len(predicate_counts) == len(predicates):
        idx.sort(key=lambda i: (-float(predicate_counts[i]), i))
        return [predicates[i] for i in idx], 'predicates sorted by training frequency'
    idx.sort(key=lambda i: (-int(per_predicate[predicates[i]].get('num_gt', 0)), i))
    return ([predicates[i] for i in idx],
            'predicates sorted by GT count in these images (training frequencies unknown)')


def dataset_facts(dataset: Any) -> Tuple[List[str], List[str], Dict[int, str], str]:
    """(classes, predicates, sample_idx -> img_path, split name) of a dataset."""
    meta = dataset.metainfo
    paths = {}
    for i in range(len(dataset)):
        info = dataset.get_data_info(i)
        paths[i] = info.get('img_path')
    split = str(getattr(dataset, 'split', '') or meta.get('split', '') or '')
    return list(meta['classes']), list(meta['predicates']), paths, split
