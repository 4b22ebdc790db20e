"""Evaluating prediction files offline (:func:`evaluate_file`, the ``python -m mmsgg_eval.eval CONFIG FILES``
path, and :func:`evaluate_grounding_predictions` for grounding in plain Python): the prediction files expanded
(globs, shards), an mmengine ``Evaluator`` built from the metric configs (:mod:`.config`) and fed the samples in
chunks as ``Evaluator.offline_evaluate`` does, the missing / duplicate / shard rules of the samples applied, and
``metrics.json`` written by the writer ``tools/test.py`` uses (:func:`mmsgg_eval.runner.results.write_run_metrics`).
"""
import glob
import os.path as osp
import sys
from typing import Any, Dict, List, Optional, Sequence, Union

from mmsgg_eval.io.errors import InputFileError
from mmsgg_eval.io.formats import FORMATS, guess_format, open_predictions
from mmsgg_eval.io.samples import CoveredSamples, DatasetSamples

from .config import box_matching_without_masks, build_dataset, load_run_config, offline_metric_cfgs

#: Options of the grounding reader (the other ``--metric-options`` go to the metric).
GROUNDING_READER_OPTIONS = ('bbox_format', 'coord_scale')


def expand_prediction_paths(predictions: Union[str, Sequence[str]]) -> List[str]:
    """The prediction files of ``predictions`` (a path, a glob pattern such as ``answers_*.jsonl``, or a list of
    them; patterns expand in sorted order); ``FileNotFoundError`` naming a path or pattern that matches no file."""
    paths: List[str] = []
    for item in [predictions] if isinstance(predictions, str) else list(predictions):
        matches = sorted(glob.glob(item)) if glob.has_magic(item) else [item]
        found = [p for p in matches if osp.isfile(p)]
        if not found:
            raise FileNotFoundError(f'predictions file not found: {osp.abspath(item)}')
        paths.extend(found)
    return paths


def offline_evaluate(evaluator: Any, samples: CoveredSamples, chunk_size: int) -> Dict[str, Any]:
    """``evaluator.offline_evaluate`` over the samples, then check that the input holds nothing more."""
    results = evaluator.offline_evaluate(samples, chunk_size=chunk_size)
    samples.finish()
    return results


def evaluate_grounding_predictions(predictions: Any, dataset: Any, bbox_format: str = 'xyxy',
                                   coord_scale: Optional[float] = None, batch_size: int = 1024,
                                   allow_missing: bool = True, **metric_kwargs: Any) -> Dict[str, float]:
    """Evaluate grounding predictions against a dataset with ``GroundingPr`` (one process).

    Args:
        predictions: path of a JSON predictions file, or its loaded content (format: :mod:`mmsgg_eval.io.grounding`).
        dataset: any object with ``__len__``, ``get_data_info(i)`` (mmdet-style dict with ``img_id``,
            ``instances`` [{'bbox': xyxy pixels, 'ignore_flag'}], ``width``, ``height``) and optionally
            ``metainfo``; e.g. :class:`mmsgg_eval.datasets.RSVGDDataset`.
        bbox_format: 'xyxy' (default) or 'xywh' for the predicted boxes.
        coord_scale: None (boxes in pixels) or S when boxes are on a [0, S] canvas (1 = normalised,
            1000 = the usual VLM canvas): x is scaled by width / S and y by height / S.
        batch_size: samples per ``process()`` call.
        allow_missing: dataset samples without an entry count as IoU 0 (default); False makes them an error.
        **metric_kwargs: ``GroundingPr`` arguments (thresholds, strict, multiple_gt, prefix, ...).

    Returns:
        The metric's dict, e.g. ``{'grounding/Pr@0.5': 81.2, ..., 'grounding/cumIoU': 0.78}``.
    """
    from mmengine.evaluator import Evaluator

    from mmsgg_eval.io.grounding import grounding_gt, iter_grounding_samples
    from mmsgg_eval.metrics import GroundingPr
    from mmsgg_eval.metrics.options import positive_int
    batch_size = positive_int(batch_size, 'batch_size', 'evaluate_grounding_predictions')
    index = DatasetSamples(dataset)
    source = predictions if isinstance(predictions, str) else 'grounding predictions'
    samples = CoveredSamples(iter_grounding_samples(predictions, index, bbox_format, coord_scale, source), index,
                             source, allow_missing=allow_missing, missing_sample=lambda i: grounding_gt(index, i),
                             quiet=True)
    evaluator = Evaluator([GroundingPr(**metric_kwargs)])
    meta = getattr(dataset, 'metainfo', None)
    evaluator.dataset_meta = dict(meta) if meta else {}
    return offline_evaluate(evaluator, samples, batch_size)


