"""The runners of ``tools/benchmark.py``: one function per implementation, the job table, one subprocess per job.

A job is ``(implementation, workload, device)``; :data:`RUNNERS` maps each implementation to the function that
measures it in the current process, given the workload, the device and the tool's options (a dict: ``images``,
``batch_size``, ``repeat``, ``offline_images``, and whatever option the tool adds). :func:`run_in_subprocess`
runs one job in a fresh interpreter (``python -m mmsgg_eval.benchmarks.runners``: a fair peak memory per
implementation) and :func:`best_rounds` runs the whole job list several times in turn, keeping each job's best
round. Every timing is :func:`.timing.best_of`.

The implementations: ``ours`` (SGRecall + SGMeanRecall, every key), ``ours-1thread`` (the same in a process
started with ``OMP_NUM_THREADS=1``: the per-core efficiency, and the reference of the thread policy under load),
``ours-torch`` (the same with the compiled CPU kernels switched off), ``baseline`` (``ours`` of another checkout
of the package, the ``baseline`` option: a regression check in the same run, :func:`baseline_command`), the
peers ``legacy`` (per-image numpy, :mod:`.legacy_numpy`), ``oi-numpy`` (per-image numpy Open Images evaluator,
:mod:`.oi_numpy`), ``sgbench`` and ``sgbench+lists`` (sgbench 1.0.0's
per-image API, its ranked lists built outside / inside the timing), ``score-floor`` (every score matrix read
once: :func:`run_score_floor`), and ``offline``, ``offline-cli``,
``cli-startup`` (:mod:`.offline`), ``relclip`` (:mod:`.relclip`).
"""
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import warnings
from typing import Any, Callable, Dict, List, Mapping, Sequence, Tuple

from .timing import best_of
from .workloads import OI_WORKLOADS, VARIABLE_WORKLOADS, ZEROSHOT_TRIPLETS, workload_mode

Job = Tuple[str, str, str]
"""(implementation, workload, device)."""

PEER_WORKLOADS = {'sgbench': ('triplets', 'sgdet-full') + VARIABLE_WORKLOADS,
                  'sgbench+lists': ('triplets', 'sgdet-full') + VARIABLE_WORKLOADS,
                  'legacy': ('triplets',), 'score-floor': ('sgdet-full',), 'oi-numpy': OI_WORKLOADS}
"""The workloads each peer implementation is measured on ('sgbench+lists': sgbench with the building of its
ranked lists from the scores inside the timing, what a user of its API does too; 'score-floor': reading every
score matrix once, :func:`run_score_floor`, on SGDet with all pairs of 80 detections; 'oi-numpy': the per-image
numpy Open Images evaluator of :mod:`.oi_numpy`, the peer of ``OIRelationMetric`` on the OIv6-like workloads)."""


def rates(images: int, timed: Mapping[str, Any]) -> Dict[str, Any]:
    """The throughput keys of a :func:`~.timing.best_of` result over ``images`` images: ``seconds`` (the best
    repeat), ``images_per_s`` (its rate) and ``runs_images_per_s`` (every repeat's rate, for the median)."""
    return dict(seconds=timed['seconds'], images_per_s=images / timed['seconds'],
                runs_images_per_s=[images / s for s in timed['runs_seconds']])


def oi_recipe_metrics(mode: str) -> List[Any]:
    """The metrics of the OIv6 recipes' evaluator for ``mode`` (``configs/_base_/evaluators/oi_<mode>.py``'s
    ``val_evaluator``, built from that file: SGMeanRecall + OIRelationMetric, + DetectionAP in SGDet)."""
    from mmengine.config import Config

    from ..registry import METRICS
    from .offline import ROOT
    config = Config.fromfile(os.path.join(ROOT, 'configs', '_base_', 'evaluators', f'oi_{mode}.py'))
    return [METRICS.build(dict(cfg)) for cfg in config.val_evaluator]


