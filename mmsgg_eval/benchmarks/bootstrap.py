"""Bootstrap-interval throughput: ``bootstrap=dict(samples=1000)`` on the VG150 test-split size.

The workload is a seeded set of reduced SGMeanRecall row tables shaped like the VG150 test split (26,446 images,
150 classes, 50 long-tailed predicates, 1-25 GT relations per image, about 7 on average, first-hit ranks of a
model with ~60% R@100), with zero-shot flags and head / body / tail groups, so the timed call computes the
interval of every key (R, ngR, zR, ngzR, mR, ngmR, mR_head/_body/_tail, F, AVG, A at K = 20/50/100): building
the per-image contributions, drawing the [B, N] resampling counts and the chunked products, the percentiles.
Command line::

    python -m mmsgg_eval.benchmarks.bootstrap [--images 26446] [--samples 1000] [--repeat 3]
"""
import argparse
import json
from typing import Any, Dict, Tuple

import numpy as np
import torch

VG150_TEST_IMAGES = 26446


def bootstrap_workload(num_images: int = VG150_TEST_IMAGES, num_predicates: int = 50, num_classes: int = 150,
                       seed: int = 0) -> Tuple[Any, Dict[str, Dict[str, torch.Tensor]]]:
    """(an ``SGMeanRecall`` with its ``dataset_meta``, reduced tables of ``num_images`` images)."""
    from ..metrics import SGMeanRecall
    from .workloads import long_tail_probs
    rng = np.random.default_rng(seed)
    per_image = np.clip(rng.poisson(7.0, num_images), 1, 25)
    total = int(per_image.sum())
    predicate = rng.choice(num_predicates, size=total, p=long_tail_probs(num_predicates))
    image = np.repeat(np.arange(num_images), per_image)
    hit = rng.random(total) < 0.6
    rank_gc = np.where(hit, rng.integers(0, 100, total), 32767)
    rank_ngc = np.where(hit | (rng.random(total) < 0.2), rng.integers(0, 100, total), 32767)
    subject, obj = rng.integers(0, num_classes, total), rng.integers(0, num_classes, total)
    triplet = (subject * num_classes + obj) * num_predicates + predicate
    counts = np.bincount(predicate, minlength=num_predicates)
    meta = dict(classes=[f'c{i}' for i in range(num_classes)], predicates=[f'p{i}' for i in range(num_predicates)],
                predicate_counts=counts.tolist(), dataset_name='vg150-shaped')
    metric = SGMeanRecall(mode='predcls', zeroshot_triplets=[(0, 1, 2)], bootstrap=dict(samples=1000))
    metric.dataset_meta = meta
    t = torch.as_tensor
    images = {'sample_idx': t(np.arange(num_images)), 'num_gt': t(per_image).int(),
              'num_pred': torch.full((num_images,), 100, dtype=torch.int32),
              'missing': torch.zeros(num_images, dtype=torch.bool)}
    relations = {'sample_idx': t(image), 'predicate': t(predicate).short(), 'triplet': t(triplet).int(),
                 'zeroshot': t(rng.random(total) < 0.05), 'rank_gc': t(rank_gc).short(),
                 'rank_ngc': t(rank_ngc).short(), 'rank_pair': t(np.minimum(rank_gc, rank_ngc)).short()}
    return metric, {'images': images, 'relations': relations}


def run_bootstrap_benchmark(num_images: int = VG150_TEST_IMAGES, samples: int = 1000,
                            repeat: int = 3) -> Dict[str, Any]:
    """Seconds (best of ``repeat``, :func:`~mmsgg_eval.benchmarks.timing.best_of`) of the intervals of every key
    of the workload, with the number of keys and the thread count."""
    from ..metrics.bootstrap import bootstrap_summary
    from .timing import best_of
    metric, tables = bootstrap_workload(num_images)
    summary = metric.summarize(tables)
    options = dict(metric.bootstrap, samples=samples)
    timed = best_of(lambda: bootstrap_summary(metric, tables, summary, options), repeat)
    return {'bootstrap_seconds': timed['seconds'], 'images': num_images, 'samples': samples,
            'keys': len(timed['result']['intervals']), 'threads': torch.get_num_threads()}


def main() -> None:
    parser = argparse.ArgumentParser(prog='python -m mmsgg_eval.benchmarks.bootstrap',
                                     description=__doc__.split('\n')[0])
    parser.add_argument('--images', type=int, default=VG150_TEST_IMAGES)
    parser.add_argument('--samples', type=int, default=1000)
    parser.add_argument('--repeat', type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(run_bootstrap_benchmark(args.images, args.samples, args.repeat)))


if __name__ == '__main__':
    main()
