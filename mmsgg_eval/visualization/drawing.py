"""Scene-graph pictures from per-image records (:mod:`mmsgg_eval.metrics.per_image`), with OpenCV and numpy
only (no matplotlib, no mmdet import: a few milliseconds per picture). :class:`~.scene_graph.SceneGraphLocalVisualizer`
(mmdet's visualizer) and the HTML report (:mod:`mmsgg_eval.analysis.browse`) both draw with these.

Each panel is the image with the boxes (``index:class``; PSG: the masks, blended as mmdet blends them) of the
objects of the relations it lists, one arrow subject -> object per object pair, numbered, and a legend strip
under the image that lists the numbered relations (numbers on the arrows and a list read better than
predicate names on the arrows once an image has 20+ relations; a pair with several relations gets one arrow
with all their numbers). Boxes are xyxy pixels of the original image; images are RGB.
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

#: colour (RGB) of a hit (prediction) / found (GT) relation and its boxes
HIT = (0, 170, 0)
#: colour (RGB) of a miss / not found relation and its boxes
MISS = (230, 30, 30)
#: colour of the objects of the panel that take part in no listed relation
OTHER = (150, 150, 150)

Item = Dict[str, Any]


def triplet_text(item: Dict[str, Any]) -> str:
    """``'3:man -on-> 5:car'``; a relation with a stand-in object (``unknown``: a name the dataset does not
    know, a legacy background object) as ``'unknown: man -floating-> car'`` with the model's ``words`` when the
    record has them, else with ``?`` for each unknown part. Never the stand-in's index, class or box."""
    words = item.get('words')
    if item.get('unknown') and words:
        return f'unknown: {words[0]} -{words[1]}-> {words[2]}'

    def end(name: str) -> str:
        return '?' if item.get(name) is None else f'{item[name]}:{item[f"{name}_label"]}'
    text = f'{end("subject")} -{"?" if item.get("predicate") is None else item["predicate"]}-> {end("object")}'
    return f'unknown: {text}' if item.get('unknown') else text


def relation_items(record: Dict[str, Any], k: int = 50, topk_drawn: int = 20) -> Tuple[List[Item], List[Item]]:
    """(GT items, prediction items) of a per-image record: what each panel lists, with its hit decision.

    A GT relation is found when ``rank_gc < k``; a prediction (position ``rank`` < ``topk_drawn``) is a hit
    when it is the first hit of some GT relation (``hits``) and ``rank < k``. Ranks are shown 0-based, as the
    per-image records hold them (the first prediction is rank 0, found at K when its rank is below K); GT
    relations are numbered from 1."""
    gt = []
    for n, rel in enumerate(record.get('gt_relations', ()), 1):
        found = rel['rank_gc'] is not None and rel['rank_gc'] < k
        if found:
            note = f'rank {rel["rank_gc"]}'
        elif rel.get('pair_predicate') is not None and rel['pair_predicate'] != rel['predicate']:
            note = f'miss, model: {rel["pair_predicate"]}'
        else:
            note = 'miss' + ('' if rel['rank_gc'] is None else f' (rank {rel["rank_gc"]})')
        gt.append(dict(number=n, hit=found, note=note, **{key: rel[key] for key in (
            'subject', 'object', 'subject_label', 'object_label', 'predicate', 'subject_box', 'object_box')}))
    pred = []
    for p in record.get('predictions', ()):
        if p['rank'] >= topk_drawn:
            continue
        hit = bool(p['hits']) and p['rank'] < k
        note = ('hit ' + ','.join(str(g + 1) for g in p['hits'])) if hit else 'miss'
        pred.append(dict(number=p['rank'], hit=hit, note=f'{p["score"]:.3f} {note}', **{key: p[key] for key in (
            'subject', 'object', 'subject_label', 'object_label', 'predicate', 'subject_box', 'object_box')},
            **{key: p[key] for key in ('unknown', 'words') if key in p}))
    return gt, pred


