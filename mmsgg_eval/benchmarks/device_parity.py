"""Whether the scene-graph metrics give the same numbers, bit for bit, on two devices (``tools/device_check.sh``).

    python -m mmsgg_eval.benchmarks.device_parity [--workload variable sgdet-variable ...] [--images N]
                                                  [--devices cpu cuda]

SGRecall + SGMeanRecall with every key on (as :mod:`.runners` measures them) evaluate the same seeded workload
images on each device; every float key must be equal (NaN equal to NaN). Prints one line per workload and exits
with status 1 naming the first differing keys when any differs.
"""
import argparse
import math
import sys
from typing import Dict, List, Optional, Sequence

from .workloads import WORKLOADS, ZEROSHOT_TRIPLETS, make_workload, meta, workload_mode


def evaluate_on(workload: str, images: int, device: str, batch_size: int = 64) -> Dict[str, float]:
    """Every float key of SGRecall + SGMeanRecall on ``images`` workload images held on ``device``."""
    from ..metrics import SGMeanRecall, SGRecall
    data = make_workload(workload, images, device=device)
    out: Dict[str, float] = {}
    for cls in (SGRecall, SGMeanRecall):
        metric = cls(mode=workload_mode(workload), zeroshot_triplets=ZEROSHOT_TRIPLETS)
        metric.dataset_meta = meta()
        for i in range(0, images, batch_size):
            metric.process({}, data[i:i + batch_size])
        out.update((k, v) for k, v in metric.evaluate(images).items() if isinstance(v, float))
    return out


def differing_keys(first: Dict[str, float], second: Dict[str, float]) -> List[str]:
    """The keys whose values differ (a key present on one side only differs; NaN equals NaN)."""
    keys = sorted(set(first) | set(second))
    return [k for k in keys if k not in first or k not in second or not (
        first[k] == second[k] or (math.isnan(first[k]) and math.isnan(second[k])))]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--workload', nargs='+', default=['variable', 'sgdet-variable', 'sgdet-full'],
                        choices=list(WORKLOADS))
    parser.add_argument('--images', type=int, default=64)
    parser.add_argument('--devices', nargs=2, default=['cpu', 'cuda'])
    args = parser.parse_args(argv)
    from mmengine.logging import MMLogger
    MMLogger.get_instance('mmengine', log_level='WARNING')
    failed = False
    for workload in args.workload:
        results = [evaluate_on(workload, args.images, device) for device in args.devices]
        diff = differing_keys(*results)
        failed |= bool(diff)
        verdict = 'bit-identical' if not diff else f'DIFFERENT in {len(diff)} keys, e.g. {diff[:5]}'
        print(f'{workload}: {len(results[0])} keys on {args.devices[0]} and {args.devices[1]}, {args.images} '
              f'images: {verdict}')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
