"""How well an image-text encoder ranks the annotated predicate of GT relations (the RelCLIPScore paper's
alignment study: its Table 1 and the confused triplets of its Table 2).

For every GT relation (subject s, predicate p, object o) of a dataset, the union of the GT subject and object
boxes is cropped from the image and scored (s = the encoder's score, as in ``RelCLIPScore``) against the text
of every predicate in L(s, o): the predicates annotated at least once, anywhere in the analysed dataset (split),
for the same (subject class, object class), the GT predicate included (``extra_triplets``, e.g. the training
split's ``train_triplets``, adds predicates seen elsewhere for the class pairs of the split). Then

* score: s of the GT triplet;
* theta = 1 - rank0(p) / |L| (eq. 7 of the paper), rank0(p) = 0-based rank of the GT predicate in L ordered
  by decreasing score (1 = best, 1/|L| = worst);
* precision: 1 when the GT predicate scores highest in L.

Tie rule: ties are broken uniformly at random and the EXPECTED values are reported. With n_gt the number of
other predicates of L scoring strictly higher than p and n_eq the number scoring exactly as high,
rank0(p) = n_gt + n_eq / 2 and precision = [n_gt = 0] / (1 + n_eq). (So an encoder that scores every text the
same gets theta = (|L| + 1) / (2|L|), its chance level, not 1.)

Reported (percent): the means over all GT relations (per dataset) and over the GT relations of each
predicate, and the most frequent confusions: (GT triplet, confused triplet) class-name pairs where the
confused predicate is the highest-scoring OTHER predicate of L and scores strictly higher than the GT one.

Crops are batched (one ``roi_align`` call per chunk of images), each image is decoded once, each distinct text
is encoded once (:class:`~mmsgg_eval.encoders.RelationScorer`), and the encoder runs on ``device``.
"""
import json
import os
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from ..encoders import RelationScorer

__all__ = ['AlignmentRows', 'candidate_predicates', 'rank_statistics', 'run_relation_alignment',
           'alignment_summary', 'alignment_markdown', 'write_alignment_report', 'encoder_from_config',
           'run_from_config']


