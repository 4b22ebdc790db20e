"""Head / body / tail predicate groups for mR@K_head/_body/_tail (``docs/metrics.md``)."""
from typing import Dict, List, Optional, Sequence

from ..vocabularies import VG150_PREDICATES, vg150_groups


def frequency_thirds(predicates: Sequence[str], counts: Sequence[float]) -> Dict[str, List[str]]:
    """Head / body / tail = thirds of the predicates sorted by decreasing training frequency."""
    order = sorted(range(len(predicates)), key=lambda i: (-float(counts[i]), i))
    n = len(order)
    cut1, cut2 = round(n / 3), round(2 * n / 3)
    names = [predicates[i] for i in order]
    return {'head': names[:cut1], 'body': names[cut1:cut2], 'tail': names[cut2:]}


def resolve_groups(predicates: Sequence[str], user: Optional[Dict[str, Sequence[str]]],
                   counts: Optional[Sequence[float]]) -> Dict[str, List[int]]:
    """Group name -> predicate indices. User groups win, then the VG150 preset, then frequency thirds."""
    if user is not None:
        groups = {name: list(members) for name, members in user.items()}
    elif tuple(predicates) == VG150_PREDICATES:
        groups = vg150_groups()
    elif counts is not None and len(counts) == len(predicates):
        groups = frequency_thirds(predicates, counts)
    else:
        return {}
    index = {p: i for i, p in enumerate(predicates)}
    out = {}
    for name, members in groups.items():
        missing = [m for m in members if m not in index]
        if missing:
            raise ValueError(f'predicate_groups[{name!r}] names predicates not in dataset_meta: {missing}')
        out[name] = [index[m] for m in members]
    return out
