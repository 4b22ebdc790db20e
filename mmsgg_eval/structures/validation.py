"""The value rules of the data contract, written once and applied to padded [B, L, ...] batches.

Every reader (the field-wise reader of dict batches, the per-sample reader of anything else; small or large
batch; CPU or GPU) builds the same padded tensors and hands them to :func:`validate_padded`, so a value is
accepted or refused the same way whatever path it took. The rules:

* boxes: finite, xyxy with x2 >= x1 and y2 >= y1;
* index fields (class labels, predicate labels, pair indices): integer dtype, or floating values that
  are integers (3.0, not 2.5, NaN or inf), in [0, bound) where the bound is the number of classes /
  predicates, or the number of objects of the image's list for pair indices;
* scores (object scores, predicate scores, the background column included): finite and >= 0. Scores rank predictions through products
  (predicate score x subject score x object score); the legacy models give softmax probabilities, and any
  non-negative scale (e.g. a VLM's 0-100 confidences) ranks the same way, so values above 1 are accepted;
  negative values (logits) are refused: they would change the order of those products;
* self-pairs (subject index == object index) are accepted in predictions and GT: the legacy evaluator
  neither filters nor refuses them (a predicted self-pair can hit a GT self-pair like any other pair).

One host synchronisation decides the whole batch (none on the CPU when the compiled reader already read every
rule: its per-image flags and value ranges decide a valid batch on the host); only when a rule fails is the first
offending sample (in batch order), field and entry looked up, for a ValueError that names them.
"""
import operator
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from ..functional.scores import lengths_mask
from ..functional.transfer import host_tensor
from .fields import sample_name


@dataclass
class FieldRule:
    """One field of a padded batch and the rule it must satisfy.

    ``kind``: 'boxes' | 'index' | 'score'. ``values`` [B, L, ...]; ``lengths``: real entries per image
    (None: every image has L). ``bound``: exclusive upper bound of an index field, one int or per image.
    ``what`` names the indices in messages ('class', 'predicate', 'object'); ``note`` is appended to the
    message (e.g. which object list pair indices point into). ``zero_padded``: the padding entries of an
    index field are 0, which passes the rule wherever an image has entries, so no padding mask is needed.
    ``value_range``: the (min, max) of each image's real entries of an integer index field when the reader has
    them (0 and -1 for an image without entries): the rule then reads no entry. ``values`` may then be None
    (a field the reader kept unpadded) with ``padded`` giving them, read only to describe a bad entry. ``bad``:
    the [B] bool result of the rule when the reader already read it (boxes and scores padded by the compiled
    kernels): the rule then reads no entry.
    """
    path: str
    kind: str
    values: Optional[Tensor]
    lengths: Optional[Sequence[int]] = None
    bound: Union[int, Sequence[int], None] = None
    what: str = ''
    note: Union[str, Callable[[int], str]] = ''
    zero_padded: bool = False
    value_range: Optional[Tuple[Tensor, Tensor]] = None  # integer index field: (min, max) [B] of real entries
    padded: Optional[Callable[[], Tensor]] = None  # the padded values when ``values`` is None
    bad: Optional[Tensor] = None  # [B] bool: images breaking the rule, when the reader read it

    def has_entries(self) -> bool:
        if self.values is not None:
            return bool(self.values.numel())
        return any(n > 0 for n in self.lengths)  # kept unpadded: the reader gives every image's length

    def entries(self) -> Tensor:
        """The padded values (built when the reader kept them unpadded)."""
        return self.values if self.values is not None else self.padded()


def _real(values: Tensor, lengths: Optional[Sequence[int]]) -> Optional[Tensor]:
    """[B, L] mask of real (not padding) entries, or None when there is no padding."""
    if lengths is None or all(n == values.shape[1] for n in lengths):
        return None
    return lengths_mask(lengths, values.shape[1], values.device)


def _row_min_max(values: Tensor):
    """(min, max) of each row of [B, L] (``aminmax`` along a dim is slow for floats on the CPU)."""
    if values.is_floating_point():
        return values.amin(1), values.amax(1)
    return torch.aminmax(values, dim=1)


