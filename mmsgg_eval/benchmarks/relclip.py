"""RelCLIPScore and relation-alignment-study throughput: relations scored per second with a ViT-B/32-sized
open_clip model (random weights).

The data is the seeded ``triplets`` workload of :mod:`.workloads` (SGDet, 25 GT objects, 80 detections,
100 ranked pairs per image, 150 classes / 50 predicates) with a JPEG written for every image, so the timed
loop includes what a real evaluation does: ranking and matching, decoding each image once, one
``roi_align`` crop call per batch, the image tower in chunks, the text tower on a cold cache, and
``evaluate()``. The alignment study (:func:`run_alignment_benchmark`) runs on the GT of the same images
(12 GT relations per image, every predicate annotated for a class pair is a candidate). Command line::

    python -m mmsgg_eval.benchmarks.relclip --device cpu --images 16 [--study]
"""
import argparse
import json
import os
import tempfile
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from .timing import best_of


def _write_images(samples: List[Dict], root: str, seed: int) -> None:
    """One smooth random JPEG per sample, large enough for its boxes; sets img_path / ori_shape."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    for s in samples:
        boxes = [s['gt_instances']['bboxes']]
        if 'pred_instances' in s:
            boxes.append(s['pred_instances']['bboxes'])
        far = torch.cat(boxes).cpu().max(0).values
        width, height = int(np.ceil(float(far[2]))) + 1, int(np.ceil(float(far[3]))) + 1
        low = rng.integers(0, 256, size=(max(height // 16, 2), max(width // 16, 2), 3), dtype=np.uint8)
        img = Image.fromarray(low).resize((width, height), Image.BICUBIC)
        path = os.path.join(root, f'{s["sample_idx"]:06d}.jpg')
        img.save(path, quality=90)
        s['img_path'], s['ori_shape'] = path, (height, width)


def _setup(device: str, num_images: Optional[int], batch_size: Optional[int], model_name: str, precision: str,
           seed: int) -> Tuple[bool, int, int, Any]:
    """(cuda?, images (default 16 on CPU, 512 on CUDA), crops per tower call (64 / 256), random-weight encoder)."""
    from ..encoders import OpenCLIPEncoder
    cuda = str(device).startswith('cuda')
    torch.manual_seed(seed)
    encoder = OpenCLIPEncoder(model_name, random_init=True, precision=precision, device=device)
    return cuda, num_images or (512 if cuda else 16), batch_size or (256 if cuda else 64), encoder


def run_relclip_benchmark(device: str = 'cpu', num_images: Optional[int] = None, samples_per_batch: int = 8,
                          batch_size: Optional[int] = None, topk: int = 20,
                          model_name: str = 'ViT-B-32-quickgelu', precision: str = 'fp32',
                          seed: int = 0) -> Dict[str, Any]:
    """Time ``RelCLIPScore.process()`` over ``num_images`` images + ``evaluate()``.

    Args:
        device: 'cpu' or 'cuda'.
        num_images: default 16 on CPU, 512 on CUDA.
        samples_per_batch: data samples per ``process()`` call.
        batch_size: crops per image-tower call (default 64 on CPU, 256 on CUDA).
        topk, model_name, precision: metric / encoder settings (random weights, ``random_init=True``).

    Returns a dict: ``relations_per_s`` (counted relations scored per second, end to end), ``images_per_s``,
    ``seconds``, ``num_relations``, ``tower_crops_per_s`` (image tower alone, same chunk size),
    ``gpu_peak_bytes`` (CUDA), and the settings.
    """
    from mmengine.logging import MMLogger

    from ..metrics.relclip import RelCLIPScore
    from .workloads import make_workload, meta
    MMLogger.get_instance('mmengine', log_level='WARNING')
    cuda, num_images, batch_size, encoder = _setup(device, num_images, batch_size, model_name, precision, seed)
    with tempfile.TemporaryDirectory() as root:
        warm = make_workload('triplets', samples_per_batch, seed=seed + 1, device=device)
        data = make_workload('triplets', num_images, seed=seed, device=device)
        for s in warm:  # distinct file names
            s['sample_idx'] += 10 ** 6
        _write_images(warm, root, seed + 1)
        _write_images(data, root, seed)

        def new_metric() -> RelCLIPScore:
            metric = RelCLIPScore(encoder=encoder, topk=topk, batch_size=batch_size, device=device)
            metric.dataset_meta = meta()
            return metric

        warm_metric = new_metric()  # kernels, allocator and lazy imports; not timed
        warm_metric.process({}, warm)
        warm_metric.evaluate(len(warm))
        metric = new_metric()  # cold text cache

        def evaluate() -> Tuple[Dict[str, Any], Dict[str, Any]]:
            for i in range(0, num_images, samples_per_batch):
                metric.process({}, data[i:i + samples_per_batch])
            return metric.evaluate(num_images), metric.last_report

        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        timed = best_of(evaluate, 1, cuda=cuda)  # one run: the text cache is cold once only
        seconds, (result, report) = timed['seconds'], timed['result']

    crops = torch.rand(batch_size, 3, 224, 224, device=device)
    encoder.encode_image(crops)
    tower = batch_size / best_of(lambda: encoder.encode_image(crops), 1, cuda=cuda)['seconds']
    num_relations = int(report['num_relations'])
    return dict(seconds=seconds, relations_per_s=num_relations / seconds, images_per_s=num_images / seconds,
                num_images=num_images, num_relations=num_relations, tower_crops_per_s=tower,
                gpu_peak_bytes=torch.cuda.max_memory_allocated() if cuda else None,
                relclip=result.get('relclip/RelCLIPScore'), model=model_name, precision=precision,
                batch_size=batch_size, samples_per_batch=samples_per_batch, torch_threads=torch.get_num_threads(),
                device=str(device))


class _WorkloadDataset:
    """The GT of workload samples behind the dataset interface the alignment study reads."""

    def __init__(self, samples: List[Dict], metainfo: Dict) -> None:
        self.samples, self.metainfo = samples, metainfo

    def __len__(self) -> int:
        return len(self.samples)

    def get_data_info(self, i: int) -> Dict[str, Any]:
        s = self.samples[i]
        boxes = s['gt_instances']['bboxes'].cpu().tolist()
        labels = s['gt_instances']['labels'].cpu().tolist()
        rels = torch.cat([s['gt_relations']['pair_idxs'], s['gt_relations']['labels'][:, None]], 1).cpu().numpy()
        return dict(img_path=s['img_path'], height=s['ori_shape'][0], width=s['ori_shape'][1], relations=rels,
                    instances=[dict(bbox=b, bbox_label=int(c)) for b, c in zip(boxes, labels)])


def run_alignment_benchmark(device: str = 'cpu', num_images: Optional[int] = None, batch_size: Optional[int] = None,
                            model_name: str = 'ViT-B-32-quickgelu', precision: str = 'fp32',
                            seed: int = 0) -> Dict[str, Any]:
    """Time :func:`mmsgg_eval.analysis.run_relation_alignment` on the GT of ``num_images`` workload images
    (default 16 on CPU, 512 on CUDA); returns ``relations_per_s`` (GT relations ranked per second, end to end:
    decoding, cropping, image tower, every candidate text) and the settings."""
    from ..analysis import run_relation_alignment
    from .workloads import make_workload, meta
    cuda, num_images, batch_size, encoder = _setup(device, num_images, batch_size, model_name, precision, seed)
    with tempfile.TemporaryDirectory() as root:
        data = make_workload('triplets', num_images + 2, seed=seed, device='cpu')
        _write_images(data, root, seed)
        warm = _WorkloadDataset(data[:2], meta())
        run_relation_alignment(warm, encoder, batch_size=batch_size, device=device, progress=False)
        dataset = _WorkloadDataset(data[2:], meta())
        timed = best_of(lambda: run_relation_alignment(dataset, encoder, batch_size=batch_size, device=device,
                                                       progress=False), 1, cuda=cuda)
        seconds, rows = timed['seconds'], timed['result']
    return dict(seconds=seconds, relations_per_s=len(rows) / seconds, num_relations=len(rows),
                num_images=num_images, candidates_per_relation=float(rows.size.mean()), model=model_name,
                precision=precision, batch_size=batch_size, torch_threads=torch.get_num_threads(),
                device=str(device))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--images', type=int, default=None)
    parser.add_argument('--samples-per-batch', type=int, default=8)
    parser.add_argument('--batch-size', type=int, default=None, help='crops per image-tower call')
    parser.add_argument('--precision', default='fp32', choices=['fp32', 'fp16', 'bf16'])
    parser.add_argument('--study', action='store_true', help='also time the relation alignment study')
    args = parser.parse_args()
    out = run_relclip_benchmark(args.device, args.images, args.samples_per_batch, args.batch_size,
                                precision=args.precision)
    if args.study:
        out['study'] = run_alignment_benchmark(args.device, args.images, args.batch_size, precision=args.precision)
    print(json.dumps(out))


if __name__ == '__main__':
    main()
