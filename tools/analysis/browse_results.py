"""Browse the hits and misses of a scene-graph evaluation as a static HTML report.

    python tools/analysis/browse_results.py CONFIG PREDICTIONS --out-dir DIR [--max-images 200] [--k 50]
        [--compare-to OTHER_RUN]

``PREDICTIONS``: any file the offline CLI reads (``python -m mmsgg_eval.eval``: a ``tools/test.py --out``
stream, JSONL predictions, the legacy format, ...), evaluated here with the config's scene-graph metrics
(``DIR/eval/metrics.json``, ``DIR/per_image.jsonl``), or a per-image file (``--per-image`` of the command
lines; ``--format per-image``, guessed from its first line). Writes ``DIR/index.html`` (open it from disk;
no server, no network). See :mod:`mmsgg_eval.analysis.browse`. ``--allow-missing``: as the offline CLI, dataset
samples without a prediction are scored as empty predictions (recall 0). Errors are one line (exit status 1).

``--compare-to OTHER_RUN``: another run on the same dataset (its predictions, evaluated here with the same
config and metrics, or its evaluation states: ``*.state`` files or a directory of them). The report then lists
the images where this run gains or loses GT relations at K against OTHER_RUN, each changed relation with the
cause of the miss on the losing side (``DIR/changes.html``, a section of the index and of each image page;
``DIR/changes.md`` / ``DIR/changes.json`` as ``python -m mmsgg_eval.compare --report`` writes them). Runs on
different ground truth or different images are refused.
"""
import argparse
import json
import os
import os.path as osp
import shutil
import sys
import time
from typing import Optional


def is_per_image_file(path: str) -> bool:
    """True when the first line of ``path`` is a per-image record."""
    try:
        with open(path, 'rb') as f:
            head = f.readline(1 << 20)
        return b'"gt_relations"' in head and head.strip().startswith(b'{')
    except OSError:
        return False


def main(argv=None) -> dict:
    """Run the tool; user errors (missing files, predictions that do not cover the dataset, invalid
    predictions) exit with status 1 and one message, as the offline CLI (``--debug``: the traceback)."""
    parser = argparse.ArgumentParser(prog='tools/analysis/browse_results.py',
                                     description='static HTML report of per-image hits and misses')
    parser.add_argument('config')
    parser.add_argument('predictions', help='predictions (any offline CLI format) or a per-image file')
    parser.add_argument('--out-dir', required=True)
    parser.add_argument('--format', default='auto', help="offline CLI format, or 'per-image'")
    parser.add_argument('--mode', choices=['predcls', 'sgcls', 'sgdet', 'phrdet'])
    parser.add_argument('--max-images', type=int, default=None, help='images drawn (the index lists all)')
    parser.add_argument('--k', default=None, help="hit within K (default 50, else the records' largest K; 'all' "
                                                 "for the VLM metric's K-free recall)")
    parser.add_argument('--topk-drawn', type=int, default=20, help='predictions drawn per image (default 20)')
    parser.add_argument('--recall-average', choices=['image', 'micro'], default=None,
                        help="the metric's recall_average (default: from the evaluation, else 'image')")
    parser.add_argument('--allow-missing', action='store_true',
                        help='as the offline CLI: dataset samples without a prediction are scored as empty '
                             'predictions (recall 0) and counted, instead of an error')
    parser.add_argument('--compare-to', metavar='OTHER_RUN',
                        help='another run on the same dataset (predictions, evaluated here with the same config '
                             'and metrics, or evaluation states): list the images where this run gains or loses '
                             'GT relations at K against it, each with the cause of the miss on the losing side')
    parser.add_argument('--no-progress', action='store_true')
    parser.add_argument('--debug', action='store_true', help='show the Python traceback of errors')
    from mmengine.config import DictAction
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, help='override config settings')
    parser.add_argument('--metric-options', nargs='+', action=DictAction,
                        help='as the offline CLI: extra metric arguments, e.g. error_analysis=False')
    args = parser.parse_args(argv)
    from mmsgg_eval.runner.arguments import USER_ERRORS, cli_message
    try:
        k = None if args.k is None else ('all' if str(args.k).lower() == 'all' else int(args.k))
    except ValueError:
        parser.error(f"--k: an integer or 'all', got {args.k!r}")
    try:
        return run(args, k)
    except USER_ERRORS as err:
        if args.debug:
            raise
        print(f'{parser.prog}: error: {cli_message(err)}\n(rerun with --debug for the traceback)', file=sys.stderr)
        raise SystemExit(1) from None


