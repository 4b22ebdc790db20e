"""``classes`` / ``predicates`` of ``dataset_meta`` for the metrics of relations (:class:`RelationVocabulary`)."""
from typing import List


class RelationVocabulary:
    """``classes`` / ``predicates`` of ``dataset_meta`` for the metrics of relations (a mixin of
    :class:`RowMetric` subclasses): a missing entry is an error that says how to set it."""

    @property
    def classes(self) -> List[str]:
        classes = self._meta('classes')  # type: ignore[attr-defined]
        if classes is None:
            raise ValueError(f'{type(self).__name__}: dataset_meta has no `classes`; use a dataset wrapper of '
                             f'mmsgg_eval or set metric.dataset_meta = dict(classes=..., predicates=...)')
        return list(classes)

    @property
    def predicates(self) -> List[str]:
        predicates = self._meta('predicates')  # type: ignore[attr-defined]
        if predicates is None:
            raise ValueError(f'{type(self).__name__}: dataset_meta has no `predicates`')
        return list(predicates)
