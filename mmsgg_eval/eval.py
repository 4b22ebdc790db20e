"""Offline evaluation of saved predictions: ``python -m mmsgg_eval.eval CONFIG PREDICTIONS [options]``.

Inputs (``--format``, default from the file name; the readers are in :mod:`mmsgg_eval.io`):

* ``dump``: the prediction stream written by ``tools/test.py --out`` (:mod:`mmsgg_eval.io.stream`: header,
  one record per sample, closing record; older streams and mmengine ``DumpResults`` lists are read too);
* ``jsonl``: per-image predictions, one JSON object per line (:mod:`mmsgg_eval.io.jsonl`; GT from the dataset);
* ``vlm``: JSONL of raw multimodal-LLM answers (:mod:`mmsgg_eval.io.vlm`), scored by ``VLMSceneGraphMetric``
  (FailureRate, Recall, mRecall, AP@50, ...), or by the config's ``vlm_evaluator`` list when it has one
  (e.g. ``RelCLIPScore`` on the model's own words, configs/relclip/);
* ``legacy``: the legacy Scene-Graph-Benchmark ``eval_results.pytorch`` (:mod:`mmsgg_eval.io.legacy`);
* ``openpsg``: OpenPSG's ``tools/test.py --out result.pkl`` (a list of its ``Result`` objects, read without
  importing OpenPSG; :mod:`mmsgg_eval.io.openpsg`), evaluated with ``protocol='openpsg'`` unless another is
  given (``match='box'`` when the results carry no masks);
* ``grounding``: a JSON list of ``{sample_idx or img_id, bbox}`` scored by ``GroundingPr``
  (:mod:`mmsgg_eval.io.grounding`; ``--metric-options coord_scale=1000`` for boxes on a 0-1000 canvas).

The metrics are the config's ``test_evaluator`` unless ``--metrics`` names others; an mmengine ``Evaluator``
is built from them and fed the samples in chunks (``Evaluator.offline_evaluate``). The predictions must cover
the dataset of the config exactly once: a sample predicted twice, a truncated stream, or samples without a
prediction make the command fail, naming how many and which samples are missing, unless ``--allow-missing``
is given; then every missing sample is scored as an empty prediction (recall 0, never skipped) and the count
is printed and written to metrics.json (``{prefix}/num_missing_predictions``, the name ``tools/test.py``
writes too). ``metrics.json`` is written by the writer of ``tools/test.py``
(:func:`mmsgg_eval.runner.results.write_run_metrics`: the same keys, per-predicate tables and ``provenance``
included); every metric with a ``report_dir`` writes its report files (``{prefix}.metrics.json``, the
per-predicate long-tail chart, Markdown tables) into ``--work-dir``. No GPU is needed; files are streamed,
never loaded whole (except the legacy format, which is one torch object).

Evaluation states (:mod:`mmsgg_eval.metrics.state`): ``--save-state DIR`` writes every metric's reduced rows
and what they depend on to ``DIR/{prefix}[.{tag}].state``; ``python -m mmsgg_eval.eval --from-state A.state
[B.state ...]`` summarises them again without the predictions (the same keys, reports and metrics.json),
merging the states of disjoint shards of one metric into exactly the result of one run over all of them
(a shard job evaluates only its predictions with ``--shard``). Several prediction files (or a quoted glob)
are read as the shards of one prediction set, with the duplicate / missing rules of one file. See
docs/states.md.

Exit status: 0 on success; 1 on a user error (bad or truncated file, refused pickle, missing samples, invalid
predictions), printed as one message without a traceback (``--debug`` shows it); 2 for bad arguments.

This module is the command line only; what it runs is the API of :mod:`mmsgg_eval.offline`
(:func:`~mmsgg_eval.offline.evaluate_file`, :func:`~mmsgg_eval.offline.evaluate_states`, ...).
"""
import argparse
import sys
from typing import Any, Dict, List, Optional

