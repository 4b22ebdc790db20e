"""Relation alignment study (mmsgg_eval/analysis/relation_alignment.py): how well an image-text encoder ranks
the annotated predicate of every GT relation of a dataset (mean score, precision, theta, confused triplets).

    python tools/analysis/relation_alignment.py configs/relclip/relclip_negclip_psg.py
    python tools/analysis/relation_alignment.py configs/vg150/sgg_sgdet_vg150.py \\
        --encoder type=OpenCLIPEncoder model_name=ViT-B-32-quickgelu pretrained=checkpoints/negclip.pth
"""
import argparse
import json


def main(argv=None):
    from mmengine.config import DictAction

    from mmsgg_eval.analysis.relation_alignment import run_from_config
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('config', help='config with the dataset (and, optionally, a metric with `encoder`)')
    parser.add_argument('--encoder', nargs='+', action=DictAction,
                        help='encoder config, e.g. type=HFSigLIPEncoder model_path=/models/siglip (default: the '
                             "config's relation_alignment.encoder or its first metric with an encoder)")
    parser.add_argument('--template', help='text template (default the metric\'s, else "{subject} {predicate} '
                                           '{object}")')
    parser.add_argument('--split-key', default='test_dataloader', help='dataloader whose dataset is analysed')
    parser.add_argument('--out-dir', help='where relation_alignment.json / .md go (default '
                                          'work_dirs/relation_alignment)')
    parser.add_argument('--device', help='cpu / cuda (default: cuda when available)')
    parser.add_argument('--batch-size', type=int, default=64, help='crops per image-tower call')
    parser.add_argument('--images-per-chunk', type=int, default=16, help='images decoded and cropped together')
    parser.add_argument('--num-confused', type=int, default=10, help='confused triplet pairs reported')
    parser.add_argument('--with-train-triplets', action='store_true',
                        help="candidate predicates also from the dataset's train_triplets (default: the split only)")
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    parser.add_argument('--no-progress', action='store_true')
    args = parser.parse_args(argv)
    summary = run_from_config(args.config, encoder=args.encoder, template=args.template, out_dir=args.out_dir,
                              split_key=args.split_key, cfg_options=args.cfg_options,
                              num_confused=args.num_confused, with_train_triplets=args.with_train_triplets,
                              device=args.device, batch_size=args.batch_size,
                              images_per_chunk=args.images_per_chunk, progress=not args.no_progress)
    print(json.dumps({'dataset': summary['dataset'], 'files': summary['files']}, indent=2))
    return summary


if __name__ == '__main__':
    main()
