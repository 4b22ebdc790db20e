"""Offline evaluation of saved predictions: ``python -m mmsgg_eval.eval CONFIG PREDICTIONS [options]``.

Inputs (``--format``, default from the file name; the readers are in :mod:`mmsgg_eval.io`):

* ``dump``: the prediction stream written by ``tools/test.py --out`` (:mod:`mmsgg_eval.io.stream`: header,
  one record per sample, closing record; older streams and mmengine ``DumpResults`` lists are read too);
* ``jsonl``: per-image predictions, one JSON object per line (:mod:`mmsgg_eval.io.jsonl`; GT from the dataset);
* ``vlm``: JSONL of raw multimodal-LLM answers (:mod:`mmsgg_eval.io.vlm`), scored by ``VLMSceneGraphMetric``
  (FailureRate, Recall, mRecall, AP@50, ...), or by the config's ``vlm_evaluator`` list when it has one
  (e.g. ``RelCLIPScore`` on the model's own words, configs/relclip/);
* ``legacy``: the legacy Scene-Graph-Benchmark ``eval_results.pytorch`` (:mod:`mmsgg_eval.io.legacy`);
* ``grounding``: a JSON list of ``{sample_idx or img_id, bbox}`` scored by ``GroundingPr``
  (:mod:`mmsgg_eval.io.grounding`; ``--metric-options coord_scale=1000`` for boxes on a 0-1000 canvas).

The metrics are the config's ``test_evaluator`` unless ``--metrics`` names others; an mmengine ``Evaluator``
is built from them and fed the samples in chunks (``Evaluator.offline_evaluate``). The predictions must cover
the dataset of the config exactly once: a sample predicted twice, a truncated stream, or samples without a
prediction make the command fail, naming how many and which samples are missing, unless ``--allow-missing``
is given; then every missing sample is scored as an empty prediction (recall 0, never skipped) and the count
is printed and written to metrics.json (``{prefix}/num_missing_predictions``, the name ``tools/test.py``
writes too). ``metrics.json`` is written by the writer of ``tools/test.py``
(:func:`mmsgg_eval.runner.results.write_run_metrics`: the same keys, per-predicate tables and ``provenance``
included); every metric with a ``report_dir`` writes its report files (``{prefix}.metrics.json``, the
per-predicate long-tail chart, Markdown tables) into ``--work-dir``. No GPU is needed; files are streamed,
never loaded whole (except the legacy format, which is one torch object).

Exit status: 0 on success; 1 on a user error (bad or truncated file, refused pickle, missing samples, invalid
predictions), printed as one message without a traceback (``--debug`` shows it); 2 for bad arguments.
"""
import argparse
import os.path as osp
import pickle
import sys
from typing import Any, Dict, List, Optional

from mmsgg_eval.io.errors import InputFileError
from mmsgg_eval.io.formats import FORMATS, guess_format, open_predictions
from mmsgg_eval.io.samples import CoveredSamples, DatasetSamples

#: Scene-graph metrics: ``--mode`` sets their ``mode``.
SG_METRICS = ('SGRecall', 'SGMeanRecall', 'SGBenchMetric')
#: Metrics ``--protocol`` applies to, with the :func:`~mmsgg_eval.metrics.protocols.resolve_protocol` target
#: that says which protocols each accepts (GroundingPr's own ``protocol`` is set with ``--metric-options``).
PROTOCOL_TARGETS = {'SGRecall': 'scene_graph', 'SGMeanRecall': 'scene_graph', 'SGBenchMetric': 'sgbench',
                    'VLMSceneGraphMetric': 'vlm'}
#: Options of the grounding reader (the other ``--metric-options`` go to the metric).
GROUNDING_READER_OPTIONS = ('bbox_format', 'coord_scale')
#: Exceptions printed as one message by :func:`main` (anything else is a bug and keeps its traceback).
USER_ERRORS = (ValueError, OSError, KeyError, SyntaxError, pickle.UnpicklingError)


