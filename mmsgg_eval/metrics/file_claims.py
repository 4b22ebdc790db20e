"""The names of the files the metrics of a run write (:class:`FileClaims`): each name is claimed by one live
metric, so that no metric overwrites another's report, ``outfile_prefix``, per-image or state file; a name
taken is numbered (:func:`file_stem_candidates`) and its ending kept (:func:`split_ending`).
"""
import itertools
import os
import weakref
from typing import Any, Dict, Hashable, Iterable, Iterator, Optional, Tuple


class FileClaims:
    """Which live metric writes which output name, so that no metric of a run overwrites another's files.

    Every file a metric writes is named through here: report files (``report_dir``), the ``outfile_prefix``
    file, per-image records (``per_image_out``) and states (``save_state``); the charts are report files. A
    name is ``(kind, directory or outfile prefix, stem)``. A metric takes the first candidate stem that no
    OTHER live metric fed the same ``dataset_meta`` object (mmengine's ``Evaluator`` gives its metrics one) has
    taken, unless both claim it for equal, not-None ``content`` (the very same lines: e.g. the per-image file
    of SGRecall and SGMeanRecall with equal settings, written once); a metric evaluated again (the next
    validation epoch) keeps its names and overwrites its own files. Members of a compute group with equal
    summaries share their report files before claiming anything (:meth:`ComputeGroup.written_reports`).
    """

    _owners: Dict[Tuple[str, str, str], Tuple['weakref.ref', int, Optional[Hashable]]] = {}

    @classmethod
    def claim(cls, kind: str, place: str, candidates: Iterable[str], metric: Any,
              content: Optional[Hashable] = None) -> str:
        meta = id(metric.dataset_meta) if metric.dataset_meta is not None else 0
        for stem in candidates:
            key = (kind, place, stem)
            owner = cls._owners.get(key)
            holder = None if owner is None else owner[0]()
            if holder is None or holder is metric or owner[1] != meta:
                cls._owners[key] = (weakref.ref(metric), meta, content)
                return stem
            if content is not None and owner[2] == content:
                return stem  # the same lines: one file
        raise RuntimeError('no free file name')  # pragma: no cover - the candidates never end


#: File name endings kept at the end when a claimed file path is renamed (longest first).
_ENDINGS = ('.metrics.json', '.jsonl', '.json', '.state', '.csv', '.txt')


def split_ending(name: str) -> Tuple[str, str]:
    """``('per_image', '.jsonl')`` of ``per_image.jsonl``: the known ending (else ``os.path.splitext``)."""
    for ending in _ENDINGS:
        if name.endswith(ending) and len(name) > len(ending):
            return name[:-len(ending)], ending
    return os.path.splitext(name)


def file_stem_candidates(base: str, tagged: str) -> Iterator[str]:
    """Stems tried in turn for a metric's files: ``base``, ``tagged`` (``{prefix}.{file_tag}``), then
    ``tagged.2``, ``tagged.3``, ... (generated lazily: the first free one ends the search)."""
    yield base
    if tagged != base:
        yield tagged
    yield from (f'{tagged}.{n}' for n in itertools.count(2))

