"""Offline evaluation of saved predictions: ``python -m mmsgg_eval.eval CONFIG PREDICTIONS [options]``.

Inputs (``--format``, default from the file name; the readers are in :mod:`mmsgg_eval.io`):

* ``dump``: the prediction stream written by ``tools/test.py --out`` (:mod:`mmsgg_eval.io.stream`: header,
  one record per sample, closing record; older streams and mmengine ``DumpResults`` lists are read too);
* ``jsonl``: per-image predictions, one JSON object per line (:mod:`mmsgg_eval.io.jsonl`; GT from the dataset);
* ``vlm``: JSONL of raw multimodal-LLM answers (:mod:`mmsgg_eval.io.vlm`), scored by ``VLMSceneGraphMetric``
  (FailureRate, Recall, mRecall, AP@50, ...), or by the config's ``vlm_evaluator`` list when it has one
  (e.g. ``RelCLIPScore`` on the model's own words, configs/relclip/);
* ``legacy``: the legacy Scene-Graph-Benchmark ``eval_results.pytorch`` (:mod:`mmsgg_eval.io.legacy`);
* ``openpsg``: OpenPSG's ``tools/test.py --out result.pkl`` (a list of its ``Result`` objects, read without
  importing OpenPSG; :mod:`mmsgg_eval.io.openpsg`), evaluated with ``protocol='openpsg'`` unless another is
  given (``match='box'`` when the results carry no masks);
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

Evaluation states (:mod:`mmsgg_eval.metrics.state`): ``--save-state DIR`` writes every metric's reduced rows
and what they depend on to ``DIR/{prefix}[.{tag}].state``; ``python -m mmsgg_eval.eval --from-state A.state
[B.state ...]`` summarises them again without the predictions (the same keys, reports and metrics.json),
merging the states of disjoint shards of one metric into exactly the result of one run over all of them
(a shard job evaluates only its predictions with ``--shard``). Several prediction files (or a quoted glob)
are read as the shards of one prediction set, with the duplicate / missing rules of one file. See
docs/states.md.

Exit status: 0 on success; 1 on a user error (bad or truncated file, refused pickle, missing samples, invalid
predictions), printed as one message without a traceback (``--debug`` shows it); 2 for bad arguments.
"""
import argparse
import glob
import logging
import os.path as osp
import sys
from typing import Any, Dict, List, Optional, Sequence, Union

from mmsgg_eval.io.errors import InputFileError
from mmsgg_eval.io.formats import FORMATS, guess_format, open_predictions
from mmsgg_eval.io.samples import CoveredSamples, DatasetSamples
from mmsgg_eval.runner.arguments import (USER_ERRORS, add_save_state_argument, check_environment,  # noqa: F401
                                         cli_message, non_negative_int_arg, positive_int_arg)

#: Scene-graph metrics: ``--mode`` sets their ``mode``.
SG_METRICS = ('SGRecall', 'SGMeanRecall', 'SGBenchMetric', 'OIRelationMetric')
#: Metrics ``--protocol`` applies to, with the :func:`~mmsgg_eval.metrics.protocols.resolve_protocol` target
#: that says which protocols each accepts (GroundingPr's own ``protocol`` is set with ``--metric-options``).
PROTOCOL_TARGETS = {'SGRecall': 'scene_graph', 'SGMeanRecall': 'scene_graph', 'SGBenchMetric': 'sgbench',
                    'VLMSceneGraphMetric': 'vlm'}
#: Options of the grounding reader (the other ``--metric-options`` go to the metric).
GROUNDING_READER_OPTIONS = ('bbox_format', 'coord_scale')


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


def config_metrics(cfg: Any) -> List[dict]:
    """The metric configs of the config's test evaluator (else its val evaluator); [] when it has none."""
    evaluator = cfg.get('test_evaluator') or cfg.get('val_evaluator')
    if evaluator is None:
        return []
    if isinstance(evaluator, dict) and 'metrics' in evaluator:
        evaluator = evaluator['metrics']
    return [dict(m) for m in (evaluator if isinstance(evaluator, (list, tuple)) else [evaluator])]