def run_ours(workload: str, images: int, batch_size: int, device: str, repeat: int,
             error_analysis: bool = False, detection_ap: bool = False, oi_recipe: bool = False,
             paired_floor: bool = False, numpy_inputs: bool = False) -> Dict[str, Any]:
    """Images/s (wall clock and CPU time) of ``process()`` in chunks of ``batch_size`` + ``evaluate()`` of
    SGRecall + SGMeanRecall (``OIRelationMetric`` on the OIv6-like workloads) on ``images`` workload images, the
    bytes one rank sends at evaluate(), the CUDA peak memory, R@50 and mR@50 (OI: R@50 and wmAP_rel).
    ``error_analysis``: the scene-graph metrics' option of that name (``ours+errors``); ``detection_ap``:
    ``DetectionAP`` in the same evaluator (``ours+detap``, what a user who also reports the detector's mAP runs);
    ``oi_recipe`` (OIv6-like workloads): the OIv6 recipe's whole evaluator (:func:`oi_recipe_metrics`,
    ``ours+recipe``). ``paired_floor``: also the score floor (:func:`score_floor_readers`, the compiled reader
    when built) read on the same tensors in this process right before each run, untimed for the run
    (``paired_floor_runs_images_per_s``, in the order of ``runs_images_per_s``; ``paired_floor_images_per_s``, the
    best): each run and its floor read the same memory within a second, whatever phase the machine is in.
    ``numpy_inputs``: every tensor field of the samples handed over as a numpy array (:func:`numpy_fields`,
    ``ours+numpy``: what a pipeline that keeps its outputs in numpy gives)."""
    import torch
    from mmengine.logging import MMLogger

    from ..metrics import DetectionAP, OIRelationMetric, SGMeanRecall, SGRecall
    from .workloads import make_workload, meta
    MMLogger.get_instance('mmengine', log_level='WARNING')
    data = make_workload(workload, images, device=device)
    if numpy_inputs:
        data = [numpy_fields(sample) for sample in data]
    mode = workload_mode(workload)

    def new_metrics() -> List[Any]:
        if workload in OI_WORKLOADS:
            metrics = oi_recipe_metrics(mode) if oi_recipe else [OIRelationMetric(mode=mode)]
        else:
            extra = dict(error_analysis=True) if error_analysis else {}
            metrics = [cls(mode=mode, zeroshot_triplets=ZEROSHOT_TRIPLETS, **extra) for cls in (SGRecall, SGMeanRecall)]
        if detection_ap:
            metrics.append(DetectionAP())
        dataset_meta = meta(workload)
        for m in metrics:  # as mmengine's Evaluator does: one dataset_meta object for all its metrics
            m.dataset_meta = dataset_meta
        return metrics

    def evaluate(metrics: List[Any]) -> Tuple[Dict[str, Any], int]:
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
        return result, sent

    floor_runs: List[float] = []
    floor_reader = None
    if paired_floor:
        readers = score_floor_readers([s['pred_relations']['scores'] for s in data])
        floor_reader = readers.get('compiled', readers['torch'])

    def setup() -> List[Any]:
        if floor_reader is not None:
            start = time.perf_counter()
            floor_reader()
            floor_runs.append(images / (time.perf_counter() - start))
        return new_metrics()

    best = best_of(evaluate, repeat, setup=setup, cuda=device == 'cuda')
    result, sent = best['result']
    peak = torch.cuda.max_memory_allocated() if device == 'cuda' else None
    keys = {k: v for k, v in result.items() if isinstance(v, float)}
    extra = {'wmap_rel': keys.get(f'{mode}/wmAP_rel')} if workload in OI_WORKLOADS else {}
    if floor_runs:
        extra.update(paired_floor_runs_images_per_s=floor_runs, paired_floor_images_per_s=max(floor_runs))
    return dict(rates(images, best), cpu_images_per_s=images / best['cpu_seconds'], bytes_sent_per_rank=sent,
                bytes_per_image=sent / images, gpu_peak_bytes=peak, num_keys=len(keys),
                r50=keys.get(f'{mode}/R@50'), mr50=keys.get(f'{mode}/mR@50'), **extra)


def numpy_fields(sample: Dict[str, Any]) -> Dict[str, Any]:
    """The workload sample with every tensor field of its groups as a numpy array (the same memory)."""
    import torch
    return {key: ({k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in value.items()}
                  if isinstance(value, dict) else value) for key, value in sample.items()}


def numpy_images(workload: str, images: int) -> List[Dict[str, Any]]:
    """The same data as numpy arrays (peers' input); ``rel_scores`` without the background column [R, P]."""
    import numpy as np

    from .workloads import NUM_PREDICATES, OI_NUM_PREDICATES, make_workload
    num_predicates = OI_NUM_PREDICATES if workload in OI_WORKLOADS else NUM_PREDICATES
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
                  rel_scores=s['pred_relations']['scores'].numpy()[:, -num_predicates:])
        out.append(im)
    return out


