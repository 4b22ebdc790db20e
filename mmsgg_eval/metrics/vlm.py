"""``VLMSceneGraphMetric``: scene graphs written as JSON by multimodal LLMs (``docs/metrics.md``).

Keys (percent): ``FailureRate`` (samples whose output is not a structurally valid graph, see
:mod:`mmsgg_eval.io.vlm`), ``Recall`` / ``mRecall`` (every predicted triplet, no K; a failed sample predicts
nothing and counts 0), ``mRecall_head/_body/_tail`` when predicate groups are known, ``AP@50`` (COCO AP at IoU
0.5 of the predicted objects against the GT objects, :func:`mmsgg_eval.functional.detection_rows.coco_ap50`,
equal to pycocotools' ``COCOeval``), and with ``topk`` the ordered ``R@K`` / ``mR@K``.

Recall is not re-implemented: every sample is converted by :func:`mmsgg_eval.io.vlm.to_data_sample` and scored by
the legacy scene-graph machinery (:class:`~mmsgg_eval.metrics.scene_graph.SceneGraphMetric`, ``mode='sgdet'``,
``skip_empty_predictions=False``) with K = :data:`K_ALL` for the K-free keys. The IoU convention follows
``iou_plus_one`` (None = ``dataset_meta``, like ``SGRecall``), for the triplets and for AP (legacy VG150 AP adds
1 to widths and heights, as the legacy evaluator's COCO conversion does).

Input data samples carry the GT of the data contract (``gt_instances``, ``gt_relations``, metainfo
``sample_idx`` and ``ori_shape`` (H, W)) plus the prediction as ONE of:

* ``pred_text``: the raw model output (str; None = no output, a failure), parsed here;
* ``pred_graph``: an already-decoded JSON value;
* ``vlm_result``: a :class:`mmsgg_eval.io.vlm.ParseResult` parsed by the caller.

Distributed state (:class:`~mmsgg_eval.metrics.base.RowMetric`): one row per sample (failure code, counts),
one row per predicted / GT object (box, label, score) for AP, and the per-image / per-GT-relation rows of the
inner scene-graph metric, all in ONE accumulator: one reduce, de-duplicated by ``sample_idx``. A sample
marked ``prediction_missing`` (no answer given for it) predicts nothing, is a failure with the code
``'missing'`` and is counted in ``num_missing_predictions``. One warning per evaluation names the answers whose
boxes look like image pixels read on the canvas (``ParseResult.pixel_like`` of at least
:data:`PIXEL_ANSWERS_MIN` answers and :data:`PIXEL_ANSWERS_FRACTION` of those that can tell; ``docs/metrics.md``).
"""
import json
import math
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from ..registry import METRICS
from ..functional.detection_rows import coco_ap50  # AP@50 of the object rows (kept importable from here)
from ..functional.limits import K_ALL  # the "K" of the K-free Recall / mRecall
from ..io.vlm import FAILURE_CODES, ParseResult, VLMAnswerParser, to_data_sample
from ..structures import get_field
from ..user_messages import warn_user
from .base import RowMetric, Schema, Tables
from .samples import first_occurrences, prediction_missing
from ..keys import RowKey
from .bootstrap import Contributions
from .key_values import scene_graph_contributions
from .row_keys import Columns, row_key_contributions, row_key_values
from .options import positive_int, positive_ints
from .protocols import UNSET, VLM_SETTINGS, describe_conventions, resolve_protocol
from .scene_graph import SceneGraphMetric
from .scene_graph_summary import warn_no_value

_SAMPLE_DTYPES = {'missing': torch.bool, 'pixel_like': torch.int8}
#: Pixel-box warning: at least this many answers look like pixels ...
PIXEL_ANSWERS_MIN = 2
#: ... and at least this fraction of the answers whose image can tell pixels from the canvas.
PIXEL_ANSWERS_FRACTION = 0.9


def vlm_key(key: str) -> str:
    """The VLM metric's name of an inner scene-graph key: ``R@K_ALL...`` is ``Recall...``, ``mR@K_ALL...`` is
    ``mRecall...`` (the sentinel K never reaches an output); other keys keep their name."""
    for family, name in (('R', 'Recall'), ('mR', 'mRecall'), ('ngR', 'ngRecall')):
        head = f'{family}@{K_ALL}'
        if key == head or key.startswith(head + '_'):
            return name + key[len(head):]
    return key


