"""Predicate score matrices of a batch, in one of three layouts, behind one object.

Every image b has R_b predicted pairs and a score row of P predicate columns per pair (the background
column, when the model gave one, is already left out; entries that are not candidates, in single-label
rows, are ``-inf``). How the rows are held depends on the batch:

* ``stacked``: every image has the same R and the same columns: one [B, R, P] tensor (``dense``, a view
  of one stacked copy) and its [B * R, P] view ``flat``;
* ``concatenated``: images of unequal R: the [sum R, P] concatenation ``flat`` (a view of one copy of the
  inputs) with the first row of each image in ``start``;
* ``views``: images with large matrices (SGDet with all pairs on the CPU): ``matrices[b]`` is image b's
  [R_b, P] view of the input, never copied; only selected rows are gathered (whole input rows, then their
  predicate columns, when the inputs are contiguous and start their predicates at one column);
* ``compiled``: as ``views``, read by the compiled CPU kernels (:mod:`.compiled`: one pass per matrix for the
  row maxima and the value check, rows gathered and the no-graph-constraint list ranked in place); any batch of
  contiguous float32 CPU matrices of one background convention without single-label images, when the kernels
  are built (else ``views``).

Which layout a batch gets is decided by :func:`choose_layout` (with its size limits, next to it).

The functional layer reads rows only through :meth:`RelationScores.rows`, :meth:`~RelationScores.predicate_at`
and the per-pair row maxima ``best`` (and ``dense`` when present), so the layout is a speed choice that never
changes a number. Every layout reads each score once for the row maxima and once for the value check
(:attr:`RelationScores.bad_images`).
"""
import math
import threading
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from . import compiled
from .limits import STACK_SCORE_ROWS
from .transfer import host_tensor, known_nonzero, sync_free

LAYOUTS = ('stacked', 'concatenated', 'views', 'compiled')


def lengths_mask(lengths: Sequence[int], width: int, device: torch.device) -> Tensor:
    """[B, width] bool, True on the first ``lengths[b]`` entries of row b (the real, not padding, entries)."""
    kernels = compiled.kernels() if torch.device(device).type == 'cpu' else None
    if kernels is not None:  # one memset per row
        return kernels.lengths_mask([int(n) for n in lengths], int(width))
    lengths_t = host_tensor(list(lengths), torch.long, device)
    return torch.arange(width, device=device)[None, :] < lengths_t[:, None]


def padded_positions(lengths: Sequence[int], width: int, device: torch.device) -> Tensor:
    """Flat positions ``b * width + i`` of entry i of image b, for every real entry, in concatenation order
    (image by image): where the rows of a concatenation go in a [B, width] padded layout. Their number is known
    (the sum of the lengths), so the device is not waited for."""
    return known_nonzero(lengths_mask(lengths, width, device).view(-1), sum(lengths))


# from this many rows per tensor on average, pad_rows copies each tensor into place instead of scattering one
# concatenation (per-tensor copies then cost less than computing and using the scatter positions)
LONG_ROWS = 128


def scatters(lengths: Sequence[int]) -> bool:
    """Whether :func:`pad_rows` pads tensors of these lengths by scattering a concatenation (so that it uses
    :func:`padded_positions`): unequal lengths, shorter than ``LONG_ROWS`` rows on average."""
    width = max(lengths, default=0)
    return lengths.count(width) != len(lengths) and sum(lengths) < LONG_ROWS * len(lengths)


def pad_rows(tensors: Sequence[Tensor], value: float, lengths: Optional[Sequence[int]] = None,
             positions: Optional[Tensor] = None) -> Tensor:
    """[B, L, ...] from B tensors [L_b, ...] (L = max L_b), padding with ``value``: one stacked copy when every
    L_b is equal; else, for short tensors (see :func:`scatters`), one concatenation scattered into the padded
    tensor, for long ones each tensor copied into place. ``lengths`` (with ``positions``,
    :func:`padded_positions` of them): the L_b when the caller has them, with tensors of one dtype. Tensors of
    another trailing shape, dtype or device than the first raise RuntimeError; a 0-d tensor raises TypeError."""
    tensors = list(tensors)
    if lengths is None:
        if any(t.dim() == 0 for t in tensors):
            raise TypeError('pad_rows: 0-d tensors have no rows')
        if any(t.dtype != tensors[0].dtype for t in tensors):
            raise RuntimeError('pad_rows: tensors of different dtypes')
        lengths = [t.shape[0] for t in tensors]
    width = max(lengths, default=0)
    if lengths.count(width) == len(tensors):
        return torch.stack(tensors)
    if not scatters(lengths):
        device = tensors[0].device
        if any(t.device != device for t in tensors):
            raise RuntimeError('pad_rows: tensors on different devices')
        kernels = compiled.kernels() if device.type == 'cpu' and value == 0 else None
        if kernels is not None and all(t.is_contiguous() for t in tensors):
            return kernels.pad_zero_rows(tensors, width)  # (its checks raise RuntimeError too)
        return pad_sequence(tensors, batch_first=True, padding_value=value)
    flat = torch.cat(tensors)
    out = flat.new_full((len(tensors) * width,) + tuple(flat.shape[1:]), value)
    if positions is None or positions.device != flat.device:
        positions = padded_positions(lengths, width, flat.device)
    out.index_copy_(0, positions, flat)
    return out.view((len(tensors), width) + tuple(flat.shape[1:]))