def run_legacy(workload: str, images: int, repeat: int) -> Dict[str, Any]:
    """Images/s, R@50 and mR@50 of the per-image numpy implementation of the legacy protocol."""
    from .legacy_numpy import evaluate_legacy
    data = numpy_images(workload, images)
    best = best_of(lambda: evaluate_legacy(data, 50), repeat)
    res = best['result']
    return dict(rates(images, best), r50=res['R@50'], mr50=res['mR@50'])


def run_oi_numpy(workload: str, images: int, repeat: int) -> Dict[str, Any]:
    """Images/s, R@50 and wmAP_rel of the per-image numpy Open Images evaluator (:mod:`.oi_numpy`)."""
    from .oi_numpy import evaluate_oi
    from .workloads import OI_NUM_PREDICATES
    data = numpy_images(workload, images)
    best = best_of(lambda: evaluate_oi(data, OI_NUM_PREDICATES), repeat)
    res = best['result']
    return dict(rates(images, best), r50=res['R@50'], mr50=None, wmap_rel=res['wmAP_rel'])


def sgbench_lists(im: Dict[str, Any]) -> Tuple[Any, Any, Any]:
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


def run_sgbench(workload: str, images: int, repeat: int, include_lists: bool = False) -> Dict[str, Any]:
    """sgbench's per-image API on the workload; its ranked lists built outside the timing, or inside it with
    ``include_lists``."""
    import numpy as np
    try:
        import sgbench
    except ImportError:
        return dict(skipped='sgbench not installed (pip install sgbench==1.0.0)')
    data = numpy_images(workload, images)
    converted = None if include_lists else [(im,) + sgbench_lists(im) for im in data]

    def evaluate() -> Tuple[float, float]:
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
        return r50, mr50

    best = best_of(evaluate, repeat)
    r50, mr50 = best['result']
    return dict(rates(images, best), r50=r50, mr50=mr50,
                note='own matching convention (one GT per detection, continuous IoU)')


def score_floor_readers(matrices: Sequence[Any], pool: int = 256) -> Dict[str, Callable[[], int]]:
    """The readers of the score floor over ``matrices`` (the score matrices of a workload, in pools of ``pool``
    images, under the metrics' thread policy: :func:`~mmsgg_eval.functional.threads.compute_threads`): ``torch``,
    the maximum of each matrix's float32 bit patterns read as int32 (as the metrics' row maxima), one torch
    reduction per image, and, when the compiled kernels are built, ``compiled``, their row maxima of a pool in one
    call (images in parallel). Each returns a count that depends on every value read."""
    from ..functional import compiled
    from ..functional.scores import float_bits
    from ..functional.threads import compute_threads
    from .workloads import NUM_PREDICATES
    pools = [list(matrices[i:i + pool]) for i in range(0, len(matrices), pool)]

    def torch_reads() -> int:
        with compute_threads():
            return sum(int(float_bits(m).amax()) > 0 for part in pools for m in part)

    readers = {'torch': torch_reads}
    kernels = compiled.kernels()
    if kernels is not None:
        def compiled_reads() -> int:
            with compute_threads():
                return sum(int(kernels.row_maxima_checked(part, 1, NUM_PREDICATES, max(m.shape[0] for m in part))[1]
                               .sum()) for part in pools)
        readers['compiled'] = compiled_reads
    return readers


def run_score_floor(workload: str, images: int, repeat: int, pool: int = 256) -> Dict[str, Any]:
    """Images/s of reading every score matrix of the workload once (:func:`score_floor_readers`), whichever
    reader is faster: the floor of any evaluation that reads each score once (``ours`` reads each one once for the
    row maxima and the value check, and the ranked lists read only a few rows again). A process of its own, with
    its own copy of the data: ``ours`` on ``sgdet-full`` also reads the floor on its own tensors, right before each
    of its runs (``paired_floor`` of :func:`run_ours`), the share that a machine's slow and fast phases leave
    alone."""
    from .workloads import make_workload
    readers = score_floor_readers([s['pred_relations']['scores'] for s in make_workload(workload, images)], pool)
    timed = {name: best_of(read, repeat) for name, read in readers.items()}
    fastest = min(timed, key=lambda name: timed[name]['seconds'])
    return dict(rates(images, timed[fastest]), reader=fastest,
                **{f'{name}_images_per_s': images / t['seconds'] for name, t in timed.items()})


