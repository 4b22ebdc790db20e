"""Scene graphs written by multimodal LLMs: the JSON parser and the answers file (JSONL).

A VLM answers with text that contains a JSON scene graph::

    {"objects": [{"id": "person.1", "bbox": [x1, y1, x2, y2]}, ...],
     "relationships": [{"subject": "person.1", "predicate": "riding", "object": "horse.2"}, ...]}

:func:`parse_vlm_output` turns the RAW model text into a :class:`ParseResult` (boxes in image pixels,
0-based labels) and decides whether it is a *structurally valid graph*; :func:`to_data_sample` turns a
result plus the ground truth into a data-sample dict (CPU tensors, single-label relations),
which :class:`~mmsgg_eval.metrics.SGRecall` / ``SGMeanRecall`` score in ``'sgdet'`` mode with
``rank='given'`` and ``skip_empty_predictions=False``. Nothing here touches the network.

Extraction from raw text
    ``<think>...</think>`` blocks are removed; when an ``<answer>`` tag is present, the text of the LAST
    ``<answer>...</answer>`` block is used (an unclosed ``<answer>`` runs to the end of the text); markdown
    code fences (```` ```json ... ``` ````) are preferred over the surrounding text; leading and trailing
    prose is ignored: the first JSON object found (``json.JSONDecoder.raw_decode`` at each ``{``) that has an
    ``objects`` or ``relationships`` key is used, whatever precedes it (objects nested in a decoded value are
    searched in document order, then the search resumes after that value, so the cost is linear in the
    answer's length). JSON is never repaired: a truncated answer is a failure. The only bound is on the work
    spent on starts that do NOT decode: at most :data:`SEARCH_WORK_FACTOR` x the answer's length in
    characters (at least 1 MiB); past that (deeply nested, truncated JSON) the answer is a ``'search_limit'``
    failure.

Structural validity (``ParseResult.ok``; anything else makes the sample a failure, ``FailureRate``)
    * ``code='no_json'``: no ``{`` at all; ``'invalid_json'``: no decodable JSON object (truncated output,
      trailing commas, single quotes, ...); ``'not_object'``: the JSON is not an object.
    * ``'missing_field'``: no ``objects`` list, no ``relationships`` (alias ``relations``) list, an object
      without ``id`` or ``bbox``, a relationship without ``subject``, ``predicate`` or ``object``.
    * ``'wrong_type'``: an entry that is not an object; ``objects``/``relationships`` not lists; ids that are
      neither strings nor integers; names (predicate, ``label``/``category``) that are not strings; scores
      that are not numbers.
    * ``'bad_box'``: ``bbox`` is not a list of 4 finite numbers (booleans and numeric strings are not numbers),
      or has x2 < x1 or y2 < y1 (in ``box_format='xywh'``: negative width/height). Zero-area boxes are valid.
    * ``'box_out_of_canvas'``: a coordinate outside ``[-tol, canvas + tol]`` with ``tol = box_tolerance x
      canvas`` (default 1 %: -10..1010 on the 0-1000 canvas). Coordinates within the tolerance are clipped
      to the canvas; rescaled boxes are clipped to the image ``[0, W] x [0, H]``.
    * ``'not_text'``: the answer is not text (bytes that are not UTF-8, e.g. a binary answer in the JSONL
      file); the sample is a failure like the others, never a crash.
    * ``'duplicate_id'``: two objects with the same id (references would be ambiguous).
    * ``'dangling_id'``: a relationship whose subject or object id is not among the objects.
    * ``'search_limit'``: the search for the graph gave up (see *Extraction*); JSON nested deeper than
      Python's decoder allows is ``'invalid_json'``.
    * ``'missing'``: the sample has no answer at all (set by the metric for a sample marked
      ``prediction_missing``: the answers file has no record for it, ``--allow-missing``). An answer that is
      ``null`` / absent in its record is ``'no_json'``.
    An empty graph (``{"objects": [], "relationships": []}``) is valid; it predicts nothing (recall 0).

Names
    Normalised by :func:`normalize_name` (lower case, ``_`` and ``-`` to space, whitespace collapsed). The object
    class is the explicit ``label`` / ``category`` / ``class`` / ``name`` field when present, else the id
    without its instance number (``person.1``, ``person_1``, ``person 1``, ``person#1`` -> ``person``). An
    optional synonym map (model name -> dataset name, see :class:`NameMapper`) is applied after
    normalisation. A class or predicate that is still unknown does NOT make the graph invalid: the object /
    relation is kept with label -1 and can never match (decision documented here; such outputs are
    counted in ``ParseResult.num_unknown_objects`` / ``num_unknown_relations``).

Scores
    ``score`` or ``confidence`` on objects and relationships when given, else 1. ``ParseResult.has_scores``
    tells whether any relationship carried one (then the order by score is meaningful).

Pixel boxes read on a canvas (``ParseResult.pixel_like``)
    A valid answer with boxes, read on a canvas that exceeds its image by at least
    :data:`PIXEL_FRAME_RATIO` in width or height, "looks like pixels" (True) when every coordinate, read as
    pixels, lies within the image (``x2 <= W``, ``y2 <= H``, plus :data:`PIXEL_FRAME_TOLERANCE`); else False.
    None when the two readings cannot be told apart (no box, no canvas, canvas about the image size).
    ``VLMSceneGraphMetric`` warns when most answers look like pixels (``docs/metrics.md``).
"""
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from .errors import InputFileError, describe
from .jsonl import iter_json_lines
from .samples import PLACEHOLDER_BOX, gt_fields, gt_from_data_info

