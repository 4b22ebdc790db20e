"""Throughput of the scene-graph metrics against peers, side by side, on seeded synthetic VG150-like data.

    python tools/benchmark.py [--workload triplets sgdet-full predcls-full variable variable-nobg variable-256
                                          sgdet-variable oiv6-sgdet]
                              [--images N] [--batch-size B] [--device cpu cuda] [--repeat R] [--rounds N]
                              [--relclip] [--bootstrap] [--torch-path] [--single-thread] [--load N] [--no-peers]
                              [--offline] [--baseline PATH] [--error-analysis] [--detection-ap] [--oi-recipe]
                              [--numpy-inputs]

Workloads: :mod:`mmsgg_eval.benchmarks.workloads` (fixed sizes, and variable sizes drawn per image from
VG150-like distributions with both score layouts). For each workload: images/s of ``process()`` +
``evaluate()`` of SGRecall + SGMeanRecall with every key on (R, ngR, zR, ngzR, A, mR, ngmR, groups, F, AVG),
the peak memory, the bytes one rank sends at evaluate() (on the CPU with the compiled score kernels when they
are built; ``--torch-path`` adds the same run with them switched off); beside it, on ``triplets`` and the variable-size
workloads, ``sgbench`` 1.0.0's per-image API (R, mR, ngR, ngmR; when installed; handed its GC and NGC top-100
lists precomputed, outside the timing; and as ``sgbench+lists`` with the numpy sorts that build those lists
from the scores inside the timing), and on ``triplets`` a per-image numpy implementation of the legacy
protocol. On ``sgdet-full`` (SGDet with all 6,320 ordered pairs of 80 detections, 1.3 MB of scores per image),
also sgbench and ``score-floor``: reading every score matrix once (its maximum; same pools and thread policy), the
floor of any evaluation that reads each score (``ours_vs_score-floor_sgdet-full_cpu``: the share of it reached);
``ours`` also reads that floor on its own tensors right before each of its runs (a line under its row;
``ours_vs_paired-floor_sgdet-full_cpu``: the share of it reached, each run and its floor on the same memory in the
same minute, where the floor's own job may fall in another phase of a shared machine).
On ``oiv6-sgdet`` (600 classes, 30 predicates, 80 detections and all their pairs) ``ours`` is
``OIRelationMetric`` with every key, and its peer ``oi-numpy`` a per-image numpy Open Images evaluator in the
style of PySGG's (:mod:`mmsgg_eval.benchmarks.oi_numpy`).
With ``--offline``, also each workload written as a prediction stream (the ``tools/test.py --out``
format) and evaluated from the file (:mod:`mmsgg_eval.benchmarks.offline`: reading alone, reading +
evaluating, the plain-read share), by the offline CLI ``python -m mmsgg_eval.eval`` in a fresh process (the time
to the first sample and the marginal rate, as a share of the in-process rate), and the CLI's start-up on the
bundled VG150 sample (time to the first sample, total); beside the CLI's marginal rate, one pass that reads and
SHA-256-hashes the same file (the reading bound), the rate's share of it and a VG150-test projection. Every implementation runs in its own subprocess (fair
peak memory); the job list runs ``--rounds`` times in turn and each figure is the job's best round, so that a
busy phase of a shared machine does not fall on one implementation only; beside it, ``median`` is the median
rate of all the job's runs (every repeat of every round), the figure to compare under ``--load``, where the
best run is only the luckiest. Prints a table and one JSON line with the ratios to the peers (best and
median), the offline shares of the in-process rate and the CLI's start-up times. Every number
option must be a positive integer (exit status 2 naming the option otherwise).

``--baseline PATH`` adds ``baseline``: ``ours`` of another checkout of the package (e.g. a ``git worktree`` of an
earlier commit, its compiled kernels built there with ``python setup.py build_ext --inplace``), interleaved with
the other jobs, so that a regression shows in one run (``ours_vs_baseline`` ratios). ``--single-thread`` adds
``ours-1thread``, the same run in a process started with ``OMP_NUM_THREADS=1`` (the
per-core efficiency), interleaved with the others in every round; ``--load N`` runs every job while N CPU-bound
busy processes compete for the cores (as dataloader workers do during ``tools/test.py``), started before the
first round and stopped after the last one, on an error or on Ctrl-C (:mod:`mmsgg_eval.benchmarks.load`); the
table's first line states the load. ``--error-analysis`` adds ``ours+errors`` (the metrics with
``error_analysis=True``) and ``--detection-ap`` adds ``ours+detap`` (``DetectionAP`` in the same evaluator, as a
user who also reports the detector's COCO mAP runs it); on ``oiv6-sgdet``, ``--oi-recipe`` adds ``ours+recipe``
(the OIv6 SGDet recipe's whole evaluator, built from ``configs/_base_/evaluators/oi_sgdet.py``: SGMeanRecall +
OIRelationMetric + DetectionAP); ``--numpy-inputs`` adds ``ours+numpy`` (the same samples with every field a numpy
array, as a pipeline that keeps its outputs in numpy hands them over): their cost is the ratio
``ours_vs_<variant>``.

The runners, the job subprocesses and the table are in the package (:mod:`mmsgg_eval.benchmarks.runners`,
:mod:`mmsgg_eval.benchmarks.report`, one timing helper :func:`mmsgg_eval.benchmarks.timing.best_of`); this tool
maps its options to the job list.
"""
import argparse
import json
import os