def _ours_torch(workload: str, device: str, opts: Mapping[str, Any]) -> Dict[str, Any]:
    """``ours`` with the compiled CPU kernels switched off (the torch implementation)."""
    from ..functional import compiled
    with compiled.disabled():
        return run_ours(workload, opts['images'], opts['batch_size'], device, opts['repeat'])


def _offline(workload: str, device: str, opts: Mapping[str, Any]) -> Dict[str, Any]:
    from .offline import run_offline
    return run_offline(workload, opts['offline_images'], opts['repeat'])


def _offline_cli(workload: str, device: str, opts: Mapping[str, Any]) -> Dict[str, Any]:
    from .offline import run_cli
    return run_cli(workload, opts['offline_images'], opts['repeat'])


def _cli_startup(workload: str, device: str, opts: Mapping[str, Any]) -> Dict[str, Any]:
    from .offline import run_cli_startup
    return run_cli_startup(opts['repeat'])


def _relclip(workload: str, device: str, opts: Mapping[str, Any]) -> Dict[str, Any]:
    from .relclip import run_alignment_benchmark, run_relclip_benchmark
    res = run_relclip_benchmark(device=device)
    res['study_relations_per_s'] = run_alignment_benchmark(device=device)['relations_per_s']
    return res


def _bootstrap(workload: str, device: str, opts: Mapping[str, Any]) -> Dict[str, Any]:
    from .bootstrap import run_bootstrap_benchmark
    return run_bootstrap_benchmark(repeat=opts['repeat'])


Runner = Callable[[str, str, Mapping[str, Any]], Dict[str, Any]]
RUNNERS: Dict[str, Runner] = {
    'ours': lambda wl, dev, o: run_ours(wl, o['images'], o['batch_size'], dev, o['repeat'],
                                        paired_floor=dev == 'cpu' and wl in PEER_WORKLOADS['score-floor']),
    'ours-1thread': lambda wl, dev, o: run_ours(wl, o['images'], o['batch_size'], dev, o['repeat']),
    'ours-torch': _ours_torch,
    'ours+errors': lambda wl, dev, o: run_ours(wl, o['images'], o['batch_size'], dev, o['repeat'], error_analysis=True),
    'ours+detap': lambda wl, dev, o: run_ours(wl, o['images'], o['batch_size'], dev, o['repeat'], detection_ap=True),
    'ours+recipe': lambda wl, dev, o: run_ours(wl, o['images'], o['batch_size'], dev, o['repeat'], oi_recipe=True),
    'ours+numpy': lambda wl, dev, o: run_ours(wl, o['images'], o['batch_size'], dev, o['repeat'], numpy_inputs=True),
    'legacy': lambda wl, dev, o: run_legacy(wl, o['images'], o['repeat']),
    'oi-numpy': lambda wl, dev, o: run_oi_numpy(wl, o['images'], o['repeat']),
    'score-floor': lambda wl, dev, o: run_score_floor(wl, o['images'], o['repeat']),
    'sgbench': lambda wl, dev, o: run_sgbench(wl, o['images'], o['repeat']),
    'sgbench+lists': lambda wl, dev, o: run_sgbench(wl, o['images'], o['repeat'], include_lists=True),
    'offline': _offline,
    'offline-cli': _offline_cli,
    'cli-startup': _cli_startup,
    'relclip': _relclip,
    'bootstrap': _bootstrap,
}
"""Implementation -> ``runner(workload, device, options)``: the result dict of one job in this process."""


