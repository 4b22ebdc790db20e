"""Throughput of the scene-graph metrics against peers, side by side, on seeded synthetic VG150-like data.

    python tools/benchmark.py [--workload triplets sgdet-full predcls-full variable variable-nobg variable-256
                                          sgdet-variable]
                              [--images N] [--batch-size B] [--device cpu cuda] [--repeat R] [--rounds N]
                              [--relclip] [--torch-path] [--no-peers] [--offline]

Workloads: :mod:`mmsgg_eval.benchmarks.workloads` (fixed sizes, and variable sizes drawn per image from
VG150-like distributions with both score layouts). For each workload: images/s of ``process()`` +
``evaluate()`` of SGRecall + SGMeanRecall with every key on (R, ngR, zR, ngzR, A, mR, ngmR, groups, F, AVG),
the peak memory, the bytes one rank sends at evaluate() (on the CPU with the compiled score kernels when they
are built; ``--torch-path`` adds the same run with them switched off); beside it, on ``triplets`` and the variable-size
workloads, ``sgbench`` 1.0.0's per-image API (R, mR, ngR, ngmR; when installed; handed its GC and NGC top-100
lists precomputed, outside the timing; and as ``sgbench+lists`` with the numpy sorts that build those lists
from the scores inside the timing), and on ``triplets`` a per-image numpy implementation of the legacy
protocol. With ``--offline``, also each workload written as a prediction stream (the ``tools/test.py --out``
format) and evaluated from the file (:mod:`mmsgg_eval.benchmarks.offline`: reading alone, reading +
evaluating, the plain-read share), by the offline CLI ``python -m mmsgg_eval.eval`` in a fresh process (the time
to the first sample and the marginal rate, as a share of the in-process rate), and the CLI's start-up on the
bundled VG150 sample (time to the first sample, total). Every implementation runs in its own subprocess (fair
peak memory); the job list runs ``--rounds`` times in turn and each figure is the job's best round, so that a
busy phase of a shared machine does not fall on one implementation only. Prints a table and one JSON line with
the ratios to the peers, the offline shares of the in-process rate and the CLI's start-up times. Every number
option must be a positive integer (exit status 2 naming the option otherwise).
"""
import argparse
import json
import resource
import subprocess
import sys
import time
import warnings

from mmsgg_eval.benchmarks.workloads import VARIABLE_WORKLOADS, WORKLOADS
from mmsgg_eval.eval import positive_int_arg

PEER_WORKLOADS = {'sgbench': ('triplets',) + VARIABLE_WORKLOADS, 'sgbench+lists': ('triplets',) + VARIABLE_WORKLOADS,
                  'legacy': ('triplets',)}
"""The workloads each peer implementation is measured on ('sgbench+lists': sgbench with the building of its
ranked lists from the scores inside the timing, what a user of its API does too)."""


