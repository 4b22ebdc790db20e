"""Readers and writers of saved data: files in, data-sample dicts out.

Modules (each importable alone; the package imports nothing above it: no metric, no runner):

* :mod:`~mmsgg_eval.io.formats`: :func:`~mmsgg_eval.io.formats.open_predictions`, every format below behind
  one call, giving the data samples of a file that cover a dataset;
* :mod:`~mmsgg_eval.io.stream`: the prediction stream of ``tools/test.py --out`` (header, one record per
  sample, closing record) with :class:`~mmsgg_eval.io.stream.StreamWriter` and
  :class:`~mmsgg_eval.io.stream.PredictionStream`;
* :mod:`~mmsgg_eval.io.jsonl`: JSONL predictions (GT from the dataset);
* :mod:`~mmsgg_eval.io.vlm`: multimodal-LLM answers (JSONL) and the JSON scene-graph parser;
* :mod:`~mmsgg_eval.io.legacy`: legacy Scene-Graph-Benchmark ``eval_results.pytorch`` dumps;
* :mod:`~mmsgg_eval.io.grounding`: grounding predictions (a JSON list of boxes);
* :mod:`~mmsgg_eval.io.samples`: GT samples from a dataset, identity resolution and dataset coverage, for all
  formats;
* :mod:`~mmsgg_eval.io.pickles`: the restricted unpickler; :mod:`~mmsgg_eval.io.errors`: the error types
  (every message names the file, line or record, sample and field);
* :mod:`~mmsgg_eval.io.readahead`: a file's SHA-256 (for ``metrics.json``'s provenance) taken while the stream
  is read, by the reader or by a hashing process beside it that runs :mod:`~mmsgg_eval.io.filehash` (standard
  library only); records read ahead by a thread.
"""
from .errors import InputFileError, MissingSamplesError, TruncatedStreamError, UnsafePickleError

__all__ = ['InputFileError', 'MissingSamplesError', 'TruncatedStreamError', 'UnsafePickleError']