def run_in_process(job: Job, options: Mapping[str, Any]) -> Dict[str, Any]:
    """One job in this process: its runner's dict plus the peak resident memory of the process (MB)."""
    impl, workload, device = job
    res = RUNNERS[impl](workload, device, options)
    res['host_peak_rss_mb'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return res


SUBPROCESS_ENV: Dict[str, Dict[str, str]] = {'ours-1thread': {'OMP_NUM_THREADS': '1', 'MKL_NUM_THREADS': '1'}}
"""Implementation -> the environment variables its subprocess starts with (read when torch loads)."""


def baseline_command(root: str, workload: str, device: str, options: Mapping[str, Any]) -> List[str]:
    """The command timing ``ours`` of the checkout at ``root`` (its compiled kernels built in place, e.g. by
    ``python setup.py build_ext --inplace``; run with ``root`` first on the import path): through its own job
    subprocess, ``mmsgg_eval.benchmarks.runners``, or, in releases before that module, its
    ``tools/benchmark.py --worker`` (the same workloads and the same measurement)."""
    if os.path.isfile(os.path.join(root, 'mmsgg_eval', 'benchmarks', 'runners.py')):
        return [sys.executable, '-m', 'mmsgg_eval.benchmarks.runners', 'ours', workload, device,
                json.dumps(dict(options))]
    tool = os.path.join(root, 'tools', 'benchmark.py')
    if not os.path.isfile(tool):
        raise FileNotFoundError(f'--baseline {root}: neither mmsgg_eval/benchmarks/runners.py nor tools/benchmark.py '
                                f'there (a checkout of mmsgg_eval is expected)')
    return [sys.executable, tool, '--worker', 'ours', workload, device, '--images', str(options['images']),
            '--batch-size', str(options['batch_size']), '--repeat', str(options['repeat'])]


def run_in_subprocess(job: Job, options: Mapping[str, Any]) -> Dict[str, Any]:
    """One job in a fresh interpreter: its result dict, or ``{'error': [the last line of its stderr]}``."""
    env = dict(os.environ, **SUBPROCESS_ENV.get(job[0], {}))
    cwd = None
    if job[0] == 'baseline':
        cwd = os.path.abspath(options['baseline'])
        cmd = baseline_command(cwd, job[1], job[2], options)
        env['PYTHONPATH'] = os.pathsep.join([cwd] + [p for p in [env.get('PYTHONPATH')] if p])
    else:
        cmd = [sys.executable, '-m', 'mmsgg_eval.benchmarks.runners', *job, json.dumps(dict(options))]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    line = [x for x in out.stdout.splitlines() if x.startswith('RESULT ')]
    if out.returncode != 0 or not line:
        return dict(error=out.stderr.strip().splitlines()[-1:] or ['failed'])
    return json.loads(line[0][len('RESULT '):])


def better(res: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Whether a round's result beats the best so far (higher throughput, or a shorter start-up where there
    is no throughput; any result beats an error)."""
    key, sign = ('images_per_s', 1) if 'images_per_s' in res else ('first_sample_s', -1)
    if key not in res:
        return False
    return key not in old or sign * res[key] > sign * old[key]


def best_rounds(jobs: Sequence[Job], options: Mapping[str, Any], rounds: int) -> Dict[Job, Dict[str, Any]]:
    """Run the job list ``rounds`` times in turn, each job in its own subprocess, and keep each job's best
    round: the load of a shared machine changes over minutes, and alternating gives every implementation the
    same chances. Progress goes to stderr. A throughput job's kept result also has ``median_images_per_s`` and
    ``runs``: the median rate and the count of all its timed runs (every repeat of every round; a busy
    machine's best run is its luckiest, the median is the typical one), and where it read a paired score floor,
    ``median_paired_floor_share``: the median of every run's share of its floor (:func:`paired_floor_shares`)."""
    best: Dict[Job, Dict[str, Any]] = {}
    runs: Dict[Job, List[float]] = {}
    shares: Dict[Job, List[float]] = {}
    for round_ in range(rounds):
        for job in jobs:
            print(f'round {round_ + 1}/{rounds}: running {job[0]} on {job[1]} ({job[2]}) ...', file=sys.stderr,
                  flush=True)
            res = run_in_subprocess(job, options)
            runs.setdefault(job, []).extend(res.get('runs_images_per_s', ()))
            shares.setdefault(job, []).extend(paired_floor_shares(res))
            if job not in best or better(res, best[job]):
                best[job] = res
    for job, job_rates in runs.items():
        if job_rates and 'images_per_s' in best[job]:
            best[job] = dict(best[job], median_images_per_s=statistics.median(job_rates), runs=len(job_rates))
        if shares[job]:
            best[job] = dict(best[job], median_paired_floor_share=statistics.median(shares[job]))
    return best


def paired_floor_shares(res: Mapping[str, Any]) -> List[float]:
    """Each run's rate as a share of the score floor read right before it on the same tensors (``paired_floor``
    of :func:`run_ours`); empty when the job read no floor."""
    return [mine / floor for mine, floor in zip(res.get('runs_images_per_s', ()),
                                                res.get('paired_floor_runs_images_per_s', ()))]


def main(argv: Sequence[str]) -> None:
    """The subprocess of one job: ``IMPLEMENTATION WORKLOAD DEVICE OPTIONS_JSON``; prints ``RESULT {json}``."""
    impl, workload, device, options = argv
    print('RESULT ' + json.dumps(run_in_process((impl, workload, device), json.loads(options))))


if __name__ == '__main__':
    main(sys.argv[1:])
