"""The types a scene-graph read produces and shares: the modes and score layouts, :class:`SceneGraphBatch`
(one validated, padded batch), :class:`ObjectCounts` (images whose object list differs from the GT), and the
small padding and per-sample checks both readers use (:mod:`.reader`)."""
import functools
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence

import torch
from torch import Tensor

from ..functional.ranking import RankedLists
from ..functional.scores import RelationScores, lengths_mask, pad_rows, padded_positions, scatters
from .fields import get_field, sample_name, to_tensor
from .pairs import RelationPairs


MODES = ('predcls', 'sgcls', 'sgdet', 'phrdet')
#: How the columns of a [R, C] ``pred_relations.scores`` matrix are read (P = number of predicates):
#: 'auto': C = P + 1 -> column 0 is "no relation"; C = P -> no background column;
#: 'background_first': C must be P + 1, column 0 = no relation; 'background_last': C must be P + 1, column P =
#: no relation; 'no_background': C must be P. 1-D scores with ``pred_relations.labels`` are read alike by all.
SCORE_LAYOUTS = ('auto', 'background_first', 'background_last', 'no_background')
# what each mode needs predicted: PredCls nothing, SGCls labels/scores, SGDet/PhrDet boxes too
_STRENGTH = {'predcls': 0, 'sgcls': 1, 'sgdet': 2, 'phrdet': 2}

# how many sample names the object-count warning lists
_SHOWN_SAMPLES = 5


class ObjectCounts:
    """Images whose predicted object list is shorter or longer than the GT (PredCls / SGCls).

    The legacy evaluator evaluates them (it only prints "Num of GT boxes is not matching with num of pred
    boxes in SGCLS"); so do the metrics by default, collecting them here for one warning per evaluation
    (:meth:`warn`). ``strict=True`` refuses the first such image with a ValueError naming it.
    """

    def __init__(self, strict: bool = False) -> None:
        self.strict = bool(strict)
        self.count = 0
        self.examples: List[str] = []

    def add(self, mode: str, sample: Any, model_count: int, gt_count: int) -> None:
        field = 'pred_instances.bboxes' if get_field(get_field(sample, 'pred_instances'), 'bboxes') is not None \
            else 'pred_instances.labels'
        if self.strict:
            raise ValueError(
                f'{sample_name(sample)}: {mode} expects the model\'s objects (`{field}`) on the {gt_count} GT '
                f'boxes, got {model_count}; strict_counts=True refuses such images (by default they are '
                f'evaluated as the legacy evaluator does, with a warning)')
        self.count += 1
        if len(self.examples) < _SHOWN_SAMPLES:
            self.examples.append(sample_name(sample))

    def message(self, mode: str) -> Optional[str]:
        """The warning text, or None when every image had as many predicted objects as GT boxes."""
        if not self.count:
            return None
        more = ', ...' if self.count > len(self.examples) else ''
        rule = ("the GT boxes and labels at the model's pair indices" if mode == 'predcls' else
                "the model's boxes, labels and pair indices")
        return (f'{self.count} image(s) in {mode} have a predicted object list of another length than the GT '
                f'(first: {", ".join(self.examples)}{more}); evaluated as the legacy evaluator does ({rule}); '
                f'pass strict_counts=True to refuse them')

    def warn(self, mode: str) -> None:
        """Log the collected images once (MMEngine's current logger when available) and start over."""
        text = self.message(mode)
        self.count, self.examples = 0, []
        if text is None:
            return
        try:
            import logging
            from mmengine.logging import print_log
            print_log(text, logger='current', level=logging.WARNING)
        except ImportError:  # pragma: no cover - mmengine is a dependency of the metrics
            import warnings
            warnings.warn(text)


