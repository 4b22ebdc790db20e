"""Names of a VLM answer: normalisation, the class encoded in an object id, and the synonym-aware mapping of
names to 0-based dataset indices (:class:`NameMapper`, :func:`build_mappers`)."""
import re
from typing import Dict, Mapping, Optional, Sequence, Tuple

__all__ = ['normalize_name', 'class_from_id', 'NameMapper', 'build_mappers']


def normalize_name(name: str) -> str:
    """Lower case, ``_`` and ``-`` to space, whitespace collapsed and stripped."""
    return ' '.join(str(name).lower().replace('_', ' ').replace('-', ' ').split())


_INSTANCE_SUFFIX = re.compile(r'^(.*?\S)[\s._#-]*\d+$')


def class_from_id(object_id: str) -> str:
    """Object class encoded in an id: ``'person.1'`` / ``'person_1'`` / ``'person1'`` -> ``'person'``."""
    text = str(object_id).strip()
    m = _INSTANCE_SUFFIX.match(text)
    return m.group(1) if m else text


class NameMapper:
    """Normalised name -> 0-based index into a dataset's class or predicate list.

    Args:
        names: the dataset's names (``dataset_meta['classes']`` / ``['predicates']``).
        synonyms: optional ``{model name: dataset name}``; both sides are normalised, every target must be one
            of ``names`` (ValueError otherwise). A synonym never overrides an exact dataset name.
    """

    def __init__(self, names: Sequence[str], synonyms: Optional[Mapping[str, str]] = None):
        self.names = list(names)
        self.index: Dict[str, int] = {}
        for i, n in enumerate(self.names):
            self.index.setdefault(normalize_name(n), i)
        for src, dst in (synonyms or {}).items():
            key, target = normalize_name(src), normalize_name(dst)
            if target not in self.index:
                raise ValueError(f'synonym {src!r} -> {dst!r}: {dst!r} is not a dataset name')
            self.index.setdefault(key, self.index[target])

    def __call__(self, name: str) -> int:
        return self.index.get(normalize_name(name), -1)


def _is_split_map(synonyms: Mapping) -> bool:
    return bool(synonyms) and set(synonyms) <= {'objects', 'classes', 'predicates'} and \
        all(isinstance(v, Mapping) for v in synonyms.values())


def build_mappers(classes: Sequence[str], predicates: Sequence[str], synonyms: Optional[Mapping] = None,
                  class_synonyms: Optional[Mapping] = None,
                  predicate_synonyms: Optional[Mapping] = None) -> Tuple[NameMapper, NameMapper]:
    """Class and predicate :class:`NameMapper` s.

    ``synonyms`` is either split, ``{'objects': {...}, 'predicates': {...}}`` (``'classes'`` is an alias of
    ``'objects'``), or flat ``{model name: dataset name}``: a flat entry applies to the class list when its
    target is a class, to the predicate list when it is a predicate (both when both). ``class_synonyms`` /
    ``predicate_synonyms`` add entries for one list. A target that is no dataset name raises ValueError.
    """
    cls_syn: Dict[str, str] = {}
    pred_syn: Dict[str, str] = {}
    if synonyms and _is_split_map(synonyms):
        cls_syn.update(synonyms.get('objects', {}) or {})
        cls_syn.update(synonyms.get('classes', {}) or {})
        pred_syn.update(synonyms.get('predicates', {}) or {})
    elif synonyms:
        cls_names = {normalize_name(n) for n in classes}
        pred_names = {normalize_name(n) for n in predicates}
        unknown = []
        for src, dst in synonyms.items():
            target = normalize_name(dst)
            if target in cls_names:
                cls_syn[src] = dst
            if target in pred_names:
                pred_syn[src] = dst
            if target not in cls_names and target not in pred_names:
                unknown.append(f'{src!r} -> {dst!r}')
        if unknown:
            raise ValueError(f'synonyms map to names that are neither classes nor predicates: {unknown}')
    cls_syn.update(class_synonyms or {})
    pred_syn.update(predicate_synonyms or {})
    return NameMapper(classes, cls_syn), NameMapper(predicates, pred_syn)