def config_mode(cfg: Any) -> Optional[str]:
    """The scene-graph mode the config evaluates (the ``mode`` of its evaluator's :data:`SG_METRICS`), None when
    it names none; ``ValueError`` when they name several (``--mode`` must choose)."""
    modes = sorted({m['mode'] for m in config_metrics(cfg) if metric_type(m) in SG_METRICS and m.get('mode')})
    if len(modes) > 1:
        raise ValueError(f'--metrics: the config evaluates the scene-graph modes {", ".join(modes)}; give --mode '
                         f'to say which one the metrics named by --metrics evaluate')
    return modes[0] if modes else None


def metric_cfgs(cfg: Any, names: Optional[List[str]], mode: Optional[str]) -> List[dict]:
    """Metric configs: ``names`` (types or metric config dicts) or the config's test/val evaluator, with ``mode``
    for the scene-graph metrics (:data:`SG_METRICS`). Metrics named by type keep the config's mode (an SGDet
    config stays SGDet) unless ``mode`` is given."""
    if names:
        metrics = [dict(type=name) if isinstance(name, str) else dict(name) for name in names]
        if not mode and any(isinstance(name, str) and metric_type(dict(type=name)) in SG_METRICS for name in names):
            own = config_mode(cfg)
            for m, name in zip(metrics, names):
                if own and isinstance(name, str) and metric_type(m) in SG_METRICS:
                    m['mode'] = own
    else:
        metrics = config_metrics(cfg)
        if not metrics:
            raise ValueError('no metric: give --metrics or a config with test_evaluator')
    if mode:
        for m in metrics:
            if metric_type(m) in SG_METRICS:
                m['mode'] = mode
    return metrics


def metric_class(metric_cfg: dict) -> Any:
    """The class of a metric config (None when no registry knows its type)."""
    from mmsgg_eval.registry import METRICS, resolve_registered
    kind = resolve_registered(METRICS, metric_cfg).get('type')
    if isinstance(kind, str):
        try:
            kind = METRICS.get(kind)
        except Exception:  # noqa: BLE001 - an unknown scope or type: its arguments cannot be known
            kind = None
    return kind if isinstance(kind, type) else None


def accepted_arguments(cls: Any) -> set:
    """Names of the constructor arguments of ``cls`` (through ``**kwargs`` to its bases' constructors)."""
    import inspect
    names: set = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get('__init__')
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names.update(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                     and p.name != 'self')
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    return names


def apply_metric_options(cfgs: List[dict], options: Dict[str, Any]) -> None:
    """``--metric-options``, in place: ``key=value`` goes to every metric whose constructor takes ``key`` (e.g.
    ``match=box`` to the scene-graph metrics, not to ``DetectionAP``), ``Type.key=value`` to the metrics of that
    type only. ``ValueError`` (one line, naming the option and the metrics) for an option no metric takes, a type
    not evaluated, or a type that does not take the option."""
    kinds = [metric_type(m) for m in cfgs]
    accepts = [accepted_arguments(cls) if cls is not None else set() for cls in map(metric_class, cfgs)]
    for key, value in options.items():
        kind, dot, name = key.rpartition('.')
        if dot:
            chosen = [i for i, k in enumerate(kinds) if k == kind]
            if not chosen:
                raise ValueError(f'--metric-options {key}: no {kind} is evaluated here (metrics: {", ".join(kinds)})')
            if name not in accepts[chosen[0]]:
                raise ValueError(f'--metric-options {key}: {kind} has no argument {name!r}')
        else:
            chosen = [i for i, taken in enumerate(accepts) if name in taken]
            if not chosen:
                raise ValueError(f'--metric-options {key}: no metric of this run takes it (metrics: '
                                 f'{", ".join(kinds)})')
        for i in chosen:
            cfgs[i][name] = value