def build_dataset(cfg: Any, split_key: str = 'test_dataloader') -> Any:
    """The config's evaluation dataset, annotations only (no pipeline, no images)."""
    from mmsgg_eval.registry import DATASETS, resolve_registered
    loader = cfg.get(split_key) or cfg.get('val_dataloader')
    if loader is None:
        raise ValueError(f'the config has no {split_key}.dataset (nor val_dataloader.dataset)')
    # our datasets by class: DATASETS.build by name imports all of mmdet.datasets (seconds of start-up)
    return DATASETS.build(resolve_registered(DATASETS, dict(loader['dataset'], pipeline=[])))


def metric_type(metric_cfg: dict) -> str:
    """The class name of a metric config's ``type`` (a registry scope such as ``mmdet.`` removed)."""
    kind = metric_cfg.get('type')
    return kind.rsplit('.', 1)[-1] if isinstance(kind, str) else getattr(kind, '__name__', str(kind))


def check_protocol_option(protocol: str, metric_cfgs: List[dict]) -> None:
    """``ValueError`` naming ``--protocol`` when a metric it applies to has no conventions for ``protocol``
    (e.g. ``openpsg`` on ``VLMSceneGraphMetric``, ``sgbench`` on ``SGRecall``), or when it applies to none
    of the metrics (it would change nothing)."""
    from mmsgg_eval.metrics.protocols import resolve_protocol
    kinds = [metric_type(m) for m in metric_cfgs]
    if not any(kind in PROTOCOL_TARGETS for kind in kinds):
        raise ValueError(f'--protocol {protocol} applies to {", ".join(PROTOCOL_TARGETS)}, none of which is '
                         f'evaluated here ({", ".join(kinds)}); a metric\'s own protocol argument is set with '
                         f'--metric-options protocol=NAME (e.g. GroundingPr: exact, mgvlf)')
    for kind in kinds:
        if kind in PROTOCOL_TARGETS:
            try:
                resolve_protocol(protocol, {}, PROTOCOL_TARGETS[kind])
            except ValueError as err:
                raise ValueError(f'--protocol {protocol} does not apply to {kind}: {err}') from None


def metric_cfgs(cfg: Any, names: Optional[List[str]], mode: Optional[str]) -> List[dict]:
    """Metric configs: ``names`` (types or metric config dicts) or the config's test/val evaluator, with ``mode``
    for the scene-graph metrics (:data:`SG_METRICS`)."""
    if names:
        metrics = [dict(type=name) if isinstance(name, str) else dict(name) for name in names]
    else:
        evaluator = cfg.get('test_evaluator') or cfg.get('val_evaluator')
        if evaluator is None:
            raise ValueError('no metric: give --metrics or a config with test_evaluator')
        if isinstance(evaluator, dict) and 'metrics' in evaluator:
            evaluator = evaluator['metrics']
        metrics = [dict(m) for m in (evaluator if isinstance(evaluator, (list, tuple)) else [evaluator])]
    if mode:
        for m in metrics:
            if metric_type(m) in SG_METRICS:
                m['mode'] = mode
    return metrics


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