def run(args: argparse.Namespace, k) -> dict:
    start = time.perf_counter()
    import mmsgg_eval  # noqa: F401
    from mmsgg_eval.analysis.browse import dataset_facts, report_k, write_report
    from mmsgg_eval.compare import is_state_input, load_run, quiet_evaluation, run_changes, run_names
    from mmsgg_eval.offline import build_dataset, evaluate_file, load_run_config
    from mmsgg_eval.io.formats import guess_format
    from mmsgg_eval.metrics.per_image import read_per_image
    cfg = load_run_config(args.config, args.cfg_options)
    dataset = build_dataset(cfg)
    classes, predicates, paths, split = dataset_facts(dataset)
    os.makedirs(args.out_dir, exist_ok=True)
    metrics = None
    states = None  # (OTHER_RUN, this run): merged evaluation states, with --compare-to
    per_image = args.predictions
    if args.format != 'per-image' and not (args.format == 'auto' and is_per_image_file(args.predictions)):
        per_image = osp.join(args.out_dir, 'per_image.jsonl')
        options = dict(args.metric_options or {})
        fmt = guess_format(args.predictions) if args.format == 'auto' else args.format
        evaluator = cfg.get('test_evaluator')
        sg = [dict(m) for m in (evaluator or []) if 'SG' in str(m.get('type', ''))
              and 'Bench' not in str(m.get('type'))] if not isinstance(evaluator, dict) else []
        for m in sg:  # where recall is lost: on here (not defined for phrdet)
            if (args.mode or m.get('mode')) != 'phrdet' and 'error_analysis' not in options:
                m.setdefault('error_analysis', True)

        def evaluate(predictions: str, work_dir: str, per_image_out: Optional[str] = None,
                     states: Optional[str] = None) -> None:
            """Evaluate a prediction file with the report's metrics (per-image records, states where asked: a
            fresh folder, so that no state of an earlier report is merged in)."""
            if states:
                shutil.rmtree(states, ignore_errors=True)
            evaluate_file(args.config, predictions, args.format,
                          None if fmt == 'vlm' else sg or None,  # VLM answers: the VLM metric
                          args.mode, work_dir, cfg_options=args.cfg_options, progress=not args.no_progress,
                          metric_options=options or None, per_image=per_image_out, allow_missing=args.allow_missing,
                          save_state=states)
        work_dir = osp.join(args.out_dir, 'eval')
        evaluate(args.predictions, work_dir, per_image, osp.join(work_dir, 'states') if args.compare_to else None)
        with open(osp.join(work_dir, 'metrics.json')) as f:  # the evaluation's own keys and tables
            metrics = json.load(f)
        if args.compare_to:
            other_states = args.compare_to
            if not is_state_input(args.compare_to):  # predictions: evaluated as this run is (same metrics)
                other_dir = osp.join(args.out_dir, 'compare_to')
                other_states = osp.join(other_dir, 'states')
                with quiet_evaluation():
                    evaluate(args.compare_to, other_dir, states=other_states)
                print(f'{args.compare_to}: evaluated with {args.config}; its report is in {other_dir}')
            states = (load_run(other_states), load_run(osp.join(work_dir, 'states')))
    elif args.compare_to:
        raise ValueError(f'--compare-to: {args.predictions} is a per-image file, which holds no evaluation state; '
                         f'give this run\'s predictions (evaluated here) to compare it with another run')
    elif not osp.isfile(per_image):
        raise FileNotFoundError(f'per-image file not found: {osp.abspath(per_image)}')
    records = read_per_image(per_image)
    for r in records:
        if not r.get('img_path'):
            r['img_path'] = paths.get(r['sample_idx'])
        r.setdefault('split', split)
    changes = None
    if states is not None:
        names = tuple(run_names([args.compare_to, args.predictions]))
        first = records[0] if records else {}
        k_changes = report_k(records) if k is None else k
        if k_changes == 'all':
            raise ValueError("--compare-to: gained and lost relations are counted at an integer K (--k), not "
                             "'all'")
        changes = run_changes(states[0], states[1], k_changes, names, first.get('prefix') or first.get('mode'))
    summary = write_report(records, args.out_dir, classes, predicates, k, args.topk_drawn, args.max_images,
                           args.recall_average, metrics, title=f'{osp.basename(args.config)}: {args.predictions}',
                           progress=not args.no_progress, split=split,
                           predicate_counts=dataset.metainfo.get('predicate_counts'), changes=changes)
    elapsed = time.perf_counter() - start
    if changes is not None:
        print(f'against {changes["a"]} at K = {changes["k"]}: {changes["num_gained"]} GT relations gained, '
              f'{changes["num_lost"]} lost, on {len(changes["images"])} images ({osp.join(args.out_dir, "changes.html")})')
    print(f'report of {len(records)} images ({len(summary["drawn"])} drawn) written to '
          f'{osp.join(args.out_dir, "index.html")} in {elapsed:.1f} s')
    return summary


if __name__ == '__main__':
    main()
