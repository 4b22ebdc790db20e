"""The outcome of parsing one VLM answer: :class:`ParseResult` and the failure codes."""
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np

__all__ = ['FAILURE_CODES', 'ParseResult', 'InvalidGraph', 'RELATION_KEYS']

#: ``ParseResult.code`` values; index in this tuple = the integer code stored by the metric.
FAILURE_CODES = ('ok', 'no_json', 'invalid_json', 'not_object', 'missing_field', 'wrong_type', 'bad_box',
                 'box_out_of_canvas', 'duplicate_id', 'dangling_id', 'not_text', 'search_limit', 'missing')
#: Keys of the relation list of a graph (``relations`` is an alias).
RELATION_KEYS = ('relationships', 'relations')


@dataclass
class ParseResult:
    """One parsed VLM answer.

    ``ok`` is False for outputs that are not a structurally valid graph (then ``code``/``reason`` say why and
    every array is empty). Objects: ``bboxes`` [N, 4] float32 xyxy in image pixels, ``labels`` [N] int64
    (0-based, -1 = unknown class), ``scores`` [N] float32 (1 when absent), ``ids`` / ``names`` (normalised
    class names). Relations, in output order: ``pair_idxs`` [R, 2] int64 into the objects,
    ``rel_labels`` [R] int64 (0-based, -1 = unknown predicate), ``rel_scores`` [R] float32 (1 when absent).
    ``object_words`` / ``predicate_words``: the model's own words, as written (whitespace-stripped, before
    normalisation and any vocabulary mapping), one per object / relation. ``pixel_like``: whether the boxes
    look like image pixels read on the canvas (see the module docstring; None = cannot tell).
    """
    ok: bool
    code: str = 'ok'
    reason: str = ''
    bboxes: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), np.float32))
    labels: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    scores: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    ids: List[str] = field(default_factory=list)
    names: List[str] = field(default_factory=list)
    pair_idxs: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    rel_labels: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rel_scores: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    predicate_names: List[str] = field(default_factory=list)
    has_scores: bool = False
    warnings: List[str] = field(default_factory=list)
    object_words: List[str] = field(default_factory=list)
    predicate_words: List[str] = field(default_factory=list)
    pixel_like: Optional[bool] = None

    @property
    def code_index(self) -> int:
        return FAILURE_CODES.index(self.code)

    @property
    def num_objects(self) -> int:
        return int(self.labels.shape[0])

    @property
    def num_relations(self) -> int:
        return int(self.rel_labels.shape[0])

    @property
    def known_relations(self) -> np.ndarray:
        """[R] bool: subject class, object class and predicate are all dataset names."""
        if not self.num_relations:
            return np.zeros(0, bool)
        return (self.rel_labels >= 0) & (self.labels[self.pair_idxs[:, 0]] >= 0) & \
            (self.labels[self.pair_idxs[:, 1]] >= 0)

    @property
    def num_unknown_objects(self) -> int:
        return int((self.labels < 0).sum())

    @property
    def num_unknown_relations(self) -> int:
        return int((~self.known_relations).sum())

    @classmethod
    def failure(cls, code: str, reason: str) -> 'ParseResult':
        assert code in FAILURE_CODES and code != 'ok', code
        return cls(ok=False, code=code, reason=reason)



class InvalidGraph(Exception):
    """Raised inside the parser for an answer that is not a structurally valid graph; ``code`` in
    :data:`FAILURE_CODES`, ``reason`` a sentence naming the offending field."""

    def __init__(self, code: str, reason: str):
        super().__init__(reason)
        self.code, self.reason = code, reason
