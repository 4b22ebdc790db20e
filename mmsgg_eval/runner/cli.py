"""``tools/test.py``: evaluate a model with MMEngine's Runner and the mmsgg_eval metrics, as mmdet's test.py.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out preds.pkl] [--save-state DIR]
                         [--cfg-options k=v ...]
    bash tools/dist_test.sh CONFIG CHECKPOINT GPUS   # torchrun; gloo on CPU-only machines

Order of a run: every output location (work dir, ``--out`` directory, the metrics' report locations) is
checked for writability first; then the process group is set up (configured backend and
``env_cfg.dist_cfg.timeout``); the Runner evaluates and logs the metrics; the main rank writes
``WORK_DIR/metrics.json`` (all keys, per-predicate recalls included, and the run's ``provenance``:
:func:`~mmsgg_eval.runner.results.write_run_metrics`, the writer the offline CLI uses too); the ranks then
meet at a barrier and the process group is destroyed. A stalled or dead rank ends the run with a
``DistributedEvaluationError`` within the timeout.

Errors: user errors (missing files, unwritable outputs, a metric refusing a sample, failed ranks) are printed
as one line, ``tools/test.py: error: ...`` and ``(rerun with --debug for the traceback)``, exit status 1, as
the offline CLI does; ``--debug`` shows the traceback.
"""
import argparse
import os
import os.path as osp
import sys
from typing import Any, Dict, List, Optional

from .launch import DistributedEvaluationError, distributed_evaluation
from .results import OutputNotWritableError, check_writable, run_provenance, set_report_dirs, write_run_metrics

_OUTPUT_ATTRIBUTES = (('report_dir', False), ('outfile_prefix', True), ('out_file_path', True),
                      ('per_image_out', True), ('save_state', True))
"""Metric attributes naming where the metric writes: (attribute, is a file path or prefix)."""
PROG = 'tools/test.py'


def add_common_arguments(parser: argparse.ArgumentParser, cfg_options_example: str) -> None:
    """``--work-dir``, ``--cfg-options``, ``--launcher`` and ``--local-rank``, as mmdet's tools have them."""
    from mmengine.config import DictAction
    parser.add_argument('--work-dir', help='directory for logs, checkpoints and metrics.json')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help=f'override config settings, e.g. {cfg_options_example}')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'], default='none',
                        help='job launcher')
    # torch.distributed.launch passes --local-rank (newer) or --local_rank (older)
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)


def parse_common(parser: argparse.ArgumentParser, argv: Optional[List[str]]) -> argparse.Namespace:
    """Parse ``argv``; sets ``LOCAL_RANK`` from ``--local-rank`` when the launcher did not."""
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def load_config(args: argparse.Namespace) -> Any:
    """The config of ``args.config`` with ``--launcher``, ``--cfg-options`` and the work dir applied
    (``--work-dir``, else the config's, else ``work_dirs/<config name>``)."""
    from mmengine.config import Config
    if not osp.isfile(args.config):
        raise SystemExit(f'config file not found: {args.config}')
    cfg = Config.fromfile(args.config)
    cfg.launcher = args.launcher
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs', osp.splitext(osp.basename(args.config))[0])
    return cfg


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Evaluate a scene-graph / grounding model (mmsgg_eval)')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--out', type=str, help='dump predictions to a pickle file for offline evaluation '
                                                '(tools/eval_offline.py)')
    add_common_arguments(parser, 'env_cfg.dist_cfg.backend=gloo env_cfg.dist_cfg.timeout=600 (seconds a '
                                 'collective may wait for a rank)')
    from .arguments import add_bootstrap_argument, add_per_image_argument, add_save_state_argument
    add_per_image_argument(parser)
    parser.add_argument('--show-dir', metavar='DIR',
                        help='draw one picture per image (GT panel | prediction panel, hits and misses) into '
                             'DIR, relative to WORK_DIR/TIMESTAMP as mmdet\'s --show-dir '
                             '(SceneGraphLocalVisualizer through DetVisualizationHook)')
    add_save_state_argument(parser)
    add_bootstrap_argument(parser)
    parser.add_argument('--debug', action='store_true', help='show the Python traceback of errors')
    return parse_common(parser, argv)


def check_metric_outputs(metrics: List[Any]) -> None:
    """Check, before evaluating, that every location a metric writes to is writable."""
    for metric in metrics:
        for attribute, is_file in _OUTPUT_ATTRIBUTES:
            value = getattr(metric, attribute, None)
            if isinstance(value, str) and value:
                directory = osp.dirname(osp.abspath(value)) if is_file else value
                check_writable(directory, f'{type(metric).__name__}.{attribute} location')


def set_config_per_image(cfg: Any, path: str) -> None:
    """``--per-image PATH``: ``per_image_out`` on the config's test-evaluator metrics that take it
    (:func:`mmsgg_eval.metrics.per_image.set_per_image_out`)."""
    from mmsgg_eval.metrics.per_image import set_per_image_out
    evaluator = cfg.get('test_evaluator')
    if evaluator is None:
        raise ValueError('--per-image: the config has no test_evaluator')
    metrics = evaluator.get('metrics', None) if isinstance(evaluator, dict) and 'type' in evaluator and \
        evaluator.get('type') == 'Evaluator' else evaluator
    metrics = [metrics] if isinstance(metrics, dict) else list(metrics)
    set_per_image_out(metrics, path)
    if isinstance(evaluator, dict) and evaluator.get('type') == 'Evaluator':
        evaluator['metrics'] = metrics
    else:
        cfg.test_evaluator = metrics if not isinstance(evaluator, dict) else metrics[0]


