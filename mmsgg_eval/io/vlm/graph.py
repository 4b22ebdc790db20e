"""Validation of a decoded JSON graph and its conversion to a :class:`ParseResult` (boxes rescaled from the
model's canvas to image pixels, names mapped to dataset indices)."""
import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .names import NameMapper, build_mappers, class_from_id, normalize_name
from .result import RELATION_KEYS, InvalidGraph, ParseResult

__all__ = ['PIXEL_FRAME_RATIO', 'PIXEL_FRAME_TOLERANCE', 'parse_scene_graph']

#: A canvas at least this much wider or taller than the image tells pixel boxes from canvas boxes.
PIXEL_FRAME_RATIO = 1.25
#: Relative slack of the "within the image" test of ``ParseResult.pixel_like``.
PIXEL_FRAME_TOLERANCE = 0.05

_CLASS_FIELDS = ('label', 'category', 'class', 'name')
_SCORE_FIELDS = ('score', 'confidence')


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_id(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidGraph('wrong_type', f'{where} must be a string or integer id, got {type(value).__name__}')
    return str(value).strip()


def _optional_score(entry: Mapping, where: str) -> Optional[float]:
    for key in _SCORE_FIELDS:
        if key in entry and entry[key] is not None:
            value = entry[key]
            if not _is_number(value) or not math.isfinite(value):
                raise InvalidGraph('wrong_type', f'{where}.{key} must be a finite number, got {value!r}')
            return float(value)
    return None


def _canvas_size(canvas: Union[None, float, Sequence[float]], image_size: Tuple[float, float]):
    if canvas is None:
        return float(image_size[0]), float(image_size[1])
    if isinstance(canvas, (int, float)):
        return float(canvas), float(canvas)
    cw, ch = canvas
    return float(cw), float(ch)


def _read_box(value: Any, where: str, canvas_wh: Tuple[float, float], tolerance: float,
              box_format: str) -> List[float]:
    if not isinstance(value, (list, tuple)) or len(value) != 4 or not all(_is_number(v) for v in value):
        raise InvalidGraph('bad_box', f'{where} must be a list of 4 numbers, got {value!r}')
    x1, y1, a, b = (float(v) for v in value)
    if not all(math.isfinite(v) for v in (x1, y1, a, b)):
        raise InvalidGraph('bad_box', f'{where} has a non-finite coordinate: {value!r}')
    if box_format == 'xywh':
        if a < 0 or b < 0:
            raise InvalidGraph('bad_box', f'{where} = {value!r} has a negative width or height')
        x2, y2 = x1 + a, y1 + b
    else:
        x2, y2 = a, b
        if x2 < x1 or y2 < y1:
            raise InvalidGraph('bad_box', f'{where} = {value!r} has x2 < x1 or y2 < y1 (boxes are [x1, y1, x2, y2])')
    cw, ch = canvas_wh
    tx, ty = tolerance * cw, tolerance * ch
    if min(x1, x2) < -tx or max(x1, x2) > cw + tx or min(y1, y2) < -ty or max(y1, y2) > ch + ty:
        raise InvalidGraph('box_out_of_canvas', f'{where} = {value!r} lies outside the {cw:g}x{ch:g} canvas '
                       f'(tolerance {tolerance:.0%})')
    return [min(max(x1, 0.0), cw), min(max(y1, 0.0), ch), min(max(x2, 0.0), cw), min(max(y2, 0.0), ch)]


def parse_scene_graph(graph: Any, image_size: Tuple[float, float], classes: Sequence[str],
                      predicates: Sequence[str], canvas: Union[None, float, Sequence[float]] = 1000,
                      box_tolerance: float = 0.01, box_format: str = 'xyxy',
                      mappers: Optional[Tuple[NameMapper, NameMapper]] = None,
                      synonyms: Optional[Mapping] = None) -> ParseResult:
    """Validate an already-decoded JSON value (see the module docstring) and convert it.

    Args:
        graph: the decoded JSON value.
        image_size: ``(width, height)`` of the original image in pixels.
        classes / predicates: the dataset's names (0-based order).
        canvas: coordinate range of the boxes: a number (square canvas, default 1000: ``x / 1000 * W``), a
            ``(width, height)`` pair, ``1`` for normalised boxes, or None when boxes are already in pixels.
        box_tolerance: fraction of the canvas a coordinate may lie outside it (then clipped).
        box_format: 'xyxy' (default) or 'xywh'.
        mappers / synonyms: prebuilt ``(class_mapper, predicate_mapper)`` or a synonym map (see
            :func:`build_mappers`).
    """
    if box_format not in ('xyxy', 'xywh'):
        raise ValueError(f"box_format must be 'xyxy' or 'xywh', got {box_format!r}")
    width, height = float(image_size[0]), float(image_size[1])
    if not (width > 0 and height > 0):
        raise ValueError(f'image_size must be positive (width, height), got {image_size}')
    class_of, predicate_of = mappers if mappers is not None else build_mappers(classes, predicates, synonyms)
    canvas_wh = _canvas_size(canvas, (width, height))
    try:
        return _parse_graph(graph, (width, height), canvas_wh, box_tolerance, box_format, class_of, predicate_of)
    except InvalidGraph as err:
        return ParseResult.failure(err.code, err.reason)


def _pixel_like(extent: Optional[Tuple[float, float]], image_wh: Tuple[float, float],
                canvas_wh: Tuple[float, float]) -> Optional[bool]:
    """Whether boxes reaching ``extent`` (largest x2, y2, canvas units) look like pixels of the image; None when
    there is no box or the canvas is not :data:`PIXEL_FRAME_RATIO` larger than the image (module docstring)."""
    (w, h), (cw, ch) = image_wh, canvas_wh
    if extent is None or not (cw >= PIXEL_FRAME_RATIO * w or ch >= PIXEL_FRAME_RATIO * h):
        return None
    slack = 1.0 + PIXEL_FRAME_TOLERANCE
    return extent[0] <= w * slack and extent[1] <= h * slack



def _graph_lists(graph: Any) -> Tuple[list, list, str]:
    """(objects, relations, the relation key) of a graph whose two lists are present and are lists."""
    if not isinstance(graph, dict):
        raise InvalidGraph('not_object', f'the JSON value is a {type(graph).__name__}, not an object')
    if 'objects' not in graph:
        raise InvalidGraph('missing_field', 'no "objects" field')
    rel_key = next((k for k in RELATION_KEYS if k in graph), None)
    if rel_key is None:
        raise InvalidGraph('missing_field', 'no "relationships" field')
    objects, relations = graph['objects'], graph[rel_key]
    if not isinstance(objects, list):
        raise InvalidGraph('wrong_type', f'"objects" must be a list, got {type(objects).__name__}')
    if not isinstance(relations, list):
        raise InvalidGraph('wrong_type', f'"{rel_key}" must be a list, got {type(relations).__name__}')
    return objects, relations, rel_key


def _entry(entry: Any, where: str, keys: Sequence[str]) -> None:
    """An object / relationship entry must be a JSON object holding every key of ``keys`` (not null)."""
    if not isinstance(entry, dict):
        raise InvalidGraph('wrong_type', f'{where} must be an object, got {type(entry).__name__}')
    for key in keys:
        if entry.get(key) is None:
            raise InvalidGraph('missing_field', f'{where} has no "{key}"')


def _object_name(obj: Mapping, oid: str, where: str) -> str:
    """The explicit class field of an object when present (a string), else the class encoded in its id."""
    for key in _CLASS_FIELDS:
        if obj.get(key) is not None:
            if not isinstance(obj[key], str):
                raise InvalidGraph('wrong_type', f'{where}.{key} must be a string, got {obj[key]!r}')
            return obj[key]
    return class_from_id(oid)


def _read_objects(objects: list, image_wh, canvas_wh, tolerance: float, box_format: str,
                  class_of: Callable[[str], int]) -> Dict[str, Any]:
    """Columns of the objects (boxes in image pixels, clipped), their id -> row index and the canvas extent
    (largest x2, y2 on the canvas; None without objects)."""
    sx, sy = image_wh[0] / canvas_wh[0], image_wh[1] / canvas_wh[1]
    out: Dict[str, Any] = {k: [] for k in ('boxes', 'labels', 'scores', 'ids', 'names', 'words')}
    index: Dict[str, int] = {}
    extent: Optional[Tuple[float, float]] = None
    for i, obj in enumerate(objects):
        where = f'objects[{i}]'
        _entry(obj, where, ('id', 'bbox'))
        oid = _as_id(obj['id'], f'{where}.id')
        if oid in index:
            raise InvalidGraph('duplicate_id', f'{where}: id {oid!r} is used twice')
        name = _object_name(obj, oid, where)
        box = _read_box(obj['bbox'], f'{where}.bbox', canvas_wh, tolerance, box_format)
        extent = (max(extent[0], box[2]), max(extent[1], box[3])) if extent else (box[2], box[3])
        score = _optional_score(obj, where)
        index[oid] = len(out['ids'])
        out['ids'].append(oid)
        out['names'].append(normalize_name(name))
        out['words'].append(str(name).strip())
        out['labels'].append(class_of(name))
        out['scores'].append(1.0 if score is None else score)
        out['boxes'].append([min(max(box[0] * sx, 0.0), image_wh[0]), min(max(box[1] * sy, 0.0), image_wh[1]),
                             min(max(box[2] * sx, 0.0), image_wh[0]), min(max(box[3] * sy, 0.0), image_wh[1])])
    out['index'], out['extent'] = index, extent
    return out


def _read_relations(relations: list, rel_key: str, index: Mapping[str, int],
                    predicate_of: Callable[[str], int]) -> Dict[str, Any]:
    """Columns of the relations, in output order, and whether any carried a score."""
    out: Dict[str, Any] = {k: [] for k in ('pairs', 'labels', 'scores', 'names', 'words')}
    has_scores = False
    for j, rel in enumerate(relations):
        where = f'{rel_key}[{j}]'
        _entry(rel, where, ('subject', 'predicate', 'object'))
        sub = _as_id(rel['subject'], f'{where}.subject')
        obj = _as_id(rel['object'], f'{where}.object')
        if not isinstance(rel['predicate'], str):
            raise InvalidGraph('wrong_type', f'{where}.predicate must be a string, got {rel["predicate"]!r}')
        for role, ref in (('subject', sub), ('object', obj)):
            if ref not in index:
                raise InvalidGraph('dangling_id', f'{where}.{role} = {ref!r} is not the id of an object')
        score = _optional_score(rel, where)
        has_scores |= score is not None
        out['pairs'].append([index[sub], index[obj]])
        out['names'].append(normalize_name(rel['predicate']))
        out['words'].append(rel['predicate'].strip())
        out['labels'].append(predicate_of(rel['predicate']))
        out['scores'].append(1.0 if score is None else score)
    out['has_scores'] = has_scores
    return out


def _parse_graph(graph, image_wh, canvas_wh, tolerance, box_format, class_of, predicate_of) -> ParseResult:
    objects, relations, rel_key = _graph_lists(graph)
    obj = _read_objects(objects, image_wh, canvas_wh, tolerance, box_format, class_of)
    rel = _read_relations(relations, rel_key, obj['index'], predicate_of)
    result = ParseResult(
        ok=True, bboxes=np.asarray(obj['boxes'], np.float32).reshape(-1, 4),
        labels=np.asarray(obj['labels'], np.int64), scores=np.asarray(obj['scores'], np.float32), ids=obj['ids'],
        names=obj['names'], pair_idxs=np.asarray(rel['pairs'], np.int64).reshape(-1, 2),
        rel_labels=np.asarray(rel['labels'], np.int64), rel_scores=np.asarray(rel['scores'], np.float32),
        predicate_names=rel['names'], has_scores=rel['has_scores'], object_words=obj['words'],
        predicate_words=rel['words'], pixel_like=_pixel_like(obj['extent'], image_wh, canvas_wh))
    if result.num_unknown_objects:
        unknown = sorted({n for n, lab in zip(obj['names'], obj['labels']) if lab < 0})
        result.warnings.append(f'unknown object classes (cannot match): {unknown}')
    if (result.rel_labels < 0).any():
        unknown = sorted({n for n, lab in zip(rel['names'], rel['labels']) if lab < 0})
        result.warnings.append(f'unknown predicates (cannot match): {unknown}')
    return result