class ScoreWorkspace:
    """A reusable CPU buffer for the copy of a batch's score matrices (stacked or concatenated layout) or a ranking
    pass' outputs.

    A fresh tensor of tens of MB is mapped anew by the C allocator, and touching its pages the first time costs
    more than the copy itself (measured on a 2-core VM: ~22 ms for a 28 MB pool against ~5 ms for the copy into
    pages already mapped). One owner (a metric) keeps a workspace and ranks one batch at a time: the batch built
    in it must be done with before the next one is. It grows to the largest batch seen (+25%); its memory is one
    of the process' buffers (:func:`process_buffer`), held while the workspace lives and taken again by a
    workspace built later (another metric, an evaluator built anew) once nothing views it. Other devices get None
    (their caching allocators already reuse memory). ``handed``: how many times the buffer was handed out (a
    batch built in it is intact while that is unchanged)."""

    def __init__(self) -> None:
        self._flat: Optional[Tensor] = None
        self.handed = 0

    def take(self, shape: Sequence[int], device: torch.device) -> Optional[Tensor]:
        """A float32 tensor of ``shape`` in the buffer (its old contents), or None off the CPU."""
        if torch.device(device).type != 'cpu':
            return None
        size = math.prod(int(n) for n in shape)
        if self._flat is None or self._flat.numel() < size:
            self._flat = None  # (the buffer outgrown is free for others first)
            self._flat = process_buffer(size)
        self.handed += 1
        return self._flat[:size].view(tuple(shape))


#: The most float32 buffers the process keeps (:func:`process_buffer`): the float32 copies of a pool's score
#: matrices (:func:`float32_copies`: a pool's copies live while its pass runs, the previous pool's rows are
#: finished and the next pool is read, three at a time per reader) and the score workspaces (three per metric that
#: reads its pools). Each was new memory when none free fitted; they are held for the life of the process (~200 MB
#: of copies for 128 SGDet images of 6,320 pairs, ~20 MB of pass outputs per reading metric).
KEPT_PROCESS_BUFFERS = 12
_process_buffers: List[Tensor] = []
_process_buffers_lock = threading.Lock()
_STORAGE_USE_COUNT = getattr(torch._C, '_storage_Use_Count', None)


def float32_copies(tensors: Sequence[Tensor], which: Sequence[bool]) -> List[Tensor]:
    """``tensors`` with each CPU tensor marked in ``which`` replaced by its C-contiguous float32 copy (score
    matrices in half, bfloat16 or float64, or strided views: what the compiled kernels read), the copies side by
    side in one buffer of the process' own. A buffer is handed out again only once no tensor views it (its
    storage's use count, where torch tells it; else new memory each time), whoever keeps the copies (a pass still
    reading them, a read shared with another metric): copies never change under a reader. Reused memory costs
    no page faults, and the buffers outlive the metrics that filled them (an evaluator built anew, a second
    evaluation): measured on `sgdet-full` (2,000 images, two threads, metrics built anew for each evaluation),
    float64 matrices 5.9-6.2k -> 7.1-7.8k images/s, column views of float32 ones 6.0k -> 9.0-9.9k (the compiled
    layout now), bfloat16 10.4-10.6k -> 10.4-11.3k, half 9.5k -> 10.5-10.8k (float32: 18-21k). Marked tensors on
    other devices are converted to float32 as they are."""
    on_cpu = [bool(w) and t.device.type == 'cpu' for t, w in zip(tensors, which)]
    size = sum(t.numel() for t, c in zip(tensors, on_cpu) if c)
    flat, at, out = process_buffer(size)[:size] if size else torch.empty(0), 0, []
    for t, w, c in zip(tensors, which, on_cpu):
        if c:
            copy = flat[at:at + t.numel()].view(t.shape)
            out.append(copy.copy_(t))
            at += t.numel()
        else:  # (other devices: converted as they are; their caching allocators reuse memory)
            out.append(t.float() if w else t)
    return out