def build_evaluator(cfgs: List[dict], dataset: Any, work_dir: str, save_state: Optional[str] = None) -> Any:
    """An mmengine ``Evaluator`` of the metric configs (built by class: no import of mmdet.evaluation), fed the
    dataset's ``metainfo``; report files go to ``work_dir``; ``save_state``: directory of the metrics' states."""
    from mmengine.evaluator import Evaluator

    from mmsgg_eval.registry import METRICS, resolve_registered
    from mmsgg_eval.runner.results import set_report_dirs
    evaluator = Evaluator([resolve_registered(METRICS, m) for m in cfgs])
    evaluator.dataset_meta = dataset.metainfo
    set_report_dirs(evaluator.metrics, work_dir)  # as tools/test.py: every metric that writes reports
    if save_state:
        from mmsgg_eval.metrics.state_paths import set_state_paths
        from mmsgg_eval.runner.results import check_writable
        check_writable(save_state, 'directory of --save-state')  # before anything is evaluated
        set_state_paths(evaluator.metrics, save_state, dataset)
    return evaluator


def run_offline(evaluator: Any, samples: CoveredSamples, batch_size: int, source: str,
                progress: bool) -> Dict[str, Any]:
    """:func:`offline_evaluate` with a progress bar; a metric refusing a sample is an ``InputFileError`` of
    ``source`` (the metric's message names the sample and the field)."""
    if progress:
        from mmengine.utils import ProgressBar
        samples.on_sample = ProgressBar(len(samples)).update
    try:
        return offline_evaluate(evaluator, samples, batch_size)
    except InputFileError:
        raise
    except ValueError as err:
        raise InputFileError(source, f'invalid prediction: {err}') from err
    finally:
        if progress:
            print(file=sys.stderr)


class ShardSamples:
    """The samples of a shard's predictions (``--shard``): a :class:`~mmsgg_eval.io.samples.CoveredSamples`
    read with ``allow_missing`` whose missing samples are left out instead of scored (duplicates are still
    refused); ``missing`` lists the dataset samples of other shards."""

    def __init__(self, covered: CoveredSamples) -> None:
        self.covered = covered
        covered.quiet = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.covered, name)

    def __len__(self) -> int:
        return len(self.covered)

    def __iter__(self):
        from mmsgg_eval.io.samples import MISSING_KEY
        return (s for s in self.covered if not s.get(MISSING_KEY))