from mmsgg_eval.benchmarks.load import busy_processes, load_average
from mmsgg_eval.benchmarks.report import format_table, load_line, summarize
from mmsgg_eval.benchmarks.runners import PEER_WORKLOADS, best_rounds
from mmsgg_eval.benchmarks.runners import run_sgbench  # noqa: F401 (tests load this tool and call it)
from mmsgg_eval.benchmarks.workloads import OI_WORKLOADS, WORKLOADS
from mmsgg_eval.runner.arguments import non_negative_int_arg, positive_int_arg


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--workload', nargs='+', default=list(WORKLOADS), choices=list(WORKLOADS) + ['none'],
                        help="workloads ('none' with --relclip for the RelCLIPScore figure alone)")
    parser.add_argument('--images', type=positive_int_arg, default=2000)
    parser.add_argument('--batch-size', type=positive_int_arg, default=64, help='samples per process() call')
    parser.add_argument('--device', nargs='+', default=None, help='default: cpu, and cuda when available')
    parser.add_argument('--repeat', type=positive_int_arg, default=3,
                        help='best of R runs within each worker process')
    parser.add_argument('--rounds', type=positive_int_arg, default=3,
                        help='run the whole job list this many times in turn and keep each job\'s best round: the '
                             'load of a shared machine changes over minutes, and alternating gives every '
                             'implementation the same chances')
    parser.add_argument('--relclip', action='store_true', help='also RelCLIPScore / alignment-study relations/s')
    parser.add_argument('--bootstrap', action='store_true',
                        help='also the seconds of 1,000 bootstrap replicates of every SGMeanRecall key over the '
                             'VG150 test split size (26,446 images x 50 predicates)')
    parser.add_argument('--error-analysis', action='store_true',
                        help='also ours+errors: SGRecall + SGMeanRecall with error_analysis=True (its cost)')
    parser.add_argument('--detection-ap', action='store_true',
                        help='also ours+detap: SGRecall + SGMeanRecall + DetectionAP in one evaluator (its cost)')
    parser.add_argument('--oi-recipe', action='store_true',
                        help='also ours+recipe on oiv6-sgdet: the OIv6 recipe\'s evaluator (SGMeanRecall + '
                             'OIRelationMetric + DetectionAP, configs/_base_/evaluators/oi_sgdet.py; its cost)')
    parser.add_argument('--numpy-inputs', action='store_true',
                        help='also ours+numpy: the same samples with every field a numpy array (read in place)')
    parser.add_argument('--no-peers', action='store_true', help='measure mmsgg_eval only (no sgbench / legacy)')
    parser.add_argument('--torch-path', action='store_true',
                        help='also measure mmsgg_eval on the CPU with its compiled kernels switched off ("ours-torch": '
                             'the torch implementation, as where the kernels are not built)')
    parser.add_argument('--single-thread', action='store_true',
                        help='also measure mmsgg_eval on the CPU in a process started with OMP_NUM_THREADS=1 '
                             '("ours-1thread")')
    parser.add_argument('--baseline', metavar='PATH', default=None,
                        help='also time "ours" of another checkout of mmsgg_eval at PATH ("baseline", its compiled '
                             'kernels built there with `python setup.py build_ext --inplace`), alternating with the '
                             'other jobs: a regression check in one run (ratio ours_vs_baseline)')
    parser.add_argument('--load', type=non_negative_int_arg, default=0,
                        help='run every job while N CPU-bound busy processes compete for the cores (started and '
                             'stopped by the benchmark)')
    parser.add_argument('--offline', action='store_true',
                        help='also evaluate each workload from a prediction stream file (tools/test.py --out), '
                             'in-process and with the offline CLI, and time the CLI\'s start-up')
    parser.add_argument('--offline-images', type=positive_int_arg, default=400,
                        help='images in the stream file of --offline (sgdet-full: 1.4 MB each)')
    return parser


