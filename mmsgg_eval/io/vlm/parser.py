"""Parsing a raw answer (:func:`parse_vlm_output`) and the answer parser the VLM-reading metrics hold
(:class:`VLMAnswerParser`: one set of options, the name mappers of a dataset, the answer of a data sample)."""
import json
from typing import Any, Mapping, Optional, Sequence, Tuple, Union

from ...structures import get_field
from .extract import decode_first_graph
from .graph import parse_scene_graph
from .names import NameMapper, build_mappers
from .result import InvalidGraph, ParseResult

__all__ = ['parse_vlm_output', 'VLMAnswerParser', 'ANSWER_FIELDS']

#: Data-sample fields that hold a VLM answer: the raw text, an already-decoded JSON value, a parsed result.
ANSWER_FIELDS = ('pred_text', 'pred_graph', 'vlm_result')


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
            graph = decode_first_graph(text)
        except InvalidGraph as err:
            return ParseResult.failure(err.code, err.reason)
    else:
        graph = text
    return parse_scene_graph(graph, image_size, classes, predicates, canvas, box_tolerance, box_format,
                             mappers=mappers)


class VLMAnswerParser:
    """Reads the VLM answers of data samples with one set of options (``VLMSceneGraphMetric`` and
    ``RelCLIPScore`` each hold one).

    Args:
        canvas: box coordinate range of the model (default 1000: ``x / 1000 * W``); a ``(w, h)`` pair, 1 for
            normalised boxes, None for pixels.
        box_tolerance: fraction of the canvas a coordinate may lie outside it (clipped); beyond = failure.
        box_format: 'xyxy' or 'xywh'.
        synonyms: model name -> dataset name map (flat, or ``{'objects': ..., 'predicates': ...}``), or the path
            of a JSON file holding one (:func:`build_mappers`).
        owner: the name error messages start with (the metric holding the parser).
    """

    def __init__(self, canvas: Union[None, float, Sequence[float]] = 1000, box_tolerance: float = 0.01,
                 box_format: str = 'xyxy', synonyms: Union[None, str, Mapping] = None,
                 owner: str = 'VLMAnswerParser') -> None:
        if box_format not in ('xyxy', 'xywh'):
            raise ValueError(f"box_format must be 'xyxy' or 'xywh', got {box_format!r}")
        if isinstance(synonyms, str):
            with open(synonyms, encoding='utf-8') as f:
                synonyms = json.load(f)
        self.canvas = canvas
        self.box_tolerance = float(box_tolerance)
        self.box_format = box_format
        self.synonyms = synonyms
        self.owner = owner
        self._mappers: Optional[Tuple[NameMapper, NameMapper]] = None
        self._mappers_key = None

    def mappers(self, classes: Sequence[str], predicates: Sequence[str]) -> Tuple[NameMapper, NameMapper]:
        """(class, predicate) mappers of a dataset's names, built once per list of names."""
        key = (tuple(classes), tuple(predicates))
        if self._mappers_key != key:
            self._mappers = build_mappers(classes, predicates, self.synonyms)
            self._mappers_key = key
        return self._mappers

    def parse(self, text: Any, image_size: Tuple[float, float], classes: Sequence[str],
              predicates: Sequence[str]) -> ParseResult:
        """Parse one raw answer (:func:`parse_vlm_output`); ``image_size`` = (width, height) in pixels."""
        return parse_vlm_output(text, image_size, classes, predicates, self.canvas, self.box_tolerance,
                                self.box_format, mappers=self.mappers(classes, predicates))

    def result_of(self, sample: Any, classes: Sequence[str], predicates: Sequence[str]) -> ParseResult:
        """The :class:`ParseResult` of a data sample's answer: its ``vlm_result`` as given, else its
        ``pred_text`` parsed (``pred_graph`` when there is no text), boxes rescaled to ``ori_shape`` (H, W)
        (or the ``height`` / ``width`` metainfo)."""
        result = get_field(sample, 'vlm_result')
        if result is not None:
            return result
        shape = get_field(sample, 'ori_shape')
        if shape is None:
            shape = (get_field(sample, 'height'), get_field(sample, 'width'))
        if shape is None or shape[0] is None:
            raise ValueError(f'{self.owner}: a sample needs `ori_shape` (H, W) metainfo to rescale the boxes')
        image_size = (float(shape[1]), float(shape[0]))
        if isinstance(sample, Mapping) and 'pred_text' not in sample and 'pred_graph' in sample:
            return self.parse(sample['pred_graph'], image_size, classes, predicates)
        text = get_field(sample, 'pred_text')
        if text is None:
            graph = get_field(sample, 'pred_graph')
            if graph is not None:
                return self.parse(graph, image_size, classes, predicates)
        return self.parse(text, image_size, classes, predicates)

    @staticmethod
    def holds_answer(sample: Any) -> bool:
        """True for a sample carrying a VLM answer (:data:`ANSWER_FIELDS`) and no ``pred_relations``."""
        if get_field(sample, 'pred_relations') is not None:
            return False
        if isinstance(sample, dict):
            return any(k in sample for k in ANSWER_FIELDS)
        return any(get_field(sample, k) is not None for k in ANSWER_FIELDS)
