"""Finding the JSON graph in a raw answer (``<think>`` / ``<answer>`` tags, code fences, surrounding prose)."""
import json
import re
from typing import Any, List, Optional

from .result import RELATION_KEYS, InvalidGraph

__all__ = ['SEARCH_WORK_FACTOR', 'extract_json_text', 'decode_first_graph']

#: Characters that graph-search starts which do not decode may examine, per character of the answer.
SEARCH_WORK_FACTOR = 16

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
    return isinstance(value, dict) and any(k in value for k in ('objects',) + RELATION_KEYS)


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


def decode_first_graph(text: str) -> Any:
    """First JSON object in ``text`` with a graph key; else the outermost decodable value; else InvalidGraph.

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
                    raise InvalidGraph('search_limit', f'no graph found before the search limit: starts that do not '
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
        raise InvalidGraph('no_json', 'no JSON object in the output')
    raise InvalidGraph('invalid_json', f'invalid JSON ({first_error.msg} at char {first_error.pos})'
                   if first_error else 'invalid JSON')


