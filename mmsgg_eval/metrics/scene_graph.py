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
from ..functional import scene_graph_ranks, triplet_keys
from ..functional.diagnostics import head_predicate_flags, image_diagnostics, label_checked_images
from ..functional import error_causes
from ..open_vocab import name_indices, split_table
from ..functional.transfer import host_tensor, known_nonzero
from ..registry import METRICS
from ..functional.overlap import Staged
from ..structures import MODES, SCORE_LAYOUTS, ObjectCounts
from ..zeroshot import as_zeroshot_triplets, check_zeroshot_indices
from ..reports import dump_metric_json, write_scene_graph_reports
from .per_image import (PER_IMAGE_TOPK, ImageNames, per_image_records, per_image_rows, per_image_schema,
                        write_per_image)
from .base import RowMetric, Schema, Tables
from .relation_vocabulary import RelationVocabulary
from .options import iou_threshold, one_of, positive_int, positive_ints
from ..keys import reported_families
from .protocols import SCENE_GRAPH_SETTINGS, UNSET, describe_conventions, resolve_protocol
from .scene_graph_inputs import PoolReader, image_sizes, score_rows as _score_rows
from .scene_graph_summary import SceneGraphSummary


class SceneGraphMetric(SceneGraphSummary, RelationVocabulary, RowMetric):
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
    protocol_target = 'scene_graph'  # which conventions resolve_protocol applies (see metrics/protocols.py)
    compute_rows_dedupes = True  # _read_pool keeps the first occurrence of a repeated sample_idx
    overlaps_pools = True  # start_rows: the compiled ranking pass of a pool runs beside the previous pool's rows


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
        self._reader = PoolReader()  # its buffers, and the reads shared with an OIRelationMetric
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
            flags, offsets = image_diagnostics(batch.pred_boxes, batch.pred_labels, batch.gt_boxes, batch.gt_labels,
                                               original, resized,
                                               label_checked_images(batch.sample_idx),  # the same on every world size
                                               self.plus_one)
        widths = batch.score_width if batch.score_width is not None else [0] * len(samples)
        num_rel = batch.rel_lengths or [batch.rel_width] * len(widths)  # (host ints: 0 for an image without pairs)
        return {'score_width': host_tensor([w if n > 0 else 0 for w, n in zip(widths, num_rel)], torch.int16, device),
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
        return sum(map(_score_rows, samples))

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
        self._reader.open_epoch()

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
        """The exact key (:func:`~mmsgg_eval.metrics.settings.key_value`) of the zero-shot codes, kept with them:
        :meth:`compute_key` is asked at every ``process()``."""
        from .settings import key_value
        codes = self._zeroshot_codes(torch.device('cpu'))
        if self._zs_key is None or self._zs_key[0] is not codes:
            self._zs_key = (codes, key_value(codes))
        return self._zs_key[1]

    # ------------------------------------------------------------------ a pool becomes rows
    def _read_pool(self, samples: List[Any], background: bool = False):
        """The padded batch of a pool, its [B] bool ``prediction_missing`` flags and the samples read (in batch
        order), in two stages (a generator yielding once: :meth:`~.scene_graph_inputs.PoolReader.stages`). A
        ``sample_idx`` repeated within the pool counts once (the first); a sample whose prediction is missing is
        read as an explicitly empty prediction (objects on the GT, no predicted pair)."""
        batch, missing, samples = yield from self._reader.stages(
            samples, self.mode, len(self.classes), len(self.predicates), counts=self.object_counts,
            score_layout=self.score_layout,
            ranking=(max(self.topk), self.ng_topk, self.error_analysis) if self.rank == 'score' else None,
            background=background, with_masks=self.match == 'mask')
        if batch.ids_missing:  # known on the host: no device read otherwise
            self.accumulator.number_missing(batch.sample_idx, type(self).__name__)
        return batch, host_tensor(missing, torch.bool, batch.device), samples

    def compute_rows(self, samples: List[Any]) -> Dict[str, Dict[str, Tensor]]:
        """Rank and match a pool: per image its GT / predicted pair counts and whether its prediction is
        missing; per GT relation its predicate, triplet code, zero-shot flag and first-hit ranks. A
        ``sample_idx`` repeated within the pool (sampler padding) is processed once: the first counts."""
        return Staged(self._row_stages(samples)).result()

    def start_rows(self, samples: List[Any]) -> Staged:
        """:meth:`compute_rows` with its compiled ranking pass started in the background thread: the rows come
        from ``.result()`` (see :meth:`RowMetric.flush <mmsgg_eval.metrics.base.RowMetric.flush>`)."""
        return Staged(self._row_stages(samples, background=True))  # (subclasses with their own rows opt out)

    def _row_stages(self, samples: List[Any], background: bool = False):
        classes, predicates = self.classes, self.predicates
        batch, missing, samples = yield from self._read_pool(samples, background)
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
            'images': {'sample_idx': batch.sample_idx,
                       'num_gt': valid.sum(1) if batch.gt_counts is None else  # (host ints where known)
                       host_tensor(batch.gt_counts, torch.long, batch.device),
                       'num_pred': batch.num_rel_preds, 'missing': missing,
                       **self.diagnostic_rows(samples, batch, ranks)},
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
            # the three stage-wise rank columns in one gather, clamped and in the stored dtype (no copy per column)
            stages = ranks['stage_ranks'].reshape(len(error_causes.STAGE_RANKS), -1).index_select(1, slot)
            stages = stages.clamp_(max=self._rank_cap).to(torch.int16 if self._rank_cap == RANK_CAP_INT16 else
                                                          torch.int32)
            rows['relations'].update(zip((column for _, column in error_causes.STAGE_RANKS), stages.unbind(0)))
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

    def evaluate(self, size: int) -> Dict[str, float]:
        """As :meth:`RowMetric.evaluate`, after one warning about object lists whose length differs from the
        GT (PredCls/SGCls, evaluated as the legacy code does unless ``strict_counts``)."""
        self.flush()
        self._reader.close_epoch()
        self.object_counts.warn(self.mode)
        return super().evaluate(size)

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
    report_keys = reported_families('recall')  # the declared families (mmsgg_eval/keys.py) SGRecall returns
    file_tag = 'recall'


@METRICS.register_module()
class SGMeanRecall(SceneGraphMetric):
    """mR@K, ngmR@K, mR@K_head/_body/_tail, F@K and AVG@K in percent; the per-predicate recall table is in
    the logged report, the report files, ``outfile_prefix`` and :meth:`extra_results` (metrics.json)."""
    report_keys = reported_families('mean_recall')
    file_tag = 'mean_recall'
    _reports_per_predicate = True
