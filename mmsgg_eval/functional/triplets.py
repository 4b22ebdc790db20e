"""Triplet codes: one integer per (subject class, object class, predicate), all 0-based, and back. The rows of
the scene-graph metrics carry these codes; zero-shot and open-vocabulary subsets, per-triplet tables and the
relation changes of ``compare --report`` decode them.
"""
from torch import Tensor


def triplet_keys(subject_class: Tensor, object_class: Tensor, predicate: Tensor, num_classes: int,
                 num_predicates: int) -> Tensor:
    """Integer code of (subject class, object class, predicate) triplets (all 0-based)."""
    return (subject_class.long() * num_classes + object_class.long()) * num_predicates + predicate.long()


def triplet_parts(codes: Tensor, num_classes: int, num_predicates: int):
    """(subject class, object class, predicate) of :func:`triplet_keys` codes (the inverse, all 0-based)."""
    codes = codes.long()
    return codes // num_predicates // num_classes, codes // num_predicates % num_classes, codes % num_predicates