def _info_graph(info: Dict[str, Any], where: str) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(boxes [N, 4] float64, labels [N] int64, relations [G, 3] (subject, object, predicate)) of a data info."""
    instances = info.get('instances', [])
    boxes = np.asarray([i['bbox'] for i in instances], np.float64).reshape(-1, 4)
    labels = np.asarray([i['bbox_label'] for i in instances], np.int64).reshape(-1)
    rels = np.asarray(info.get('relations', np.zeros((0, 3))), np.int64).reshape(-1, 3)
    if len(rels) and (rels[:, :2].min() < 0 or rels[:, :2].max() >= len(labels)):
        raise ValueError(f'{where}: `relations` index an object outside 0..{len(labels) - 1}')
    return boxes, labels, rels


def candidate_predicates(graphs: Sequence[Tuple[np.ndarray, np.ndarray, np.ndarray]],
                         extra_triplets: Optional[Any] = None) -> Dict[Tuple[int, int], List[int]]:
    """(subject class, object class) -> sorted predicates annotated at least once for that class pair in
    ``graphs`` (boxes, labels, relations), plus those of ``extra_triplets`` ([T, 3] (subject class, object class,
    predicate)) for the class pairs the graphs have."""
    seen: Dict[Tuple[int, int], set] = defaultdict(set)
    for _, labels, rels in graphs:
        for s, o, p in rels.tolist():
            seen[(int(labels[s]), int(labels[o]))].add(int(p))
    if extra_triplets is not None:
        for s, o, p in np.asarray(extra_triplets, np.int64).reshape(-1, 3).tolist():
            if (s, o) in seen:
                seen[(s, o)].add(p)
    return {key: sorted(value) for key, value in seen.items()}


def rank_statistics(scores: Tensor, gt_column: Tensor, valid: Tensor) -> Dict[str, Tensor]:
    """Per row of a candidate score matrix: theta, precision and the best other candidate (tie rule above).

    Args:
        scores: [R, L] float scores of the candidates (entries outside ``valid`` are ignored).
        gt_column: [R] column of the GT predicate.
        valid: [R, L] bool, True for the |L| real candidates of each row.
    Returns ``theta``, ``precision`` (float64 [R]), ``rank0`` (float64, expected 0-based rank), ``size`` (|L|),
    ``num_higher`` (int64), ``best_other`` ([R] column of the highest other candidate, -1 when none; the first
    such column on ties) and ``best_other_score``.
    """
    rows = torch.arange(scores.shape[0], device=scores.device)
    gt = scores[rows, gt_column]
    others = valid.clone()
    others[rows, gt_column] = False
    higher = ((scores > gt[:, None]) & others).sum(1)
    equal = ((scores == gt[:, None]) & others).sum(1)
    size = valid.sum(1)
    rank0 = higher.double() + equal.double() / 2
    precision = (higher == 0).double() / (1 + equal.double())
    masked = scores.masked_fill(~others, float('-inf'))
    best_score, best = masked.max(dim=1)
    best = torch.where(others.any(1), best, torch.full_like(best, -1))
    return {'theta': 1 - rank0 / size.double(), 'precision': precision, 'rank0': rank0, 'size': size,
            'num_higher': higher, 'best_other': best, 'best_other_score': best_score, 'gt_score': gt}


@dataclass
class AlignmentRows:
    """One row per GT relation (all numpy): ``image`` (dataset index), ``subject`` / ``object`` classes,
    ``predicate`` (GT), ``score`` (s of the GT triplet), ``theta``, ``precision``, ``size`` (|L|),
    ``num_higher``, ``confused`` (best other predicate when it scores strictly higher, else -1)."""
    image: np.ndarray
    subject: np.ndarray
    object: np.ndarray
    predicate: np.ndarray
    score: np.ndarray
    theta: np.ndarray
    precision: np.ndarray
    size: np.ndarray
    num_higher: np.ndarray
    confused: np.ndarray

    def __len__(self) -> int:
        return int(self.predicate.shape[0])


def _decode(path: str, backend_args: Optional[dict]) -> Tensor:
    from ..metrics.relclip import decode_image
    return decode_image(path, backend_args)


@dataclass
class _CandidateTexts:
    """Each candidate triplet's text once: ``index[(s, o, p)]`` its position in ``texts``, ``predicate[t]`` the
    predicate of text t, ``embeddings`` [T, D] (None for a joint scorer, which reads the texts)."""
    index: Dict[Tuple[int, int, int], int]
    texts: List[str]
    predicate: List[int]
    embeddings: Optional[Tensor] = None


def _candidate_texts(candidates: Dict[Tuple[int, int], List[int]], classes: Sequence[str],
                     predicates: Sequence[str], template: str) -> _CandidateTexts:
    out = _CandidateTexts({}, [], [])
    for (s, o), preds in candidates.items():
        for p in preds:
            out.index[(s, o, p)] = len(out.texts)
            out.predicate.append(p)
            out.texts.append(template.format(subject=classes[s], predicate=predicates[p], object=classes[o]))
    return out


def _chunk_features(scorer: RelationScorer, chunk: range, graphs: Sequence[Tuple[np.ndarray, ...]],
                    infos: Sequence[Dict[str, Any]], dev: torch.device,
                    backend_args: Optional[dict]) -> Tuple[Optional[Tensor], List[Tuple[int, int, int, int]]]:
    """Image features of the union crops (subject box | object box, in the decoded image's pixel frame) of
    every GT relation of the chunk's images, and each row's (image, subject class, object class, predicate);
    (None, []) when the chunk has no relation."""
    images, image_of, boxes, meta_rows = [], [], [], []
    for slot, i in enumerate(chunk):
        box, labels, rels = graphs[i]
        if not len(rels):
            images.append(None)
            continue
        img = _decode(str(infos[i]['img_path']), backend_args).to(dev)
        h, w = img.shape[-2:]
        sx = w / float(infos[i].get('width') or w)
        sy = h / float(infos[i].get('height') or h)
        images.append(img)
        sub_box, obj_box = box[rels[:, 0]], box[rels[:, 1]]
        union = np.concatenate([np.minimum(sub_box[:, :2], obj_box[:, :2]),
                                np.maximum(sub_box[:, 2:], obj_box[:, 2:])], 1) * [sx, sy, sx, sy]
        boxes.append(union)
        image_of += [slot] * len(rels)
        for s, o, p in rels.tolist():
            meta_rows.append((i, int(labels[s]), int(labels[o]), int(p)))
    if not meta_rows:
        return None, []
    index = torch.tensor(image_of, dtype=torch.long, device=dev)
    crops = scorer.crop(images, index, torch.as_tensor(np.concatenate(boxes), dtype=torch.float32, device=dev))
    del images
    return scorer.image_features(crops), meta_rows


def _score_rows(scorer: RelationScorer, features: Tensor, meta_rows: List[Tuple[int, int, int, int]],
                candidates: Dict[Tuple[int, int], List[int]], texts: _CandidateTexts, width: int,
                dev: torch.device) -> Dict[str, np.ndarray]:
    """The :class:`AlignmentRows` columns of one chunk: every row scored against its candidate texts."""
    cand = torch.full((len(meta_rows), width), -1, dtype=torch.long)
    gt_column = torch.zeros(len(meta_rows), dtype=torch.long)
    for r, (_, s, o, p) in enumerate(meta_rows):
        preds = candidates[(s, o)]
        cand[r, :len(preds)] = torch.tensor([texts.index[(s, o, q)] for q in preds])
        gt_column[r] = preds.index(p)
    cand, gt_column = cand.to(dev), gt_column.to(dev)
    valid = cand >= 0
    row, col = valid.nonzero(as_tuple=True)
    flat_text = cand[row, col]
    pair_texts = [texts.texts[t] for t in flat_text.tolist()] if scorer.joint else [''] * int(row.numel())
    flat = scorer.scores(features, row, pair_texts,
                         None if texts.embeddings is None else texts.embeddings[flat_text])
    mat = torch.full(cand.shape, float('-inf'), device=dev)
    mat[row, col] = flat.float()
    stats = rank_statistics(mat, gt_column, valid)
    best_text = cand.gather(1, stats['best_other'].clamp(min=0)[:, None])[:, 0]
    confused = torch.where(stats['num_higher'] > 0, best_text, torch.full_like(best_text, -1))
    arr = np.asarray(meta_rows, np.int64)
    return dict(image=arr[:, 0], subject=arr[:, 1], object=arr[:, 2], predicate=arr[:, 3],
                score=stats['gt_score'].double().cpu().numpy(), theta=stats['theta'].cpu().numpy(),
                precision=stats['precision'].cpu().numpy(), size=stats['size'].cpu().numpy(),
                num_higher=stats['num_higher'].cpu().numpy(),
                confused=np.asarray([-1 if t < 0 else texts.predicate[t] for t in confused.tolist()], np.int64))


_COLUMN_DTYPES = dict(image=np.int64, subject=np.int64, object=np.int64, predicate=np.int64, score=np.float64,
                      theta=np.float64, precision=np.float64, size=np.int64, num_higher=np.int64,
                      confused=np.int64)


def run_relation_alignment(dataset: Any, encoder: Any, template: str = '{subject} {predicate} {object}',
                           batch_size: int = 64, images_per_chunk: int = 16, device: Optional[str] = None,
                           backend_args: Optional[dict] = None, progress: bool = True,
                           extra_triplets: Optional[Any] = None) -> AlignmentRows:
    """Score every GT relation of ``dataset`` against its candidate predicates (see the module docstring).

    Args:
        dataset: anything with ``__len__``, ``get_data_info(i)`` (mmdet-style: ``img_path``, ``width``,
            ``height``, ``instances`` with ``bbox`` (xyxy pixels) / ``bbox_label``, ``relations`` [G, 3]
            (subject, object, 0-based predicate)) and ``metainfo`` with ``classes`` / ``predicates``.
        encoder: an encoder or encoder config (:func:`mmsgg_eval.encoders.build_encoder`).
        template: text template, as ``RelCLIPScore``.
        batch_size: crops per image-tower call and pairs per joint-scorer call.
        images_per_chunk: images decoded and cropped together.
        device: where crops are made and the encoder runs (default: CUDA when available, else CPU).
        backend_args: MMEngine file backend arguments for ``img_path``.
        progress: show a progress bar (images).
        extra_triplets: more annotated (subject class, object class, predicate) triplets for the candidate lists
            (e.g. ``dataset.metainfo['train_triplets']``).
    """
    meta = dataset.metainfo
    classes, predicates = [str(c) for c in meta['classes']], [str(p) for p in meta['predicates']]
    dev = torch.device(device or ('cuda' if torch.cuda.is_available() else 'cpu'))
    infos = [dataset.get_data_info(i) for i in range(len(dataset))]
    graphs = [_info_graph(info, f'dataset sample {i} ({info.get("img_path")})') for i, info in enumerate(infos)]
    candidates = candidate_predicates(graphs, extra_triplets)
    scorer = RelationScorer(encoder, batch_size)
    scorer.place(dev)
    texts = _candidate_texts(candidates, classes, predicates, template)
    texts.embeddings = None if scorer.joint else scorer.embed_texts(texts.texts, dev)
    width = max((len(v) for v in candidates.values()), default=1)
    columns: Dict[str, List[np.ndarray]] = {k: [] for k in _COLUMN_DTYPES}
    bar = None
    if progress:
        from mmengine.utils import ProgressBar
        bar = ProgressBar(len(infos))
    for start in range(0, len(infos), images_per_chunk):
        chunk = range(start, min(start + images_per_chunk, len(infos)))
        features, meta_rows = _chunk_features(scorer, chunk, graphs, infos, dev, backend_args)
        if meta_rows:
            for key, value in _score_rows(scorer, features, meta_rows, candidates, texts, width, dev).items():
                columns[key].append(value)
        if bar is not None:
            for _ in chunk:
                bar.update()
    if progress:
        import sys
        print(file=sys.stderr)
    return AlignmentRows(**{k: np.concatenate(v) if v else np.zeros(0, _COLUMN_DTYPES[k])
                            for k, v in columns.items()})


def alignment_summary(rows: AlignmentRows, classes: Sequence[str], predicates: Sequence[str],
                      num_confused: int = 10, template: str = '{subject} {predicate} {object}') -> Dict[str, Any]:
    """Dataset and per-predicate means (percent) and the top confused triplet pairs of the rows."""
    def means(sel: np.ndarray) -> Dict[str, Any]:
        n = int(sel.sum())
        if not n:
            return {'num_relations': 0, 'Score': float('nan'), 'Precision': float('nan'), 'theta': float('nan')}
        return {'num_relations': n, 'Score': 100 * float(rows.score[sel].mean()),
                'Precision': 100 * float(rows.precision[sel].mean()), 'theta': 100 * float(rows.theta[sel].mean())}

    everything = np.ones(len(rows), bool)
    per_predicate = {}
    for p, name in enumerate(predicates):
        sel = rows.predicate == p
        if sel.any():
            per_predicate[str(name)] = means(sel)

    def triplet(s: int, p: int, o: int) -> str:
        return template.format(subject=classes[s], predicate=predicates[p], object=classes[o])

    confusions = Counter()
    for s, p, o, q in zip(rows.subject.tolist(), rows.predicate.tolist(), rows.object.tolist(),
                          rows.confused.tolist()):
        if q >= 0:
            confusions[(s, p, o, q)] += 1
    ranked = sorted(confusions.items(), key=lambda kv: (-kv[1], kv[0]))[:num_confused]
    return {'dataset': means(everything),
            'num_single_candidate': int((rows.size == 1).sum()),
            'per_predicate': per_predicate,
            'confused': [{'groundtruth': triplet(s, p, o), 'confused': triplet(s, q, o), 'count': c}
                         for (s, p, o, q), c in ranked]}


def alignment_markdown(summary: Dict[str, Any], title: str = 'Relation alignment') -> str:
    """Markdown tables of :func:`alignment_summary` (dataset, per predicate, confused triplets); names through
    the one Markdown cell escaper (:func:`mmsgg_eval.reports.markdown_cell`)."""
    from ..reports import markdown_cell as cell

    def fmt(v: float) -> str:
        return 'n/a' if v != v else f'{v:.2f}'

    d = summary['dataset']
    lines = [f'# {title}', '', '| relations | Score | Prec. | theta |', '|---:|---:|---:|---:|',
             f"| {d['num_relations']} | {fmt(d['Score'])} | {fmt(d['Precision'])} | {fmt(d['theta'])} |", '',
             '## Per predicate', '', '| predicate | relations | Score | Prec. | theta |', '|---|---:|---:|---:|---:|']
    for name, m in summary['per_predicate'].items():
        lines.append(f"| {cell(name)} | {m['num_relations']} | {fmt(m['Score'])} | {fmt(m['Precision'])} | "
                     f"{fmt(m['theta'])} |")
    lines += ['', '## Most confused triplets', '', '| groundtruth triplet | confused triplet | count |',
              '|---|---|---:|']
    lines += [f"| {cell(c['groundtruth'])} | {cell(c['confused'])} | {c['count']} |" for c in summary['confused']]
    return '\n'.join(lines) + '\n'


def write_alignment_report(summary: Dict[str, Any], out_dir: str, title: str = 'Relation alignment') -> List[str]:
    """Write ``relation_alignment.json`` and ``relation_alignment.md`` to ``out_dir``; returns the paths."""
    os.makedirs(out_dir, exist_ok=True)
    json_path = os.path.join(out_dir, 'relation_alignment.json')
    md_path = os.path.join(out_dir, 'relation_alignment.md')
    with open(json_path, 'w', encoding='utf-8') as f:
        json.dump(summary, f, indent=2, allow_nan=True)
    with open(md_path, 'w', encoding='utf-8') as f:
        f.write(alignment_markdown(summary, title))
    return [json_path, md_path]


def encoder_from_config(cfg: Any) -> Tuple[Optional[dict], Optional[str]]:
    """(encoder config, template) of a config: its ``relation_alignment`` dict, else the first metric of
    ``test_evaluator`` (or ``vlm_evaluator``) that has an ``encoder`` (e.g. the configs in configs/relclip/)."""
    own = cfg.get('relation_alignment') or {}
    if own.get('encoder') is not None:
        return dict(own['encoder']), own.get('template')
    for key in ('test_evaluator', 'vlm_evaluator', 'val_evaluator'):
        metrics = cfg.get(key) or []
        if isinstance(metrics, dict):
            metrics = metrics.get('metrics', [metrics])
        for m in metrics:
            if isinstance(m, dict) and m.get('encoder') is not None:
                return dict(m['encoder']), m.get('template')
    return None, None


def run_from_config(config: str, encoder: Optional[dict] = None, template: Optional[str] = None,
                    out_dir: Optional[str] = None, split_key: str = 'test_dataloader',
                    cfg_options: Optional[dict] = None, num_confused: int = 10, with_train_triplets: bool = False,
                    **kwargs: Any) -> Dict[str, Any]:
    """The study on the GT of a config's dataset (annotations only); writes JSON + Markdown to ``out_dir``
    (default ``work_dirs/relation_alignment``) and returns the summary. ``encoder`` / ``template`` default to
    :func:`encoder_from_config`; ``with_train_triplets`` adds the dataset's ``train_triplets`` to the candidate
    lists; other keyword arguments go to :func:`run_relation_alignment`."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope

    import mmsgg_eval  # noqa: F401  (registration)
    from mmsgg_eval.offline import build_dataset
    cfg = Config.fromfile(config)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    init_default_scope(cfg.get('default_scope', 'mmdet'))
    cfg_encoder, cfg_template = encoder_from_config(cfg)
    encoder = encoder or cfg_encoder
    if encoder is None:
        raise SystemExit(f'{config}: no encoder (give --encoder type=... or a config whose test_evaluator has a '
                         f'RelCLIPScore-style metric with `encoder`)')
    template = template or cfg_template or '{subject} {predicate} {object}'
    dataset = build_dataset(cfg, split_key)
    meta = dataset.metainfo
    extra = None
    if with_train_triplets:
        extra = meta.get('train_triplets')
        if extra is None:
            raise SystemExit(f'{config}: the dataset metainfo has no train_triplets (--with-train-triplets)')
    rows = run_relation_alignment(dataset, encoder, template=template, extra_triplets=extra, **kwargs)
    summary = alignment_summary(rows, meta['classes'], meta['predicates'], num_confused, template)
    name = type(dataset).__name__
    summary.update(config=config, dataset=dict(summary['dataset'], name=name), template=template,
                   candidates='split + train_triplets' if with_train_triplets else 'split',
                   encoder={k: str(v) for k, v in dict(encoder).items()} if isinstance(encoder, dict)
                   else type(encoder).__name__)
    paths = write_alignment_report(summary, out_dir or os.path.join('work_dirs', 'relation_alignment'),
                                   title=f'Relation alignment: {name}')
    summary['files'] = paths
    return summary