def box_matching_without_masks(cfgs: List[dict], fmt: str, paths: Sequence[str], dataset: Any, mode: str,
                               unsafe: bool) -> List[str]:
    """Scene-graph metrics whose protocol matches masks by default (``openpsg``) and that were given no ``match``
    match boxes (``match='box'``, in place) when the data has no masks (:func:`data_has_masks`); returns the
    metric types switched (the caller says so)."""
    from mmsgg_eval.metrics.protocols import resolve_protocol
    candidates = []
    for m in cfgs:
        if PROTOCOL_TARGETS.get(metric_type(m)) != 'scene_graph' or 'match' in m or not m.get('protocol'):
            continue
        try:
            default = resolve_protocol(m['protocol'], {}, 'scene_graph').settings.get('match')
        except ValueError:
            continue  # the metric names the bad protocol itself
        if default == 'mask':
            candidates.append(m)
    if not candidates or data_has_masks(fmt, paths, dataset, candidates[0].get('mode') or mode, unsafe):
        return []
    for m in candidates:
        m['match'] = 'box'
    return [f'{metric_type(m)} (protocol {m["protocol"]})' for m in candidates]


def data_has_masks(fmt: str, paths: Sequence[str], dataset: Any, mode: str, unsafe: bool) -> bool:
    """Whether the samples of the predictions carry the masks mask matching needs (``gt_instances.masks``, and
    ``pred_instances.masks`` in SGDet / PhrDet), judged on the first sample: only a ``tools/test.py --out``
    stream can (the other formats take their GT boxes from the dataset's annotations)."""
    if fmt != 'dump':
        return False
    from mmsgg_eval.structures import get_field
    samples = open_predictions(fmt, paths[:1], dataset, mode, unsafe, allow_missing=True)
    for sample in samples:
        needed = ['gt_instances'] + (['pred_instances'] if mode in ('sgdet', 'phrdet') else [])
        return all(get_field(get_field(sample, part), 'masks') is not None for part in needed)
    return False


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


