"""Scene graphs written by multimodal LLMs: the JSON parser and the answers file (JSONL).

One module per concern: :mod:`.names` (name normalisation and mapping), :mod:`.extract` (finding the JSON in
the raw text), :mod:`.graph` (structural validation, canvas to pixels), :mod:`.result` (:class:`ParseResult`,
the failure codes), :mod:`.parser` (:func:`parse_vlm_output` and :class:`VLMAnswerParser`, the one answer
reader of the VLM-reading metrics), :mod:`.convert` (data samples) and :mod:`.answers` (the JSONL file).

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
from ..samples import PLACEHOLDER_BOX, gt_from_data_info
from .answers import ID_KEYS, TEXT_KEYS, iter_vlm_answers, iter_vlm_jsonl
from .convert import failed_data_sample, to_data_sample
from .extract import SEARCH_WORK_FACTOR, extract_json_text
from .graph import PIXEL_FRAME_RATIO, PIXEL_FRAME_TOLERANCE, parse_scene_graph
from .names import NameMapper, build_mappers, class_from_id, normalize_name
from .parser import ANSWER_FIELDS, VLMAnswerParser, parse_vlm_output
from .result import FAILURE_CODES, ParseResult

__all__ = [
    'FAILURE_CODES', 'PLACEHOLDER_BOX', 'ParseResult', 'NameMapper', 'normalize_name', 'class_from_id',
    'build_mappers', 'extract_json_text', 'parse_vlm_output', 'parse_scene_graph', 'to_data_sample',
    'failed_data_sample', 'gt_from_data_info', 'iter_vlm_jsonl', 'TEXT_KEYS', 'ID_KEYS', 'SEARCH_WORK_FACTOR',
    'PIXEL_FRAME_RATIO', 'PIXEL_FRAME_TOLERANCE', 'VLMAnswerParser', 'ANSWER_FIELDS', 'iter_vlm_answers'
]
