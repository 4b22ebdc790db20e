#!/usr/bin/env python
"""Time the indexing of a synthetic VG150-sized h5 (default 100k images; no image files).

    python tools/bench_datasets.py [--num-images 100000] [--work-dir /tmp/vg150_bench] [--scaling]

Prints the seconds to build ``VG150Dataset`` for each split (metainfo with training statistics + data list +
serialisation). ``--scaling`` also times 25k and 50k images to show the growth is linear.
"""
import argparse
import os.path as osp
import tempfile
import time

from mmsgg_eval.datasets import VG150Dataset
from mmsgg_eval.testing import write_synthetic_vg150


def bench(num_images: int, work_dir: str) -> None:
    root = osp.join(work_dir, f'vg150_{num_images}')
    t0 = time.perf_counter()
    write_synthetic_vg150(root, num_images)
    print(f'{num_images} images: wrote synthetic files in {time.perf_counter() - t0:.2f} s')
    for split in ('test', 'val', 'train'):
        t0 = time.perf_counter()
        ds = VG150Dataset(data_root=root, split=split)
        dt = time.perf_counter() - t0
        n_rel = sum(len(ds.get_data_info(i)['relations']) for i in range(min(len(ds), 1000)))
        print(f'  split={split:5s}: {len(ds):6d} images indexed in {dt:.2f} s '
              f'({n_rel} relations in the first 1000)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--num-images', type=int, default=100000)
    parser.add_argument('--work-dir', default=None, help='default: a temporary folder')
    parser.add_argument('--scaling', action='store_true', help='also time num_images / 4 and / 2')
    args = parser.parse_args()
    sizes = [args.num_images // 4, args.num_images // 2, args.num_images] if args.scaling else [args.num_images]
    if args.work_dir:
        for n in sizes:
            bench(n, args.work_dir)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            for n in sizes:
                bench(n, tmp)


if __name__ == '__main__':
    main()
