"""Published vocabularies and their fixed splits: facts of the datasets that the dataset readers, the metrics
(through presets keyed by the vocabulary) and the test fixtures all need, so they sit below every layer.

* ``VG150_PREDICATES``: the 50 VG150 predicates in the order of ``VG-SGG-dicts-with-attri.json``
  (``idx_to_predicate`` '1'..'50', 0-based here).
* ``vg150_groups()``: BGNN's / PySGG's head / body / tail split of those predicates (mR@K_head/_body/_tail).
"""
from typing import Dict, List

# BGNN / PySGG split of the VG150 predicates.
VG150_HEAD = ('behind', 'has', 'in', 'near', 'of', 'on', 'wearing')
VG150_TAIL = ('across', 'against', 'along', 'between', 'covered in', 'covering', 'eating', 'flying in', 'from',
              'growing on', 'laying on', 'lying on', 'made of', 'mounted on', 'on back of', 'painted on',
              'part of', 'playing', 'says', 'to', 'using', 'walking in')
VG150_PREDICATES = (
    'above', 'across', 'against', 'along', 'and', 'at', 'attached to', 'behind', 'belonging to', 'between',
    'carrying', 'covered in', 'covering', 'eating', 'flying in', 'for', 'from', 'growing on', 'hanging from',
    'has', 'holding', 'in', 'in front of', 'laying on', 'looking at', 'lying on', 'made of', 'mounted on',
    'near', 'of', 'on', 'on back of', 'over', 'painted on', 'parked on', 'part of', 'playing', 'riding', 'says',
    'sitting on', 'standing on', 'to', 'under', 'using', 'walking in', 'walking on', 'watching', 'wearing',
    'wears', 'with')


def vg150_groups() -> Dict[str, List[str]]:
    head, tail = set(VG150_HEAD), set(VG150_TAIL)
    return {'head': list(VG150_HEAD),
            'body': [p for p in VG150_PREDICATES if p not in head and p not in tail],
            'tail': list(VG150_TAIL)}