def process_buffer(size: int) -> Tensor:
    """A float32 view of a whole buffer of the process' own that nothing else views, of at least ``size`` elements
    (the smallest kept one that fits and is at most four times as large, else new memory of ``size`` + 25%), its
    old contents. On a miss, the free buffers too small for it but at least a quarter of it are let go (a use
    outgrew them), and the new one is kept while fewer than :data:`KEPT_PROCESS_BUFFERS` are held, else in
    place of the smallest free one. The caller's view keeps it from being handed out again: once no tensor views
    it (its storage's use count, where torch tells it; else new memory each time) it is free for the next
    caller."""
    with _process_buffers_lock:  # (the view is made under the lock: from then on the buffer counts as used)
        free = [b for b in _process_buffers if _only_user(b)]
        fits = [b for b in free if size <= b.numel() <= 4 * size + 4096]  # (a large one is left for large uses)
        if fits:
            return min(fits, key=Tensor.numel)[:]
        outgrown = {id(b) for b in free if 4 * b.numel() >= size > b.numel()}  # (a use outgrew them: let go)
        _process_buffers[:] = [b for b in _process_buffers if id(b) not in outgrown]
        free = [b for b in free if id(b) not in outgrown]
        buffer = torch.empty(size + size // 4, dtype=torch.float32)
        if _only_user(buffer):
            if len(_process_buffers) >= KEPT_PROCESS_BUFFERS and free:
                smallest = min(free, key=Tensor.numel)
                _process_buffers[:] = [b for b in _process_buffers if b is not smallest]
            if len(_process_buffers) < KEPT_PROCESS_BUFFERS:
                _process_buffers.append(buffer)
        return buffer[:]


def _only_user(buffer: Tensor) -> bool:
    """Whether no tensor but ``buffer`` itself holds its memory (False where torch does not tell)."""
    if _STORAGE_USE_COUNT is None:
        return False
    try:
        return _STORAGE_USE_COUNT(buffer.untyped_storage()._cdata) == 1
    except (AttributeError, RuntimeError, TypeError):
        return False


def _copy_into(tensors: List[Tensor], out: Optional[Tensor], stack: bool) -> Tensor:
    """``torch.stack`` / ``torch.cat`` of float32 ``tensors``, into ``out`` when given."""
    join = torch.stack if stack else torch.cat
    return join(tensors) if out is None else join(tensors, out=out)


@dataclass
class RelationScores:
    """Predicate scores of a batch (see the module docstring for the layouts).

    ``best`` [B, R] is the best predicate score of each pair (0 padding; its column, the graph-constrained
    predicate, is found on demand for the rows that need it: :meth:`predicate_at`); ``bad_images`` [B] bool
    marks the images with a score entry that is NaN, +-inf or negative (the given scores of single-label
    images, every column of the input matrix, background included, otherwise), for input validation.
    """
    layout: str
    num_predicates: int
    best: Tensor
    bad_images: Tensor
    has_single_label: bool = False
    dense: Optional[Tensor] = None          # [B, R, P] (stacked)
    flat: Optional[Tensor] = None           # [sum R, P] (stacked, concatenated)
    start: Optional[Tensor] = None          # [B] first row of each image in ``flat``
    matrices: Optional[List[Tensor]] = None  # B x [R_b, P] (views)
    sources: Optional[List[Tensor]] = None   # B x the contiguous inputs (of ``matrices``, when they all are and
    column: int = 0                          # all start their predicates at this ``column``: views; compiled)

    @property
    def device(self) -> torch.device:
        return self.best.device

    def rows(self, image: Tensor, pos: Tensor) -> Tensor:
        """Score rows of pairs (image[i], pos[i]) -> [n, P]; ``image`` must be non-decreasing."""
        if self.flat is not None:
            return self.flat.index_select(0, self.start.index_select(0, image) + pos)
        if self.layout == 'compiled':
            return compiled.kernels().gather_rows(self.sources, image, pos, self.column, self.num_predicates)
        counts = torch.bincount(image, minlength=len(self.matrices)).tolist()
        if self.sources is not None:  # whole rows of contiguous inputs, copied into place, then their columns
            out = self.sources[0].new_empty((pos.numel(), self.column + self.num_predicates))
            start = 0
            for m, p, c in zip(self.sources, torch.split(pos, counts), counts):
                if c:
                    torch.index_select(m, 0, p, out=out[start:start + c])
                    start += c
            return out[:, self.column:]
        parts = [m.index_select(0, p) for m, p, c in zip(self.matrices, torch.split(pos, counts), counts) if c]
        if not parts:
            return torch.zeros((0, self.num_predicates), device=self.device)
        return torch.cat(parts)

    def predicate_at(self, order: Tensor, valid: Tensor) -> Tensor:
        """Graph-constrained predicate (first maximal column, as ``argmax``) of pairs ``order`` [B, K]; invalid
        entries 0. Only the valid entries' rows are arg-maxed, except where the scores are one copy (stacked,
        concatenated) off the CPU: there every entry's row is arg-maxed (invalid ones then set to 0), which needs
        no host synchronisation."""
        if self.flat is not None and sync_free(self.device) and self.num_predicates and order.numel() \
                and self.flat.shape[0]:
            row = (self.start[:, None] + torch.where(valid, order, 0)).clamp(max=self.flat.shape[0] - 1)
            best = self.flat.index_select(0, row.reshape(-1)).argmax(dim=1).view_as(order)
            return torch.where(valid, best, 0)
        out = torch.zeros_like(order)
        slot = valid.reshape(-1).nonzero().squeeze(1)  # b * K + k of the valid entries
        if slot.numel() and self.num_predicates:
            image = slot // order.shape[1]
            best = self.rows(image, order.reshape(-1).index_select(0, slot)).argmax(dim=1)
            out.view(-1).index_copy_(0, slot, best)
        return out


def _ranges_per_image(raw: Sequence[Tensor], single_label: Sequence[bool], given_scores: Sequence[Tensor],
                      device: torch.device) -> Tensor:
    """[B, 2] (min, max) of each image's score entries: its given scores when single-label (the densified
    matrix holds -inf on purpose), else its whole input matrix; (0, 0) for an image without entries."""
    zero = torch.zeros((), device=device)
    given = iter(given_scores)
    bounds = []
    for matrix, single in zip(raw, single_label):
        bounds.extend(_entry_range(next(given) if single else matrix, zero))
    return torch.stack(bounds).view(len(raw), 2) if bounds else torch.zeros((0, 2), device=device)


def _entry_range(entries: Tensor, zero: Tensor):
    """(min, max) of a tensor's entries, (0, 0) when it has none."""
    return torch.aminmax(entries) if entries.numel() else (zero, zero)


def _range_flags(value_range: Tensor) -> Tensor:
    """[B] bool from [B, 2] (min, max): NaN, +-inf or a negative value among the entries."""
    return ~(torch.isfinite(value_range).all(1) & (value_range[:, 0] >= 0))


# float32 bit patterns read as int32: +0.0 .. the largest finite float are 0 .. FINITE_BITS - 1 in the order of
# their values; +inf and every NaN with the sign bit clear lie above, every value with the sign bit set
# (negatives, -0.0, -inf, NaN with the sign bit) below 0
FINITE_BITS = 0x7F800000


def float_bits(values: Tensor) -> Tensor:
    """The int32 view of float32 ``values`` (no copy; any strides)."""
    return values.view(torch.int32)


def row_maxima(matrix: Tensor) -> Tensor:
    """[R] max of each row of a float32 [R, P] matrix, exact when every entry of a row is finite and >= 0 (or
    -inf, as in densified single-label rows, beside at least one such entry): computed on the int32 bit patterns,
    which order such floats as their values (an integer max is about twice as fast as a float one on the CPU).
    Rows holding NaN, +inf or a negative value get some other value: the value check flags their image."""
    if not matrix.shape[1]:
        return matrix.new_zeros(matrix.shape[0])
    return float_bits(matrix).amax(dim=1).view(torch.float32)


def _bits_in_range(bits: Tensor) -> Tensor:
    """Whether the float32 entries behind int32 ``bits`` are all finite and >= 0, from one integer (min, max)
    (-0.0 fails it: callers recheck a failure on the values)."""
    low, high = torch.aminmax(bits)
    return (low >= 0) & (high < FINITE_BITS)


def _checked_as_a_whole(whole: Tensor, batch_size: int, raw: Sequence[Tensor], device: torch.device) -> Tensor:
    """[B] bad-image flags of a batch whose input matrices were copied into ``whole`` (stacked or
    concatenated): one integer (min, max) over the copy's bit patterns; the images are looked at one by one, on
    their values, only when that check fails."""
    if bool(_bits_in_range(float_bits(whole))):
        return torch.zeros(batch_size, dtype=torch.bool, device=device)
    return _range_flags(_ranges_per_image(raw, [False] * batch_size, (), device))


def _row_checked(whole: Tensor, num_rel: Sequence[int], device: torch.device) -> Tensor:
    """[B] bad-image flags of a batch copied into ``whole`` (stacked [B, R, C] or concatenated [sum R, C]) without
    a host synchronisation: each row's float (min, max) (NaN propagates), the rows' flags added per image (the
    images' rows known on the host). The same flags as :func:`_checked_as_a_whole`."""
    rows = whole.reshape(-1, whole.shape[-1])
    low, high = rows.amin(dim=1), rows.amax(dim=1)
    row_bad = ~(torch.isfinite(low) & torch.isfinite(high) & (low >= 0))
    lengths = host_tensor(list(num_rel), torch.long, device)
    image = torch.repeat_interleave(torch.arange(len(num_rel), device=device), lengths, output_size=rows.shape[0])
    count = torch.zeros(len(num_rel), dtype=torch.long, device=device).index_add_(0, image, row_bad.long())
    return count > 0


def _flags_from_checks(passed: Tensor, raw: Sequence[Tensor], device: torch.device) -> Tensor:
    """[B] bad-image flags from each image's :func:`_bits_in_range` result ``passed`` [B] bool (True for an
    empty matrix): the images that fail it are looked at again on their values."""
    flags = torch.zeros(len(raw), dtype=torch.bool, device=device)
    if not sync_free(passed.device) and False not in passed.tolist():  # all passed (a host read is free there)
        return flags
    failed = (~passed).nonzero().squeeze(1).tolist()
    if failed:
        flags[failed] = _range_flags(_ranges_per_image([raw[b] for b in failed], [False] * len(failed), (), device))
    return flags


# The layout rule (:func:`choose_layout`). On the CPU a batch of up to STACK_SCORE_ROWS score rows (a pool of the
# metrics) is stacked / concatenated once (one copy of its score matrices, read by whole-batch kernels) unless its
# images have more than VIEW_ROWS_PER_IMAGE rows on average (SGDet with all pairs): per-image kernels are then long
# enough to amortise their dispatch, and copying the matrices would cost more than it saves; above, each image's
# matrix stays a view. On a GPU whole-batch kernels win up to memory limits (SMALL_BATCH_ROWS_GPU).
VIEW_ROWS_PER_IMAGE = 2048
SMALL_BATCH_ROWS_GPU = 1 << 22  # ~850 MB of 51-column float32 scores


def choose_layout(raw: Sequence[Tensor], background: Sequence[int], single_label: Sequence[bool],
                  num_rel: Sequence[int], num_predicates: int, device: torch.device) -> str:
    """The layout of a batch's score matrices (arguments as :func:`build_relation_scores`): 'compiled' where the
    compiled CPU kernels can read the matrices in place (any size: no copy), else 'stacked' (concatenated when the
    images differ) for batches up to the size limits above, else 'views'. A speed choice only: every layout gives
    the same numbers."""
    if compiled.suits(raw, background, single_label, num_predicates, device):
        return 'compiled'
    total = sum(num_rel)
    if not sync_free(device):
        small = total <= STACK_SCORE_ROWS and total <= VIEW_ROWS_PER_IMAGE * max(len(num_rel), 1)
    else:
        small = total <= SMALL_BATCH_ROWS_GPU
    return 'stacked' if small else 'views'


def build_relation_scores(raw: Sequence[Tensor], background: Sequence[int], num_rel: Sequence[int],
                          num_predicates: int, single_label: Sequence[bool], given_scores: Sequence[Tensor],
                          layout: str, device: torch.device, positions: Optional[Tensor] = None,
                          workspace: Optional[ScoreWorkspace] = None,
                          checked_maxima: Optional[Tuple[Tensor, Tensor]] = None) -> RelationScores:
    """Arrange the score matrices in ``layout`` ('stacked' falls back to 'concatenated' when the images differ in
    shape or background column, 'compiled' to 'views' when :func:`.compiled.suits` says no); reduce each row once.

    ``raw[b]``: image b's float32 [R_b, P] or [R_b, P + 1] matrix (``background[b]`` = 1 when column 0 is
    the background); single-label images were densified with ``-inf`` and ``given_scores`` holds their
    1-D scores (in image order). ``positions``: :func:`padded_positions` of ``num_rel`` when already known.
    ``workspace``: where the stacked / concatenated copy goes (see :class:`ScoreWorkspace`; default: a new
    tensor). ``checked_maxima``: the compiled layout's ``(row maxima [B, R], check passed [B])`` when the caller
    already read the matrices (:func:`~mmsgg_eval.functional.ranking.compiled_ranked_lists`).
    """
    if layout not in LAYOUTS:
        raise ValueError(f'layout must be one of {LAYOUTS}, got {layout!r}')
    raw, has_single, batch_size = list(raw), any(single_label), len(raw)
    uniform_bg = len(set(background)) <= 1
    bg = background[0] if batch_size else 0
    if layout == 'stacked' and not (uniform_bg and all(m.shape == raw[0].shape for m in raw)):
        layout = 'concatenated'
    if layout == 'compiled' and checked_maxima is None:  # (else the kernels read these very matrices already)
        layout = layout if compiled.suits(raw, background, single_label, num_predicates, device) else 'views'
    dense = flat = start = mats = whole = sources = None
    if not batch_size:
        best = torch.zeros((0, 0), device=device)
        bad = torch.zeros(0, dtype=torch.bool, device=device)
        return RelationScores(layout=layout, num_predicates=num_predicates, best=best, bad_images=bad)
    if layout == 'stacked':
        out = workspace.take((batch_size,) + tuple(raw[0].shape), device) if workspace is not None else None
        whole = _copy_into(raw, out, stack=True)  # one copy; the views drop the background column
        dense = whole[..., bg:]
        flat = dense.reshape(-1, num_predicates)
    elif layout == 'concatenated':
        if uniform_bg:
            out = workspace.take((sum(num_rel), raw[0].shape[1]), device) if workspace is not None else None
            whole = _copy_into(raw, out, stack=False)
            flat = whole[:, bg:]
        else:
            flat = torch.cat([m[:, b:] for m, b in zip(raw, background)])
    elif layout == 'compiled':  # the kernels read the inputs themselves (contiguous, one background column)
        sources = raw
    else:
        mats = [m[:, b:] for m, b in zip(raw, background)]
        if uniform_bg and all(m.is_contiguous() and m.device == raw[0].device for m in raw):
            sources = raw
    if layout == 'compiled':  # one pass over each matrix, in place
        best, passed = checked_maxima if checked_maxima is not None else \
            compiled.kernels().row_maxima_checked(raw, bg, num_predicates, max(num_rel))
        bad = _flags_from_checks(passed, raw, device)
    elif flat is not None:
        lengths = host_tensor(list(num_rel), torch.long, device)
        start = torch.cumsum(lengths, 0) - lengths
        values = row_maxima(flat)
        if dense is not None:
            best = values.view(dense.shape[:2])
        else:
            best = pad_rows(values.split(list(num_rel)), 0.0, list(num_rel), positions)
        if whole is not None and not has_single and whole.numel():  # (row by row: no host wait)
            bad = _row_checked(whole, num_rel, device) if sync_free(device) else \
                _checked_as_a_whole(whole, batch_size, raw, device)
        else:
            bad = _range_flags(_ranges_per_image(raw, single_label, given_scores, device))
    else:
        # per image: the row maxima, then the bit-pattern check of the whole matrix while it is still in cache
        maxima, passed = [], []
        true = torch.ones((), dtype=torch.bool, device=device)
        for m, matrix in zip(mats, raw):
            maxima.append(row_maxima(m))
            if not has_single:
                passed.append(_bits_in_range(float_bits(matrix)) if matrix.numel() else true)
        best = pad_rows(maxima, 0.0, list(num_rel), positions)
        if has_single:  # single-label images are checked on their given scores
            bad = _range_flags(_ranges_per_image(raw, single_label, given_scores, device))
        else:
            bad = _flags_from_checks(torch.stack(passed), raw, device)
    return RelationScores(layout=layout, num_predicates=num_predicates, best=best, bad_images=bad,
                          has_single_label=has_single, dense=dense, flat=flat, start=start, matrices=mats,
                          sources=sources, column=bg if sources is not None else 0)
