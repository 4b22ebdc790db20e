"""``SGRecall`` and ``SGMeanRecall``: the legacy VG150/GQA200/PSG scene-graph protocol (definitions and
conventions: ``docs/metrics.md``).

Both are presets of one :class:`SceneGraphMetric`: they compute the same rows and the same summary and
differ only in the keys they return. Each pool of samples is validated, ranked and matched on the samples'
device (:mod:`mmsgg_eval.functional`) into a few integers per GT relation (its first-hit rank in each
ranked list); ``evaluate()`` reduces those rows across ranks once, removes sampler padding by
``sample_idx`` and derives every key for every K (:class:`~mmsgg_eval.metrics.base.RowMetric`). Values are
percentages. An ``SGRecall`` and an ``SGMeanRecall`` with the same settings in one evaluator share that work
through a :class:`~mmsgg_eval.metrics.base.ComputeGroup`: the second ranks nothing and sends nothing.
"""
from functools import partial
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from ..functional.limits import NO_HIT, POOL_SCORE_ROWS, RANK_CAP_INT16
from ..functional import per_predicate_recall, recall_from_ranks, scene_graph_ranks, triplet_keys
from ..functional.boxes import box_iou
from ..functional.diagnostics import (box_frame_flags, box_frame_warnings, describe_score_columns,
                                      head_predicate_flags, label_checked_images, label_offset_counts,
                                      label_shift_warnings,
                                      score_column_warnings)
from ..functional.recall import NO_VALUE, evaluated_image_rows, hit_within, mean_recall, triplet_parts
from ..functional import error_causes
from ..open_vocab import name_indices, split_table
from ..functional.scores import ScoreWorkspace
from ..functional.transfer import host_tensor, known_nonzero
from ..registry import METRICS
from ..structures import MODES, SCORE_LAYOUTS, ObjectCounts, collate_scene_graphs, get_field
from ..zeroshot import as_zeroshot_triplets, derive_zeroshot, triplet_set_digest
from ..reports import dump_metric_json, format_recall_lost, format_scene_graph_report, write_scene_graph_reports
from .per_image import PER_IMAGE_TOPK, ImageNames, per_image_records, per_image_rows, per_image_schema, \
    write_per_image
from .base import (RelationVocabulary, RowMetric, Schema, Tables, first_occurrences, prediction_missing,
                   warn_user)
from .options import iou_threshold, one_of, positive_int, positive_ints
from .predicate_groups import resolve_groups
from .protocols import SCENE_GRAPH_SETTINGS, UNSET, describe_conventions, resolve_protocol

def _put(m: Dict[str, float], family: str, ks: Sequence[int], values: Tensor, suffix: str = '') -> None:
    """``m['{family}@{k}{suffix}']`` = 100 x each value (one per K, fractions to percent)."""
    for k, v in zip(ks, values.tolist()):
        m[f'{family}@{k}{suffix}'] = 100.0 * v


def _score_rows(sample: Any) -> int:
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


def check_zeroshot_indices(triplets: Tensor, num_classes: int, num_predicates: int, source: str) -> None:
    """Refuse a zero-shot set with an index outside the dataset (a 1-based list given as 0-based, or the set of
    another dataset), naming ``source`` and the first offending row: its codes would alias real triplets."""
    bounds = torch.tensor([num_classes, num_classes, num_predicates])
    bad = ((triplets < 0) | (triplets >= bounds)).any(1)
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise ValueError(
            f'zero-shot triplets ({source}): row {row} = (subject, object, predicate) {triplets[row].tolist()} '
            f'(0-based) is outside the dataset ({num_classes} classes, {num_predicates} predicates; '
            f'{int(bad.sum())} of {triplets.shape[0]} rows are); a list of triplets must be 0-based, the legacy file '
            f'(a path) 1-based')


def _as_unpredicted(sample: Any, num_predicates: int) -> Any:
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


def warn_no_value(metric: Any, no_value: Sequence[Dict[str, Any]]) -> None:
    """One warning naming the keys without a value (``summary['no_value']``) and why."""
    if no_value:
        warn_user(f'{type(metric).__name__} ({metric.prefix}): no value (NaN, shown as –) for '
                  + '; '.join(f'{", ".join(e["keys"])}: {e["why"]}' for e in no_value))


