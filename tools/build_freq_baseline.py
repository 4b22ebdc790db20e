"""Count the frequency-baseline statistics on a config's training split and save a checkpoint.

    python tools/build_freq_baseline.py CONFIG --out freq.pth [--must-overlap] [--split-as-configured]
        [--background {motifs,unlabelled}] [--cfg-options k=v ...]

The training dataset is ``freq_train_dataset`` of the config when present, else ``train_dataloader.dataset``.
Only annotations are read (no images). The checkpoint loads with ``tools/test.py CONFIG freq.pth``.

By default the statistics are those MOTIFS' FREQ learns: the training split is built the way the legacy
statistics build it (the dataset class's ``FREQUENCY_STATISTICS_ARGS``; VG150: relations whose boxes do not
overlap and the images left without one dropped, duplicates kept, boxes unclipped; GQA200 and OIv6 (PySGG's
``get_statistics``): duplicates kept, boxes as in the file) unless the config sets those arguments itself, and
the background channel is counted as MOTIFS counts it (see ``count_frequency_statistics``).
``--split-as-configured`` counts on the training split exactly as the config builds it; ``--background
unlabelled`` counts only pairs without a relation.

A training split with 0 images or 0 relations (e.g. a wrong ``data_root``) is refused: nothing is saved. User
errors (missing files, an empty split, a config without a training dataset) are printed as one line,
``tools/build_freq_baseline.py: error: ...``, exit status 1 (``--debug``: the traceback).
"""
import argparse
import os
import os.path as osp
import sys


PROG = 'tools/build_freq_baseline.py'


def main(argv=None):
    """Parse ``argv``, count and save; user errors exit with status 1 and one message (``--debug``: raise)."""
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split('\n')[0])
    parser.add_argument('config')
    parser.add_argument('--out', required=True, help='checkpoint path (.pth)')
    parser.add_argument('--must-overlap', action='store_true', default=None,
                        help='FREQ+OVERLAP (default: the config model.must_overlap)')
    parser.add_argument('--split-as-configured', action='store_true',
                        help='count on the training split as the config builds it, without the legacy '
                             'statistics arguments of the dataset (e.g. VG150 overlap filter)')
    parser.add_argument('--background', choices=('motifs', 'unlabelled'), default='motifs',
                        help='background channel: every candidate pair + 1, as MOTIFS (default), or only '
                             'the pairs without a GT relation')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    parser.add_argument('--debug', action='store_true', help='show the Python traceback of errors')
    args = parser.parse_args(argv)

    from mmsgg_eval.runner.arguments import USER_ERRORS
    from mmsgg_eval.runner.cli import user_error_line
    try:
        build(args)
    except USER_ERRORS as err:
        if args.debug:
            raise
        print(user_error_line(PROG, err), file=sys.stderr, flush=True)
        raise SystemExit(1) from None


def build(args: argparse.Namespace) -> None:
    """Count the statistics on the config's training split and save the checkpoint ``args.out``."""
    import torch
    from mmengine.config import Config
    from mmengine.registry import init_default_scope

    import mmsgg_eval  # noqa: F401
    from mmsgg_eval.models import FrequencyBaseline, count_frequency_statistics
    from mmsgg_eval.models.frequency_baseline import describe_dataset
    from mmsgg_eval.registry import DATASETS

    if not osp.isfile(args.config):
        raise FileNotFoundError(f'config file not found: {args.config}')
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    init_default_scope(cfg.get('default_scope', 'mmdet'))
    key = 'freq_train_dataset' if cfg.get('freq_train_dataset') else 'train_dataloader.dataset'
    train_cfg = cfg.get('freq_train_dataset') or cfg.get('train_dataloader', {}).get('dataset')
    if train_cfg is None:
        raise ValueError(f'{args.config}: the config has neither `freq_train_dataset` nor '
                         f'`train_dataloader.dataset`')
    train_cfg = dict(train_cfg, pipeline=[], test_mode=False)
    dataset_cls = DATASETS.get(train_cfg['type']) if isinstance(train_cfg.get('type'), str) else train_cfg.get('type')
    legacy_args = {} if args.split_as_configured else dict(getattr(dataset_cls, 'FREQUENCY_STATISTICS_ARGS', {}))
    applied = {k: v for k, v in legacy_args.items() if k not in train_cfg}
    train_cfg.update(applied)
    if applied:
        print(f'training split built as the legacy statistics build it: {applied} (--split-as-configured: as '
              f'in the config)')
    dataset = DATASETS.build(train_cfg)
    meta = dataset.metainfo
    num_classes, num_predicates = len(meta['classes']), len(meta['predicates'])
    model_cfg = dict(cfg.model)
    if (model_cfg.get('num_classes'), model_cfg.get('num_predicates')) != (num_classes, num_predicates):
        raise ValueError(f'model has num_classes={model_cfg.get("num_classes")}, num_predicates='
                         f'{model_cfg.get("num_predicates")} but the dataset has {num_classes} classes and '
                         f'{num_predicates} predicates')
    must_overlap = model_cfg.get('must_overlap', False) if args.must_overlap is None else args.must_overlap
    print(f'counting {"FREQ+OVERLAP" if must_overlap else "FREQ"} statistics on {len(dataset)} training images '
          f'of {meta.get("dataset_name", type(dataset).__name__)}')
    counts = count_frequency_statistics(dataset, num_classes, num_predicates, must_overlap=must_overlap,
                                        background=args.background,
                                        source=f'{args.config}: the training dataset `{key}` '
                                               f'{describe_dataset(dataset)}')
    model = FrequencyBaseline(num_classes, num_predicates, must_overlap=must_overlap,
                              mode=model_cfg.get('mode', 'predcls'))
    model.fit(counts)
    os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
    torch.save({'state_dict': model.state_dict(),
                'meta': {'dataset_name': str(meta.get('dataset_name', '')), 'num_train_images': len(dataset),
                         'num_train_relations': int(counts[..., 1:].sum()), 'must_overlap': bool(must_overlap),
                         'background': args.background, 'legacy_split_args': applied}},
               args.out)
    print(f'\nsaved {args.out}: {int(counts[..., 1:].sum())} relations, {int(counts[..., 0].sum())} background pairs')


if __name__ == '__main__':
    main()