def bad_images(rule: FieldRule) -> Tensor:
    """[B] bool: images with an entry breaking the rule (padding entries never count).

    Per-image reductions (min / max of each image's entries), so a valid batch costs about one pass over
    each field.
    """
    if rule.bad is not None:
        return rule.bad
    v = rule.values
    # a zero-padded index field needs no padding mask: a padding 0 is never below the range and is at or above
    # the bound only where the bound is 0, i.e. the image has no object to point to (then only images with
    # entries count)
    zero_padded = rule.kind == 'index' and rule.zero_padded
    if rule.kind == 'index' and rule.value_range is not None and (v is None or not v.is_floating_point()):
        # the reader's (min, max) of each image's real entries (0, -1 without entries)
        device = rule.value_range[0].device if v is None else v.device
        low, high = (t.to(device) for t in rule.value_range)
        return _outside_bound(rule, low, high, device, zero_padded)
    real = None if zero_padded else _real(v, rule.lengths)
    if real is not None:
        real = real.view(*real.shape, *([1] * (v.dim() - 2)))
    if rule.kind == 'boxes':  # padding boxes are zeros: finite and ordered
        # per image: every coordinate finite (min / max propagate NaN) and every side x2 - x1, y2 - y1 >= 0 (for
        # finite values a - b >= 0 exactly when a >= b)
        if not v.numel():
            return torch.zeros(v.shape[0], dtype=torch.bool, device=v.device)
        low, high = _row_min_max(v.flatten(1))
        sides = (v[..., 2:] - v[..., :2]).flatten(1).amin(1)
        return ~(torch.isfinite(low) & torch.isfinite(high) & (sides >= 0))
    if rule.kind == 'score':  # padding scores are 0; min / max propagate NaN
        low, high = _row_min_max(v.flatten(1))
        return ~(torch.isfinite(low) & torch.isfinite(high) & (low >= 0))
    if real is None:
        low, high = _row_min_max(v.flatten(1))
    else:
        low = torch.where(real, v, torch.zeros_like(v)).flatten(1).amin(1)  # 0: never below the range
        high = torch.where(real, v, torch.full_like(v, -1)).flatten(1).amax(1)  # -1: never above it
    bad = _outside_bound(rule, low, high, v.device, zero_padded)
    if v.is_floating_point():  # fractional values; NaN != NaN (NaN also escapes the comparisons above)
        fractional = v != v.round()
        if real is not None:
            fractional &= real
        bad |= fractional.flatten(1).any(1)
    return bad


def _outside_bound(rule: FieldRule, low: Tensor, high: Tensor, device: torch.device, zero_padded: bool) -> Tensor:
    """[B] bool: an index field's per-image (min, max) of its entries below 0 or at / above its bound."""
    bound = rule.bound
    if not isinstance(bound, int):
        bound = host_tensor(list(bound), torch.long, device)
    above = high >= bound
    if zero_padded and rule.lengths is not None:
        above &= host_tensor(list(rule.lengths), torch.long, device) > 0
    return (low < 0) | above


def validate_padded(rules: List[FieldRule], samples: Sequence[Any],
                    extra: Optional[List[Tensor]] = None, extra_messages: Optional[List[Callable[[int], str]]] = None
                    ) -> None:
    """Raise a ValueError naming the first sample (in batch order) and field that breaks a rule.

    ``extra``: further [B] bool tensors of bad images computed elsewhere (e.g. predicate-score ranges) with
    ``extra_messages[i](b)`` building their message.
    """
    checked = [r for r in rules if r.has_entries()]
    if _passes_on_host(checked, extra or []):  # the CPU reader's kernels read every rule already
        return
    ranged = [i for i, r in enumerate(checked) if _reads_range(r)]
    order = [i for i in range(len(checked)) if i not in ranged]
    flags = [bad_images(checked[i]) for i in order]
    order += [len(checked) + i for i in range(len(extra or []))]
    flags += list(extra or [])
    if not flags and not ranged:
        return
    table = torch.stack([f.to(flags[0].device) for f in flags]) if flags else None  # [F, B], rows in ``order``
    if ranged:  # the index rules that read the reader's value ranges, in one batch of operations
        group = _outside_bounds([checked[i] for i in ranged])
        table = group if table is None else torch.cat([table, group.to(table.device)])
        order += ranged
    if not bool(table.any()):  # the one host synchronisation of a valid batch
        return
    image = int(table.any(0).nonzero()[0, 0])
    field = min(order[int(row)] for row in table[:, image].nonzero()[:, 0])  # the first rule in ``rules`` order
    if field >= len(checked):
        raise ValueError(extra_messages[field - len(checked)](image))
    raise ValueError(describe(checked[field], image, samples[image]))


def _passes_on_host(rules: List[FieldRule], extra: List[Tensor]) -> bool:
    """True when every rule and flag is known to pass from host values alone: CPU tensors of per-image results the
    compiled reader gave (``bad`` flags, index value ranges within bounds; no torch operation). False when any is
    not such a value or some image may break a rule: the batch then takes the rules' torch path, which decides it
    (and names the first offending sample and field). A host read costs nothing on the CPU; a device's batch never
    has these CPU values, so this adds no synchronisation there."""
    for flags in [r.bad for r in rules if r.kind != 'index'] + extra:
        if flags is None or flags.device.type != 'cpu' or True in flags.tolist():
            return False
    for rule in rules:
        if rule.kind != 'index':
            continue
        if not _reads_range(rule):
            return False
        low, high = rule.value_range[0].tolist(), rule.value_range[1].tolist()
        if low and min(low) < 0:
            return False
        bound = rule.bound
        if isinstance(bound, int):
            if high and max(high) >= bound:
                return False
        elif (not isinstance(bound, (list, tuple)) or len(bound) != len(high)
              or not all(map(operator.lt, high, bound))):  # (an image without entries has max -1)
            return False
    return True