def _center(box: Sequence[float]) -> Tuple[float, float]:
    return (box[0] + box[2]) / 2.0, (box[1] + box[3]) / 2.0


def _font(image: np.ndarray, font_size: Optional[int] = None) -> int:
    """Legend / label text height in pixels."""
    if font_size:
        return int(font_size)
    return int(np.clip(min(image.shape[:2]) / 32.0, 10, 16))

def draw_panel(image: np.ndarray, items: List[Item], title: str,
               masks: Optional[Dict[int, np.ndarray]] = None, others: Sequence[Tuple[int, str, Sequence[float]]] = (),
               legend_lines: Optional[int] = None, font_size: Optional[int] = None,
               line_width: float = 2) -> np.ndarray:
    """The image with the items' boxes, arrows and a legend strip below: [H + legend, W, 3] uint8 RGB.

    ``masks``: {object index: [H, W] bool} drawn for the objects of the items (blended with ``alpha``
    0.4, as mmdet blends masks); ``others``: (index, label, box) of objects in no item (grey);
    ``legend_lines``: lines reserved in the strip (default: as many as the items need), so that two panels
    get the same height. Drawn with OpenCV (a few milliseconds per panel)."""
    import cv2
    height, width = image.shape[:2]
    font = _font(image, font_size)
    scale = font / 22.0
    thick = max(1, int(round(line_width)))
    line_h = font + 6
    lines = max(len(items) + 1, legend_lines or 0)
    canvas = np.full((height + lines * line_h + 8, width, 3), 255, dtype=np.uint8)
    canvas[:height] = image
    objects: Dict[int, Dict[str, Any]] = {}
    for item in items:  # an object is drawn as a hit when one of its listed relations is a hit
        for end in ('subject', 'object'):
            if item[f'{end}_box'] is None:  # a stand-in object (unknown name): listed, not drawn
                continue
            entry = objects.setdefault(item[end], dict(box=item[f'{end}_box'], label=item[f'{end}_label'],
                                                       hit=False))
            entry['hit'] = entry['hit'] or item['hit']
    if masks:
        region = canvas[:height].astype(np.float32)
        for index, entry in objects.items():
            mask = masks.get(index)
            if mask is not None and mask.shape[:2] == (height, width) and mask.any():
                color = np.asarray(HIT if entry['hit'] else MISS, dtype=np.float32)
                region[mask] = region[mask] * 0.6 + color * 0.4
        canvas[:height] = region.clip(0, 255).astype(np.uint8)
    boxes = [(index, label, box, OTHER) for index, label, box in others if index not in objects]
    boxes += [(index, e['label'], e['box'], HIT if e['hit'] else MISS) for index, e in sorted(objects.items())]
    view = canvas[:height]
    for index, label, box, color in boxes:
        x0, y0, x1, y1 = (int(round(v)) for v in box)
        cv2.rectangle(view, (x0, y0), (x1, y1), color, thick)
    _draw_arrows(view, items, font, thick)
    for index, label, box, color in boxes:
        _label(view, f'{index}:{label}', (int(box[0]), int(box[1])), scale, color, below=True)
    legend = [f'{item["number"]}. {triplet_text(item)}   {item["note"]}' for item in items]
    widest = max([cv2.getTextSize(t, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)[0][0] for t in [title] + legend])
    legend_scale = scale * min(1.0, max(width - 8, 1) / max(widest, 1))  # long lines shrink to fit the panel
    _text(canvas, title, (4, height + 4), legend_scale, (0, 0, 0))
    for n, (text, item) in enumerate(zip(legend, items), 1):
        _text(canvas, text, (4, height + 4 + n * line_h), legend_scale, HIT if item['hit'] else MISS)
    return canvas