def evaluate_file(config: str, predictions: str, fmt: str = 'auto', metrics: Optional[List[str]] = None,
                  mode: Optional[str] = None, work_dir: Optional[str] = None, batch_size: int = 64,
                  cfg_options: Optional[dict] = None, unsafe_load: bool = False,
                  progress: bool = True, metric_options: Optional[dict] = None,
                  allow_missing: bool = False, protocol: Optional[str] = None,
                  per_image: Optional[str] = None) -> Dict[str, Any]:
    """Evaluate a predictions file against the dataset of ``config``; returns the metrics dict.

    ``allow_missing``: score dataset samples without a prediction (or cut off by a truncated stream) as empty
    predictions instead of failing with :class:`~mmsgg_eval.io.errors.MissingSamplesError`.
    ``protocol``: named conventions (docs/protocols.md) for the metrics of :data:`PROTOCOL_TARGETS`; it
    replaces the config's, a ``protocol`` in ``metric_options`` replaces it, and a metric that has no
    conventions for it is a ``ValueError`` naming the option. ``per_image``: path of the per-image results
    (``per_image_out`` of the metrics that take it: :func:`mmsgg_eval.metrics.per_image.set_per_image_out`).

    Returns the evaluator's scalar keys; ``WORK_DIR/metrics.json`` adds the tables,
    ``{prefix}/num_missing_predictions`` and ``provenance`` (:func:`mmsgg_eval.runner.results.write_run_metrics`).
    """
    from mmengine.config import Config
    from mmengine.evaluator import Evaluator
    from mmengine.registry import init_default_scope

    import mmsgg_eval  # noqa: F401  (registers the metrics and datasets)
    from mmsgg_eval.metrics.options import positive_int
    from mmsgg_eval.registry import METRICS, resolve_registered
    from mmsgg_eval.runner.results import run_provenance, set_report_dirs, write_run_metrics

    batch_size = positive_int(batch_size, 'batch_size', 'evaluate_file')  # 0 would loop forever in mmengine
    if not osp.isfile(config):
        raise FileNotFoundError(f'config file not found: {config}')
    if not osp.isfile(predictions):
        raise FileNotFoundError(f'predictions file not found: {osp.abspath(predictions)}')
    cfg = Config.fromfile(config)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    init_default_scope(cfg.get('default_scope', 'mmdet'))
    fmt = guess_format(predictions) if fmt == 'auto' else fmt
    if fmt not in FORMATS:
        raise ValueError(f'unknown format {fmt!r}; expected one of {FORMATS}')
    dataset = build_dataset(cfg)
    work_dir = work_dir or cfg.get('work_dir') or osp.join('work_dirs', 'offline')
    options = dict(metric_options or {})
    reader_options = {k: options.pop(k) for k in GROUNDING_READER_OPTIONS if k in options} \
        if fmt == 'grounding' else {}
    if fmt == 'vlm' and not metrics:  # the config's `vlm_evaluator` (e.g. configs/relclip/) when it has one
        metrics = cfg.get('vlm_evaluator') or ['VLMSceneGraphMetric']
        metrics = [metrics] if isinstance(metrics, dict) else list(metrics)
    elif fmt == 'grounding' and not metrics:
        metrics = ['GroundingPr']
    cfgs = metric_cfgs(cfg, metrics, mode)
    if protocol and 'protocol' not in options:
        check_protocol_option(protocol, cfgs)
    for m in cfgs:
        m.update(options)
        if protocol and metric_type(m) in PROTOCOL_TARGETS:
            m['protocol'] = options.get('protocol', protocol)
    if per_image:
        from mmsgg_eval.metrics.per_image import set_per_image_out
        set_per_image_out(cfgs, per_image)
    sg_mode = mode or next((m.get('mode') for m in cfgs if m.get('mode')), 'sgdet')
    evaluator = Evaluator([resolve_registered(METRICS, m) for m in cfgs])  # by class: no mmdet.evaluation
    evaluator.dataset_meta = dataset.metainfo
    set_report_dirs(evaluator.metrics, work_dir)  # as tools/test.py: every metric that writes reports

    samples = open_predictions(fmt, predictions, dataset, sg_mode, unsafe_load, allow_missing, reader_options)
    if progress:
        from mmengine.utils import ProgressBar
        samples.on_sample = ProgressBar(len(samples)).update
    try:
        results = offline_evaluate(evaluator, samples, batch_size)
    except InputFileError:
        raise
    except ValueError as err:  # a metric refused a sample (it names the sample and the field): name the file
        raise InputFileError(predictions, f'invalid prediction: {err}') from err
    finally:
        if progress:
            print(file=sys.stderr)
    provenance = run_provenance(
        'mmsgg_eval.eval', config, evaluator.metrics, dataset, (cfg.get('test_dataloader') or
                                                                 cfg.get('val_dataloader') or {}).get('dataset'),
        predictions=predictions, predictions_format=fmt, work_dir=work_dir,
        options=dict(cfg_options=cfg_options, mode=mode, protocol=protocol, metric_options=metric_options,
                     metrics=metrics, allow_missing=allow_missing, per_image=per_image))
    path, _ = write_run_metrics(results, evaluator.metrics, work_dir, provenance, len(samples.missing))
    missing = f' ({len(samples.missing)} without a prediction, scored as empty predictions)' \
        if samples.missing else ''
    print(f'{len(samples)} samples evaluated{missing}; metrics written to {path}')
    return results


