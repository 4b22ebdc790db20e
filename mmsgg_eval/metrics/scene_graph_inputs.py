"""What the scene-graph metrics (``SceneGraphMetric``, ``OIRelationMetric``) read from a sample around the padded
batch: its predicted pair count (the pool's weight), its image sizes (the box-frame diagnostics), the explicitly
empty prediction a sample marked ``prediction_missing`` is read as, and the reading of a pool itself
(:func:`read_pool_stages`, with a metric's buffers and the reads shared between metric classes: :class:`PoolReader`)."""
import weakref
from typing import Any, Callable, Generator, Hashable, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..functional.overlap import Staged
from ..functional.scores import ScoreWorkspace
from ..functional.transfer import host_tensor
from ..structures import ObjectCounts, SceneGraphBatch, collate_stages, get_field
from .accumulator import same_objects
from .samples import first_occurrences, prediction_missing

#: what a pool read returns: (batch, ``prediction_missing`` flags [B], the samples read), in batch order
PoolValue = Tuple[SceneGraphBatch, List[bool], List[Any]]


def score_rows(sample: Any) -> int:
    """Number of predicted pairs of a sample (0 when unreadable: the pool's reader reports that)."""
    scores = get_field(get_field(sample, 'pred_relations'), 'scores')
    shape = getattr(scores, 'shape', None)
    return int(shape[0]) if shape else 0


def image_sizes(samples: Sequence[Any], device: torch.device) -> Tuple[Tensor, Tensor]:
    """(original [B, 2], resized [B, 2]) (width, height) pixels of each sample from its ``ori_shape`` (H, W) and
    ``img_shape`` (H, W) or ``scale_factor`` (w, h) metainfo; NaN where unknown."""
    nan = float('nan')
    original, resized = [], []
    for sample in samples:
        ori = get_field(sample, 'ori_shape')
        if ori is None or len(ori) < 2:
            original.append((nan, nan))
            resized.append((nan, nan))
            continue
        h, w = float(ori[0]), float(ori[1])
        original.append((w, h))
        img, scale = get_field(sample, 'img_shape'), get_field(sample, 'scale_factor')
        if img is not None and len(img) >= 2:
            resized.append((float(img[1]), float(img[0])))
        elif scale is not None:
            scale = [float(v) for v in (scale if hasattr(scale, '__len__') else (scale,))]
            resized.append((w * scale[0], h * scale[-1]))
        else:
            resized.append((nan, nan))
    return (host_tensor(original, torch.float32, device).reshape(-1, 2),
            host_tensor(resized, torch.float32, device).reshape(-1, 2))


def as_unpredicted(sample: Any, num_predicates: int) -> Any:
    """A sample marked ``prediction_missing`` with an explicitly empty prediction that every mode reads
    (objects on the GT, no predicted pair): its GT relations are all missed. Data elements pass unchanged."""
    if not isinstance(sample, dict):
        return sample
    labels = get_field(get_field(sample, 'gt_instances'), 'labels')
    boxes = get_field(get_field(sample, 'gt_instances'), 'bboxes')
    if labels is None or boxes is None:
        return sample  # the reader names the missing GT field
    device = getattr(labels, 'device', torch.device('cpu'))
    out = dict(sample)
    out['pred_instances'] = {'bboxes': boxes, 'labels': labels, 'scores': torch.ones(len(labels), device=device)}
    out['pred_relations'] = {'pair_idxs': torch.zeros((0, 2), dtype=torch.long, device=device),
                             'scores': torch.zeros((0, num_predicates + 1), device=device)}
    out.pop('pred_mode', None)
    return out


def read_pool_stages(samples: List[Any], mode: str, num_classes: int, num_predicates: int, *,
                     counts: ObjectCounts, workspace: ScoreWorkspace, pass_outputs: List[ScoreWorkspace],
                     score_layout: str, ranking: Optional[Tuple[int, ...]], background: bool = False,
                     with_masks: bool = False) -> Generator[bool, None, Tuple[SceneGraphBatch, List[bool], List[Any]]]:
    """A pool of a scene-graph metric (each ``sample_idx`` once: :meth:`PoolReader.stages`) read in two stages
    (:func:`~mmsgg_eval.structures.reader.collate_stages`): a sample marked ``prediction_missing`` read as an
    explicitly empty prediction (:func:`as_unpredicted`), the compiled pass (with ``ranking``) writing to the
    buffer of ``pass_outputs`` that the previous pool's did not (the two are swapped: that pool's batch lives in
    the other while this pass runs). Returns ``(batch, missing flags [B], samples read)`` in batch order."""
    missing = [prediction_missing(s) for s in samples]
    if any(missing):
        samples = [as_unpredicted(s, num_predicates) if m else s for s, m in zip(samples, missing)]
    pass_outputs.reverse()
    batch = yield from collate_stages(samples, mode, num_classes, num_predicates, with_masks=with_masks,
                                      counts=counts, workspace=workspace, score_layout=score_layout, ranking=ranking,
                                      background=background, pass_workspace=pass_outputs[0])
    return batch, missing, samples