def evaluate_file(config: str, predictions: Union[str, Sequence[str]], fmt: str = 'auto',
                  metrics: Optional[List[str]] = None, mode: Optional[str] = None, work_dir: Optional[str] = None,
                  batch_size: int = 64, cfg_options: Optional[dict] = None, unsafe_load: bool = False,
                  progress: bool = True, metric_options: Optional[dict] = None,
                  allow_missing: bool = False, protocol: Optional[str] = None,
                  per_image: Optional[str] = None, save_state: Optional[str] = None,
                  shard: bool = False, bootstrap: Optional[int] = None) -> Dict[str, Any]:
    """Evaluate a predictions file against the dataset of ``config``; returns the metrics dict.

    ``predictions``: a file, a glob pattern or a list of them: several files are shards of one prediction
    set, read in order, that together must cover the dataset once (:func:`expand_prediction_paths`).
    ``allow_missing``: score dataset samples without a prediction (or cut off by a truncated stream) as empty
    predictions instead of failing with :class:`~mmsgg_eval.io.errors.MissingSamplesError`.
    ``protocol``: named conventions (docs/protocols.md) for the metrics of :data:`~.config.PROTOCOL_TARGETS`; it
    replaces the config's, a ``protocol`` in ``metric_options`` replaces it, and a metric that has no
    conventions for it is a ``ValueError`` naming the option. ``per_image``: path of the per-image results
    (``per_image_out`` of the metrics that take it: :func:`mmsgg_eval.metrics.per_image.set_per_image_out`).
    ``save_state``: directory where every metric writes its evaluation state (:mod:`mmsgg_eval.metrics.state`).
    ``shard``: the predictions are one shard of the dataset: only their samples are evaluated (no missing
    sample error; needs ``save_state``); the shards' states are merged by :func:`~.states.evaluate_states`.
    ``bootstrap``: intervals of every key from that many image resamples (``--bootstrap N``,
    :func:`mmsgg_eval.metrics.bootstrap.set_bootstrap`).

    Returns the evaluator's scalar keys; ``WORK_DIR/metrics.json`` adds the tables,
    ``{prefix}/num_missing_predictions`` and ``provenance`` (:func:`mmsgg_eval.runner.results.write_run_metrics`).
    """
    import mmsgg_eval  # noqa: F401  (registers the metrics and datasets)
    from mmsgg_eval.metrics.options import positive_int
    from mmsgg_eval.runner.results import file_fingerprint, run_provenance, write_run_metrics

    batch_size = positive_int(batch_size, 'batch_size', 'evaluate_file')  # 0 would loop forever in mmengine
    if shard and not save_state:
        raise ValueError('--shard evaluates a part of the dataset for merging: give --save-state DIR with it')
    cfg = load_run_config(config, cfg_options)
    paths = expand_prediction_paths(predictions)
    fmt = guess_format(paths[0]) if fmt == 'auto' else fmt
    if fmt not in FORMATS:
        raise ValueError(f'unknown format {fmt!r}; expected one of {FORMATS}')
    dataset = build_dataset(cfg)
    work_dir = work_dir or cfg.get('work_dir') or osp.join('work_dirs', 'offline')
    options = dict(metric_options or {})
    reader_options = {k: options.pop(k) for k in GROUNDING_READER_OPTIONS if k in options} \
        if fmt == 'grounding' else {}
    cfgs = offline_metric_cfgs(cfg, fmt, metrics, mode, options, protocol, per_image)
    if fmt == 'openpsg':  # OpenPSG's conventions unless chosen otherwise
        from mmsgg_eval.io.openpsg import openpsg_metric_defaults
        for note in openpsg_metric_defaults(paths[0], cfgs, protocol, options, unsafe_load):
            print(f'--format openpsg: {note}')
    sg_mode = mode or next((m.get('mode') for m in cfgs if m.get('mode')), 'sgdet')
    switched = box_matching_without_masks(cfgs, fmt, paths, dataset, sg_mode, unsafe_load)
    if switched:
        print(f'{", ".join(switched)}: the predictions carry no segmentation masks, so boxes are matched '
              f'(match=box) instead of the protocol\'s masks; --metric-options match=mask insists on masks',
              file=sys.stderr)
    evaluator = build_evaluator(cfgs, dataset, work_dir, save_state)
    from mmsgg_eval.metrics.bootstrap import set_bootstrap
    set_bootstrap(evaluator.metrics, bootstrap)
    samples = open_predictions(fmt, paths, dataset, sg_mode, unsafe_load, allow_missing or shard, reader_options)
    if shard:
        samples = ShardSamples(samples)
    results = run_offline(evaluator, samples, batch_size, samples.source, progress)
    provenance = run_provenance(
        'mmsgg_eval.eval', config, evaluator.metrics, dataset, (cfg.get('test_dataloader') or
                                                                 cfg.get('val_dataloader') or {}).get('dataset'),
        predictions=paths[0], predictions_format=fmt, work_dir=work_dir,
        options=dict(cfg_options=cfg_options, mode=mode, protocol=protocol, metric_options=metric_options,
                     metrics=metrics, allow_missing=allow_missing, per_image=per_image, save_state=save_state,
                     shard=shard))
    if len(paths) > 1:
        provenance['prediction_files'] = [dict(file_fingerprint(p), format=fmt) for p in paths]
    path, _ = write_run_metrics(results, evaluator.metrics, work_dir, provenance, len(samples.missing))
    if shard:  # the samples of the other shards were not evaluated
        done = f'{len(samples) - len(samples.missing)} samples of the {len(samples)} of the dataset evaluated (shard)'
    else:
        missing = f' ({len(samples.missing)} without a prediction, scored as empty predictions)' \
            if samples.missing else ''
        done = f'{len(samples)} samples evaluated{missing}'
    print(f'{done}; metrics written to {path}')
    return results