def _draw_arrows(view: np.ndarray, items: List[Item], font: int, thick: int) -> None:
    """One arrow per (subject, object) pair, subject centre -> object centre, in the colour of a hit when
    one of its relations is, numbered with all its relations at 45% of its length."""
    import cv2
    pairs: Dict[Tuple[int, int], List[Item]] = {}
    for item in items:
        if item['subject_box'] is not None and item['object_box'] is not None:
            pairs.setdefault((item['subject'], item['object']), []).append(item)
    labels = []
    for group in pairs.values():
        (x0, y0), (x1, y1) = _center(group[0]['subject_box']), _center(group[0]['object_box'])
        color = HIT if any(i['hit'] for i in group) else MISS
        length = max(((x1 - x0) ** 2 + (y1 - y0) ** 2) ** 0.5, 1.0)
        cv2.arrowedLine(view, (int(round(x0)), int(round(y0))), (int(round(x1)), int(round(y1))), color, thick,
                        cv2.LINE_AA, tipLength=min(0.5, max(8.0, font * 0.8) / length))
        labels.append((','.join(str(i['number']) for i in group),
                       (int(x0 + 0.45 * (x1 - x0)), int(y0 + 0.45 * (y1 - y0))), color))
    for text, at, color in labels:  # numbers on top of every arrow
        _label(view, text, at, font / 22.0, color, centered=True)


def draw_record(image: np.ndarray, record: Dict[str, Any], k: int = 50, topk_drawn: int = 20, draw_gt: bool = True,
                draw_pred: bool = True, gt_masks: Optional[Dict[int, np.ndarray]] = None,
                pred_masks: Optional[Dict[int, np.ndarray]] = None,
                gt_objects: Sequence[Tuple[int, str, Sequence[float]]] = (), font_size: Optional[int] = None,
                line_width: float = 2) -> np.ndarray:
    """The picture of a per-image record: GT panel | prediction panel (RGB uint8), the panels side by side as
    mmdet's ``DetLocalVisualizer`` puts them."""
    image = np.ascontiguousarray(image.clip(0, 255).astype(np.uint8))
    gt_items, pred_items = relation_items(record, k, topk_drawn)
    lines = max(len(gt_items), len(pred_items)) + 1
    panels = []
    if draw_gt:
        found = sum(i['hit'] for i in gt_items)
        panels.append(draw_panel(image, gt_items, f'GT: {found}/{len(gt_items)} found at {k}', gt_masks,
                                 gt_objects, lines, font_size, line_width))
    if draw_pred:
        hits = sum(i['hit'] for i in pred_items)
        panels.append(draw_panel(image, pred_items, f'top {len(pred_items)} predictions: {hits} hits',
                                 pred_masks, (), lines, font_size, line_width))
    return np.concatenate(panels, axis=1) if panels else image



def _text(canvas: np.ndarray, text: str, at: Tuple[int, int], scale: float, color: Tuple[int, int, int]) -> None:
    """``text`` with its top-left corner at ``at``."""
    import cv2
    (_, h), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)
    cv2.putText(canvas, text, (at[0], at[1] + h), cv2.FONT_HERSHEY_SIMPLEX, scale, color, 1, cv2.LINE_AA)


def _label(view: np.ndarray, text: str, at: Tuple[int, int], scale: float, color: Tuple[int, int, int],
           below: bool = False, centered: bool = False) -> None:
    """White ``text`` on a filled box of ``color``: top-left at ``at`` (``below``: inside the box corner) or
    centred on it; kept inside the image."""
    import cv2
    (w, h), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)
    x, y = at
    if centered:
        x, y = x - w // 2 - 2, y - (h + base) // 2 - 2
    height, width = view.shape[:2]
    x = int(np.clip(x, 0, max(width - w - 4, 0)))
    y = int(np.clip(y, 0, max(height - h - base - 4, 0)))
    cv2.rectangle(view, (x, y), (x + w + 4, y + h + base + 4), color, -1)
    cv2.putText(view, text, (x + 2, y + h + 2), cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), 1, cv2.LINE_AA)