def run_ours(workload, images, batch_size, device, repeat):
    import torch
    from mmengine.logging import MMLogger
    from mmsgg_eval.benchmarks.workloads import make_workload, meta
    from mmsgg_eval.metrics import SGMeanRecall, SGRecall
    MMLogger.get_instance('mmengine', log_level='WARNING')
    data = make_workload(workload, images, device=device)
    mode = 'predcls' if workload == 'predcls-full' else 'sgdet'
    best, best_cpu, result, sent = None, None, None, 0
    for _ in range(repeat):
        metrics = [cls(mode=mode, zeroshot_triplets=[(0, 1, 2), (3, 4, 5)]) for cls in (SGRecall, SGMeanRecall)]
        dataset_meta = meta()
        for m in metrics:  # as mmengine's Evaluator does: one dataset_meta object for all its metrics
            m.dataset_meta = dataset_meta
        if device == 'cuda':
            torch.cuda.synchronize()
        start, start_cpu = time.perf_counter(), time.process_time()
        for i in range(0, images, batch_size):
            chunk = data[i:i + batch_size]
            for m in metrics:
                m.process({}, chunk)
        for m in metrics:  # rank the last pool now (evaluate() would), so its rows count in the payload
            m.flush()
        # a metric whose rows are those of an earlier one reuses its reduced tables and sends nothing
        sent = sum(m.accumulator.payload_bytes() for i, m in enumerate(metrics)
                   if not any(m.accumulator.holds_same_rows(o.accumulator.sources) for o in metrics[:i]))
        result = {}
        for m in metrics:
            result.update(m.evaluate(images))
        if device == 'cuda':
            torch.cuda.synchronize()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        best = elapsed if best is None else min(best, elapsed)
        best_cpu = cpu if best_cpu is None else min(best_cpu, cpu)
    peak = torch.cuda.max_memory_allocated() if device == 'cuda' else None
    keys = {k: v for k, v in result.items() if isinstance(v, float)}
    return dict(seconds=best, images_per_s=images / best, cpu_images_per_s=images / best_cpu,
                bytes_sent_per_rank=sent,
                bytes_per_image=sent / images, gpu_peak_bytes=peak, num_keys=len(keys),
                r50=keys.get(f'{mode}/R@50'), mr50=keys.get(f'{mode}/mR@50'))


def numpy_images(workload, images):
    """The same data as numpy arrays (peers' input); ``rel_scores`` without the background column [R, P]."""
    import numpy as np
    from mmsgg_eval.benchmarks.workloads import NUM_PREDICATES, make_workload
    out = []
    for s in make_workload(workload, images):
        pred = s.get('pred_instances')
        gt_boxes = s['gt_instances']['bboxes'].numpy()
        gt_labels = s['gt_instances']['labels'].numpy()
        im = dict(gt_boxes=gt_boxes, gt_labels=gt_labels,
                  gt_pairs=s['gt_relations']['pair_idxs'].numpy(), gt_predicates=s['gt_relations']['labels'].numpy(),
                  pred_boxes=pred['bboxes'].numpy() if pred else gt_boxes,
                  pred_labels=pred['labels'].numpy() if pred else gt_labels,
                  pred_scores=pred['scores'].numpy() if pred else np.ones(len(gt_labels), np.float32),
                  rel_pairs=s['pred_relations']['pair_idxs'].numpy(),
                  rel_scores=s['pred_relations']['scores'].numpy()[:, -NUM_PREDICATES:])
        out.append(im)
    return out


def run_legacy(workload, images, repeat):
    from mmsgg_eval.benchmarks.legacy_numpy import evaluate_legacy
    data = numpy_images(workload, images)
    best, res = None, None
    for _ in range(repeat):
        start = time.perf_counter()
        res = evaluate_legacy(data, 50)
        elapsed = time.perf_counter() - start
        best = elapsed if best is None else min(best, elapsed)
    return dict(seconds=best, images_per_s=images / best, r50=res['R@50'], mr50=res['mR@50'])


def sgbench_lists(im):
    """sgbench's inputs from one image's outputs: the GC and NGC top-100 triplets (subject idx, object idx,
    predicate) in rank order (stable score sorts, as ours) and the GT triplets."""
    import numpy as np
    rs = im['rel_scores']
    os_ = im['pred_scores']
    score = rs.max(1) * os_[im['rel_pairs'][:, 0]] * os_[im['rel_pairs'][:, 1]]
    order = np.argsort(-score, kind='stable')[:100]
    trip = np.column_stack([im['rel_pairs'][order], rs.argmax(1)[order]])
    ng = (os_[im['rel_pairs'][:, 0]] * os_[im['rel_pairs'][:, 1]])[:, None] * rs
    flat = np.argsort(-ng.ravel(), kind='stable')[:100]
    r, p = np.unravel_index(flat, ng.shape)
    ng_trip = np.column_stack([im['rel_pairs'][r], p])
    gt = np.column_stack([im['gt_pairs'], im['gt_predicates']])
    return trip, ng_trip, gt