__all__ = [
    'FAILURE_CODES', 'PLACEHOLDER_BOX', 'ParseResult', 'NameMapper', 'normalize_name', 'class_from_id',
    'build_mappers', 'extract_json_text', 'parse_vlm_output', 'parse_scene_graph', 'to_data_sample',
    'failed_data_sample', 'gt_from_data_info', 'iter_vlm_jsonl', 'TEXT_KEYS', 'ID_KEYS', 'SEARCH_WORK_FACTOR',
    'PIXEL_FRAME_RATIO', 'PIXEL_FRAME_TOLERANCE'
]

#: ``ParseResult.code`` values; index in this tuple = the integer code stored by the metric.
FAILURE_CODES = ('ok', 'no_json', 'invalid_json', 'not_object', 'missing_field', 'wrong_type', 'bad_box',
                 'box_out_of_canvas', 'duplicate_id', 'dangling_id', 'not_text', 'search_limit', 'missing')

#: Characters that graph-search starts which do not decode may examine, per character of the answer.
SEARCH_WORK_FACTOR = 16
#: A canvas at least this much wider or taller than the image tells pixel boxes from canvas boxes.
PIXEL_FRAME_RATIO = 1.25
#: Relative slack of the "within the image" test of ``ParseResult.pixel_like``.
PIXEL_FRAME_TOLERANCE = 0.05

_CLASS_FIELDS = ('label', 'category', 'class', 'name')
_SCORE_FIELDS = ('score', 'confidence')
_RELATION_KEYS = ('relationships', 'relations')


def normalize_name(name: str) -> str:
    """Lower case, ``_`` and ``-`` to space, whitespace collapsed and stripped."""
    return ' '.join(str(name).lower().replace('_', ' ').replace('-', ' ').split())


_INSTANCE_SUFFIX = re.compile(r'^(.*?\S)[\s._#-]*\d+$')


def class_from_id(object_id: str) -> str:
    """Object class encoded in an id: ``'person.1'`` / ``'person_1'`` / ``'person1'`` -> ``'person'``."""
    text = str(object_id).strip()
    m = _INSTANCE_SUFFIX.match(text)
    return m.group(1) if m else text


class NameMapper:
    """Normalised name -> 0-based index into a dataset's class or predicate list.

    Args:
        names: the dataset's names (``dataset_meta['classes']`` / ``['predicates']``).
        synonyms: optional ``{model name: dataset name}``; both sides are normalised, every target must be one
            of ``names`` (ValueError otherwise). A synonym never overrides an exact dataset name.
    """

    def __init__(self, names: Sequence[str], synonyms: Optional[Mapping[str, str]] = None):
        self.names = list(names)
        self.index: Dict[str, int] = {}
        for i, n in enumerate(self.names):
            self.index.setdefault(normalize_name(n), i)
        for src, dst in (synonyms or {}).items():
            key, target = normalize_name(src), normalize_name(dst)
            if target not in self.index:
                raise ValueError(f'synonym {src!r} -> {dst!r}: {dst!r} is not a dataset name')
            self.index.setdefault(key, self.index[target])

    def __call__(self, name: str) -> int:
        return self.index.get(normalize_name(name), -1)


