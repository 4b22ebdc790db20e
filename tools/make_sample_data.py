#!/usr/bin/env python
"""Write a small deterministic sample of VG150, GQA200, OIv6, PSG and RSVGD in their real on-disk formats.

    python tools/make_sample_data.py --out data/sample [--seed 0] [--datasets vg150 psg] [--predictions]

See :mod:`mmsgg_eval.testing.sample_data` for what is written. The VG150 sample has 8 val images: use
``VG150Dataset(num_val_images=8)`` with it. ``--predictions`` also writes example prediction files
(:mod:`mmsgg_eval.testing.predictions`): ``vg150/predictions.jsonl``, ``vg150/vlm_answers.jsonl``,
``rsvgd/predictions.json``.
"""
import argparse
import json

from mmsgg_eval.testing import WRITERS, make_sample_data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--out', default='data/sample', help='output folder (one sub-folder per dataset)')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--datasets', nargs='+', choices=list(WRITERS), default=None, help='default: all')
    parser.add_argument('--predictions', action='store_true',
                        help='also write example prediction files (JSONL, VLM answers, grounding JSON)')
    args = parser.parse_args()
    summary = make_sample_data(args.out, seed=args.seed, datasets=args.datasets)
    if args.predictions:
        from mmsgg_eval.testing.predictions import write_sample_predictions
        summary['predictions'] = write_sample_predictions(args.out, args.datasets or list(WRITERS))
    print(json.dumps(summary, indent=2))


if __name__ == '__main__':
    main()
