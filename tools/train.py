"""Train a model (e.g. a detector for SGDet / SGCls) with MMEngine's Runner, as mmdet's tools/train.py.

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT]] [--amp] [--cfg-options k=v ...]
    python -m torch.distributed.run --nproc_per_node=N tools/train.py CONFIG --launcher pytorch

The config imports mmsgg_eval (``custom_imports``), so its datasets serve as mmdet detection training sets;
mmdet's own ``mmdet/.mim/tools/train.py`` trains the same configs. Checkpoints go to WORK_DIR.
"""
import argparse
import os
import os.path as osp


def parse_args(argv=None):
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser(description='Train a detector / model (mmsgg_eval, mmdet style)')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='directory for logs and checkpoints')
    parser.add_argument('--amp', action='store_true', help='automatic mixed precision (GPU)')
    parser.add_argument('--auto-scale-lr', action='store_true', help='scale the learning rate by the batch size')
    parser.add_argument('--resume', nargs='?', type=str, const='auto',
                        help='resume from CKPT, or from the latest checkpoint of the work dir when none is given')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, e.g. train_cfg.max_iters=2')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'], default='none',
                        help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def main(argv=None):
    args = parse_args(argv)
    from mmengine.config import Config
    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner

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
    if args.amp:
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.loss_scale = 'dynamic'
    if args.auto_scale_lr:
        if 'auto_scale_lr' not in cfg or 'base_batch_size' not in cfg.auto_scale_lr:
            raise SystemExit('--auto-scale-lr needs `auto_scale_lr = dict(enable=..., base_batch_size=...)` in the config')
        cfg.auto_scale_lr.enable = True
    if args.resume == 'auto':
        cfg.resume, cfg.load_from = True, None
    elif args.resume is not None:
        cfg.resume, cfg.load_from = True, args.resume
    runner = Runner.from_cfg(cfg) if 'runner_type' not in cfg else RUNNERS.build(cfg)
    runner.train()


if __name__ == '__main__':
    main()