def _reads_range(rule: FieldRule) -> bool:
    """Whether :func:`bad_images` of ``rule`` reads only the reader's value ranges on the CPU (the compiled
    padding's index fields), which :func:`_outside_bounds` then decides with the other such rules at once."""
    v = rule.values
    return (rule.kind == 'index' and rule.bad is None and rule.value_range is not None
            and rule.value_range[0].device.type == 'cpu' and (v is None or (not v.is_floating_point()
                                                                           and v.device.type == 'cpu')))


def _outside_bounds(rules: List[FieldRule]) -> Tensor:
    """[F, B] bool: :func:`_outside_bound` of each index rule's value range (:func:`_reads_range`), in one batch
    of operations on the CPU."""
    batch = rules[0].value_range[0].shape[0]
    low = torch.stack([r.value_range[0] for r in rules])
    high = torch.stack([r.value_range[1] for r in rules])
    bounds = [[r.bound] * batch if isinstance(r.bound, int) else list(r.bound) for r in rules]
    # a zero-padded field counts as above its bound only in images with entries (see bad_images)
    counted = [[n > 0 for n in r.lengths] if r.zero_padded and r.lengths is not None else [True] * batch
               for r in rules]
    cpu = torch.device('cpu')
    above = (high >= host_tensor(bounds, torch.long, cpu)) & host_tensor(counted, torch.bool, cpu)
    return (low < 0) | above


def describe(rule: FieldRule, image: int, sample: Any) -> str:
    """Message for the first bad entry of image ``image`` under ``rule``."""
    values = rule.entries()
    length = values.shape[1] if rule.lengths is None else rule.lengths[image]
    bound = rule.bound if rule.bound is None or isinstance(rule.bound, int) else list(rule.bound)[image]
    entries = values[image, :length]  # each entry as an image of its own: the same rule finds it
    per_entry = FieldRule(rule.path, rule.kind, entries.unsqueeze(1), bound=bound, what=rule.what)
    row = int(bad_images(per_entry).nonzero()[0, 0])
    value = values[image, row]
    shown = value.tolist()
    name = sample_name(sample)
    note = rule.note(image) if callable(rule.note) else rule.note
    note = f' {note}' if note else ''
    if rule.kind == 'boxes':
        if not bool(torch.isfinite(value).all()):
            return f'{name}: `{rule.path}`[{row}] = {shown} contains NaN or inf'
        return (f'{name}: `{rule.path}`[{row}] = {shown} has x2 < x1 or y2 < y1 (boxes must be xyxy in '
                f'original image pixels)')
    if rule.kind == 'score':
        if not bool(torch.isfinite(value)):
            return f'{name}: `{rule.path}`[{row}] = {shown} contains NaN or inf'
        return (f'{name}: `{rule.path}`[{row}] = {shown} is negative; scores must be >= 0 (probabilities, '
                f'e.g. softmax outputs, not logits)')
    entries = value.reshape(-1)
    if value.is_floating_point() and not bool((entries == entries.round()).all()):
        return (f'{name}: `{rule.path}`[{row}] = {shown}: {rule.what} indices must be integers (integer '
                f'dtype or integer-valued floats){note}')
    if rule.what == 'object':
        return (f'{name}: `{rule.path}` has pair {shown} with an index outside [0, {bound}) (the object list '
                f'has {bound} entries){note}')
    return (f'{name}: `{rule.path}` has {rule.what} index {shown} outside [0, {bound}) (labels are 0-based '
            f'into dataset_meta){note}')


def check_tensor(kind: str, values: Tensor, sample: Any, path: str, bound: Optional[int] = None,
                 what: str = '') -> None:
    """Apply one rule to the entries of a single sample's field ``values`` [L, ...]."""
    rule = FieldRule(path, kind, values[None], bound=bound, what=what)
    if values.numel() and bool(bad_images(rule).any()):
        raise ValueError(describe(rule, 0, sample))


def box_shape(boxes: Tensor, sample: Any, field: str) -> Tensor:
    """One sample's xyxy boxes as float32 [N, 4] (an empty value becomes [0, 4]); other shapes raise."""
    if boxes.numel() == 0:
        return boxes.reshape(0, 4).float()
    if boxes.dim() != 2 or boxes.shape[1] != 4:
        raise ValueError(f'{sample_name(sample)}: `{field}` must have shape [N, 4] (xyxy), '
                         f'got {list(boxes.shape)}')
    return boxes.float()


def check_boxes(boxes: Tensor, sample: Any, field: str) -> Tensor:
    """One sample's xyxy boxes [N, 4] under the box rule (shape too); returns them as float32."""
    boxes = box_shape(boxes, sample, field)
    check_tensor('boxes', boxes, sample, field)
    return boxes


def check_finite(values: Tensor, sample: Any, field: str) -> Tensor:
    """``values`` unchanged when every entry is finite; else a ValueError naming the sample and ``field``."""
    if values.numel() and not bool(torch.isfinite(values).all()):
        raise ValueError(f'{sample_name(sample)}: `{field}` contains NaN or inf')
    return values