def job_list(args: argparse.Namespace, devices: list) -> list:
    """The (implementation, workload, device) jobs the options ask for, in the order of the table."""
    jobs = []
    for wl in [w for w in args.workload if w != 'none']:
        jobs += [('ours', wl, dev) for dev in devices]
        if args.single_thread and 'cpu' in devices:
            jobs.append(('ours-1thread', wl, 'cpu'))
        if args.torch_path and 'cpu' in devices:
            jobs.append(('ours-torch', wl, 'cpu'))
        if args.error_analysis:
            jobs += [('ours+errors', wl, dev) for dev in devices]
        if args.detection_ap:
            jobs += [('ours+detap', wl, dev) for dev in devices]
        if args.oi_recipe and wl in OI_WORKLOADS:
            jobs += [('ours+recipe', wl, dev) for dev in devices]
        if args.numpy_inputs and 'cpu' in devices:
            jobs.append(('ours+numpy', wl, 'cpu'))
        if args.baseline and 'cpu' in devices:
            jobs.append(('baseline', wl, 'cpu'))
        if not args.no_peers:
            jobs += [(peer, wl, 'cpu') for peer, workloads in PEER_WORKLOADS.items() if wl in workloads]
        if args.offline:
            jobs += [('offline', wl, 'cpu'), ('offline-cli', wl, 'cpu')]
    if args.offline:
        jobs.append(('cli-startup', 'vg150-sample', 'cpu'))
    if args.relclip:
        jobs += [('relclip', '-', dev) for dev in devices]
    if args.bootstrap:
        jobs.append(('bootstrap', '-', 'cpu'))
    return jobs


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.offline and args.offline_images < 2:
        parser.error(f'argument --offline-images: must be at least 2 with --offline (the CLI\'s marginal rate '
                     f'compares two stream sizes), got {args.offline_images}')
    if args.baseline and not os.path.isdir(os.path.join(args.baseline, 'mmsgg_eval')):
        parser.error(f'argument --baseline: {args.baseline} is not a checkout of mmsgg_eval (no mmsgg_eval/ there)')
    import torch
    from mmsgg_eval.functional import compiled
    devices = args.device or (['cpu', 'cuda'] if torch.cuda.is_available() else ['cpu'])
    jobs = job_list(args, devices)
    with busy_processes(args.load):
        before = load_average()
        best = best_rounds(jobs, vars(args), args.rounds)  # every option reaches the runners
        after = load_average()
    print(load_line(args.load, before, after))
    print('\n'.join(format_table(jobs, best, args.offline_images)))
    print(json.dumps(dict(summarize(jobs, best), images=args.images, batch_size=args.batch_size, rounds=args.rounds,
                          repeat=args.repeat, torch_threads=torch.get_num_threads(), load=args.load,
                          load_average=dict(before=before, after=after), compiled_kernels=compiled.built())))


if __name__ == '__main__':
    main()