class SceneGraphMetric(RelationVocabulary, RowMetric):
    """Shared machinery of :class:`SGRecall` and :class:`SGMeanRecall`.

    Args:
        mode: 'predcls' | 'sgcls' | 'sgdet' | 'phrdet'. PredCls replaces predicted boxes/labels by the GT and
            object scores by 1; SGCls uses the model's boxes (GT boxes only when it gives none) with its
            labels/scores, as the legacy evaluator; PhrDet matches union boxes.
        topk: the K of R@K.
        iou_thr: IoU threshold, compared with ``>=``.
        iou_plus_one: legacy +1-pixel IoU; None = ``dataset_meta['iou_plus_one']`` (VG150/GQA200: True),
            else False.
        ng_topk: length of the no-graph-constraint list.
        rank: 'score' (stable sort by predicate prob x subject score x object score) or 'given'.
        skip_empty_predictions: images without predicted pairs are skipped (legacy) or count as recall 0.
            An image marked ``prediction_missing`` (the user gave no prediction for it) is never skipped.
        mr_average: 'all' (sum over all P predicates / P, legacy) or 'present'.
        recall_average: 'image' (mean of per-image recalls, legacy) or 'micro' (sum of hits / sum of GT).
        match: 'box' or 'mask' (PSG; needs ``gt_instances.masks`` / ``pred_instances.masks``).
        zeroshot_triplets: path to the legacy zero-shot file, or 0-based (subject, object, predicate)
            triplets; None = ``dataset_meta['zeroshot_triplets']``, else derived from
            ``dataset_meta['train_triplets']`` (evaluated GT triplets unseen in training), else no zR.
        predicate_groups: {group: [predicate names]}; None = VG150 preset for VG150, else thirds by
            training frequency (``dataset_meta['predicate_counts']``).
        outfile_prefix: when set, ``{outfile_prefix}.{prefix}.{file_tag}.json`` (``file_tag`` 'recall' for
            SGRecall, 'mean_recall' for SGMeanRecall) receives the keys and per-predicate recalls.
        report_dir: when set, ``{prefix}.metrics.json``, ``{prefix}.per_predicate.png`` (long-tail bar chart)
            and the tables ``{prefix}.tables.md`` / ``.tables.tex`` / ``.tables.{name}.csv`` are written there,
            once per evaluator (tools/test.py sets it to the work
            dir). They hold every key, so SGRecall and SGMeanRecall with equal settings write them once.
        pool_samples: samples pooled across ``process()`` calls and ranked as one batch (1 = each call on
            its own); a pool is also processed once it holds ``functional.limits.POOL_SCORE_ROWS`` pairs (SGDet with
            all pairs), which bounds the memory it keeps alive. Results do not depend on it.
        prefix: key prefix; default the mode.
        strict_counts: PredCls/SGCls images whose predicted object list is shorter or longer than the GT are
            evaluated as the legacy evaluator does, with one warning per evaluation (False), or refused (True).
        protocol: named bundle of conventions ('sgb' = the legacy defaults above, 'openpsg', 'r1sgg'; see
            ``docs/protocols.md``). The convention arguments iou_thr ... match default to the protocol's
            values; an explicit argument overrides its single choice. :attr:`conventions` lists them all.
        score_layout: how the columns of [R, C] ``pred_relations.scores`` are read: 'auto' (C = P + 1: column
            0 = no relation; C = P: no background column), 'background_first', 'background_last' (column P =
            no relation) or 'no_background' (the last three refuse any other C). The report says how the
            scores were read, and warns when the results look like shifted columns.
        novel_objects / novel_predicates: names of the novel object classes / predicates of an
            open-vocabulary split (unknown names are an error); keys ``R@K_novel_obj`` / ``ngR@K_novel_obj``
            (GT relations whose subject AND object are novel), ``R@K_novel_pred`` / ``ngR@K_novel_pred`` /
            ``mR@K_novel_pred`` / ``ngmR@K_novel_pred`` (GT relations with a novel predicate; mR over the novel
            predicates) and ``R@K_base`` / ``ngR@K_base`` (no novel part). None = ``dataset_meta['open_vocab']``
            (``VG150Dataset(open_vocab_split=...)``), else no novel keys.
        novel_split: a named split instead ('ovsgtr-ovd', 'ovsgtr-ovr', 'ovsgtr-ovdr': OvSGTR's VG150 tables,
            :mod:`mmsgg_eval.open_vocab`).
        per_image_out: when set, a JSON-lines file of per-image results (per-image R@K / ngR@K, the GT
            relations with their first-hit ranks, the top ``per_image_topk`` graph-constrained triplets with
            the GT relations they hit) is written there on the main rank after the reduce
            (:mod:`mmsgg_eval.metrics.per_image`). It adds a few columns per GT relation and at most
            ``per_image_topk`` rows per image to the reduced rows; nothing is added when it is None.
        error_analysis: also say where recall is lost (``docs/metrics.md``): the cause of each missed GT
            relation at each K (keys ``miss@K_{cause}``, with ``R@K`` + the causes = 100), PySGG's stage-wise
            recalls (``stage_pair_loc@K``, ``stage_pair_det@K``, ``stage_pred_cls@K``, ``stage_inst_loc``,
            ``stage_inst_det``) and the per-predicate table of causes (``per_predicate_causes``). Adds one byte
            and three ranks per GT relation and three counts per image to the rows; nothing when False. Not
            defined for 'phrdet'.
    """

    default_prefix: Optional[str] = None
    report_keys: Sequence[str] = ()
    _reports_per_predicate = False
    _warns_no_value = True  # False: the owner (VLMSceneGraphMetric) names the keys without a value itself
    protocol_target = 'scene_graph'  # which conventions resolve_protocol applies (see metrics/protocols.py)
    compute_rows_dedupes = True  # _read_pool keeps the first occurrence of a repeated sample_idx

    def __init__(self, mode: str = 'predcls', topk: Sequence[int] = (20, 50, 100), iou_thr: float = UNSET,
                 iou_plus_one: Optional[bool] = UNSET, ng_topk: int = UNSET, rank: str = UNSET,
                 skip_empty_predictions: bool = UNSET, mr_average: str = UNSET, recall_average: str = UNSET,
                 match: str = UNSET, zeroshot_triplets: Union[None, str, Sequence] = None,
                 predicate_groups: Optional[Dict[str, Sequence[str]]] = None,
                 outfile_prefix: Optional[str] = None, report_dir: Optional[str] = None,
                 pool_samples: int = 256, collect_device: str = 'cpu',
                 prefix: Optional[str] = None, strict_counts: bool = False, protocol: str = 'sgb',
                 score_layout: str = 'auto', novel_objects: Optional[Sequence[str]] = None,
                 novel_predicates: Optional[Sequence[str]] = None, novel_split: Optional[str] = None,
                 per_image_out: Optional[str] = None, per_image_topk: int = PER_IMAGE_TOPK,
                 error_analysis: bool = False) -> None:
        self.protocol = resolve_protocol(protocol, dict(
            iou_thr=iou_thr, iou_plus_one=iou_plus_one, ng_topk=ng_topk, rank=rank, mr_average=mr_average,
            skip_empty_predictions=skip_empty_predictions, recall_average=recall_average, match=match),
            self.protocol_target)
        iou_thr, iou_plus_one, ng_topk, rank, skip_empty_predictions, mr_average, recall_average, match = \
            self.protocol.values(SCENE_GRAPH_SETTINGS)
        owner = type(self).__name__
        one_of(mode, 'mode', owner, MODES)
        for name, value, allowed in (('rank', rank, ('score', 'given')), ('mr_average', mr_average, ('all', 'present')),
                                     ('recall_average', recall_average, ('image', 'micro')),
                                     ('match', match, ('box', 'mask')), ('score_layout', score_layout, SCORE_LAYOUTS)):
            one_of(value, name, owner, allowed)
        if match == 'mask' and mode == 'phrdet':
            raise ValueError("match='mask' is not defined for phrdet (union boxes)")
        if not isinstance(error_analysis, bool):
            raise ValueError(f'{owner}: error_analysis must be True or False, got {error_analysis!r}')
        if error_analysis and mode == 'phrdet':
            raise ValueError(f"{owner}: error_analysis=True is not defined for mode='phrdet' (union-box matching "
                             f"has no subject / object detection to blame)")
        topk = positive_ints(topk, 'topk', owner)
        iou_thr = iou_threshold(iou_thr, 'iou_thr', owner)
        ng_topk = positive_int(ng_topk, 'ng_topk', owner)
        pool_samples = positive_int(pool_samples, 'pool_samples', owner)
        super().__init__(outfile_prefix=outfile_prefix, report_dir=report_dir, pool_samples=pool_samples,
                         collect_device=collect_device, prefix=prefix or mode)
        self.mode = mode
        self.topk = topk
        self.iou_thr = float(iou_thr)
        self.iou_plus_one = iou_plus_one
        self.ng_topk = int(ng_topk)
        self.rank = rank
        self.skip_empty_predictions = skip_empty_predictions
        self.mr_average = mr_average
        self.recall_average = recall_average
        self.match = match
        self.user_zeroshot = as_zeroshot_triplets(zeroshot_triplets)
        self._zs_source = f'file {zeroshot_triplets}' if isinstance(zeroshot_triplets, str) else \
            'the zeroshot_triplets argument'
        self.score_layout = score_layout
        if novel_split is not None:
            if novel_objects is not None or novel_predicates is not None:
                raise ValueError(f'{owner}: give novel_split or novel_objects / novel_predicates, not both')
            table = split_table(novel_split)
            novel_objects, novel_predicates = table['novel_objects'], table['novel_predicates']
        for name, value in (('novel_objects', novel_objects), ('novel_predicates', novel_predicates)):
            if value is not None and (isinstance(value, str) or not all(isinstance(v, str) for v in value)):
                raise ValueError(f'{owner}: {name} must be a list of names, got {value!r}')
        self.novel_split = novel_split
        self.novel_names = None if novel_objects is None and novel_predicates is None else \
            (tuple(novel_objects or ()), tuple(novel_predicates or ()))
        self.user_groups = predicate_groups
        self.object_counts = ObjectCounts(strict=strict_counts)
        self._workspace = ScoreWorkspace()  # the pools' score copies, one pool at a time
        # ranks only matter below max K: int16 (capped) keeps the state ~25 bytes per GT relation
        self._rank_cap = RANK_CAP_INT16 if max(topk) < RANK_CAP_INT16 else NO_HIT
        self._zs_meta: Any = None
        self._zs_codes: Optional[Tensor] = None
        self._zs_cache: Dict[str, Optional[Tensor]] = {}
        self._zs_key: Optional[Tuple[Optional[Tensor], Optional[tuple]]] = None  # (codes, their exact key)
        self.per_image_out = per_image_out
        self.per_image_topk = positive_int(per_image_topk, 'per_image_topk', owner)
        self._list_length = self.per_image_topk if per_image_out else 0  # 0: no per-image rows
        self.error_analysis = error_analysis
        self._image_names = ImageNames()

    @property
    def conventions(self) -> Dict[str, Any]:
        """The protocol name and every convention it implies (with explicit overrides), JSON-ready."""
        return describe_conventions(self.protocol, self.mode, self.plus_one if self.dataset_meta else None,
                                    self.protocol_target)

    # ------------------------------------------------------------------ rows and sharing
    def row_schema(self) -> Schema:
        rank_dtype = torch.int16 if self._rank_cap == RANK_CAP_INT16 else torch.int32
        schema = {
            'images': {'num_gt': (torch.int32, ()), 'num_pred': (torch.int32, ()), 'missing': (torch.bool, ()),
                       **self.diagnostic_columns()},
            'relations': {'predicate': (torch.int16, ()), 'triplet': (torch.int32, ()),
                          'zeroshot': (torch.bool, ()), 'rank_gc': (rank_dtype, ()),
                          'rank_ngc': (rank_dtype, ()), 'rank_pair': (rank_dtype, ())},
        }
        if self._list_length:  # per-image results: a few more columns and the bounded top-triplet table
            for table, columns in per_image_schema(rank_dtype).items():
                schema.setdefault(table, {}).update(columns)
        if self.error_analysis:  # the cause of a miss and the stage-wise ranks (functional.error_causes)
            schema['relations'].update({'cause': (torch.int8, ()), **{column: (rank_dtype, ()) for _, column in
                                                                      error_causes.STAGE_RANKS}})
            schema['images'].update({n: (torch.int32, ()) for n in ('num_gt_objects', 'inst_loc', 'inst_det')})
            if self._list_length:  # the evidence of each cause on the per-image pages
                schema['relations'].update({f'{end}_{n}': (dtype, ()) for end in ('subject', 'object') for n, dtype in
                                            (('iou', torch.float32), ('det_label', torch.int16),
                                             ('det_score', torch.float32))})
        return schema

    @staticmethod
    def diagnostic_columns() -> Schema:
        """Per-image columns of the input diagnostics (:mod:`mmsgg_eval.functional.diagnostics`): score columns
        given (-1 single-label), the predicate of the first graph-constrained entry (-1 none), box-frame flags."""
        return {'score_width': (torch.int16, ()), 'top_predicate': (torch.int16, ()), 'box_flags': (torch.uint8, ()),
                'head_predicates': (torch.int16, (2,)), 'label_offsets': (torch.int32, (4,))}

    def diagnostic_rows(self, samples: List[Any], batch: Any, ranks: Dict[str, Tensor]) -> Dict[str, Tensor]:
        """The :meth:`diagnostic_columns` of a read pool (``samples`` in batch order; ``ranks`` of
        :func:`~mmsgg_eval.functional.scene_graph_ranks`)."""
        device = batch.device
        if self.mode == 'predcls':  # the GT boxes and labels are evaluated: nothing of the model's to check
            flags = torch.zeros(len(samples), dtype=torch.uint8, device=device)
            offsets = torch.zeros((len(samples), 4), dtype=torch.int32, device=device)
        else:
            original, resized = image_sizes(samples, device)
            flags = box_frame_flags(batch.pred_boxes, batch.pred_labels >= 0, original, resized)
            checked = label_checked_images(batch.sample_idx).nonzero().squeeze(1)  # the same on every world size
            offsets = torch.zeros((len(samples), 4), dtype=torch.int32, device=device)
            offsets[checked] = label_offset_counts(
                box_iou(batch.pred_boxes[checked], batch.gt_boxes[checked], self.plus_one),
                batch.pred_labels[checked], batch.gt_labels[checked])
        widths = batch.score_width if batch.score_width is not None else [0] * len(samples)
        width = host_tensor(widths, torch.int16, device)
        return {'score_width': torch.where(batch.num_rel_preds > 0, width, torch.zeros_like(width)),
                'top_predicate': ranks['top_predicate'].to(torch.int16), 'box_flags': flags,
                'head_predicates': head_predicate_flags(ranks['head_predicate'], ranks['head_valid']),
                'label_offsets': offsets}

    # Shared work (RowMetric.compute_key / summary_key, derived from the recorded constructor arguments): the
    # arguments below only shape the summary; every other one (and the facts below) decides the rows.
    shares_work = True
    summary_arguments = ('topk', 'skip_empty_predictions', 'mr_average', 'recall_average', 'predicate_groups',
                         'novel_objects', 'novel_predicates', 'novel_split')

    def row_facts(self) -> Tuple[Tuple[str, Any], ...]:
        """The dataset facts the rows read (class and predicate names, the +1 IoU, zero-shot codes by content)
        and the largest K (the ranked lists' length; ``topk`` itself only shapes the summary)."""
        return (('classes', tuple(self.classes)), ('predicates', tuple(self.predicates)),
                ('iou_plus_one', self.plus_one), ('zeroshot_codes', self._zeroshot_key()),
                ('max_k', max(self.topk)), ('rank_cap', self._rank_cap))

    def output_content(self, argument: str) -> Optional[Hashable]:
        """The per-image lines depend on the rows and on the K, the averaging and the images evaluated
        (:meth:`summary_key`): metrics equal in these write one file (e.g. SGRecall and SGMeanRecall of a run)."""
        if argument != 'per_image_out':
            return None
        return self.summary_key()

    def pool_weight(self, samples: Sequence[Any]) -> int:
        return sum(_score_rows(s) for s in samples)

    def pool_capacity(self) -> Optional[int]:
        return POOL_SCORE_ROWS

    def before_epoch(self) -> None:
        """A missing ``dataset_meta`` (or an unknown novel class / predicate name) fails at the first
        ``process()``, not at the first pool or at the end."""
        for key in ('classes', 'predicates'):
            if self._meta(key) is None:
                getattr(self, key)  # raises the explanatory error
        self.novel_indices()
        super().before_epoch()

    def novel_indices(self) -> Optional[Dict[str, Any]]:
        """The open-vocabulary split evaluated: ``{'objects': [0-based classes], 'predicates': [...], 'source'}``
        from the arguments, else ``dataset_meta['open_vocab']``; None when there is none."""
        names, source = self.novel_names, self.novel_split or 'the novel_objects / novel_predicates arguments'
        meta = self._meta('open_vocab')
        if names is None and meta:
            names = (tuple(meta.get('novel_objects') or ()), tuple(meta.get('novel_predicates') or ()))
            source = f"dataset_meta['open_vocab'] ({meta.get('split', 'custom')})"
        if names is None:
            return None
        owner = f'{type(self).__name__} ({source})'
        return {'objects': name_indices(names[0], self.classes, 'classes', owner),
                'predicates': name_indices(names[1], self.predicates, 'predicates', owner), 'source': source}

    @property
    def plus_one(self) -> bool:
        if self.iou_plus_one is not None:
            return bool(self.iou_plus_one)
        return bool(self._meta('iou_plus_one', False))

    def _zeroshot_codes(self, device: torch.device) -> Optional[Tensor]:
        """Sorted integer codes of the given zero-shot triplets (cached per dataset_meta object), or None."""
        if self._zs_meta is not self.dataset_meta or not self._zs_cache:
            triplets, source = self.user_zeroshot, self._zs_source
            meta_zs = self._meta('zeroshot_triplets')
            if triplets is None and meta_zs is not None:
                triplets = as_zeroshot_triplets(meta_zs)
                source = f"dataset_meta['zeroshot_triplets'] = {meta_zs}" if isinstance(meta_zs, str) else \
                    "dataset_meta['zeroshot_triplets']"
            codes = None
            if triplets is not None:
                check_zeroshot_indices(triplets, len(self.classes), len(self.predicates), source)
                codes = torch.sort(triplet_keys(triplets[:, 0], triplets[:, 1], triplets[:, 2], len(self.classes),
                                                len(self.predicates))).values
            self._zs_meta, self._zs_codes, self._zs_cache = self.dataset_meta, codes, {'cpu': codes}
        where = str(device)
        if where not in self._zs_cache:
            self._zs_cache[where] = None if self._zs_codes is None else self._zs_codes.to(device)
        return self._zs_cache[where]

    def _zeroshot_key(self) -> Optional[tuple]:
        """The exact key (:func:`~mmsgg_eval.metrics.state.key_value`) of the zero-shot codes, kept with them:
        :meth:`compute_key` is asked at every ``process()``."""
        from .state import key_value
        codes = self._zeroshot_codes(torch.device('cpu'))
        if self._zs_key is None or self._zs_key[0] is not codes:
            self._zs_key = (codes, key_value(codes))
        return self._zs_key[1]

    # ------------------------------------------------------------------ a pool becomes rows
    def _read_pool(self, samples: List[Any]):
        """The padded batch of a pool, its [B] bool ``prediction_missing`` flags and the samples read (in batch
        order). A ``sample_idx`` repeated within the pool counts once (the first); a sample whose prediction is
        missing is read as an explicitly empty prediction (objects on the GT, no predicted pair)."""
        samples = first_occurrences(samples)
        missing = [prediction_missing(s) for s in samples]
        if any(missing):
            samples = [_as_unpredicted(s, len(self.predicates)) if m else s for s, m in zip(samples, missing)]
        batch = collate_scene_graphs(samples, self.mode, len(self.classes), len(self.predicates),
                                     with_masks=self.match == 'mask', counts=self.object_counts,
                                     workspace=self._workspace, score_layout=self.score_layout,
                                     ranking=(max(self.topk), self.ng_topk) if self.rank == 'score' else None)
        if batch.ids_missing:  # known on the host: no device read otherwise
            self.accumulator.number_missing(batch.sample_idx, type(self).__name__)
        return batch, host_tensor(missing, torch.bool, batch.device), samples

    def compute_rows(self, samples: List[Any]) -> Dict[str, Dict[str, Tensor]]:
        """Rank and match a pool: per image its GT / predicted pair counts and whether its prediction is
        missing; per GT relation its predicate, triplet code, zero-shot flag and first-hit ranks. A
        ``sample_idx`` repeated within the pool (sampler padding) is processed once: the first counts."""
        classes, predicates = self.classes, self.predicates
        batch, missing, samples = self._read_pool(samples)
        max_k = max(self.topk)
        ranks = scene_graph_ranks(batch, max_k, self.ng_topk, self.iou_thr, self.plus_one,
                                  phrase=self.mode == 'phrdet', use_masks=self.match == 'mask',
                                  rank_by=self.rank, with_pair_accuracy=self.mode in ('predcls', 'sgcls'),
                                  list_length=self._list_length,
                                  analysis=partial(error_causes.error_analysis_rows, evidence=bool(self._list_length))
                                  if self.error_analysis else None)
        valid = batch.gt_valid
        most_gt = (max(batch.gt_counts, default=0) if batch.gt_counts is not None else
                   int(valid.sum(1).max()) if valid.numel() else 0)
        if most_gt > max_k:  # R@rel (K = the image's GT relations) needs the graph-constrained list that far
            ranks['gc'] = scene_graph_ranks(batch, most_gt, self.ng_topk, self.iou_thr, self.plus_one,
                                            phrase=self.mode == 'phrdet', use_masks=self.match == 'mask',
                                            rank_by=self.rank, with_pair_accuracy=False)['gc']
        # b * G + g of the real GT relations (their number is known on the host: no device read)
        slot = valid.reshape(-1).nonzero().squeeze(1) if batch.gt_counts is None else \
            known_nonzero(valid.reshape(-1), sum(batch.gt_counts))

        def real(values: Tensor) -> Tensor:
            return values.reshape(-1).index_select(0, slot)
        image_of = slot // max(valid.shape[1], 1)
        sub_cls = real(batch.gt_labels.gather(1, batch.gt_pairs[..., 0]))
        obj_cls = real(batch.gt_labels.gather(1, batch.gt_pairs[..., 1]))
        pred = real(batch.gt_predicates)
        if len(classes) ** 2 * len(predicates) >= 2 ** 31:
            raise ValueError(f'{len(classes)} classes x {len(predicates)} predicates: triplet codes exceed int32')
        codes = triplet_keys(sub_cls, obj_cls, pred, len(classes), len(predicates))
        zs_codes = self._zeroshot_codes(batch.device)
        if zs_codes is not None and zs_codes.numel():
            zeroshot = torch.isin(codes, zs_codes)
        else:
            zeroshot = torch.zeros_like(codes, dtype=torch.bool)
        pair_rank = ranks.get('pair_acc', torch.full_like(ranks['gc'], NO_HIT))
        rows = {
            'images': {'sample_idx': batch.sample_idx, 'num_gt': valid.sum(1), 'num_pred': batch.num_rel_preds,
                       'missing': missing, **self.diagnostic_rows(samples, batch, ranks)},
            'relations': {'sample_idx': batch.sample_idx.index_select(0, image_of), 'predicate': pred,
                          'triplet': codes, 'zeroshot': zeroshot,
                          'rank_gc': real(ranks['gc']).clamp(max=self._rank_cap),
                          'rank_ngc': real(ranks['ngc']).clamp(max=self._rank_cap),
                          'rank_pair': real(pair_rank).clamp(max=self._rank_cap)},
        }
        if self._list_length:
            for table, columns in per_image_rows(samples, batch, ranks, slot, self._rank_cap).items():
                rows.setdefault(table, {}).update(columns)
        if self.error_analysis:
            rows['relations']['cause'] = real(ranks['cause'])
            for _, column in error_causes.STAGE_RANKS:
                rows['relations'][column] = real(ranks[column]).clamp(max=self._rank_cap)
            for name in ('num_gt_objects', 'inst_loc', 'inst_det'):
                rows['images'][name] = ranks[name]
            if self._list_length:
                for name in (f'{end}_{n}' for end in ('subject', 'object') for n in ('iou', 'det_label', 'det_score')):
                    rows['relations'][name] = real(ranks[name])
        return rows

    def compute_rows_per_image(self, samples: List[Any], topk: int) -> Dict[str, Dict[str, Tensor]]:
        """:meth:`compute_rows` with the per-image columns (``topk`` listed triplets), whatever
        ``per_image_out``: the rows :func:`~.per_image.image_record` turns into one image's record."""
        length, self._list_length = self._list_length, positive_int(topk, 'topk_drawn', type(self).__name__)
        try:
            return self.compute_rows(samples)
        finally:
            self._list_length = length

    def _write_files(self, summary: Dict[str, Any], keys: Dict[str, float], tables: Tables) -> None:
        super()._write_files(summary, keys, tables)
        target = self.output_path('per_image_out') if self.per_image_out else None
        done = (target, id(tables), self.output_content('per_image_out'))
        if self.per_image_out and self._group is not None and self._group.per_image_written(done):
            summary.setdefault('report_files', {})['per_image'] = done[0]  # a group member wrote these lines
        elif self.per_image_out:
            path = self._guarded('per_image_out', lambda: write_per_image(
                target, per_image_records(self, tables, self._image_names.names)))
            if path is not None and self._group is not None:
                self._group.record_per_image(done)
            if path is not None:
                summary.setdefault('report_files', {})['per_image'] = path
        self._image_names.clear()

    # ------------------------------------------------------------------ reduced tables become keys
    def evaluate(self, size: int) -> Dict[str, float]:
        """As :meth:`RowMetric.evaluate`, after one warning about object lists whose length differs from the
        GT (PredCls/SGCls, evaluated as the legacy code does unless ``strict_counts``)."""
        self.flush()
        self.object_counts.warn(self.mode)
        return super().evaluate(size)

    def select_keys(self, summary: Dict[str, Any]) -> Dict[str, float]:
        return {k: v for k, v in summary['metrics'].items() if k.split('@')[0] in self.report_keys}

    def _evaluated_images(self, images: Dict[str, Tensor], quiet: bool = False) -> Tensor:
        """[N] bool: images that count. Images without GT relations never count; with
        ``skip_empty_predictions`` images without predicted pairs are skipped (legacy), except those whose
        prediction is missing (the user did not predict them: they count as recall 0)."""
        evaluated = images['num_gt'] > 0
        if self.skip_empty_predictions:
            evaluated &= (images['num_pred'] > 0) | images['missing']
        if not quiet and not bool(evaluated.any()):
            num = int(images['sample_idx'].numel())
            no_gt = int((images['num_gt'] == 0).sum())
            reason = f'{no_gt} without GT relations'
            if self.skip_empty_predictions:
                reason += (f', {int(((images["num_gt"] > 0) & (images["num_pred"] == 0)).sum())} without any '
                           f'predicted pair (skipped: skip_empty_predictions=True)')
            warn_user(f'{type(self).__name__} ({self.prefix}): no image was evaluated ({num} samples: {reason}); '
                  f'every recall is 0')
        return evaluated

    def summarize(self, tables: Tables) -> Dict[str, Any]:
        """All keys (percent) and the per-predicate table from de-duplicated row tables: the zero-shot set
        (:meth:`_zeroshot_relations`), the recall keys (:meth:`_recall_keys`), the mean-recall keys and predicate
        groups (:meth:`_mean_recall_keys`) and the per-predicate table (:meth:`_per_predicate_table`)."""
        images, rels = tables['images'], tables['relations']
        evaluated = self._evaluated_images(images)
        image_of, keep, num_images = evaluated_image_rows(images['sample_idx'], evaluated, rels['sample_idx'])
        kept = keep.nonzero().squeeze(1)
        rel = {n: c.index_select(0, kept) for n, c in rels.items()}
        image = {n: c[evaluated] for n, c in images.items()}  # the evaluated images, numbered as ``image_of``
        zs_mask, zs_info = self._zeroshot_relations(rels['triplet'], rel)
        novel = self.novel_indices()
        subsets = self.novel_subsets(rel['triplet'], novel) if novel else {}
        m: Dict[str, float] = {}
        rank_rel = self.relative_ranks(rel['rank_gc'], image['num_gt'].index_select(0, image_of))
        self._recall_keys(m, rel, image_of, num_images, zs_mask, subsets, rank_rel)
        per_pred, groups = self._mean_recall_keys(m, rel, image_of, num_images, novel, subsets, rank_rel)
        pred = rel['predicate'].long()
        no_value = self.no_value_reasons(m, zs_info, subsets, groups)
        if self._warns_no_value:
            warn_no_value(self, no_value)
        causes = self._error_keys(m, rel, image, image_of, num_images) if self.error_analysis else {}
        return {'metrics': m, 'per_predicate': self._per_predicate_table(per_pred, pred), 'num_images': num_images,
                'no_value': no_value, **causes,
                'num_samples': int(images['sample_idx'].numel()), 'num_gt_relations': int(pred.numel()),
                'num_missing_predictions': int(images['missing'].sum()),
                'zeroshot': zs_info, 'groups': {n: [self.predicates[i] for i in g] for n, g in groups.items()},
                'conventions': self.conventions,
                **self.input_diagnostics(images, m, num_images, torch.bincount(pred, minlength=len(self.predicates))),
                **({'open_vocab': {'source': novel['source'],
                                   'novel_objects': [self.classes[i] for i in novel['objects']],
                                   'novel_predicates': [self.predicates[i] for i in novel['predicates']],
                                   'num_gt_relations': {n: int(mk.sum()) for n, mk in subsets.items()}}}
                   if novel else {})}

    def no_value_reasons(self, m: Dict[str, float], zs_info: Optional[Dict[str, Any]], subsets: Dict[str, Tensor],
                         groups: Dict[str, Sequence[int]]) -> List[Dict[str, Any]]:
        """The keys of ``m`` without a value (NaN: a subset, group or family without any GT relation in the
        evaluated images) and why, ``[{'keys': [...], 'why': text}]`` (``summary['no_value']``)."""
        def nan_keys(predicate) -> List[str]:
            return [k for k, v in m.items() if v != v and predicate(k)]
        out = []
        zero_shot = nan_keys(lambda k: k.split('@')[0] in ('zR', 'ngzR'))
        if zero_shot:
            out.append({'keys': zero_shot, 'why': f'no evaluated GT relation is in the zero-shot set '
                                                  f'({zs_info["size"]} triplets, {zs_info["source"]})'})
        for subset in subsets:
            keys = nan_keys(lambda k: k.endswith(f'_{subset}'))
            if keys:
                out.append({'keys': keys, 'why': f'no evaluated GT relation is in the {subset} subset'})
        for name in groups:
            keys = nan_keys(lambda k: k.endswith(f'_{name}'))
            if keys:
                out.append({'keys': keys, 'why': f'no predicate of the {name} group has a GT relation in the '
                                                 f'evaluated images'})
        return out

    def _zeroshot_relations(self, triplets: Tensor, rel: Dict[str, Tensor]
                            ) -> Tuple[Optional[Tensor], Optional[Dict[str, Any]]]:
        """The zero-shot flags of the evaluated GT relations ``rel`` (None: no zero-shot set) and the set's
        description: the given set (``zeroshot_triplets``, else ``dataset_meta['zeroshot_triplets']``: the rows'
        own flags), else the set derived from ``dataset_meta['train_triplets']``: the GT triplets of the split
        (the codes ``triplets`` of every relation row) absent from training."""
        if self.user_zeroshot is not None or self._meta('zeroshot_triplets') is not None:
            z = self.user_zeroshot if self.user_zeroshot is not None else \
                as_zeroshot_triplets(self._meta('zeroshot_triplets'))
            return rel['zeroshot'], {'source': 'given', 'size': int(z.shape[0]), 'sha1': triplet_set_digest(z)}
        if self._meta('train_triplets') is None:
            return None, None
        train = torch.as_tensor(self._meta('train_triplets')).long().reshape(-1, 3)
        c, p = len(self.classes), len(self.predicates)
        derived = derive_zeroshot(torch.stack(triplet_parts(triplets, c, p), 1), train)
        codes = triplet_keys(derived[:, 0], derived[:, 1], derived[:, 2], c, p)
        return torch.isin(rel['triplet'], codes), {
            'source': 'derived (evaluated GT triplets absent from training)', 'size': int(derived.shape[0]),
            'sha1': triplet_set_digest(derived)}

    def relative_ranks(self, rank_gc: Tensor, num_gt: Tensor) -> Tensor:
        """Ranks that count a GT relation at K = 1 exactly when it is hit within the first n graph-constrained
        entries, n = its image's number of GT relations ``num_gt`` [G] (duplicates included): R@rel / mR@rel
        are R@1 / mR@1 of these (stored ranks are capped, so n is too)."""
        return error_causes.as_rank(rank_gc.long() < num_gt.long().clamp(max=self._rank_cap))

    def _recall_keys(self, m: Dict[str, float], rel: Dict[str, Tensor], image_of: Tensor, num_images: int,
                     zs_mask: Optional[Tensor], subsets: Dict[str, Tensor], rank_rel: Optional[Tensor] = None) -> None:
        """R@K and ngR@K into ``m``; R@rel (with ``rank_rel``: :meth:`relative_ranks`), zR@K / ngzR@K (with a
        zero-shot set), A@K (PredCls / SGCls) and the recalls of the open-vocabulary subsets (``R@K_{subset}``,
        ``ngR@K_{subset}``)."""
        ks, avg = self.topk, self.recall_average
        rank_gc, rank_ngc = rel['rank_gc'].long(), rel['rank_ngc'].long()

        def recall(rank: Tensor, mask: Optional[Tensor] = None) -> Tensor:  # a subset without GT: NaN
            return recall_from_ranks(rank, image_of, num_images, ks, rel_mask=mask, average=avg,
                                     empty=0.0 if mask is None else NO_VALUE)
        _put(m, 'R', ks, recall(rank_gc))
        if rank_rel is not None:
            m['R@rel'] = 100.0 * float(recall_from_ranks(rank_rel, image_of, num_images, (1,), average=avg)[0])
        _put(m, 'ngR', ks, recall(rank_ngc))
        if zs_mask is not None:
            _put(m, 'zR', ks, recall(rank_gc, zs_mask))
            _put(m, 'ngzR', ks, recall(rank_ngc, zs_mask))
        if self.mode in ('predcls', 'sgcls'):
            total = float(rel['predicate'].numel())
            for k in ks:
                m[f'A@{k}'] = 100.0 * float(hit_within(rel['rank_pair'].long(), k).sum()) / total if total else 0.0
        for subset, mask in subsets.items():
            for family, rank in (('R', rank_gc), ('ngR', rank_ngc)):
                _put(m, family, ks, recall(rank, mask), f'_{subset}')

    def _mean_recall_keys(self, m: Dict[str, float], rel: Dict[str, Tensor], image_of: Tensor, num_images: int,
                          novel: Optional[Dict[str, Any]], subsets: Dict[str, Tensor],
                          rank_rel: Optional[Tensor] = None) -> Tuple[Tensor, Dict[str, Sequence[int]]]:
        """mR@K, ngmR@K, the predicate groups' mR@K_{group}, the novel predicates' mR@K_novel_pred /
        ngmR@K_novel_pred, F@K and AVG@K into ``m``; returns the per-predicate recalls [K, P] and the groups."""
        ks, avg, num_pred_classes = self.topk, self.recall_average, len(self.predicates)
        pred = rel['predicate'].long()
        per_pred, present = per_predicate_recall(rel['rank_gc'].long(), pred, image_of, num_images, num_pred_classes,
                                                 ks, avg)
        ng_per_pred, _ = per_predicate_recall(rel['rank_ngc'].long(), pred, image_of, num_images, num_pred_classes,
                                              ks, avg)

        def mean_over(values: Tensor, members: Sequence[int], empty: float = NO_VALUE) -> Tensor:
            return mean_recall(values, present, members, self.mr_average, empty)

        everyone = range(num_pred_classes)
        _put(m, 'mR', ks, mean_over(per_pred, everyone, 0.0))  # nothing evaluated: 0, warned (docs/metrics.md)
        if rank_rel is not None:  # mR@rel: mR@1 of the relative ranks
            rel_per_pred, _ = per_predicate_recall(rank_rel, pred, image_of, num_images, num_pred_classes, (1,), avg)
            m['mR@rel'] = 100.0 * float(mean_over(rel_per_pred, everyone, 0.0)[0])
        _put(m, 'ngmR', ks, mean_over(ng_per_pred, everyone, 0.0))
        groups = resolve_groups(self.predicates, self.user_groups, self._meta('predicate_counts'))
        for name, members in groups.items():
            _put(m, 'mR', ks, mean_over(per_pred, members), f'_{name}')
        if 'novel_pred' in subsets:
            for family, table in (('mR', per_pred), ('ngmR', ng_per_pred)):
                _put(m, family, ks, mean_over(table, novel['predicates']), '_novel_pred')
        for k in ks:
            r, mrk = m[f'R@{k}'], m[f'mR@{k}']
            m[f'F@{k}'] = 2 * r * mrk / (r + mrk) if r + mrk > 0 else 0.0
            m[f'AVG@{k}'] = (r + mrk) / 2
        return per_pred, groups

    def reported_causes(self, images: Dict[str, Tensor]) -> Tuple[str, ...]:
        """The causes with a ``miss@K_{cause}`` key: all, ``no_prediction`` only where it can occur (images
        without predicted pairs counted: ``skip_empty_predictions=False``, or predictions missing)."""
        can = not self.skip_empty_predictions or bool(images['missing'].any())
        return tuple(c for c in error_causes.CAUSES if c != 'no_prediction' or can)

    def no_prediction_rows(self, image: Dict[str, Tensor], image_of: Tensor) -> Tensor:
        """[G] bool: GT relations of counted images without any predicted pair (or with a missing prediction),
        whose misses are ``no_prediction`` (``image``: columns of the evaluated images, numbered by ``image_of``)."""
        return ((image['num_pred'] == 0) | image['missing']).index_select(0, image_of)

    def _error_keys(self, m: Dict[str, float], rel: Dict[str, Tensor], image: Dict[str, Tensor], image_of: Tensor,
                    num_images: int) -> Dict[str, Any]:
        """``miss@K_{cause}`` (and ``miss@K_predicate_ng``), the stage-wise keys ``stage_*`` into ``m``; returns
        ``{'per_predicate_causes': table, 'causes': [names]}`` for the summary (:mod:`~..functional.error_causes`)."""
        ks, avg = self.topk, self.recall_average
        rank_gc, cause = rel['rank_gc'].long(), rel['cause'].long()
        no_pred = self.no_prediction_rows(image, image_of)
        reported = self.reported_causes(image)
        shares = error_causes.cause_shares(rank_gc, cause, image_of, num_images, ks, avg, no_pred,
                                           rel['rank_ngc'].long(), self.ng_topk)
        for name in reported + ('predicate_ng',):
            _put(m, 'miss', ks, shares[name], f'_{name}')
        count = image['num_gt']
        for family, column in error_causes.STAGE_RANKS:
            _put(m, family, ks, error_causes.stage_recall(rel[column].long(), image_of, num_images, count, ks))
        predicted = ~image['missing']  # a missing prediction detects nothing (its rows hold the GT objects)
        for name in ('inst_loc', 'inst_det'):
            found = torch.where(predicted, image[name], torch.zeros_like(image[name]))
            m[f'stage_{name}'] = 100.0 * float(error_causes.instance_recall(found, image['num_gt_objects']))
        table = error_causes.per_predicate_cause_shares(rank_gc, cause, rel['predicate'].long(), image_of, num_images,
                                                        len(self.predicates), ks, avg, no_pred)
        num_gt = torch.bincount(rel['predicate'].long(), minlength=len(self.predicates)).tolist()
        rows = {name: values.tolist() for name, values in table.items()}
        per_predicate = {}
        for i in self._predicate_order():
            if not num_gt[i]:
                continue
            row = {'num_gt': num_gt[i]}
            for j, k in enumerate(ks):
                row[f'R@{k}'] = 100.0 * rows['hit'][j][i]
                row.update({f'miss@{k}_{c}': 100.0 * rows[c][j][i] for c in reported})
            per_predicate[self.predicates[i]] = row
        return {'per_predicate_causes': per_predicate, 'causes': list(reported)}

    def _predicate_order(self) -> List[int]:
        """Predicate indices by descending training frequency when ``predicate_counts`` is known, else in order."""
        counts = self._meta('predicate_counts')
        order = list(range(len(self.predicates)))
        if counts is not None and len(counts) == len(order):
            order.sort(key=lambda i: (-float(counts[i]), i))
        return order

    def _per_predicate_table(self, per_pred: Tensor, pred: Tensor) -> Dict[str, Dict[str, Any]]:
        """``{predicate: {'R@K': percent, ..., 'num_gt': GT relations}}`` from the per-predicate recalls [K, P] and
        the evaluated relations' predicates, by descending training frequency when ``predicate_counts`` is known
        (else in predicate order)."""
        ks, num_pred_classes = self.topk, len(self.predicates)
        counts = self._meta('predicate_counts')
        order = list(range(num_pred_classes))
        if counts is not None and len(counts) == num_pred_classes:
            order.sort(key=lambda i: (-float(counts[i]), i))
        per_pred_rows = per_pred.tolist()  # [K][P] floats (element-wise tensor reads are slow)
        per_predicate = {
            self.predicates[i]: {f'R@{k}': 100.0 * per_pred_rows[j][i] for j, k in enumerate(ks)}
            for i in order}
        num_gt = torch.bincount(pred, minlength=num_pred_classes).tolist()
        for i in order:
            per_predicate[self.predicates[i]]['num_gt'] = num_gt[i]
        return per_predicate

    def novel_subsets(self, triplets: Tensor, novel: Dict[str, Any]) -> Dict[str, Tensor]:
        """[G] bool masks of the open-vocabulary subsets of GT relations (their triplet codes): 'novel_obj'
        (subject and object novel; when novel classes are set), 'novel_pred' (novel predicate; when set) and
        'base' (no novel subject, object or predicate)."""
        c, p = len(self.classes), len(self.predicates)
        subject, obj, predicate = triplet_parts(triplets, c, p)
        novel_obj = torch.zeros(c, dtype=torch.bool)
        novel_obj[novel['objects']] = True
        novel_pred = torch.zeros(p, dtype=torch.bool)
        novel_pred[novel['predicates']] = True
        out = {}
        if novel['objects']:
            out['novel_obj'] = novel_obj[subject] & novel_obj[obj]
        if novel['predicates']:
            out['novel_pred'] = novel_pred[predicate]
        out['base'] = ~(novel_obj[subject] | novel_obj[obj] | novel_pred[predicate])
        return out

    def input_diagnostics(self, images: Dict[str, Tensor], metrics: Dict[str, float],
                          num_evaluated: int, gt_counts: Optional[Tensor] = None) -> Dict[str, Any]:
        """``score_columns`` (how the predicate scores were read) and ``input_warnings`` of the reduced image
        rows; each warning is issued once here (summaries are computed once per group of metrics)."""
        if 'score_width' not in images:
            return {}
        k = max(self.topk)
        warnings_ = box_frame_warnings(images['box_flags'])
        if 'label_offsets' in images:
            warnings_ += label_shift_warnings(images['label_offsets'], len(self.classes))
        warnings_ += score_column_warnings(metrics.get(f'R@{k}'), metrics.get(f'ngR@{k}'), k, num_evaluated,
                                           images['top_predicate'], images['score_width'], self.predicates,
                                           self.score_layout, images.get('head_predicates'), gt_counts)
        for text in warnings_:
            warn_user(f'{type(self).__name__} ({self.prefix}): {text}')
        return {'score_columns': describe_score_columns(images['score_width'], len(self.predicates),
                                                        self.score_layout),
                'input_warnings': warnings_}

    # ------------------------------------------------------------------ reporting
    def format_report(self, summary: Dict[str, Any], keys: Dict[str, float]) -> str:
        text = format_scene_graph_report(summary, keys, mode=self.mode,
                                         dataset=self._meta('dataset_name', 'unknown dataset'),
                                         metric_name=f'{type(self).__name__} | protocol={self.protocol.name}',
                                         ks=self.topk,
                                         with_per_predicate=self._reports_per_predicate)
        lines = [text]
        info = summary.get('open_vocab')
        if info:
            lines.append(f'open-vocabulary subsets ({info["source"]}; GT relations: '
                         + ', '.join(f'{n} {c}' for n, c in info['num_gt_relations'].items()) + ')')
            for subset in info['num_gt_relations']:
                shown = [f'{k}: {"–" if v != v else format(v, ".2f")}' for k, v in keys.items()
                         if k.endswith(f'_{subset}')]
                if shown:
                    lines.append(f'  {subset}: ' + '  '.join(shown))
        lines += [f'no value (–) for {", ".join(e["keys"])}: {e["why"]}' for e in summary.get('no_value', ())
                  if any(k in keys for k in e['keys'])]
        if summary.get('causes') and any(k.startswith('miss@') for k in keys):
            lines += format_recall_lost(summary['metrics'], self.topk, summary['causes'])
        if summary.get('score_columns'):
            lines.append(f'predicate scores read as {summary["score_columns"]}')
        lines += [f'WARNING: {w}' for w in summary.get('input_warnings', ())]
        return '\n'.join(lines)

    def write_outfile(self, summary: Dict[str, Any], keys: Dict[str, float], tables: Tables) -> str:
        return dump_metric_json(self.outfile_prefix, self.file_stem(), {
            'mode': self.mode, 'keys': keys, 'per_predicate': summary['per_predicate'],
            'num_images': summary['num_images'], 'num_missing_predictions': summary['num_missing_predictions'],
            'zeroshot': summary['zeroshot'], 'conventions': summary.get('conventions')})

    def write_reports(self, summary: Dict[str, Any], keys: Dict[str, float], stem: str) -> Dict[str, str]:
        return write_scene_graph_reports(summary, self.report_dir, stem, self.topk,
                                         self._meta('dataset_name', 'unknown dataset'), self.mode)

    def extra_results(self) -> Dict[str, Any]:
        """``{prefix}/num_missing_predictions`` and (SGMeanRecall) ``{prefix}/per_predicate_recall`` of the
        last evaluation, for ``metrics.json``."""
        if self.last_report is None:
            return {}
        out: Dict[str, Any] = {f'{self.prefix}/num_missing_predictions': self.last_report['num_missing_predictions']}
        if self._reports_per_predicate:
            out[f'{self.prefix}/per_predicate_recall'] = self.last_report['per_predicate']
        if self.last_report.get('per_predicate_causes') is not None:
            out[f'{self.prefix}/per_predicate_causes'] = self.last_report['per_predicate_causes']
        return out


@METRICS.register_module()
class SGRecall(SceneGraphMetric):
    """R@K, ngR@K, zR@K, ngzR@K and (PredCls/SGCls) A@K, in percent. See :class:`SceneGraphMetric`."""
    report_keys = ('R', 'ngR', 'zR', 'ngzR', 'A', 'miss', 'stage_pair_loc', 'stage_pair_det', 'stage_pred_cls',
                   'stage_inst_loc', 'stage_inst_det')
    file_tag = 'recall'


@METRICS.register_module()
class SGMeanRecall(SceneGraphMetric):
    """mR@K, ngmR@K, mR@K_head/_body/_tail, F@K and AVG@K in percent; the per-predicate recall table is in
    the logged report, the report files, ``outfile_prefix`` and :meth:`extra_results` (metrics.json)."""
    report_keys = ('mR', 'ngmR', 'F', 'AVG')
    file_tag = 'mean_recall'
    _reports_per_predicate = True