def _is_split_map(synonyms: Mapping) -> bool:
    return bool(synonyms) and set(synonyms) <= {'objects', 'classes', 'predicates'} and \
        all(isinstance(v, Mapping) for v in synonyms.values())


def build_mappers(classes: Sequence[str], predicates: Sequence[str], synonyms: Optional[Mapping] = None,
                  class_synonyms: Optional[Mapping] = None,
                  predicate_synonyms: Optional[Mapping] = None) -> Tuple[NameMapper, NameMapper]:
    """Class and predicate :class:`NameMapper` s.

    ``synonyms`` is either split, ``{'objects': {...}, 'predicates': {...}}`` (``'classes'`` is an alias of
    ``'objects'``), or flat ``{model name: dataset name}``: a flat entry applies to the class list when its
    target is a class, to the predicate list when it is a predicate (both when both). ``class_synonyms`` /
    ``predicate_synonyms`` add entries for one list. A target that is no dataset name raises ValueError.
    """
    cls_syn: Dict[str, str] = {}
    pred_syn: Dict[str, str] = {}
    if synonyms and _is_split_map(synonyms):
        cls_syn.update(synonyms.get('objects', {}) or {})
        cls_syn.update(synonyms.get('classes', {}) or {})
        pred_syn.update(synonyms.get('predicates', {}) or {})
    elif synonyms:
        cls_names = {normalize_name(n) for n in classes}
        pred_names = {normalize_name(n) for n in predicates}
        unknown = []
        for src, dst in synonyms.items():
            target = normalize_name(dst)
            if target in cls_names:
                cls_syn[src] = dst
            if target in pred_names:
                pred_syn[src] = dst
            if target not in cls_names and target not in pred_names:
                unknown.append(f'{src!r} -> {dst!r}')
        if unknown:
            raise ValueError(f'synonyms map to names that are neither classes nor predicates: {unknown}')
    cls_syn.update(class_synonyms or {})
    pred_syn.update(predicate_synonyms or {})
    return NameMapper(classes, cls_syn), NameMapper(predicates, pred_syn)


@dataclass
class ParseResult:
    """One parsed VLM answer.

    ``ok`` is False for outputs that are not a structurally valid graph (then ``code``/``reason`` say why and
    every array is empty). Objects: ``bboxes`` [N, 4] float32 xyxy in image pixels, ``labels`` [N] int64
    (0-based, -1 = unknown class), ``scores`` [N] float32 (1 when absent), ``ids`` / ``names`` (normalised
    class names). Relations, in output order: ``pair_idxs`` [R, 2] int64 into the objects,
    ``rel_labels`` [R] int64 (0-based, -1 = unknown predicate), ``rel_scores`` [R] float32 (1 when absent).
    ``object_words`` / ``predicate_words``: the model's own words, as written (whitespace-stripped, before
    normalisation and any vocabulary mapping), one per object / relation. ``pixel_like``: whether the boxes
    look like image pixels read on the canvas (see the module docstring; None = cannot tell).
    """
    ok: bool
    code: str = 'ok'
    reason: str = ''
    bboxes: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), np.float32))
    labels: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    scores: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    ids: List[str] = field(default_factory=list)
    names: List[str] = field(default_factory=list)
    pair_idxs: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    rel_labels: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rel_scores: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    predicate_names: List[str] = field(default_factory=list)
    has_scores: bool = False
    warnings: List[str] = field(default_factory=list)
    object_words: List[str] = field(default_factory=list)
    predicate_words: List[str] = field(default_factory=list)
    pixel_like: Optional[bool] = None

    @property
    def code_index(self) -> int:
        return FAILURE_CODES.index(self.code)

    @property
    def num_objects(self) -> int:
        return int(self.labels.shape[0])

    @property
    def num_relations(self) -> int:
        return int(self.rel_labels.shape[0])

    @property
    def known_relations(self) -> np.ndarray:
        """[R] bool: subject class, object class and predicate are all dataset names."""
        if not self.num_relations:
            return np.zeros(0, bool)
        return (self.rel_labels >= 0) & (self.labels[self.pair_idxs[:, 0]] >= 0) & \
            (self.labels[self.pair_idxs[:, 1]] >= 0)

    @property
    def num_unknown_objects(self) -> int:
        return int((self.labels < 0).sum())

    @property
    def num_unknown_relations(self) -> int:
        return int((~self.known_relations).sum())

    @classmethod
    def failure(cls, code: str, reason: str) -> 'ParseResult':
        assert code in FAILURE_CODES and code != 'ok', code
        return cls(ok=False, code=code, reason=reason)