from mmsgg_eval.io.formats import FORMATS
from mmsgg_eval.offline import evaluate_file, evaluate_states
from mmsgg_eval.offline.config import PROTOCOL_TARGETS, SG_METRICS
from mmsgg_eval.runner.arguments import USER_ERRORS, add_bootstrap_argument, add_per_image_argument, \
    add_save_state_argument, check_environment, cli_message, positive_int_arg


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser(prog='python -m mmsgg_eval.eval',
                                     description='Evaluate saved scene-graph / grounding predictions offline')
    parser.add_argument('config', nargs='?', help='config with the dataset (test_dataloader) and test_evaluator')
    parser.add_argument('predictions', nargs='*',
                        help='tools/test.py --out stream, JSONL predictions, VLM JSONL, legacy eval_results.pytorch, '
                             'OpenPSG result.pkl (--format openpsg) or grounding JSON; several files (or a quoted '
                             'glob, e.g. "answers_*.jsonl") are shards that together cover the dataset once')
    parser.add_argument('--from-state', nargs='+', metavar='STATE',
                        help='summarise saved evaluation states (files, globs or directories of *.state) instead '
                             'of predictions: shards of one metric are merged; no config is needed')
    add_save_state_argument(parser)
    parser.add_argument('--format', default='auto', choices=('auto',) + FORMATS)
    parser.add_argument('--metrics', nargs='+', help='metric types instead of the config test_evaluator')
    parser.add_argument('--mode', choices=['predcls', 'sgcls', 'sgdet', 'phrdet'],
                        help=f'scene-graph mode of {", ".join(SG_METRICS)}')
    parser.add_argument('--work-dir', help='where metrics.json and the reports go (default work_dirs/offline)')
    parser.add_argument('--batch-size', type=positive_int_arg, default=64, help='samples per process() call')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    parser.add_argument('--metric-options', nargs='+', action=DictAction,
                        help='extra metric arguments, e.g. iou_plus_one=False skip_empty_predictions=False')
    parser.add_argument('--allow-missing', action='store_true',
                        help='predictions: evaluate although some dataset samples have no prediction (or the '
                             'stream is truncated): they are scored as empty predictions (recall 0) and counted '
                             'in metrics.json (not with --from-state: see --covered-only)')
    parser.add_argument('--covered-only', action='store_true',
                        help='--from-state: summarise the samples the states cover, alone, although some dataset '
                             'samples are in no state (a warning says how many)')
    parser.add_argument('--unsafe-load', action='store_true',
                        help='load pickles with the unrestricted unpickler (only for files you trust)')
    parser.add_argument('--no-progress', action='store_true')
    from mmsgg_eval.metrics.protocols import PROTOCOLS
    parser.add_argument('--protocol', choices=list(PROTOCOLS),
                        help=f'named evaluation conventions of {", ".join(PROTOCOL_TARGETS)} (sgb is the '
                             f'default; each metric accepts only some of them, see docs/protocols.md)')
    add_per_image_argument(parser)
    parser.add_argument('--shard', action='store_true',
                        help='the predictions are one shard of the dataset: evaluate only their samples and save '
                             'the state (--save-state) for merging with --from-state')
    add_bootstrap_argument(parser)
    parser.add_argument('--debug', action='store_true', help='show the Python traceback of errors')
    args = parser.parse_args(argv)
    if args.from_state and (args.config or args.predictions):
        parser.error('--from-state summarises saved states: give no config or predictions with it')
    if not args.from_state and not (args.config and args.predictions):
        parser.error('give a config and predictions file(s), or --from-state STATE [STATE ...]')
    if args.covered_only and not args.from_state:
        parser.error('--covered-only applies to --from-state; prediction files take --allow-missing')
    try:
        check_environment()
        if args.from_state:
            return evaluate_states(args.from_state, args.work_dir, args.covered_only, args.save_state,
                                   args.bootstrap, allow_missing=args.allow_missing)
        return evaluate_file(args.config, args.predictions, fmt=args.format, metrics=args.metrics, mode=args.mode,
                             work_dir=args.work_dir, batch_size=args.batch_size, cfg_options=args.cfg_options,
                             unsafe_load=args.unsafe_load, progress=not args.no_progress,
                             metric_options=args.metric_options, allow_missing=args.allow_missing,
                             protocol=args.protocol, per_image=args.per_image, save_state=args.save_state,
                             shard=args.shard, bootstrap=args.bootstrap)
    except USER_ERRORS as err:
        if args.debug:
            raise
        print(f'{parser.prog}: error: {cli_message(err)}\n(rerun with --debug for the traceback)', file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == '__main__':
    main()
