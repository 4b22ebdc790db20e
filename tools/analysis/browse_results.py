"""Browse the hits and misses of a scene-graph evaluation as a static HTML report.

    python tools/analysis/browse_results.py CONFIG PREDICTIONS --out-dir DIR [--max-images 200] [--k 50]

``PREDICTIONS``: any file the offline CLI reads (``python -m mmsgg_eval.eval``: a ``tools/test.py --out``
stream, JSONL predictions, the legacy format, ...), evaluated here with the config's scene-graph metrics
(``DIR/eval/metrics.json``, ``DIR/per_image.jsonl``), or a per-image file (``--per-image`` of the command
lines; ``--format per-image``, guessed from its first line). Writes ``DIR/index.html`` (open it from disk;
no server, no network). See :mod:`mmsgg_eval.analysis.browse`.
"""
import argparse
import json
import os
import os.path as osp
import time


def is_per_image_file(path: str) -> bool:
    """True when the first line of ``path`` is a per-image record."""
    try:
        with open(path, 'rb') as f:
            head = f.readline(1 << 20)
        return b'"gt_relations"' in head and head.strip().startswith(b'{')
    except OSError:
        return False


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description='static HTML report of per-image hits and misses')
    parser.add_argument('config')
    parser.add_argument('predictions', help='predictions (any offline CLI format) or a per-image file')
    parser.add_argument('--out-dir', required=True)
    parser.add_argument('--format', default='auto', help="offline CLI format, or 'per-image'")
    parser.add_argument('--mode', choices=['predcls', 'sgcls', 'sgdet', 'phrdet'])
    parser.add_argument('--max-images', type=int, default=None, help='images drawn (the index lists all)')
    parser.add_argument('--k', type=int, default=50, help='hit within K (default 50)')
    parser.add_argument('--topk-drawn', type=int, default=20, help='predictions drawn per image (default 20)')
    parser.add_argument('--recall-average', choices=['image', 'micro'], default=None,
                        help="the metric's recall_average (default: from the evaluation, else 'image')")
    parser.add_argument('--metric-options', nargs='+', default=None, help='as the offline CLI (key=value)')
    parser.add_argument('--no-progress', action='store_true')
    from mmengine.config import DictAction
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, help='override config settings')
    args = parser.parse_args(argv)
    start = time.perf_counter()
    from mmengine.config import Config
    from mmengine.registry import init_default_scope

    import mmsgg_eval  # noqa: F401
    from mmsgg_eval.analysis.browse import dataset_facts, write_report
    from mmsgg_eval.eval import build_dataset, evaluate_file
    from mmsgg_eval.metrics.per_image import read_per_image
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    init_default_scope(cfg.get('default_scope', 'mmdet'))
    dataset = build_dataset(cfg)
    classes, predicates, paths, split = dataset_facts(dataset)
    os.makedirs(args.out_dir, exist_ok=True)
    metrics, average = None, args.recall_average
    per_image = args.predictions
    if args.format != 'per-image' and not (args.format == 'auto' and is_per_image_file(args.predictions)):
        per_image = osp.join(args.out_dir, 'per_image.jsonl')
        options = {}
        for item in args.metric_options or ():
            key, _, value = item.partition('=')
            try:
                options[key] = json.loads(value)
            except ValueError:
                options[key] = value
        sg = [m for m in (cfg.get('test_evaluator') or []) if 'SG' in str(m.get('type', ''))
              and 'Bench' not in str(m.get('type'))] if not isinstance(cfg.get('test_evaluator'), dict) else []
        sg = [dict(m) for m in sg]
        for m in sg:  # where recall is lost: on here (not defined for phrdet)
            if (args.mode or m.get('mode')) != 'phrdet' and 'error_analysis' not in options:
                m.setdefault('error_analysis', True)
        metrics = evaluate_file(args.config, args.predictions, args.format, sg or None,
                                args.mode, osp.join(args.out_dir, 'eval'), cfg_options=args.cfg_options,
                                progress=not args.no_progress,
                                metric_options=options or None, per_image=per_image)
    records = read_per_image(per_image)
    if average is None and records:  # the evaluation's own convention, written in every line
        average = records[0].get('recall_average')
    for r in records:
        if not r.get('img_path'):
            r['img_path'] = paths.get(r['sample_idx'])
        r.setdefault('split', split)
    summary = write_report(records, args.out_dir, classes, predicates, args.k, args.topk_drawn, args.max_images,
                           average or 'image', metrics, title=f'{osp.basename(args.config)}: {args.predictions}',
                           progress=not args.no_progress, split=split)
    elapsed = time.perf_counter() - start
    print(f'report of {len(records)} images ({len(summary["drawn"])} drawn) written to '
          f'{osp.join(args.out_dir, "index.html")} in {elapsed:.1f} s')
    return summary


if __name__ == '__main__':
    main()