class _Invalid(Exception):
    def __init__(self, code: str, reason: str):
        super().__init__(reason)
        self.code, self.reason = code, reason


# ---------------------------------------------------------------------------------------------- raw text
_THINK = re.compile(r'<think>.*?(</think>|$)', re.S | re.I)
_ANSWER = re.compile(r'<answer>(.*?)(?:</answer>|$)', re.S | re.I)
_FENCE = re.compile(r'```[ \t]*[A-Za-z0-9_+-]*[ \t]*\n?(.*?)(?:```|$)', re.S)


def extract_json_text(text: str) -> List[str]:
    """Candidate regions of a raw answer that may hold the JSON graph, most specific first."""
    text = _THINK.sub('', text)
    answers = _ANSWER.findall(text)
    if answers:
        text = answers[-1]
    candidates = [m.group(1) for m in _FENCE.finditer(text)]
    candidates.append(text)
    return candidates


def _is_graph(value: Any) -> bool:
    return isinstance(value, dict) and any(k in value for k in ('objects',) + _RELATION_KEYS)


def _graph_within(value: Any) -> Optional[dict]:
    """The first object with a graph key in a decoded value, in document order (the value itself first)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if _is_graph(item):
                return item
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return None


def _decode_first_graph(text: str) -> Any:
    """First JSON object in ``text`` with a graph key; else the outermost decodable value; else _Invalid.

    Each start (``{``, or a leading ``[``) that decodes is searched as a whole and skipped, so the cost is
    linear in the text; starts that fail may examine :data:`SEARCH_WORK_FACTOR` x ``len(text)`` characters
    (at least 1 MiB) in all before the search gives up (``'search_limit'``).
    """
    decoder = json.JSONDecoder()
    first_value, first_error = None, None
    budget = SEARCH_WORK_FACTOR * max(len(text), 1 << 16)
    for candidate in extract_json_text(text):
        pos = candidate.find('{')
        bracket = candidate.find('[')
        if bracket != -1 and (pos == -1 or bracket < pos):
            pos = bracket  # a top-level array is decoded too (then reported as 'not_object')
        while pos != -1:
            try:
                value, end = decoder.raw_decode(candidate, pos)
            except (json.JSONDecodeError, RecursionError) as err:
                if isinstance(err, RecursionError):  # nested deeper than the decoder allows
                    err = json.JSONDecodeError('JSON nested too deeply', candidate, pos)
                    budget -= len(candidate) - pos
                else:
                    budget -= err.pos - pos + 1
                first_error = first_error or err
                if budget < 0:
                    raise _Invalid('search_limit', f'no graph found before the search limit: starts that do not '
                                   f'decode examined over {SEARCH_WORK_FACTOR}x the answer\'s {len(text)} '
                                   f'characters (deeply nested, truncated JSON?)')
                pos = candidate.find('{', pos + 1)  # a graph may still start inside the undecodable text
                continue
            graph = _graph_within(value)
            if graph is not None:
                return graph
            if first_value is None and first_error is None:
                first_value = value
            pos = candidate.find('{', end)
    if first_value is not None:
        return first_value
    stripped = _THINK.sub('', text)
    if '{' not in stripped:
        raise _Invalid('no_json', 'no JSON object in the output')
    raise _Invalid('invalid_json', f'invalid JSON ({first_error.msg} at char {first_error.pos})'
                   if first_error else 'invalid JSON')


# ---------------------------------------------------------------------------------------------- structure
def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_id(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _Invalid('wrong_type', f'{where} must be a string or integer id, got {type(value).__name__}')
    return str(value).strip()


def _optional_score(entry: Mapping, where: str) -> Optional[float]:
    for key in _SCORE_FIELDS:
        if key in entry and entry[key] is not None:
            value = entry[key]
            if not _is_number(value) or not math.isfinite(value):
                raise _Invalid('wrong_type', f'{where}.{key} must be a finite number, got {value!r}')
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
        raise _Invalid('bad_box', f'{where} must be a list of 4 numbers, got {value!r}')
    x1, y1, a, b = (float(v) for v in value)
    if not all(math.isfinite(v) for v in (x1, y1, a, b)):
        raise _Invalid('bad_box', f'{where} has a non-finite coordinate: {value!r}')
    if box_format == 'xywh':
        if a < 0 or b < 0:
            raise _Invalid('bad_box', f'{where} = {value!r} has a negative width or height')
        x2, y2 = x1 + a, y1 + b
    else:
        x2, y2 = a, b
        if x2 < x1 or y2 < y1:
            raise _Invalid('bad_box', f'{where} = {value!r} has x2 < x1 or y2 < y1 (boxes are [x1, y1, x2, y2])')
    cw, ch = canvas_wh
    tx, ty = tolerance * cw, tolerance * ch
    if min(x1, x2) < -tx or max(x1, x2) > cw + tx or min(y1, y2) < -ty or max(y1, y2) > ch + ty:
        raise _Invalid('box_out_of_canvas', f'{where} = {value!r} lies outside the {cw:g}x{ch:g} canvas '
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
    except _Invalid as err:
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


def _parse_graph(graph, image_wh, canvas_wh, tolerance, box_format, class_of, predicate_of) -> ParseResult:
    if not isinstance(graph, dict):
        raise _Invalid('not_object', f'the JSON value is a {type(graph).__name__}, not an object')
    if 'objects' not in graph:
        raise _Invalid('missing_field', 'no "objects" field')
    rel_key = next((k for k in _RELATION_KEYS if k in graph), None)
    if rel_key is None:
        raise _Invalid('missing_field', 'no "relationships" field')
    objects, relations = graph['objects'], graph[rel_key]
    if not isinstance(objects, list):
        raise _Invalid('wrong_type', f'"objects" must be a list, got {type(objects).__name__}')
    if not isinstance(relations, list):
        raise _Invalid('wrong_type', f'"{rel_key}" must be a list, got {type(relations).__name__}')
    sx, sy = image_wh[0] / canvas_wh[0], image_wh[1] / canvas_wh[1]
    boxes, labels, scores, ids, names, words, index = [], [], [], [], [], [], {}
    extent: Optional[Tuple[float, float]] = None  # largest x2, y2 on the canvas
    for i, obj in enumerate(objects):
        where = f'objects[{i}]'
        if not isinstance(obj, dict):
            raise _Invalid('wrong_type', f'{where} must be an object, got {type(obj).__name__}')
        for key in ('id', 'bbox'):
            if obj.get(key) is None:
                raise _Invalid('missing_field', f'{where} has no "{key}"')
        oid = _as_id(obj['id'], f'{where}.id')
        if oid in index:
            raise _Invalid('duplicate_id', f'{where}: id {oid!r} is used twice')
        name = None
        for key in _CLASS_FIELDS:
            if obj.get(key) is not None:
                if not isinstance(obj[key], str):
                    raise _Invalid('wrong_type', f'{where}.{key} must be a string, got {obj[key]!r}')
                name = obj[key]
                break
        if name is None:
            name = class_from_id(oid)
        box = _read_box(obj['bbox'], f'{where}.bbox', canvas_wh, tolerance, box_format)
        extent = (max(extent[0], box[2]), max(extent[1], box[3])) if extent else (box[2], box[3])
        score = _optional_score(obj, where)
        index[oid] = len(ids)
        ids.append(oid)
        names.append(normalize_name(name))
        words.append(str(name).strip())
        labels.append(class_of(name))
        scores.append(1.0 if score is None else score)
        boxes.append([min(max(box[0] * sx, 0.0), image_wh[0]), min(max(box[1] * sy, 0.0), image_wh[1]),
                      min(max(box[2] * sx, 0.0), image_wh[0]), min(max(box[3] * sy, 0.0), image_wh[1])])
    pairs, rel_labels, rel_scores, pred_names, pred_words, has_scores = [], [], [], [], [], False
    for j, rel in enumerate(relations):
        where = f'{rel_key}[{j}]'
        if not isinstance(rel, dict):
            raise _Invalid('wrong_type', f'{where} must be an object, got {type(rel).__name__}')
        for key in ('subject', 'predicate', 'object'):
            if rel.get(key) is None:
                raise _Invalid('missing_field', f'{where} has no "{key}"')
        sub = _as_id(rel['subject'], f'{where}.subject')
        obj = _as_id(rel['object'], f'{where}.object')
        if not isinstance(rel['predicate'], str):
            raise _Invalid('wrong_type', f'{where}.predicate must be a string, got {rel["predicate"]!r}')
        for role, ref in (('subject', sub), ('object', obj)):
            if ref not in index:
                raise _Invalid('dangling_id', f'{where}.{role} = {ref!r} is not the id of an object')
        score = _optional_score(rel, where)
        has_scores |= score is not None
        pairs.append([index[sub], index[obj]])
        pred_names.append(normalize_name(rel['predicate']))
        pred_words.append(rel['predicate'].strip())
        rel_labels.append(predicate_of(rel['predicate']))
        rel_scores.append(1.0 if score is None else score)
    result = ParseResult(
        ok=True, bboxes=np.asarray(boxes, np.float32).reshape(-1, 4), labels=np.asarray(labels, np.int64),
        scores=np.asarray(scores, np.float32), ids=ids, names=names,
        pair_idxs=np.asarray(pairs, np.int64).reshape(-1, 2), rel_labels=np.asarray(rel_labels, np.int64),
        rel_scores=np.asarray(rel_scores, np.float32), predicate_names=pred_names, has_scores=has_scores,
        object_words=words, predicate_words=pred_words, pixel_like=_pixel_like(extent, image_wh, canvas_wh))
    if result.num_unknown_objects:
        unknown = sorted({n for n, lab in zip(names, labels) if lab < 0})
        result.warnings.append(f'unknown object classes (cannot match): {unknown}')
    if (result.rel_labels < 0).any():
        unknown = sorted({n for n, lab in zip(pred_names, rel_labels) if lab < 0})
        result.warnings.append(f'unknown predicates (cannot match): {unknown}')
    return result


def parse_vlm_output(text: Any, image_size: Tuple[float, float], classes: Sequence[str],
                     predicates: Sequence[str], canvas: Union[None, float, Sequence[float]] = 1000,
                     box_tolerance: float = 0.01, box_format: str = 'xyxy',
                     mappers: Optional[Tuple[NameMapper, NameMapper]] = None,
                     synonyms: Optional[Mapping] = None) -> ParseResult:
    """Parse RAW model text into a :class:`ParseResult` (never raises for bad model output).

    ``text`` may also be an already-decoded JSON value (dict/list), which skips the text extraction.
    ``None`` (no answer at all) is a ``'no_json'`` failure; ``bytes`` are decoded as UTF-8, and bytes that
    are not UTF-8 are a ``'not_text'`` failure. Other arguments: :func:`parse_scene_graph`.
    """
    if mappers is None:
        mappers = build_mappers(classes, predicates, synonyms)
    if text is None:
        return ParseResult.failure('no_json', 'no output')
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode('utf-8')
        except UnicodeDecodeError as err:
            return ParseResult.failure('not_text', f'the answer is not UTF-8 text (byte 0x{text[err.start]:02x} '
                                                   f'at offset {err.start})')
    if isinstance(text, str):
        try:
            graph = _decode_first_graph(text)
        except _Invalid as err:
            return ParseResult.failure(err.code, err.reason)
    else:
        graph = text
    return parse_scene_graph(graph, image_size, classes, predicates, canvas, box_tolerance, box_format,
                             mappers=mappers)


# ---------------------------------------------------------------------------------------------- data samples
def to_data_sample(result: ParseResult, gt: Any = None, sample_idx: Optional[int] = None,
                   img_id: Any = None) -> Dict[str, Any]:
    """Data sample (plain dict of CPU tensors) of one parsed answer, scored by
    ``SGRecall``/``SGMeanRecall(mode='sgdet', rank='given', skip_empty_predictions=False)``.

    ``pred_instances``: the objects of known class (``bboxes``, ``labels``, ``scores``); ``pred_relations``:
    EVERY relation in output order, single-label (``pair_idxs``, ``labels``, 1-D ``scores``). A relation whose
    subject class, object class or predicate is unknown keeps its rank slot but points at a trailing
    placeholder object (:data:`PLACEHOLDER_BOX`, label 0, score 1) with predicate 0, so it can never match; its
    score is the float32 product relation score x subject score x object score, so ``rank='score'`` ranks it
    where the original triplet would be. A failed result (``ok=False``) gives 0 objects and 0 relations.
    ``gt``: a data sample / dict with ``gt_instances`` and ``gt_relations`` or an mmdet data-info dict
    (``instances``, ``relations``); its ``sample_idx``/``img_id``/``ori_shape`` are copied. The key ``vlm``
    holds ``ok``, ``code``, ``reason`` and the unknown-name counts. The key ``open_vocab`` holds EVERY parsed
    object and relation in the model's own words (for ``RelCLIPScore``): ``pred_instances`` (``bboxes``,
    ``scores``) and ``pred_relations`` (``pair_idxs``, 1-D ``scores``, ``labels`` (-1 = not a dataset
    predicate) and ``texts``: one (subject, predicate, object) triplet of words per relation).
    """
    sample = gt_fields(gt)
    if sample_idx is not None:
        sample['sample_idx'] = int(sample_idx)
    if img_id is not None:
        sample['img_id'] = img_id
    known_obj = result.labels >= 0 if result.ok else np.zeros(0, bool)
    new_index = np.cumsum(known_obj) - 1
    boxes = result.bboxes[known_obj] if result.ok else np.zeros((0, 4), np.float32)
    labels = result.labels[known_obj] if result.ok else np.zeros(0, np.int64)
    scores = result.scores[known_obj] if result.ok else np.zeros(0, np.float32)
    if result.ok and result.num_relations:
        known_rel = result.known_relations
        pairs = result.pair_idxs.copy()
        rel_labels = result.rel_labels.copy()
        rel_scores = result.rel_scores.astype(np.float32).copy()
        pairs[known_rel] = new_index[pairs[known_rel]]
        if (~known_rel).any():
            placeholder = boxes.shape[0]
            unknown = ~known_rel
            sub_s = result.scores[result.pair_idxs[unknown, 0]].astype(np.float32)
            obj_s = result.scores[result.pair_idxs[unknown, 1]].astype(np.float32)
            rel_scores[unknown] = (rel_scores[unknown] * sub_s) * obj_s
            pairs[unknown] = placeholder
            rel_labels[unknown] = 0
            boxes = np.concatenate([boxes, np.asarray([PLACEHOLDER_BOX], np.float32)])
            labels = np.concatenate([labels, np.zeros(1, np.int64)])
            scores = np.concatenate([scores, np.ones(1, np.float32)])
    else:
        pairs = np.zeros((0, 2), np.int64)
        rel_labels = np.zeros(0, np.int64)
        rel_scores = np.zeros(0, np.float32)
    sample['pred_instances'] = {'bboxes': torch.from_numpy(np.ascontiguousarray(boxes, np.float32)).reshape(-1, 4),
                                'labels': torch.from_numpy(np.ascontiguousarray(labels, np.int64)),
                                'scores': torch.from_numpy(np.ascontiguousarray(scores, np.float32))}
    sample['pred_relations'] = {'pair_idxs': torch.from_numpy(np.ascontiguousarray(pairs, np.int64)).reshape(-1, 2),
                                'labels': torch.from_numpy(np.ascontiguousarray(rel_labels, np.int64)),
                                'scores': torch.from_numpy(np.ascontiguousarray(rel_scores, np.float32))}

    def array(value: np.ndarray, dtype) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(value, dtype))

    words = result.object_words
    sample['open_vocab'] = {
        'pred_instances': {'bboxes': array(result.bboxes, np.float32).reshape(-1, 4),
                           'scores': array(result.scores, np.float32)},
        'pred_relations': {'pair_idxs': array(result.pair_idxs, np.int64).reshape(-1, 2),
                           'scores': array(result.rel_scores, np.float32),
                           'labels': array(result.rel_labels, np.int64),
                           'texts': [(words[i], w, words[j]) for (i, j), w in
                                     zip(result.pair_idxs.tolist(), result.predicate_words)]}}
    sample['vlm'] = {'ok': result.ok, 'code': result.code, 'reason': result.reason,
                     'num_objects': result.num_objects, 'num_relations': result.num_relations,
                     'num_unknown_objects': result.num_unknown_objects if result.ok else 0,
                     'num_unknown_relations': result.num_unknown_relations if result.ok else 0}
    return sample


def failed_data_sample(gt: Any = None, sample_idx: Optional[int] = None, reason: str = 'no output') -> Dict:
    """Empty prediction for a sample without any usable output (it counts as recall 0, never dropped)."""
    return to_data_sample(ParseResult.failure('no_json', reason), gt, sample_idx)


# ---------------------------------------------------------------------------------------------- files
#: Keys tried, in order, for the model text of a JSONL record (:func:`iter_vlm_jsonl`).
TEXT_KEYS = ('output', 'response', 'text', 'prediction', 'answer')
#: Keys tried, in order, for the sample identity of a JSONL record.
ID_KEYS = ('sample_idx', 'img_id', 'image_id', 'id')


def _has_surrogates(text: str) -> bool:
    """True for text decoded with ``surrogateescape`` from bytes that are not UTF-8."""
    return any('\udc80' <= ch <= '\udcff' for ch in text)


def iter_vlm_jsonl(path: str) -> Iterator[Tuple[str, Any, Any]]:
    """Stream a JSONL file of VLM answers, one record per line::

        {"sample_idx": 17, "output": "<answer>```json {...} ```</answer>"}
        {"image_id": "2343729", "response": "..."}

    The sample identity is the first of :data:`ID_KEYS` present and the text the first of :data:`TEXT_KEYS`
    (``null`` or absent = no output, a failure). The text may also be a JSON object (an already-decoded
    graph). An answer holding bytes that are not UTF-8 is yielded as those ``bytes`` (a ``'not_text'``
    failure of :func:`parse_vlm_output`, counted in FailureRate). Yields ``(id_key, id_value, text)``; a line
    that is not a JSON object, or without a usable identity, raises :class:`~mmsgg_eval.io.errors.InputFileError`
    naming the line.
    """
    for _, id_key, id_value, text, _ in _iter_answers(path):
        yield id_key, id_value, text


def iter_vlm_answers(path: str) -> Iterator[Tuple[str, Dict[str, Any], Any]]:
    """``(location, identity, text)`` per line of a VLM answers file: ``identity`` holds ``sample_idx`` and / or
    ``img_id`` (``image_id`` / ``id`` are read as ``img_id``; an ``img_id`` / ``image_id`` beside
    ``sample_idx`` is kept, to be checked against the dataset), ``text`` as in :func:`iter_vlm_jsonl`."""
    for where, id_key, id_value, text, img_id in _iter_answers(path):
        identity = {'sample_idx' if id_key == 'sample_idx' else 'img_id': id_value}
        if img_id is not None:
            identity['img_id'] = img_id
        yield where, identity, text


def _iter_answers(path: str) -> Iterator[Tuple[str, str, Any, Any, Any]]:
    """(location, identity key, its value, text, the image id beside a ``sample_idx`` or None) per line."""
    for lineno, record in iter_json_lines(path, undecodable='escape'):
        where = describe(path, lineno)
        id_key = next((k for k in ID_KEYS if k in record), None)
        if id_key is None:
            raise InputFileError(where, f'has no sample identity; expected one of {", ".join(ID_KEYS)}')
        id_value = record[id_key]
        if isinstance(id_value, str) and _has_surrogates(id_value):
            raise InputFileError(where, 'is not UTF-8 text; expected a string or integer', field=id_key)
        text = next((record[k] for k in TEXT_KEYS if k in record), None)
        if isinstance(text, str) and _has_surrogates(text):
            text = text.encode('utf-8', 'surrogateescape')
        img_id = next((record[k] for k in ('img_id', 'image_id') if k in record), None) \
            if id_key == 'sample_idx' else None  # not `id`: beside an index it may name a question
        yield where, id_key, id_value, text, img_id
