"""Every offline predictions format behind one call: :func:`open_predictions` gives the data samples of a file
that cover a dataset (:class:`~mmsgg_eval.io.samples.CoveredSamples`), ready for an evaluator.

Formats: ``dump`` (the prediction stream, :mod:`~mmsgg_eval.io.stream`), ``jsonl``
(:mod:`~mmsgg_eval.io.jsonl`, GT from the dataset), ``vlm`` (answers file, :mod:`~mmsgg_eval.io.vlm`, GT from
the dataset), ``legacy`` (:mod:`~mmsgg_eval.io.legacy`, GT from the dump, which defines the evaluated images)
``grounding`` (:mod:`~mmsgg_eval.io.grounding`, GT from the dataset) and ``openpsg`` (OpenPSG's
``tools/test.py --out result.pkl``, :mod:`~mmsgg_eval.io.openpsg`, GT from the dataset).
"""
import itertools
import logging
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple, Union

from .errors import InputFileError
from .samples import CoveredSamples, DatasetSamples, Located

FORMATS = ('dump', 'jsonl', 'vlm', 'legacy', 'grounding', 'openpsg')


def guess_format(path: str) -> str:
    """Format from the file name: ``.jsonl`` / ``.json`` -> jsonl, ``.pytorch`` / ``.pth`` / ``.pt`` -> legacy,
    anything else -> dump (the VLM and grounding formats are named explicitly)."""
    name = path.lower()
    if name.endswith('.jsonl') or name.endswith('.json'):
        return 'jsonl'
    if name.endswith('.pytorch') or name.endswith('.pth') or name.endswith('.pt'):
        return 'legacy'
    return 'dump'


def _dump_samples(path: str, dataset: DatasetSamples, unsafe: bool, allow_missing: bool) -> Iterator[Located]:
    from .stream import PredictionStream
    stream = PredictionStream(path, unsafe=unsafe, allow_truncated=allow_missing)
    checked, hint = False, ''
    for index, record in stream:
        if not checked and stream.header is not None:
            written_for = stream.header.get('dataset_length')
            if written_for is not None and written_for != len(dataset):
                raise InputFileError(path, f'was written for a dataset of {written_for} samples, the dataset of '
                                           f'the config has {len(dataset)}: wrong config or split?')
            if stream.header.get('config'):
                hint = f' The stream was written with the config {stream.header["config"]}'
        checked = True
        where = f'{path} record #{index}'
        dataset.check_identity(where, record, hint)  # same length is not enough: the same images
        yield where, record


def _jsonl_samples(path: str, dataset: DatasetSamples) -> Iterator[Located]:
    from .jsonl import iter_jsonl
    for where, prediction in iter_jsonl(path):
        idx = dataset.resolve(where, prediction)
        sample = dataset.gt(idx)
        prediction.pop('img_id', None)  # the dataset's identity is kept (resolve checked that they agree)
        sample.update(prediction)
        sample['sample_idx'] = idx
        yield where, sample


def _vlm_samples(path: str, dataset: DatasetSamples) -> Iterator[Located]:
    from .vlm import iter_vlm_answers
    for where, identity, text in iter_vlm_answers(path):
        idx = dataset.resolve(where, identity)
        yield where, dict(dataset.gt(idx), pred_text=text)


def _legacy_samples(path: str, dataset: DatasetSamples, mode: str, unsafe: bool) -> Tuple[Iterator[Located], int]:
    """Samples of a legacy dump and their number: the dump holds its own GT and defines the evaluated images."""
    from mmengine.logging import print_log

    from .legacy import iter_legacy_samples, legacy_records, load_legacy_results
    obj = load_legacy_results(path, unsafe=unsafe)
    size = len(legacy_records(obj)[0])
    if size != len(dataset):
        print_log(f'{path}: the legacy dump holds {size} images, the dataset of the config {len(dataset)}; the '
                  f'images of the dump are evaluated with its own GT (the config gives the vocabulary)',
                  logger='current', level=logging.WARNING)
    located = ((f'{path} prediction #{s["sample_idx"]}', s) for s in iter_legacy_samples(obj, mode=mode, source=path))
    return located, size


def _read(fmt: str, path: str, dataset: DatasetSamples, mode: str, unsafe: bool, allow_missing: bool,
          reader_options: Optional[dict]
          ) -> Tuple[Iterator[Located], Optional[Callable[[int], Dict[str, Any]]], Optional[int]]:
    """(located samples, missing-sample builder (None: the default), number to cover (None: dataset length))."""
    if fmt == 'dump':
        return _dump_samples(path, dataset, unsafe, allow_missing), None, None
    if fmt == 'jsonl':
        return _jsonl_samples(path, dataset), None, None
    if fmt == 'vlm':
        return _vlm_samples(path, dataset), lambda idx: dict(dataset.gt(idx), pred_text=None), None
    if fmt == 'legacy':
        located, size = _legacy_samples(path, dataset, mode, unsafe)
        return located, None, size
    if fmt == 'openpsg':
        from .openpsg import iter_openpsg_samples
        return iter_openpsg_samples(path, dataset, mode, unsafe), None, None
    if fmt == 'grounding':
        from .grounding import grounding_gt, iter_grounding_samples
        return (iter_grounding_samples(path, dataset, **(reader_options or {})),
                lambda idx: grounding_gt(dataset, idx), None)
    raise ValueError(f'unknown format {fmt!r}; expected one of {FORMATS}')


def open_predictions(fmt: str, path: Union[str, Sequence[str]], dataset: Any, mode: str = 'sgdet',
                     unsafe: bool = False, allow_missing: bool = False, reader_options: Optional[dict] = None,
                     on_sample: Optional[Callable[[], None]] = None) -> CoveredSamples:
    """The data samples of predictions file ``path`` in format ``fmt`` (``'auto'``: from the file name),
    covering ``dataset`` (a dataset or :class:`~mmsgg_eval.io.samples.DatasetSamples`). A list of paths is
    read as shards of one prediction set, in order: together they cover the dataset once (a sample in two
    files is an error naming both places); ``fmt='auto'`` then takes the format of the first file.

    ``mode``: the scene-graph mode of legacy dumps; ``unsafe``: unrestricted unpickling (trusted files only);
    ``allow_missing``: samples without a prediction (or cut off a truncated stream) become empty predictions
    marked ``prediction_missing`` instead of an error; ``reader_options``: ``bbox_format`` / ``coord_scale``
    of the grounding reader; ``on_sample``: called per sample (progress). Nothing is read before iterating,
    except a legacy dump (one torch object).
    """
    paths = [path] if isinstance(path, str) else list(path)
    fmt = guess_format(paths[0]) if fmt == 'auto' else fmt
    if fmt == 'legacy' and len(paths) > 1:
        raise ValueError('legacy dumps hold their own GT and image list: give one legacy file, not several')
    if fmt == 'openpsg' and len(paths) > 1:
        raise ValueError('an OpenPSG result.pkl holds the whole test split by position: give one file, not several')
    index = dataset if isinstance(dataset, DatasetSamples) else DatasetSamples(dataset)
    reads = [_read(fmt, p, index, mode, unsafe, allow_missing, reader_options) for p in paths]
    located = itertools.chain.from_iterable(r[0] for r in reads)
    source = paths[0] if len(paths) == 1 else f'{len(paths)} prediction files ({", ".join(paths)})'
    return CoveredSamples(located, index, source, allow_missing, reads[0][1], on_sample=on_sample, size=reads[0][2])