def trigger_visualization_hook(cfg: Any, show_dir: str) -> None:
    """``--show-dir DIR``, as mmdet's ``tools/test.py``: the ``visualization`` hook
    (``DetVisualizationHook``, added when the config has none) draws every test image into ``DIR`` (relative
    to ``WORK_DIR/TIMESTAMP``) with the config's visualizer, which becomes ``SceneGraphLocalVisualizer`` unless
    the config names one of its own kind."""
    hooks = cfg.setdefault('default_hooks', {})
    hook = dict(hooks.get('visualization') or {'type': 'DetVisualizationHook'})
    hook.update(draw=True, test_out_dir=show_dir)
    hooks['visualization'] = hook
    visualizer = dict(cfg.get('visualizer') or {})
    if 'SceneGraph' not in str(visualizer.get('type', '')):
        visualizer = dict(type='SceneGraphLocalVisualizer', vis_backends=visualizer.get(
            'vis_backends', [dict(type='LocalVisBackend')]), name=visualizer.get('name', 'visualizer'))
    cfg.visualizer = visualizer


def user_error_line(prog: str, err: BaseException) -> str:
    """The one-line report of a user error, as both command lines print it (the project's own error
    classes are named, e.g. ``OutputNotWritableError: ...``)."""
    from .arguments import cli_message
    text = cli_message(err)
    if isinstance(err, (OutputNotWritableError, DistributedEvaluationError)):
        text = f'{type(err).__name__}: {text}'
    return f'{prog}: error: {text}\n(rerun with --debug for the traceback)'


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    """Run ``tools/test.py``; user errors (missing files, unwritable outputs, invalid predictions, failed
    ranks) exit with status 1 and one message instead of a traceback (``--debug``: the traceback)."""
    from .arguments import USER_ERRORS
    args = parse_args(argv)
    # mmengine 0.10.7 loads checkpoints with torch.load's default, weights_only=True since torch 2.6, which
    # refuses mmengine's own training checkpoints (message hub, numpy metadata). The checkpoint is the one
    # the user names on the command line, loaded as mmdet's tools did before torch 2.6.
    os.environ.setdefault('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD', '1')
    try:
        return _run(args)
    except USER_ERRORS + (DistributedEvaluationError,) as err:
        if args.debug:
            raise
        print(user_error_line(PROG, err), file=sys.stderr, flush=True)
        raise SystemExit(1) from None


def _run(args: argparse.Namespace) -> Dict[str, Any]:
    from mmengine.dist import is_main_process
    from mmengine.runner import Runner

    import mmsgg_eval  # noqa: F401  (registers metrics, datasets, transforms, models)
    from .arguments import check_environment

    check_environment()
    if not osp.isfile(args.config):
        raise FileNotFoundError(f'config file not found: {osp.abspath(args.config)}')
    if not osp.isfile(args.checkpoint):
        raise FileNotFoundError(f'checkpoint not found: {osp.abspath(args.checkpoint)} (build one for the '
                                f'frequency baseline with tools/build_freq_baseline.py CONFIG --out CHECKPOINT)')
    if args.out is not None and not args.out.endswith(('.pkl', '.pickle')):
        raise ValueError(f'--out must be a .pkl or .pickle file, got {args.out}')
    cfg = load_config(args)
    cfg.load_from = args.checkpoint
    if args.per_image is not None:
        set_config_per_image(cfg, args.per_image)
    if args.show_dir is not None:
        trigger_visualization_hook(cfg, args.show_dir)
    # every output location is checked before anything is evaluated
    check_writable(cfg.work_dir, 'work dir (--work-dir)')
    if args.out is not None:
        check_writable(osp.dirname(osp.abspath(args.out)), 'directory of --out')

    with distributed_evaluation(cfg, args.launcher):
        runner = Runner.from_cfg(cfg)
        evaluator = runner.test_evaluator
        set_report_dirs(evaluator.metrics, cfg.work_dir)  # {prefix}.metrics.json, long-tail chart, tables
        from mmsgg_eval.metrics.bootstrap import set_bootstrap
        set_bootstrap(evaluator.metrics, args.bootstrap)  # --bootstrap N: intervals of every key
        if args.out is not None:
            from mmsgg_eval.metrics.dump import DumpSceneGraphPredictions
            evaluator.metrics.append(DumpSceneGraphPredictions(out_file_path=args.out, config=args.config))
        if args.save_state is not None:
            from mmsgg_eval.metrics.state_paths import set_state_paths
            set_state_paths(evaluator.metrics, args.save_state, runner.test_dataloader.dataset)
        check_metric_outputs(evaluator.metrics)
        metrics = runner.test()  # the Runner logs the metrics before anything is written
        if is_main_process():  # written before the process group is torn down
            from mmengine.dist import get_world_size
            provenance = run_provenance(
                PROG, args.config, evaluator.metrics, runner.test_dataloader.dataset,
                cfg.get('test_dataloader', {}).get('dataset'), checkpoint=args.checkpoint, predictions=args.out,
                predictions_format='dump', work_dir=cfg.work_dir,
                options=dict(cfg_options=args.cfg_options, launcher=args.launcher, world_size=get_world_size(),
                             save_state=args.save_state))
            path, _ = write_run_metrics(metrics, evaluator.metrics, cfg.work_dir, provenance)
            print(f'metrics written to {path}', flush=True)
    return metrics