def run_sgbench(workload, images, repeat, include_lists=False):
    """sgbench's per-image API on the workload; its ranked lists built outside the timing, or inside it with
    ``include_lists``."""
    import numpy as np
    try:
        import sgbench
    except ImportError:
        return dict(skipped='sgbench not installed (pip install sgbench==1.0.0)')
    data = numpy_images(workload, images)
    converted = None if include_lists else [(im,) + sgbench_lists(im) for im in data]
    best = None
    for _ in range(repeat):
        start = time.perf_counter()
        acc = {}
        for item in converted or data:
            im, trip, ng_trip, gt = item if converted else (item,) + sgbench_lists(item)
            p2g = sgbench.match_instances(im['gt_boxes'], im['gt_labels'], im['pred_boxes'], im['pred_labels'])
            for name, t in (('R', trip), ('ngR', ng_trip)):
                matched = sgbench.remap_triplets(p2g, t)
                for k in (20, 50, 100):
                    acc.setdefault((name, k), []).append(sgbench.recall(k, False, gt, matched, 50))
                    acc.setdefault(('m' + name, k), []).append(sgbench.recall(k, True, gt, matched, 50))
        r50 = 100 * float(np.mean(acc[('R', 50)]))
        with warnings.catch_warnings():  # predicates absent from every image: all-NaN columns, left out
            warnings.simplefilter('ignore', RuntimeWarning)
            mr50 = 100 * float(np.nanmean(np.nanmean(np.stack(acc[('mR', 50)]), 0)))
        elapsed = time.perf_counter() - start
        best = elapsed if best is None else min(best, elapsed)
    return dict(seconds=best, images_per_s=images / best, r50=r50, mr50=mr50,
                note='own matching convention (one GT per detection, continuous IoU)')


