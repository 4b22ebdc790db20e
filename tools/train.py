"""Train a model (e.g. a detector for SGDet / SGCls) with MMEngine's Runner, as mmdet's tools/train.py.

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT]] [--amp] [--cfg-options k=v ...]
    python -m torch.distributed.run --nproc_per_node=N tools/train.py CONFIG --launcher pytorch

The config imports mmsgg_eval (``custom_imports``), so its datasets serve as mmdet detection training sets;
mmdet's own ``mmdet/.mim/tools/train.py`` trains the same configs. Checkpoints go to WORK_DIR.
"""
import argparse

from mmsgg_eval.runner.cli import add_common_arguments, load_config, parse_common


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Train a detector / model (mmsgg_eval, mmdet style)')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--amp', action='store_true', help='automatic mixed precision (GPU)')
    parser.add_argument('--auto-scale-lr', action='store_true', help='scale the learning rate by the batch size')
    parser.add_argument('--resume', nargs='?', type=str, const='auto',
                        help='resume from CKPT, or from the latest checkpoint of the work dir when none is given')
    add_common_arguments(parser, 'train_cfg.max_iters=2')
    return parse_common(parser, argv)


def main(argv=None):
    args = parse_args(argv)
    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner

    cfg = load_config(args)
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