class _CountLog(ObjectCounts):
    """The object-count mismatches a read finds (:meth:`ObjectCounts.add`'s arguments), kept to be added to the
    counts of each metric that takes the read (each with its own ``strict``)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: List[Tuple[str, Any, int, int]] = []

    def add(self, mode: str, sample: Any, model_count: int, gt_count: int) -> None:
        self.events.append((mode, sample, model_count, gt_count))

    def add_to(self, counts: ObjectCounts) -> None:
        for event in self.events:
            counts.add(*event)


class _PoolRead:
    """One pool read by a :class:`PoolReader` (:func:`read_pool_stages` as a :class:`Staged`, its first stage
    done), with what says whether its batch is still intact: the times its reader's score workspace and its pass
    buffer had been handed out when it wrote into them (neither is handed out again while the batch is used)."""
    __slots__ = ('epoch', 'samples', 'ranking', 'staged', 'log', 'reader', '_workspace', '_handed', '_pass',
                 '_pass_handed', '__weakref__')

    def __init__(self, samples: List[Any], reader: 'PoolReader', ranking: Optional[Tuple[Any, ...]],
                 stages: Callable[[ObjectCounts], Generator[bool, None, PoolValue]]) -> None:
        self.epoch, self.samples, self.ranking, self.log = reader.epoch, samples, ranking, _CountLog()
        self.reader = weakref.ref(reader)
        self._workspace, self._handed = reader.workspace, None
        self.staged = Staged(self._noting_workspace(stages(self.log)))
        self._pass = reader.pass_outputs[0]  # (read_pool_stages swapped the two: this read's)
        self._pass_handed = self._pass.handed

    def _noting_workspace(self, stages: Generator) -> Generator[bool, None, PoolValue]:
        value = yield from stages
        self._handed = self._workspace.handed
        return value

    def value(self, counts: ObjectCounts) -> PoolValue:
        """The read's value (its second stage run by whoever asks first), its count mismatches added to
        ``counts``."""
        value = self.staged.result()
        self.log.add_to(counts)
        return value

    def intact(self) -> bool:
        """Whether the batch's buffers hold it still (its second stage run first)."""
        self.staged.result()
        return self._workspace.handed == self._handed and self._pass.handed == self._pass_handed


class _Epoch:
    """When an epoch of a reader's metric ended (its ``evaluate()``; None while open), on the clock of
    :class:`PoolReader`."""
    __slots__ = ('ended',)

    def __init__(self) -> None:
        self.ended: Optional[int] = None


def _merged(own: Tuple[Any, ...], asked: Tuple[Any, ...]) -> Tuple[Any, ...]:
    """A pass' ``ranking`` (k, ng_topk, pair codes[, OI lists]) that also gives what ``asked`` asks for: its
    scene-graph lists when ``own`` has none (k = ng_topk = 0), its pair codes, its OI lists."""
    k, ng_topk, codes = (tuple(own) + (0, 0, False)[len(own):])[:3]
    oi_lists = own[3] if len(own) > 3 else None
    if not k and not ng_topk:
        k, ng_topk = asked[0], asked[1]
    codes = bool(codes) or (len(asked) > 2 and bool(asked[2]))
    oi_lists = oi_lists if oi_lists is not None or len(asked) < 4 else asked[3]
    return (k, ng_topk, codes) if oi_lists is None else (k, ng_topk, codes, oi_lists)


def _serves(offered: Optional[Tuple[Any, ...]], wanted: Optional[Tuple[Any, ...]]) -> bool:
    """Whether a read whose pass ran with ``offered`` gives a reader asking ``wanted`` what it takes from the pass:
    anything when it asks for no scene-graph lists (None, or k = ng_topk = 0: the OI metric, whose lists have
    their own way), else the same (k, ng_topk), with the pair codes when it asks for them."""
    if wanted is None or not (wanted[0] or wanted[1]):
        return True
    codes = len(wanted) > 2 and bool(wanted[2])
    return offered is not None and tuple(offered[:2]) == tuple(wanted[:2]) and \
        (not codes or (len(offered) > 2 and bool(offered[2])))


