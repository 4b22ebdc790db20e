"""The metric configs of an offline run: the config file loaded (its default scope set) and its evaluation
dataset built without images, the metric configs taken from ``--metrics`` or the config's evaluator, and the
command line's ``--mode``, ``--protocol``, ``--metric-options`` and ``--per-image`` applied to them, checked by
name (an option no metric takes, a protocol a metric has no conventions for, and a mode the config leaves open
are one-line errors); scene-graph metrics whose protocol matches masks switch to boxes when the data has none.
"""
import os.path as osp
from typing import Any, Dict, List, Optional, Sequence

from mmsgg_eval.io.formats import open_predictions

#: Scene-graph metrics: ``--mode`` sets their ``mode``.
SG_METRICS = ('SGRecall', 'SGMeanRecall', 'SGBenchMetric', 'OIRelationMetric')
#: Metrics ``--protocol`` applies to, with the :func:`~mmsgg_eval.metrics.protocols.resolve_protocol` target
#: that says which protocols each accepts (GroundingPr's own ``protocol`` is set with ``--metric-options``).
PROTOCOL_TARGETS = {'SGRecall': 'scene_graph', 'SGMeanRecall': 'scene_graph', 'SGBenchMetric': 'sgbench',
                    'VLMSceneGraphMetric': 'vlm'}


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

