"""The answers file: JSONL records holding a sample identity and the model's text."""
from typing import Any, Dict, Iterator, Tuple

from ..errors import InputFileError, describe
from ..jsonl import iter_json_lines

__all__ = ['TEXT_KEYS', 'ID_KEYS', 'iter_vlm_jsonl', 'iter_vlm_answers']

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