def positive_int_arg(text: str) -> int:
    """argparse ``type=`` of a count option: an integer >= 1, else an error naming the option (exit status 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'must be a positive integer, got {text!r}') from None
    if value < 1:
        raise argparse.ArgumentTypeError(f'must be a positive integer (>= 1), got {value}')
    return value


def _message(err: BaseException) -> str:
    if hasattr(err, 'cli_message'):
        return err.cli_message()
    if isinstance(err, KeyError) and err.args:
        return str(err.args[0])
    return str(err) or type(err).__name__


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser(prog='python -m mmsgg_eval.eval',
                                     description='Evaluate saved scene-graph / grounding predictions offline')
    parser.add_argument('config', help='config with the dataset (test_dataloader) and test_evaluator')
    parser.add_argument('predictions', help='tools/test.py --out stream, JSONL predictions, VLM JSONL, '
                                            'legacy eval_results.pytorch or grounding JSON')
    parser.add_argument('--format', default='auto', choices=('auto',) + FORMATS)
    parser.add_argument('--metrics', nargs='+', help='metric types instead of the config test_evaluator')
    parser.add_argument('--mode', choices=['predcls', 'sgcls', 'sgdet', 'phrdet'],
                        help=f'scene-graph mode of {", ".join(SG_METRICS)}')
    parser.add_argument('--work-dir', help='where metrics.json and the reports go (default work_dirs/offline)')
    parser.add_argument('--batch-size', type=positive_int_arg, default=64, help='samples per process() call')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    parser.add_argument('--metric-options', nargs='+', action=DictAction,
                        help='extra metric arguments, e.g. iou_plus_one=False skip_empty_predictions=False')
    parser.add_argument('--allow-missing', action='store_true',
                        help='evaluate although some dataset samples have no prediction (or the stream is '
                             'truncated): they are scored as empty predictions (recall 0) and counted in '
                             'metrics.json')
    parser.add_argument('--unsafe-load', action='store_true',
                        help='load pickles with the unrestricted unpickler (only for files you trust)')
    parser.add_argument('--no-progress', action='store_true')
    from mmsgg_eval.metrics.protocols import PROTOCOLS
    parser.add_argument('--protocol', choices=list(PROTOCOLS),
                        help=f'named evaluation conventions of {", ".join(PROTOCOL_TARGETS)} (sgb is the '
                             f'default; each metric accepts only some of them, see docs/protocols.md)')
    parser.add_argument('--per-image', metavar='PATH',
                        help='write per-image results (JSON lines: per-image R@K, GT relations with their '
                             'first-hit ranks, top predictions and the GT relations they hit) to PATH')
    parser.add_argument('--debug', action='store_true', help='show the Python traceback of errors')
    args = parser.parse_args(argv)
    try:
        return evaluate_file(args.config, args.predictions, args.format, args.metrics, args.mode, args.work_dir,
                             args.batch_size, args.cfg_options, args.unsafe_load, not args.no_progress,
                             args.metric_options, args.allow_missing, args.protocol, args.per_image)
    except USER_ERRORS as err:
        if args.debug:
            raise
        print(f'{parser.prog}: error: {_message(err)}\n(rerun with --debug for the traceback)', file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == '__main__':
    main()