class PoolReader:
    """How a scene-graph metric reads its pools (:func:`read_pool_stages`): its score workspace, the two buffers
    its pass writes to in turn, and the reads shared between metric classes of one evaluator.

    Each reader leaves its latest read where the others find it (one per reading settings: mode, class and
    predicate counts, score layout, masks), and takes the read of the very same sample objects, in the same order,
    instead of reading the pool again when that read's pass gives what its own would (:func:`_serves`: the OI
    metric takes any; a scene-graph metric one with its lists) and the two metrics' epochs overlap (the offering
    one's had not ended when the taking one's began: samples changed in place between two evaluations are read
    anew). A reader that finds such a read asks the offering reader's pass for what its own ``ranking`` adds
    (:func:`_merged`: the scene-graph lists, the pair codes, the OI lists built while each matrix is in cache)
    from that reader's next pool to the end of its epoch, so that whatever the order of the metrics in the
    evaluator, the score matrices are read once per pool from the second pool on. The taken read is used only
    while the offering reader's buffers still hold it (it reads the pool itself otherwise, e.g. when the
    offering metric has read two more pools meanwhile) and its object-count mismatches are added to the counts
    of each. The offered read lives as long as the reader and its metric (the latest one only). A metric calls
    :meth:`open_epoch` at its first ``process()`` of an epoch and :meth:`close_epoch` in its ``evaluate()``."""

    _offered: 'weakref.WeakValueDictionary[Hashable, _PoolRead]' = weakref.WeakValueDictionary()
    _clock = 0  # epochs opened and closed so far, all readers

    def __init__(self) -> None:
        self.workspace = ScoreWorkspace()  # the pools' score copies (stacked / concatenated layouts)
        self.pass_outputs = [ScoreWorkspace(), ScoreWorkspace()]  # the ranking pass' outputs, taken in turn
        self._latest: Optional[_PoolRead] = None  # this reader's latest read (what keeps an offer alive)
        self.requested: Optional[Tuple[Any, ...]] = None  # what readers finding its reads ask its pass for
        self.epoch = _Epoch()
        self._opened = self._tick()  # when this reader's epoch began

    @classmethod
    def _tick(cls) -> int:
        cls._clock += 1
        return cls._clock

    def open_epoch(self) -> None:
        self.epoch, self._opened = _Epoch(), self._tick()

    def close_epoch(self) -> None:
        self.epoch.ended = self._tick()
        self.requested = None

    def _overlaps(self, epoch: _Epoch) -> bool:
        """Whether ``epoch`` (another reader's) had not ended when this reader's began."""
        return epoch.ended is None or epoch.ended > self._opened

    def stages(self, samples: List[Any], mode: str, num_classes: int, num_predicates: int, *,
               counts: ObjectCounts, score_layout: str, ranking: Optional[Tuple[int, ...]],
               background: bool = False, with_masks: bool = False) -> Generator[bool, None, PoolValue]:
        """The pool, the first sample of each ``sample_idx`` (a repeat within the pool counts once), read in two
        stages (a generator yielding once): a read offered by another reader when one fits (see the class docs),
        else :func:`read_pool_stages` with this reader's buffers."""
        samples = first_occurrences(samples)
        key = (mode, num_classes, num_predicates, score_layout, with_masks)
        offer = PoolReader._offered.get(key)
        producer = offer.reader() if offer is not None else None
        if producer is None or producer is self or not self._overlaps(offer.epoch) or \
                not same_objects(offer.samples, samples):
            offer = None
        elif ranking is not None:  # its next pools' pass gives what this reader's would
            producer.requested = _merged(producer.requested or (0, 0, False), ranking)
        if offer is not None and _serves(offer.ranking, ranking):
            yield background  # the offering metric finishes its read; this one takes it at its next flush
            if offer.intact():
                return offer.value(counts)
        else:
            offer = None
        if ranking is not None and self.requested is not None:
            ranking = _merged(ranking, self.requested)
        read = _PoolRead(samples, self, ranking, lambda log: read_pool_stages(
            samples, mode, num_classes, num_predicates, counts=log, workspace=self.workspace,
            pass_outputs=self.pass_outputs, score_layout=score_layout, ranking=ranking,
            background=background and offer is None, with_masks=with_masks))
        self._latest = PoolReader._offered[key] = read
        if offer is None:
            yield read.staged.in_background
        return read.value(counts)