def raw_answer(sample: Any) -> Optional[str]:
    """The answer of a data sample as the model gave it, for the per-image file: ``pred_text``, else
    ``pred_graph`` as JSON; None for a ``vlm_result`` parsed by the caller or no answer."""
    text = get_field(sample, 'pred_text')
    if text is not None:
        return str(text)
    graph = get_field(sample, 'pred_graph')
    if graph is None:
        return None
    try:
        return json.dumps(graph, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(graph)


@METRICS.register_module()
class VLMSceneGraphMetric(RowMetric):
    """FailureRate, Recall, mRecall, AP@50 (and ordered R@K / mR@K) of VLM JSON scene graphs, in percent.

    Args:
        canvas / box_tolerance / box_format / synonyms: how answers are read, the options of
            :class:`~mmsgg_eval.io.vlm.VLMAnswerParser` (default: boxes on a 0-1000 canvas, 1 % tolerance, xyxy,
            no synonyms; names are normalised first: case, ``_``/``-``, whitespace).
        topk: K of the ordered ``R@K`` / ``mR@K`` (default none: a VLM's order is often meaningless).
        rank: order of the triplets for ``R@K``: 'given' (output order, default) or 'score' (relation score x
            object scores when the model gives them; ties keep the output order).
        iou_thr / iou_plus_one / mr_average / recall_average / predicate_groups: as in ``SGRecall``.
        novel_objects / novel_predicates / novel_split: open-vocabulary subsets as in ``SGRecall`` (default
            ``dataset_meta['open_vocab']``), on the model's words mapped to dataset names: keys
            ``Recall_novel_obj`` / ``Recall_novel_pred`` / ``mRecall_novel_pred`` / ``Recall_base`` (and
            ``R@K_...`` for each ``topk``).
        ap_max_dets: detections per image and class kept by COCO AP (COCOeval's default 100; below 10 it acts
            as 10, as in COCOeval).
        report_dir: when set, ``write_scene_graph_reports`` writes ``{prefix}.metrics.json``, the per-predicate
            PNG and the tables (``{prefix}.tables.md`` / ``.tex`` / ``.{name}.csv``) there after every
            evaluation (main rank only).
        outfile_prefix: when set, ``{outfile_prefix}.{prefix}.json`` receives the keys and the summary.
        prefix: key prefix (default 'vlm').
        protocol: named bundle of conventions ('sgb': the defaults above; 'r1sgg': plain IoU, pooled recall,
            mR over the predicates present; see ``docs/protocols.md``); explicit rank / iou_thr /
            iou_plus_one / mr_average / recall_average override single choices. See :attr:`conventions`.
    """

    default_prefix = 'vlm'

    def __init__(self, canvas: Union[None, float, Sequence[float]] = 1000, box_tolerance: float = 0.01,
                 box_format: str = 'xyxy', synonyms: Union[None, str, Mapping] = None,
                 topk: Sequence[int] = (), rank: str = UNSET, iou_thr: float = UNSET,
                 iou_plus_one: Optional[bool] = UNSET, mr_average: str = UNSET, recall_average: str = UNSET,
                 predicate_groups: Optional[Dict[str, Sequence[str]]] = None, ap_max_dets: int = 100,
                 report_dir: Optional[str] = None, collect_device: str = 'cpu',
                 prefix: Optional[str] = None, outfile_prefix: Optional[str] = None,
                 protocol: str = 'sgb', novel_objects: Optional[Sequence[str]] = None,
                 novel_predicates: Optional[Sequence[str]] = None, novel_split: Optional[str] = None,
                 per_image_out: Optional[str] = None) -> None:
        super().__init__(outfile_prefix=outfile_prefix, report_dir=report_dir, collect_device=collect_device,
                         prefix=prefix or self.default_prefix)
        self.protocol = resolve_protocol(protocol, dict(iou_thr=iou_thr, iou_plus_one=iou_plus_one, rank=rank,
                                                        mr_average=mr_average, recall_average=recall_average), 'vlm')
        iou_thr, iou_plus_one, rank, mr_average, recall_average = self.protocol.values(VLM_SETTINGS)
        #: the answer reader (canvas, box tolerance and format, synonyms), shared in kind with RelCLIPScore
        self.parser = VLMAnswerParser(canvas, box_tolerance, box_format, synonyms, owner='VLMSceneGraphMetric')
        self.canvas = canvas
        empty = isinstance(topk, (tuple, list)) and not topk
        self.topk = () if empty else positive_ints(topk, 'topk', 'VLMSceneGraphMetric')
        if any(k >= K_ALL for k in self.topk):
            raise ValueError(f'topk must be positive integers below {K_ALL}, got {self.topk}')
        self.rank = rank
        self.ap_max_dets = positive_int(ap_max_dets, 'ap_max_dets', 'VLMSceneGraphMetric')
        # scores the converted samples (rows and summary); never fed by an evaluator itself
        self.inner = SceneGraphMetric(mode='sgdet', topk=(K_ALL,) + self.topk, iou_thr=iou_thr,
                                      iou_plus_one=iou_plus_one, rank=rank, skip_empty_predictions=False,
                                      mr_average=mr_average, recall_average=recall_average,
                                      predicate_groups=predicate_groups, collect_device=collect_device,
                                      prefix=self.prefix, novel_objects=novel_objects,
                                      novel_predicates=novel_predicates, novel_split=novel_split,
                                      per_image_out=per_image_out)
        # per_image_out: JSON lines of the inner scene-graph records plus each answer's parse status, failure
        # code and unknown names (metrics/per_image.py); the inner metric only computes the rows
        self.inner._warns_no_value = False  # named below with this metric's keys (Recall_base, not R@K_ALL_base)
        self.per_image_out = per_image_out
        self._unknown_words: Dict[int, List[str]] = {}
        #: sample_idx -> (the raw answer as given, the reason of a failure) (main rank, for the per-image file)
        self._answers: Dict[int, Tuple[Optional[str], str]] = {}
        #: sample_idx -> {position in the ranked list: the model's (subject, predicate, object) words} of the
        #: relations with a name unknown to the dataset (main rank, for the per-image file)
        self._unknown_triplets: Dict[int, Dict[int, List[str]]] = {}

    @property
    def conventions(self) -> Dict[str, Any]:
        """The protocol name and every convention it implies (with explicit overrides), JSON-ready."""
        return describe_conventions(self.protocol, 'sgdet', self.inner.plus_one if self.dataset_meta else None,
                                    target='vlm')

    def row_schema(self) -> Schema:
        schema = {
            'samples': {'code': (torch.int32, ()), 'num_objects': (torch.int32, ()),
                        'num_relations': (torch.int32, ()), 'num_unknown_relations': (torch.int32, ()),
                        'missing': (torch.bool, ()), 'pixel_like': (torch.int8, ())},
            'pred_objects': {'box': (torch.float32, (4,)), 'label': (torch.int32, ()), 'score': (torch.float32, ())},
            'gt_objects': {'box': (torch.float32, (4,)), 'label': (torch.int32, ())},
        }
        schema.update(self.inner.row_schema())  # 'images' and 'relations' of the scene-graph rows
        return schema

    # ------------------------------------------------------------------ helpers
    def before_epoch(self) -> None:
        """Unknown novel class / predicate names fail at the first ``process()``."""
        self._sync_meta()
        if self.dataset_meta:
            self.inner.novel_indices()
        super().before_epoch()

    def _sync_meta(self) -> None:
        if self.inner.dataset_meta is not self.dataset_meta:
            self.inner.dataset_meta = self.dataset_meta

    def mappers(self):
        """(class, predicate) name mappers of the dataset (:meth:`VLMAnswerParser.mappers`)."""
        return self.parser.mappers(self.inner.classes, self.inner.predicates)

    def parse(self, text: Any, image_size) -> ParseResult:
        """Parse one raw output with this metric's settings; ``image_size`` = (width, height)."""
        self._sync_meta()
        return self.parser.parse(text, image_size, self.inner.classes, self.inner.predicates)

    def _sample_idx(self, sample: Any) -> int:
        idx = get_field(sample, 'sample_idx')
        if idx is not None:
            return int(idx)
        return int(self.accumulator.number_missing(torch.tensor([-1]), 'VLMSceneGraphMetric')[0])

    def unknown_triplets(self, result: ParseResult, ds: Dict[str, Any]) -> Dict[int, List[str]]:
        """``{position in the graph-constrained list: [subject, predicate, object] words}`` of the answer's
        relations with a name unknown to the dataset (scored on a stand-in object that never matches): the
        given order (``rank='given'``) or the stable descending order of the triplet scores (``'score'``, as
        the ranking multiplies them: relation x subject x object score, float32)."""
        if not result.ok or not result.num_relations:
            return {}
        unknown = ~torch.from_numpy(result.known_relations.astype(bool))
        if not bool(unknown.any()):
            return {}
        order = torch.arange(unknown.numel())
        if self.rank == 'score':
            pairs, scores = ds['pred_relations']['pair_idxs'], ds['pred_instances']['scores'].float()
            triplet = ds['pred_relations']['scores'].float() * scores[pairs[:, 0]] * scores[pairs[:, 1]]
            order = torch.sort(triplet, descending=True, stable=True).indices
        texts = ds['open_vocab']['pred_relations']['texts']
        return {pos: [str(w) for w in texts[i]] for pos, i in enumerate(order.tolist()) if bool(unknown[i])}

    # ------------------------------------------------------------------ a pool becomes rows
    def compute_rows(self, data_samples: List[Any]) -> Dict[str, Dict[str, torch.Tensor]]:
        """Parse each answer, convert it to a scene-graph sample and keep its counts, its objects (for AP) and
        the scene-graph rows of the converted samples."""
        self._sync_meta()
        data_samples = first_occurrences(data_samples)  # sampler padding within one call counts once
        converted: List[Dict[str, Any]] = []
        sample_rows = {k: [] for k in ('sample_idx', 'code', 'num_objects', 'num_relations',
                                       'num_unknown_relations', 'missing', 'pixel_like')}
        pred_rows = {k: [] for k in ('sample_idx', 'box', 'label', 'score')}
        gt_rows = {k: [] for k in ('sample_idx', 'box', 'label')}
        for sample in data_samples:
            idx = self._sample_idx(sample)
            missing = prediction_missing(sample)
            # no answer at all (the answers file has no record for it): its own failure code, not 'no_json'
            result = ParseResult.failure('missing', 'no answer for this sample') if missing else \
                self.parser.result_of(sample, self.inner.classes, self.inner.predicates)
            ds = to_data_sample(result, sample, sample_idx=idx)
            if self.per_image_out:
                self.inner._image_names.note([dict(sample_idx=idx, img_id=get_field(sample, 'img_id'),
                                                   img_path=get_field(sample, 'img_path'))])
                self._unknown_words.setdefault(idx, [w for w in getattr(result, 'warnings', ()) or ()
                                                     if str(w).startswith('unknown')])
                self._unknown_triplets.setdefault(idx, self.unknown_triplets(result, ds))
                self._answers.setdefault(idx, (raw_answer(sample), result.reason))
            converted.append(ds)
            sample_rows['sample_idx'].append(idx)
            sample_rows['code'].append(result.code_index)
            sample_rows['num_objects'].append(result.num_objects)
            sample_rows['num_relations'].append(result.num_relations)
            sample_rows['num_unknown_relations'].append(ds['vlm']['num_unknown_relations'])
            sample_rows['missing'].append(missing)
            sample_rows['pixel_like'].append(-1 if result.pixel_like is None else int(result.pixel_like))
            if result.ok:
                known = result.labels >= 0
                n = int(known.sum())
                pred_rows['sample_idx'].append(torch.full((n,), idx, dtype=torch.long))
                pred_rows['box'].append(torch.from_numpy(result.bboxes[known]).reshape(-1, 4))
                pred_rows['label'].append(torch.from_numpy(result.labels[known]))
                pred_rows['score'].append(torch.from_numpy(result.scores[known]))
            gt_boxes = ds['gt_instances']['bboxes'].float().cpu().reshape(-1, 4)
            gt_rows['sample_idx'].append(torch.full((gt_boxes.shape[0],), idx, dtype=torch.long))
            gt_rows['box'].append(gt_boxes)
            gt_rows['label'].append(ds['gt_instances']['labels'].long().cpu().reshape(-1))

        def cat(parts, shape, dtype):
            return torch.cat(parts).to(dtype) if parts else torch.zeros(shape, dtype=dtype)

        rows = {
            'samples': {k: torch.tensor(v, dtype=_SAMPLE_DTYPES.get(k, torch.long))
                        for k, v in sample_rows.items()},
            'pred_objects': {'sample_idx': cat(pred_rows['sample_idx'], (0,), torch.long),
                             'box': cat(pred_rows['box'], (0, 4), torch.float32),
                             'label': cat(pred_rows['label'], (0,), torch.int32),
                             'score': cat(pred_rows['score'], (0,), torch.float32)},
            'gt_objects': {'sample_idx': cat(gt_rows['sample_idx'], (0,), torch.long),
                           'box': cat(gt_rows['box'], (0, 4), torch.float32),
                           'label': cat(gt_rows['label'], (0,), torch.int32)},
        }
        inner = self.inner.compute_rows(converted)
        rows.update({t: {n: c.cpu() for n, c in cols.items()} for t, cols in inner.items()})
        return rows

    # ------------------------------------------------------------------ reduced tables become keys
    def row_keys(self) -> Tuple[RowKey, ...]:
        """``FailureRate``, declared once (:class:`~mmsgg_eval.keys.RowKey`): the percentage of samples whose
        answer failed (0 without samples). The recall keys are the inner scene-graph metric's declared families
        (renamed by :func:`vlm_key`); ``AP@50`` is :func:`object_ap50` of the object rows."""
        return (RowKey('FailureRate', 'samples', 'failed', empty=0.0),)

    def key_columns(self, tables: Tables) -> Columns:
        """The columns :meth:`row_keys` read: per sample ``failed`` (its failure code is not 0)."""
        samples = tables['samples']
        return {'samples': {'sample_idx': samples['sample_idx'], 'failed': samples['code'] != 0}}

    def contributions(self, tables: Tables) -> Contributions:
        """Every key per sample (the bootstrap intervals and ``compare``): the recalls from the inner scene-graph
        metric's rows (its declared families, renamed by :func:`vlm_name`), :meth:`row_keys`, and ``AP@50``
        recomputed per replicate on the resampled object rows (:func:`resampled_ap50`)."""
        c = scene_graph_contributions(self.inner, tables, units=tables['samples']['sample_idx'])
        c.rename(vlm_name)
        row_key_contributions(c, self.row_keys(), self.key_columns(tables))
        c.resampled['AP@50'] = lambda counts: resampled_ap50(self, tables, c, counts)
        return c

    def summarize(self, tables: Tables) -> Dict[str, Any]:
        self._sync_meta()
        samples = tables['samples']
        num_samples = int(samples['sample_idx'].numel())
        codes = samples['code'].long()
        failed = int((codes != 0).sum())
        reasons = {FAILURE_CODES[c]: int((codes == c).sum()) for c in range(1, len(FAILURE_CODES))
                   if int((codes == c).sum())}
        sg = self.inner.summarize({'images': tables['images'], 'relations': tables['relations']})
        m: Dict[str, float] = row_key_values(self.row_keys(), self.key_columns(tables))
        self._check_pixel_boxes(samples['pixel_like'])
        m['Recall'] = sg['metrics'][f'R@{K_ALL}']
        m['mRecall'] = sg['metrics'][f'mR@{K_ALL}']
        for group in sg['groups']:
            m[f'mRecall_{group}'] = sg['metrics'][f'mR@{K_ALL}_{group}']
        for subset in (sg.get('open_vocab') or {}).get('num_gt_relations', {}):
            for family, name in (('R', 'Recall'), ('mR', 'mRecall')):
                if f'{family}@{K_ALL}_{subset}' in sg['metrics']:
                    m[f'{name}_{subset}'] = sg['metrics'][f'{family}@{K_ALL}_{subset}']
                for k in self.topk:
                    if f'{family}@{k}_{subset}' in sg['metrics']:
                        m[f'{family}@{k}_{subset}'] = sg['metrics'][f'{family}@{k}_{subset}']
        ap = object_ap50(self, {name: dict(tables[name], image=tables[name]['sample_idx'])
                                for name in ('gt_objects', 'pred_objects')}, samples['sample_idx'].tolist())
        if math.isnan(ap):
            warnings.warn('VLMSceneGraphMetric: no GT object in the evaluated samples; AP@50 is NaN')
        m['AP@50'] = ap
        for k in self.topk:
            m[f'R@{k}'] = sg['metrics'][f'R@{k}']
            m[f'mR@{k}'] = sg['metrics'][f'mR@{k}']
            for group in sg['groups']:
                m[f'mR@{k}_{group}'] = sg['metrics'][f'mR@{k}_{group}']
        no_value = [dict(e, keys=[vlm_key(k) for k in e['keys'] if vlm_key(k) in m]) for e in sg['no_value']]
        no_value = [e for e in no_value if e['keys']]
        warn_no_value(self, no_value)
        per_predicate = {}
        for name, row in sg['per_predicate'].items():
            new = {'Recall': row[f'R@{K_ALL}']}
            new.update({f'R@{k}': row[f'R@{k}'] for k in self.topk})
            new['num_gt'] = row['num_gt']
            per_predicate[name] = new
        return {'metrics': m, 'per_predicate': per_predicate, 'groups': sg['groups'],
                **({'open_vocab': sg['open_vocab']} if sg.get('open_vocab') else {}),
                'num_images': sg['num_images'], 'num_samples': num_samples, 'num_failed': failed,
                'failure_reasons': reasons, 'num_gt_relations': sg['num_gt_relations'],
                'num_pred_relations': int(samples['num_relations'].sum()),
                'num_unknown_relations': int(samples['num_unknown_relations'].sum()),
                'num_missing_predictions': int(samples['missing'].sum()),
                'num_pred_objects': int(tables['pred_objects']['sample_idx'].numel()),
                'num_gt_objects': int(tables['gt_objects']['sample_idx'].numel()),
                'no_value': no_value, 'zeroshot': None, 'ks': ['all'] + list(self.topk), 'mode': 'sgdet (VLM)',
                'rank': self.rank,
                'canvas': self.canvas, 'conventions': self.conventions}

    def _write_files(self, summary: Dict[str, Any], keys: Dict[str, float], tables: Tables) -> None:
        super()._write_files(summary, keys, tables)
        if not self.per_image_out:
            return
        from .per_image import per_image_records, write_metric_per_image
        samples = {n: c.tolist() for n, c in tables['samples'].items()}
        status = {idx: i for i, idx in enumerate(samples['sample_idx'])}

        def records() -> List[Dict[str, Any]]:
            out = per_image_records(self.inner, {t: tables[t] for t in ('images', 'relations', 'top_triplets')},
                                    self.inner._image_names.names,
                                    key_name=lambda k: None if k.startswith('ngR') else vlm_key(k))
            for record in out:
                words = self._unknown_triplets.get(record['sample_idx'], {})
                for p in record['predictions']:
                    if p.get('unknown'):  # a relation with a name unknown to the dataset: the model's words
                        p.update(predicate=None, unknown=['relation'], words=words.get(p['rank']))
                i = status.get(record['sample_idx'])
                if i is not None:
                    code = FAILURE_CODES[samples['code'][i]]
                    record.update(parse_status='ok' if code == 'ok' else 'failed', failure_code=code,
                                  num_unknown_relations=samples['num_unknown_relations'][i],
                                  unknown_words=self._unknown_words.get(record['sample_idx'], []))
                answer, reason = self._answers.get(record['sample_idx'], (None, ''))
                record.update(answer=answer, failure_reason=reason)
            return out
        write_metric_per_image(self, summary, records)  # this metric's claimed path (FileClaims)
        self.inner._image_names.clear()
        self._unknown_words, self._unknown_triplets, self._answers = {}, {}, {}

    def _check_pixel_boxes(self, pixel_like: torch.Tensor) -> None:
        """Warn once per evaluation when most answers whose image can tell pixels from the canvas look like
        pixels (``ParseResult.pixel_like``; at least :data:`PIXEL_ANSWERS_MIN` answers and
        :data:`PIXEL_ANSWERS_FRACTION` of those that can tell)."""
        tell = int((pixel_like >= 0).sum())
        pixels = int((pixel_like == 1).sum())
        if tell == 0 or pixels < max(PIXEL_ANSWERS_MIN, math.ceil(PIXEL_ANSWERS_FRACTION * tell)):
            return
        warn_user(f'{self.name} ({self.prefix}): the boxes of {pixels} of {tell} answers lie within their '
                  f'image\'s own pixel frame (width x height), a part of the {self.canvas} canvas they are read on: '
                  f'they look like PIXEL coordinates read as x / canvas x image width. If the model writes '
                  f'pixels, set canvas=None: Recall and AP@50 below are not meaningful then.')

    # ------------------------------------------------------------------ reporting
    def format_report(self, summary: Dict[str, Any], keys: Dict[str, float]) -> str:
        missing = summary['num_missing_predictions']
        lines = [f'====== VLMSceneGraphMetric | protocol={self.protocol.name} | '
                 f'dataset={self._meta("dataset_name", "unknown")} | '
                 f'samples={summary["num_samples"]} (failed {summary["num_failed"]}'
                 + (f', {missing} without any answer' if missing else '')
                 + f') | GT relations={summary["num_gt_relations"]} ======',
                 '  '.join(f'{k}: {"–" if v != v else format(v, ".4f")}' for k, v in summary['metrics'].items())]
        lines += [f'no value (–) for {", ".join(e["keys"])}: {e["why"]}' for e in summary.get('no_value', ())]
        if summary['failure_reasons']:
            lines.append('failures: ' + ', '.join(f'{k}={v}' for k, v in summary['failure_reasons'].items()))
        if summary['num_unknown_relations']:
            lines.append(f'{summary["num_unknown_relations"]} predicted relations use names unknown to the dataset '
                         f'(add a synonym map?)')
        return '\n'.join(lines)

    def write_reports(self, summary: Dict[str, Any], keys: Dict[str, float], stem: str) -> Dict[str, str]:
        from ..reports import write_scene_graph_reports
        return write_scene_graph_reports(summary, self.report_dir, stem, summary['ks'],
                                         str(self._meta('dataset_name', 'unknown dataset')), 'sgdet (VLM)')

    def extra_results(self) -> Dict[str, Any]:
        """``{prefix}/per_predicate_recall`` and ``{prefix}/num_missing_predictions`` for ``metrics.json``."""
        if self.last_report is None:
            return {}
        return {f'{self.prefix}/per_predicate_recall': self.last_report['per_predicate'],
                f'{self.prefix}/num_missing_predictions': self.last_report['num_missing_predictions']}


# ---------------------------------------------------------------------------------------------- intervals

def vlm_name(key: str) -> Optional[str]:
    """The VLM metric's name of an inner scene-graph recall key (:func:`vlm_key`: ``R@K_ALL`` -> ``Recall``,
    ``mR@K_ALL_tail`` -> ``mRecall_tail``, ``R@20`` kept); None for the inner keys of the other families, which the
    VLM metric does not report."""
    return vlm_key(key) if key.split('@')[0] in ('R', 'mR') else None


def object_ap50(metric: Any, objects: Dict[str, Dict[str, Tensor]], image_ids: List[int]) -> float:
    """The VLM metric's AP@50 (percent, :func:`~mmsgg_eval.functional.detection_rows.coco_ap50`) of the object rows
    ``objects`` (``gt_objects`` / ``pred_objects``, each row's image in ``image``) over the images ``image_ids``:
    the summary's value and each bootstrap replicate's (:func:`resampled_ap50`)."""
    gt, pred = objects['gt_objects'], objects['pred_objects']
    ap = coco_ap50({n: gt[n].numpy() for n in ('image', 'box', 'label')},
                   {n: pred[n].numpy() for n in ('image', 'box', 'label', 'score')},
                   image_ids, len(metric.inner.classes), metric.inner.plus_one, metric.ap_max_dets)
    return 100.0 * ap


def repeat_rows(unit: Tensor, counts: Tensor) -> Tuple[Tensor, Tensor]:
    """Rows (sorted by ``unit``) of a resample with ``counts`` [N] per unit: (row index, copy number) of every
    row of every drawn copy; copy numbers 0..N-1 name the drawn images."""
    n = counts.numel()
    copies = torch.repeat_interleave(torch.arange(n), counts.long())  # unit of each drawn copy, in unit order
    per_unit = torch.bincount(unit, minlength=n)
    start = torch.cumsum(per_unit, 0) - per_unit
    length = per_unit.index_select(0, copies)
    copy_of_row = torch.repeat_interleave(torch.arange(copies.numel()), length)
    offset = torch.arange(int(length.sum())) - torch.repeat_interleave(torch.cumsum(length, 0) - length, length)
    return start.index_select(0, copies).index_select(0, copy_of_row) + offset, copy_of_row


def resampled_ap50(metric: Any, tables: Tables, c: Contributions, counts: Tensor) -> float:
    """The VLM metric's AP@50 (percent, :func:`object_ap50`) of the images drawn ``counts`` [N] times each (copies
    are images)."""
    rows = {}
    for name in ('gt_objects', 'pred_objects'):
        table = tables[name]
        unit = c.unit_of(table['sample_idx'])
        order = torch.sort(unit, stable=True).indices
        index, copy = repeat_rows(unit.index_select(0, order), counts)
        picked = order.index_select(0, index)
        rows[name] = {'image': copy, **{k: v.index_select(0, picked) for k, v in table.items()
                                        if k in ('box', 'label', 'score')}}
    return object_ap50(metric, rows, list(range(int(counts.sum()))))
