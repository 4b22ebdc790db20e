"""Evaluate a model with MMEngine's Runner, as mmdet's tools/test.py, with the mmsgg_eval metrics.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out preds.pkl] [--cfg-options k=v ...]
    bash tools/dist_test.sh CONFIG CHECKPOINT GPUS   # torchrun; gloo on CPU-only machines

Metrics are logged, and written to WORK_DIR/metrics.json (all keys, per-predicate recalls included).
"""
import argparse
import os
import os.path as osp
import sys

sys.path.insert(0, osp.abspath(osp.join(osp.dirname(__file__), '..')))


def parse_args(argv=None):
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser(description='Evaluate a scene-graph / grounding model (mmsgg_eval)')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--work-dir', help='directory for logs and metrics.json')
    parser.add_argument('--out', type=str, help='write the predictions to a prediction stream (.pkl) for offline '
                                                'evaluation (python -m mmsgg_eval.eval CONFIG FILE)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, e.g. env_cfg.dist_cfg.backend=gloo')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'], default='none',
                        help='job launcher')
    # torch.distributed.launch passes --local-rank (newer) or --local_rank (older)
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def main(argv=None):
    args = parse_args(argv)
    from mmengine.config import Config
    from mmengine.runner import Runner

    import mmsgg_eval  # noqa: F401  (registers metrics, datasets, transforms, models)
    from mmsgg_eval.runner_utils import setup_cpu_distributed, write_metrics_json

    if not osp.isfile(args.config):
        raise SystemExit(f'config file not found: {args.config}')
    if not osp.isfile(args.checkpoint):
        raise SystemExit(f'checkpoint not found: {osp.abspath(args.checkpoint)} (build one for the frequency '
                         f'baseline with tools/build_freq_baseline.py CONFIG --out CHECKPOINT)')
    cfg = Config.fromfile(args.config)
    cfg.launcher = args.launcher
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs', osp.splitext(osp.basename(args.config))[0])
    cfg.load_from = args.checkpoint
    setup_cpu_distributed(cfg, args.launcher)

    runner = Runner.from_cfg(cfg)
    for metric in runner.test_evaluator.metrics:
        if hasattr(metric, 'report_dir') and metric.report_dir is None:
            metric.report_dir = cfg.work_dir  # metrics.json, long-tail chart, Markdown tables
    if args.out is not None:
        if not args.out.endswith(('.pkl', '.pickle')):
            raise SystemExit('--out must be a .pkl or .pickle file')
        from mmsgg_eval.metrics.dump import DumpSceneGraphPredictions
        runner.test_evaluator.metrics.append(DumpSceneGraphPredictions(out_file_path=args.out, config=args.config))
    metrics = runner.test()
    from mmengine.dist import is_main_process
    if is_main_process():
        from mmsgg_eval.metrics import extra_results_of  # per-predicate tables: metrics.json, not the log line
        path = write_metrics_json({**metrics, **extra_results_of(runner.test_evaluator.metrics)}, cfg.work_dir)
        print(f'metrics written to {path}')
    return metrics


if __name__ == '__main__':
    main()