def load_run_config(config: str, cfg_options: Optional[dict] = None) -> Any:
    """The config file with ``cfg_options`` merged, its default scope initialised."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    if not osp.isfile(config):
        raise FileNotFoundError(f'config file not found: {config}')
    cfg = Config.fromfile(config)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    init_default_scope(cfg.get('default_scope', 'mmdet'))
    return cfg


def offline_metric_cfgs(cfg: Any, fmt: str, metrics: Optional[List[Any]], mode: Optional[str],
                        options: dict, protocol: Optional[str], per_image: Optional[str]) -> List[dict]:
    """The metric configs of an offline run: ``metrics`` or the format's defaults (VLM answers: the config's
    ``vlm_evaluator`` or ``VLMSceneGraphMetric``; grounding: ``GroundingPr``) or the config's evaluator, with
    ``--mode``, ``--metric-options`` (``options``), ``--protocol`` and ``--per-image`` applied."""
    if fmt == 'vlm' and not metrics:  # the config's `vlm_evaluator` (e.g. configs/relclip/) when it has one
        metrics = cfg.get('vlm_evaluator') or ['VLMSceneGraphMetric']
        metrics = [metrics] if isinstance(metrics, dict) else list(metrics)
    elif fmt == 'grounding' and not metrics:
        metrics = ['GroundingPr']
    cfgs = metric_cfgs(cfg, metrics, mode)
    if protocol and 'protocol' not in options:
        check_protocol_option(protocol, cfgs)
    apply_metric_options(cfgs, options)
    for m in cfgs:
        if protocol and metric_type(m) in PROTOCOL_TARGETS:
            m['protocol'] = options.get('protocol', protocol)
    if per_image:
        from mmsgg_eval.metrics.per_image import set_per_image_out
        set_per_image_out(cfgs, per_image)
    return cfgs


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
        from mmsgg_eval.metrics.state import set_state_paths
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
    ``protocol``: named conventions (docs/protocols.md) for the metrics of :data:`PROTOCOL_TARGETS`; it
    replaces the config's, a ``protocol`` in ``metric_options`` replaces it, and a metric that has no
    conventions for it is a ``ValueError`` naming the option. ``per_image``: path of the per-image results
    (``per_image_out`` of the metrics that take it: :func:`mmsgg_eval.metrics.per_image.set_per_image_out`).
    ``save_state``: directory where every metric writes its evaluation state (:mod:`mmsgg_eval.metrics.state`).
    ``shard``: the predictions are one shard of the dataset: only their samples are evaluated (no missing
    sample error; needs ``save_state``); the shards' states are merged by :func:`evaluate_states`.
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


def state_paths(items: Sequence[str]) -> List[str]:
    """State files of ``items``: files, directories (their ``*.state`` files) or glob patterns matching either
    (``'job_*/states'`` as ``'job_*/states/*.state'``), in order; ``FileNotFoundError`` naming an item that
    gives no state."""
    from mmsgg_eval.metrics.state import STATE_SUFFIX
    paths: List[str] = []
    for item in items:
        matches = sorted(glob.glob(item)) if glob.has_magic(item) else [item]
        found: List[str] = []
        for match in matches:
            found += sorted(glob.glob(osp.join(glob.escape(match), '*' + STATE_SUFFIX))) if osp.isdir(match) \
                else [match]
        if not found:
            where = f'no evaluation state at {osp.abspath(item)}'
            raise FileNotFoundError(where + (' (a directory without *.state files)' if osp.isdir(item) else ''))
        paths.extend(found)
    return paths


#: ``--allow-missing`` with ``--from-state``: the option means "score missing samples as empty predictions",
#: which a state cannot do (it holds no rows of the samples it lacks).
ALLOW_MISSING_WITH_STATES = ('--allow-missing scores samples without a prediction as empty predictions, which '
                             'evaluation states cannot do (they hold no rows of the samples they lack); '
                             '--covered-only summarises the samples the states cover, alone')


def evaluate_states(states: Sequence[str], work_dir: Optional[str] = None, covered_only: bool = False,
                    save_state: Optional[str] = None, bootstrap: Optional[int] = None,
                    allow_missing: bool = False) -> Dict[str, Any]:
    """Summarise saved evaluation states again, without the predictions (``--from-state``).

    States of one metric (same type and prefix) are shards: they are merged
    (:func:`~mmsgg_eval.metrics.state.merge_states`: overlapping samples, different settings, protocols or GT
    are refused, naming the difference); each merged metric then runs its ``evaluate()`` on the rows, in the
    order of the original evaluator, writing the same reports into ``work_dir`` (default
    ``work_dirs/offline``) and the same ``metrics.json`` (with ``provenance`` naming the states). Dataset
    samples in no state are a :class:`~mmsgg_eval.io.errors.MissingSamplesError`; with ``covered_only``
    (``--covered-only``) the covered samples are summarised alone (a warning names how many are absent).
    ``allow_missing`` (scoring missing samples as empty predictions, as for prediction files) is refused
    with a ValueError pointing to ``covered_only``. ``save_state``: a directory where the merged states are
    written. Every output location (``work_dir``, ``save_state``, the metrics' files) is checked before any
    metric is summarised. Output arguments recorded in a state are never used
    (:meth:`~mmsgg_eval.metrics.state.EvaluationState.build_metric`)."""
    if allow_missing:
        raise ValueError(ALLOW_MISSING_WITH_STATES)
    from mmengine.logging import print_log

    from mmsgg_eval.io.errors import MissingSamplesError
    from mmsgg_eval.metrics.state import evaluation_order, evaluate_state, load_state, merge_states, \
        missing_samples, shared_objects
    from mmsgg_eval.runner.results import file_fingerprint, run_provenance, write_run_metrics
    from mmsgg_eval.runner.results import check_writable
    paths = state_paths(states)
    work_dir = work_dir or osp.join('work_dirs', 'offline')
    check_writable(work_dir, 'work dir (--work-dir)')  # every output location before any work
    if save_state:
        check_writable(save_state, 'directory of --save-state')
    groups: Dict[Any, list] = {}
    for path in paths:
        state = load_state(path)
        groups.setdefault(state.identity(), []).append(state)
    merged = shared_objects(evaluation_order([merge_states(g) for g in groups.values()]))
    for state in merged:
        missing = missing_samples(state)
        if missing and not covered_only:
            raise MissingSamplesError(state.where, missing, state.dataset['num_samples'],
                                      remedy='pass --covered-only (covered_only=True) to summarise the samples '
                                             'the states cover, alone')
        if missing:
            print_log(f'{state.name}: {len(missing)} of the {state.dataset["num_samples"]} dataset samples are in '
                      f'no state (first sample_idx: {missing[:10]}); --covered-only: the other samples are '
                      f'summarised alone', logger='current', level=logging.WARNING)
    results: Dict[str, Any] = {}
    metrics = []
    for state in merged:
        target = None if not save_state else osp.join(save_state, osp.basename(state.sources[0]))
        metrics.append(state.build_metric(report_dir=work_dir, save_state=target, bootstrap=bootstrap))
    for metric in metrics:  # the metrics' own files (names claimed, locations checked) before any summary
        metric.check_outputs()
    for state, metric in zip(merged, metrics):
        _, keys = evaluate_state(state, metric=metric)
        results.update(keys)
    provenance = run_provenance('mmsgg_eval.eval --from-state', '', metrics, work_dir=work_dir,
                                options=dict(covered_only=covered_only, save_state=save_state))
    provenance.update(config=None, dataset=dict(merged[0].dataset) if merged else None,
                      states=[file_fingerprint(p) for p in paths])
    path, _ = write_run_metrics(results, metrics, work_dir, provenance)
    print(f'{len(paths)} evaluation states summarised; metrics written to {path}')
    return results


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser(prog='python -m mmsgg_eval.eval',
                                     description='Evaluate saved scene-graph / grounding predictions offline')
    parser.add_argument('config', nargs='?', help='config with the dataset (test_dataloader) and test_evaluator')
    parser.add_argument('predictions', nargs='*',
                        help='tools/test.py --out stream, JSONL predictions, VLM JSONL, legacy eval_results.pytorch, '
                             'OpenPSG result.pkl (--format openpsg) or grounding JSON; several files (or a quoted '
                             'glob, e.g. "answers_*.jsonl") are shards that together cover the dataset once')
    parser.add_argument('--from-state', nargs='+', metavar='STATE',
                        help='summarise saved evaluation states (files, globs or directories of *.state) instead '
                             'of predictions: shards of one metric are merged; no config is needed')
    add_save_state_argument(parser)
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
                        help='predictions: evaluate although some dataset samples have no prediction (or the '
                             'stream is truncated): they are scored as empty predictions (recall 0) and counted '
                             'in metrics.json (not with --from-state: see --covered-only)')
    parser.add_argument('--covered-only', action='store_true',
                        help='--from-state: summarise the samples the states cover, alone, although some dataset '
                             'samples are in no state (a warning says how many)')
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
    parser.add_argument('--shard', action='store_true',
                        help='the predictions are one shard of the dataset: evaluate only their samples and save '
                             'the state (--save-state) for merging with --from-state')
    parser.add_argument('--bootstrap', type=positive_int_arg, metavar='N',
                        help='95%% bootstrap interval of every key from N resamples of the images (reports, '
                             'tables, metrics.json; docs/metrics.md)')
    parser.add_argument('--debug', action='store_true', help='show the Python traceback of errors')
    args = parser.parse_args(argv)
    if args.from_state and (args.config or args.predictions):
        parser.error('--from-state summarises saved states: give no config or predictions with it')
    if not args.from_state and not (args.config and args.predictions):
        parser.error('give a config and predictions file(s), or --from-state STATE [STATE ...]')
    if args.covered_only and not args.from_state:
        parser.error('--covered-only applies to --from-state; prediction files take --allow-missing')
    try:
        check_environment()
        if args.from_state:
            return evaluate_states(args.from_state, args.work_dir, args.covered_only, args.save_state,
                                   args.bootstrap, allow_missing=args.allow_missing)
        return evaluate_file(args.config, args.predictions, fmt=args.format, metrics=args.metrics, mode=args.mode,
                             work_dir=args.work_dir, batch_size=args.batch_size, cfg_options=args.cfg_options,
                             unsafe_load=args.unsafe_load, progress=not args.no_progress,
                             metric_options=args.metric_options, allow_missing=args.allow_missing,
                             protocol=args.protocol, per_image=args.per_image, save_state=args.save_state,
                             shard=args.shard, bootstrap=args.bootstrap)
    except USER_ERRORS as err:
        if args.debug:
            raise
        print(f'{parser.prog}: error: {cli_message(err)}\n(rerun with --debug for the traceback)', file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == '__main__':
    main()