def worker(args):
    impl, workload, device = args.worker
    if impl == 'ours':
        res = run_ours(workload, args.images, args.batch_size, device, args.repeat)
    elif impl == 'ours-torch':  # the same metrics with the compiled CPU kernels switched off
        from mmsgg_eval.functional import compiled
        with compiled.disabled():
            res = run_ours(workload, args.images, args.batch_size, device, args.repeat)
    elif impl == 'legacy':
        res = run_legacy(workload, args.images, args.repeat)
    elif impl == 'offline':
        from mmsgg_eval.benchmarks.offline import run_offline
        res = run_offline(workload, args.offline_images, args.repeat)
    elif impl == 'offline-cli':
        from mmsgg_eval.benchmarks.offline import run_cli
        res = run_cli(workload, args.offline_images, args.repeat)
    elif impl == 'cli-startup':
        from mmsgg_eval.benchmarks.offline import run_cli_startup
        res = run_cli_startup(args.repeat)
    elif impl == 'relclip':
        from mmsgg_eval.benchmarks.relclip import run_alignment_benchmark, run_relclip_benchmark
        res = run_relclip_benchmark(device=device)
        res['study_relations_per_s'] = run_alignment_benchmark(device=device)['relations_per_s']
    else:
        res = run_sgbench(workload, args.images, args.repeat, include_lists=impl == 'sgbench+lists')
    res['host_peak_rss_mb'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print('RESULT ' + json.dumps(res))


def run_job(job, args):
    """One implementation x workload x device in its own subprocess: its RESULT dict, or an error dict."""
    cmd = [sys.executable, __file__, '--worker', *job, '--images', str(args.images), '--batch-size',
           str(args.batch_size), '--repeat', str(args.repeat), '--offline-images', str(args.offline_images)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    line = [x for x in out.stdout.splitlines() if x.startswith('RESULT ')]
    if out.returncode != 0 or not line:
        return dict(error=out.stderr.strip().splitlines()[-1:] or ['failed'])
    return json.loads(line[0][len('RESULT '):])


def better(res, old):
    """Whether a round's result beats the best so far (higher throughput, or a shorter start-up where there
    is no throughput; any result beats an error)."""
    key, sign = ('images_per_s', 1) if 'images_per_s' in res else ('first_sample_s', -1)
    if key not in res:
        return False
    return key not in old or sign * res[key] > sign * old[key]


def main(argv=None):
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
    parser.add_argument('--no-peers', action='store_true', help='measure mmsgg_eval only (no sgbench / legacy)')
    parser.add_argument('--torch-path', action='store_true',
                        help='also measure mmsgg_eval on the CPU with its compiled kernels switched off ("ours-torch": '
                             'the torch implementation, as where the kernels are not built)')
    parser.add_argument('--offline', action='store_true',
                        help='also evaluate each workload from a prediction stream file (tools/test.py --out), '
                             'in-process and with the offline CLI, and time the CLI\'s start-up')
    parser.add_argument('--offline-images', type=positive_int_arg, default=400,
                        help='images in the stream file of --offline (sgdet-full: 1.4 MB each)')
    parser.add_argument('--worker', nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.offline and args.offline_images < 2:
        parser.error(f'argument --offline-images: must be at least 2 with --offline (the CLI\'s marginal rate '
                     f'compares two stream sizes), got {args.offline_images}')
    if args.worker:
        return worker(args)
    import torch
    from mmsgg_eval.functional import compiled
    devices = args.device or (['cpu', 'cuda'] if torch.cuda.is_available() else ['cpu'])
    jobs = []
    for wl in [w for w in args.workload if w != 'none']:
        for dev in devices:
            jobs.append(('ours', wl, dev))
        if args.torch_path and 'cpu' in devices:
            jobs.append(('ours-torch', wl, 'cpu'))
        if not args.no_peers:
            jobs += [(peer, wl, 'cpu') for peer, workloads in PEER_WORKLOADS.items() if wl in workloads]
        if args.offline:
            jobs += [('offline', wl, 'cpu'), ('offline-cli', wl, 'cpu')]
    if args.offline:
        jobs.append(('cli-startup', 'vg150-sample', 'cpu'))
    if args.relclip:
        jobs += [('relclip', '-', dev) for dev in devices]
    best = {}
    for round_ in range(args.rounds):
        for job in jobs:
            print(f'round {round_ + 1}/{args.rounds}: running {job[0]} on {job[1]} ({job[2]}) ...', file=sys.stderr,
                  flush=True)
            res = run_job(job, args)
            if job not in best or better(res, best[job]):
                best[job] = res
    rows = [(job, best[job]) for job in jobs]
    print(f'\n{"implementation":<14} {"workload":<14} {"device":<6} {"images/s":>10} {"peak RSS MB":>11} '
          f'{"GPU peak MB":>11} {"bytes/img sent":>14} {"R@50":>7} {"mR@50":>7}')
    for (impl, wl, dev), res in rows:
        if impl == 'relclip' and 'relations_per_s' in res:
            print(f'{impl:<14} {"ViT-B/32":<14} {dev:<6} {res["images_per_s"]:>10.2f} {res["host_peak_rss_mb"]:>11.0f} '
                  f'   ({res["relations_per_s"]:.1f} relations/s, study {res["study_relations_per_s"]:.1f} '
                  f'relations/s, random weights)')
            continue
        if impl == 'cli-startup' and 'first_sample_s' in res:
            print(f'{impl:<14} {wl:<14} {dev:<6}   first sample after {res["first_sample_s"]:.2f} s '
                  f'({res["first_sample_cpu_s"]:.2f} CPU s), total {res["total_s"]:.2f} s ({res["images"]} images, '
                  f'python -m mmsgg_eval.eval)')
            continue
        if 'images_per_s' not in res:
            print(f'{impl:<14} {wl:<14} {dev:<6} {res.get("skipped") or res.get("error")}')
            continue
        gpu = f'{res["gpu_peak_bytes"] / 2**20:.1f}' if res.get('gpu_peak_bytes') else '-'
        sent = f'{res["bytes_per_image"]:.0f}' if 'bytes_per_image' in res else '-'
        r50 = f'{res["r50"]:.3f}' if res.get('r50') is not None else '-'
        mr50 = f'{res["mr50"]:.3f}' if res.get('mr50') is not None else '-'
        print(f'{impl:<14} {wl:<14} {dev:<6} {res["images_per_s"]:>10.0f} {res["host_peak_rss_mb"]:>11.0f} '
              f'{gpu:>11} {sent:>14} {r50:>7} {mr50:>7}')
        if impl == 'offline':
            print(f'{"":<14} {"":<14} {"":<6} ({res["file_mb"]:.0f} MB stream: reading alone '
                  f'{res["read_images_per_s"]:.0f} images/s, {100 * res["read_share"]:.0f}% of the offline time; '
                  f'plain file read {res["disk_images_per_s"]:.0f} images/s)')
        if impl == 'offline-cli':
            ours = best.get(('ours', wl, 'cpu'), {}).get('images_per_s')
            ours_cpu = best.get(('ours', wl, 'cpu'), {}).get('cpu_images_per_s')
            share = f', {100 * res["images_per_s"] / ours:.0f}% of the in-process rate' if ours else ''
            if ours_cpu:
                share += f' ({100 * res["cpu_images_per_s"] / ours_cpu:.0f}% in CPU time)'
            print(f'{"":<14} {"":<14} {"":<6} (python -m mmsgg_eval.eval: marginal rate{share}, '
                  f'{res["cpu_images_per_s"]:.0f} images per CPU second; {res["small_images"]} images: first '
                  f'sample after {res["first_sample_s"]:.2f} s ({res["first_sample_cpu_s"]:.2f} CPU s), total '
                  f'{res["total_s"]:.2f} s; {args.offline_images} images: total {res["total_s_full"]:.2f} s)')
    summary = {f'{impl}/{wl}/{dev}': res.get('images_per_s') for (impl, wl, dev), res in rows}
    summary.update({f'{impl}/relations_per_s/{dev}': res['relations_per_s'] for (impl, wl, dev), res in rows
                    if 'relations_per_s' in res})
    startup = {f'{impl}/{wl}': {k: res[k] for k in ('first_sample_s', 'first_sample_cpu_s', 'total_s') if k in res}
               for (impl, wl, dev), res in rows if impl in ('offline-cli', 'cli-startup')}
    ratios = {}
    for peer, workloads in dict(PEER_WORKLOADS, **{'ours-torch': tuple(WORKLOADS)}).items():
        for wl in workloads:
            ours, theirs = summary.get(f'ours/{wl}/cpu'), summary.get(f'{peer}/{wl}/cpu')
            if ours and theirs:
                ratios[f'ours_vs_{peer}_{wl}_cpu'] = ours / theirs
    for impl in ('offline', 'offline-cli'):  # offline rates as a share of the in-process rate
        for wl in WORKLOADS:
            ours, offline = summary.get(f'ours/{wl}/cpu'), summary.get(f'{impl}/{wl}/cpu')
            if ours and offline:
                ratios[f'{impl}_share_of_ours_{wl}_cpu'] = offline / ours
    for (impl, wl, dev), res in rows:  # the same share in CPU seconds (steadier on a shared machine)
        ours_cpu = best.get(('ours', wl, 'cpu'), {}).get('cpu_images_per_s')
        if impl == 'offline-cli' and ours_cpu and res.get('cpu_images_per_s'):
            ratios[f'offline-cli_cpu_share_of_ours_{wl}_cpu'] = res['cpu_images_per_s'] / ours_cpu
    print(json.dumps({'images_per_s': summary, 'ratios': ratios, 'startup': startup, 'images': args.images,
                      'batch_size': args.batch_size, 'rounds': args.rounds, 'repeat': args.repeat,
                      'torch_threads': torch.get_num_threads(), 'compiled_kernels': compiled.built()}))


if __name__ == '__main__':
    main()