@dataclass
class SceneGraphBatch:
    """A batch of B scene-graph samples, ready for the functional layer.

    Objects: N predicted / M GT per image (padded). Relations: R predicted pairs, G GT relations (padded).
    ``scores`` holds the predicate scores (:class:`~mmsgg_eval.functional.scores.RelationScores`, in the
    layout chosen for the batch size). All labels are 0-based; boxes are xyxy in the original image frame
    (float32).
    """
    sample_idx: Tensor          # [B] int64 (-1: the sample has none)
    pred_boxes: Tensor          # [B, N, 4]
    pred_labels: Tensor         # [B, N] (-1 padding)
    pred_scores: Tensor         # [B, N] float32
    gt_boxes: Tensor            # [B, M, 4]
    gt_labels: Tensor           # [B, M] (-1 padding)
    gt_pairs: Tensor            # [B, G, 2]
    gt_predicates: Tensor       # [B, G]
    gt_valid: Tensor            # [B, G] bool
    pairs: RelationPairs        # the predicted pairs (``rel_pairs`` [B, R, 2] padded on first use)
    rel_width: int              # R
    num_rel_preds: Tensor       # [B] int64
    scores: RelationScores
    pred_masks: Optional[List[Tensor]] = None
    gt_masks: Optional[List[Tensor]] = None
    score_width: Optional[List[int]] = None  # score columns each sample gave (-1: single-label scores)
    ranked_lists: Optional[RankedLists] = None  # both ranked lists, when built while the scores were read
    gt_counts: Optional[List[int]] = None  # GT relations of each image (host ints: sizes known without a sync)
    ids_missing: bool = False  # some sample has no ``sample_idx`` (-1 in ``sample_idx``; known on the host)
    rel_lengths: Optional[List[int]] = None  # predicted pairs of each image (None: every image has R)
    _rel_valid: Optional[Tensor] = field(default=None, init=False, repr=False, compare=False)

    @property
    def device(self) -> torch.device:
        return self.gt_valid.device

    @property
    def rel_valid(self) -> Tensor:
        """[B, R] bool, True on real pairs; built on first use (the compiled path, which reads each image's pairs
        up to its count, never asks)."""
        if self._rel_valid is None:
            self._rel_valid = _valid_mask(self.rel_lengths, self.sample_idx.shape[0], self.rel_width, self.device)
        return self._rel_valid

    @property
    def rel_pairs(self) -> Tensor:
        """[B, R, 2] int64 predicted (subject, object) indices, zero-padded."""
        return self.pairs.padded

    @property
    def pair_rows(self) -> List[Tensor]:
        """The predicted pairs as the compiled kernels read them (per image where the reader kept them)."""
        return self.pairs.kernel_input

    @property
    def num_predicates(self) -> int:
        return self.scores.num_predicates

    @property
    def gc_prob(self) -> Tensor:
        """[B, R] best non-background score of each pair (0 padding)."""
        return self.scores.best

    def gc_predicate_at(self, order: Tensor, valid: Tensor) -> Tensor:
        """Graph-constrained predicate (first maximal column) of pairs ``order`` [B, K]; invalid entries 0."""
        return self.scores.predicate_at(order, valid)


def _pad(tensors: Sequence[Any], value: float) -> Tensor:
    """[B, L, ...] batch of tensors [L_b, ...]: one stacked copy when every L_b is equal (fixed-size outputs),
    else padded with ``value``. Mixed dtypes are promoted first (a float field among integer ones keeps its
    fractions for the validation); mmdet boxes objects are taken by their tensors; irregular trailing shapes
    or devices raise (RuntimeError / ValueError)."""
    return pad_with_lengths(tensors, value)[0]


def pad_with_lengths(tensors: Sequence[Any], value: float, positions: Optional[dict] = None):
    """:func:`_pad` and the per-image lengths L_b (None when they are all equal: no padding). ``positions``
    caches :func:`~mmsgg_eval.functional.scores.padded_positions` by lengths, for fields of equal lengths."""
    tensors = [t if type(t) is Tensor else to_tensor(t) for t in tensors]
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) > 1:
        common = functools.reduce(torch.promote_types, dtypes)
        tensors = [t.to(common) for t in tensors]
    shapes = [t.shape for t in tensors]
    if any(not shape for shape in shapes):
        raise TypeError('a 0-d value has no entries')
    lengths = [shape[0] for shape in shapes]
    width = max(lengths, default=0)
    if lengths.count(width) == len(lengths):  # no padding (pad_rows stacks them)
        return pad_rows(tensors, value, lengths), None
    where = None
    if positions is not None and scatters(lengths):
        key = tuple(lengths)
        where = positions.get(key)
        if where is None or where.device != tensors[0].device:
            where = positions[key] = padded_positions(lengths, width, tensors[0].device)
    return pad_rows(tensors, value, lengths, where), lengths


def _entries(values: Tensor, count: int, sample: Any, field: str, reason: str = '') -> Tensor:
    values = values.reshape(-1)
    if values.numel() != count:
        raise ValueError(f'{sample_name(sample)}: `{field}` has {values.numel()} entries, expected {count}{reason}')
    return values


def _pairs(pairs: Tensor, sample: Any, field: str) -> Tensor:
    if pairs.numel() == 0:
        return pairs.reshape(0, 2)
    if pairs.dim() != 2 or pairs.shape[1] != 2:
        raise ValueError(f'{sample_name(sample)}: `{field}` must have shape [R, 2], got {list(pairs.shape)}')
    return pairs


def _weaker(produced: Any, mode: str) -> bool:
    """Whether a model that produced ``produced`` predictions (metainfo ``pred_mode``) lacks what ``mode`` reads."""
    return produced in _STRENGTH and _STRENGTH[produced] < _STRENGTH[mode]


def _check_produced_mode(sample: Any, produced: Any, mode: str) -> None:
    if _weaker(produced, mode):
        raise ValueError(f'{sample_name(sample)}: the model produced {produced} predictions (metainfo '
                         f'`pred_mode`), but the metric evaluates {mode!r}: {mode} needs predicted '
                         f'{"boxes, labels and scores" if mode in ("sgdet", "phrdet") else "labels and scores"} '
                         f'in `pred_instances`; set the metric mode to {produced!r} or use a model that predicts '
                         f'them')


def _valid_mask(lengths: Optional[List[int]], batch: int, width: int, device: torch.device) -> Tensor:
    """[B, width] True on real entries; ``lengths`` None = every image has ``width`` entries."""
    if lengths is None:
        return torch.ones((batch, width), dtype=torch.bool, device=device)
    return lengths_mask(lengths, width, device)
