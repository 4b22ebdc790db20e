"""VG150 files in the real VG-SGG format: the h5, the dicts json, ``image_data.json`` records; the VG150 sample and
a VG150-sized synthetic set (no images) for benchmarks.

The format's facts come from the reader (:mod:`mmsgg_eval.datasets.vg150`): the 1024 box scale and the corrupted
image ids that the loader removes from ``image_data.json``.
"""
import os
import os.path as osp
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from ..datasets.vg150 import BOX_SCALE, CORRUPTED_IMAGE_IDS
from .graphs import dump_json, random_graph, render, save_image, zipf
from .vocabularies import VG150_CLASSES, VG150_PREDICATES, VG150_PREDICATES_BY_FREQUENCY

VG150_SAMPLE_NUM_VAL = 8
"""Val images of the VG150 sample: use ``VG150Dataset(num_val_images=VG150_SAMPLE_NUM_VAL)`` with it (the real
split has 5,000)."""


def encode_boxes_1024(boxes_xyxy: np.ndarray, longer_side: np.ndarray) -> np.ndarray:
    """Pixel xyxy -> VG-SGG ``boxes_1024`` (cx, cy, w, h at longer side ``BOX_SCALE`` = 1024), int32, w and h >= 1."""
    scale = BOX_SCALE / np.asarray(longer_side, np.float64)[:, None]
    b = np.asarray(boxes_xyxy, np.float64)
    centre = np.rint((b[:, :2] + b[:, 2:]) / 2 * scale)
    size = np.maximum(np.rint((b[:, 2:] - b[:, :2]) * scale), 1)
    return np.concatenate([centre, size], 1).astype(np.int32)


def write_vg150_h5(path: str, split: np.ndarray, obj_counts: np.ndarray, rel_counts: np.ndarray, labels: np.ndarray,
                   boxes_1024: np.ndarray, relationships: np.ndarray, predicates: np.ndarray) -> None:
    """Write a ``VG-SGG-with-attri.h5`` with the real keys and dtypes.

    Args:
        split: int [I] 0 (train/val) or 2 (test).
        obj_counts / rel_counts: int [I] objects / relations per image (0 -> img_to_first_* = -1).
        labels: 1-based classes [N]; boxes_1024: int32 [N, 4] cx, cy, w, h; relationships: GLOBAL object rows
            [R, 2]; predicates: 1-based [R].
    """
    import h5py
    obj_counts, rel_counts = np.asarray(obj_counts, np.int64), np.asarray(rel_counts, np.int64)

    def first_last(counts: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        first = np.cumsum(counts) - counts
        has = counts > 0
        return np.where(has, first, -1).astype(np.int32), np.where(has, first + counts - 1, -1).astype(np.int32)
    first_box, last_box = first_last(obj_counts)
    first_rel, last_rel = first_last(rel_counts)
    n = len(labels)
    boxes_1024 = np.asarray(boxes_1024, np.int32)
    boxes_512 = np.maximum(boxes_1024 // 2, np.array([0, 0, 1, 1], np.int32))
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    with h5py.File(path, 'w') as f:
        def put(name: str, value: np.ndarray) -> None:
            f.create_dataset(name, data=value, track_times=False)
        put('active_object_mask', np.ones((n, 1), dtype=bool))
        put('attributes', np.zeros((n, 10), dtype=np.int64))
        put('boxes_1024', boxes_1024)
        put('boxes_512', boxes_512)
        put('img_to_first_box', first_box)
        put('img_to_first_rel', first_rel)
        put('img_to_last_box', last_box)
        put('img_to_last_rel', last_rel)
        put('labels', np.asarray(labels, np.int64).reshape(-1, 1))
        put('predicates', np.asarray(predicates, np.int64).reshape(-1, 1))
        put('relationships', np.asarray(relationships, np.int32).reshape(-1, 2))
        put('split', np.asarray(split, np.int32))


def vg150_dict_json(classes: Sequence[str] = VG150_CLASSES, predicates: Sequence[str] = VG150_PREDICATES,
                    predicate_counts: Optional[Sequence[int]] = None) -> dict:
    """A ``VG-SGG-dicts-with-attri.json`` (string ids '1'..N, both directions, counts, no attributes)."""
    counts = list(predicate_counts) if predicate_counts is not None else [0] * len(predicates)
    return dict(object_count={c: 0 for c in classes},
                idx_to_label={str(i): c for i, c in enumerate(classes, 1)},
                predicate_to_idx={p: i for i, p in enumerate(predicates, 1)},
                predicate_count={p: int(c) for p, c in zip(predicates, counts)},
                idx_to_predicate={str(i): p for i, p in enumerate(predicates, 1)},
                label_to_idx={c: i for i, c in enumerate(classes, 1)},
                attribute_count={}, idx_to_attribute={}, attribute_to_idx={})


def image_record(image_id: int, width: int, height: int) -> dict:
    """One ``image_data.json`` record."""
    return dict(width=int(width), url=f'https://cs.stanford.edu/people/rak248/VG_100K/{image_id}.jpg',
                height=int(height), image_id=int(image_id), coco_id=None, flickr_id=None)


def write_vg150_sample(out_dir: str, seed: int = 0, num_train: int = 40, num_test: int = 13,
                       num_val: int = VG150_SAMPLE_NUM_VAL, with_images: bool = True) -> Dict[str, Any]:
    """The VG150 sample (see :mod:`mmsgg_eval.testing.sample_data`). Returns a summary of what was written."""
    rng = np.random.default_rng([seed, 150])
    by_freq = [VG150_PREDICATES.index(p) for p in VG150_PREDICATES_BY_FREQUENCY]
    kinds = ['split0'] * (num_val + num_train) + ['test'] * num_test + ['no_rel', 'no_rel', 'no_box']
    order = rng.permutation(len(kinds))
    kinds = [kinds[i] for i in order]
    images, graphs = [], []
    next_id = 1585
    for kind in kinds:
        if next_id in CORRUPTED_IMAGE_IDS:  # in image_data.json, absent from the h5 (the loader drops it)
            images.append(image_record(next_id, 500, 375))
            next_id += 1
        # concentrated classes (as in VG, where a few dozen classes dominate): class pairs recur between the
        # training and test splits, so the frequency baseline of the demo has something to learn
        g = random_graph(rng, len(VG150_CLASSES), len(VG150_PREDICATES), by_freq, seed, label_exponent=1.6)
        if kind == 'test' and rng.uniform() < 0.4:  # an exact duplicate GT triplet (kept by the test loader)
            g['relations'] = np.concatenate([g['relations'], g['relations'][:1]])
        if kind == 'no_rel':
            g['relations'] = g['relations'][:0]
        if kind == 'no_box':
            g['boxes'], g['labels'], g['relations'] = g['boxes'][:0], g['labels'][:0], g['relations'][:0]
        g.update(image_id=next_id, split=2 if kind == 'test' else 0)
        images.append(image_record(next_id, g['width'], g['height']))
        graphs.append(g)
        next_id += 1
    obj_counts = np.array([len(g['labels']) for g in graphs])
    rel_counts = np.array([len(g['relations']) for g in graphs])
    obj_start = np.cumsum(obj_counts) - obj_counts
    longer = np.repeat([max(g['width'], g['height']) for g in graphs], obj_counts)
    boxes = np.concatenate([g['boxes'] for g in graphs]).reshape(-1, 4)
    rels = np.concatenate([g['relations'] for g in graphs]).reshape(-1, 3)
    rel_img = np.repeat(np.arange(len(graphs)), rel_counts)
    root = osp.join(out_dir, 'vg150')
    write_vg150_h5(osp.join(root, 'VG-SGG-with-attri.h5'), np.array([g['split'] for g in graphs]), obj_counts,
                   rel_counts, np.concatenate([g['labels'] for g in graphs]) + 1, encode_boxes_1024(boxes, longer),
                   rels[:, :2] + obj_start[rel_img][:, None], rels[:, 2] + 1)
    train_counts = np.bincount(rels[:, 2], minlength=len(VG150_PREDICATES))
    dump_json(osp.join(root, 'VG-SGG-dicts-with-attri.json'), vg150_dict_json(predicate_counts=train_counts))
    dump_json(osp.join(root, 'image_data.json'), images)
    if with_images:
        for g in graphs:
            save_image(osp.join(root, 'VG_100K', f'{g["image_id"]}.jpg'),
                       render(rng, g['width'], g['height'], g['boxes']))
    return dict(root=root, num_h5_images=len(graphs), num_val=num_val, num_train=num_train, num_test=num_test)


def synthetic_vg150_arrays(num_images: int, seed: int = 0, objects: Tuple[int, int] = (3, 20),
                           relations: Tuple[int, int] = (1, 12), test_fraction: float = 0.3) -> Dict[str, Any]:
    """VG150-sized synthetic h5 arrays + ``image_data.json`` records, fully vectorised (for benchmarks)."""
    rng = np.random.default_rng([seed, num_images])
    split = np.where(rng.uniform(size=num_images) < test_fraction, 2, 0)
    obj_counts = rng.integers(objects[0], objects[1] + 1, num_images)
    rel_counts = rng.integers(relations[0], relations[1] + 1, num_images)
    n, r = int(obj_counts.sum()), int(rel_counts.sum())
    widths = rng.integers(300, 1025, num_images)
    heights = rng.integers(300, 1025, num_images)
    longer = np.repeat(np.maximum(widths, heights), obj_counts)
    w_obj, h_obj = np.repeat(widths, obj_counts), np.repeat(heights, obj_counts)
    bw = np.maximum((rng.uniform(0.05, 0.6, n) * w_obj).astype(np.int64), 2)
    bh = np.maximum((rng.uniform(0.05, 0.6, n) * h_obj).astype(np.int64), 2)
    x1 = (rng.uniform(size=n) * (w_obj - bw)).astype(np.int64)
    y1 = (rng.uniform(size=n) * (h_obj - bh)).astype(np.int64)
    boxes = encode_boxes_1024(np.stack([x1, y1, x1 + bw, y1 + bh], 1), longer)
    obj_start = np.cumsum(obj_counts) - obj_counts
    rel_img = np.repeat(np.arange(num_images), rel_counts)
    local = (rng.uniform(size=(r, 2)) * obj_counts[rel_img][:, None]).astype(np.int64)
    ids = np.arange(10, 10 + num_images + len([i for i in CORRUPTED_IMAGE_IDS if i < 10 + num_images]))
    ids = ids[~np.isin(ids, CORRUPTED_IMAGE_IDS)][:num_images]
    records = [image_record(i, w, h) for i, w, h in zip(ids.tolist(), widths.tolist(), heights.tolist())]
    num_classes, num_predicates = len(VG150_CLASSES), len(VG150_PREDICATES)
    labels = rng.choice(num_classes, n, p=zipf(num_classes, 0.6)) + 1
    predicates = rng.choice(num_predicates, r, p=zipf(num_predicates, 1.3)) + 1
    return dict(split=split, obj_counts=obj_counts, rel_counts=rel_counts, labels=labels, boxes_1024=boxes,
                relationships=local + obj_start[rel_img][:, None], predicates=predicates, image_data=records)


def write_synthetic_vg150(out_dir: str, num_images: int, seed: int = 0) -> str:
    """Write a synthetic VG150 (h5 + dict + image_data.json, no images) of ``num_images`` images; returns out_dir."""
    arrays = synthetic_vg150_arrays(num_images, seed)
    write_vg150_h5(osp.join(out_dir, 'VG-SGG-with-attri.h5'), arrays['split'], arrays['obj_counts'],
                   arrays['rel_counts'], arrays['labels'], arrays['boxes_1024'], arrays['relationships'],
                   arrays['predicates'])
    dump_json(osp.join(out_dir, 'VG-SGG-dicts-with-attri.json'), vg150_dict_json())
    dump_json(osp.join(out_dir, 'image_data.json'), arrays['image_data'])
    return out_dir


__all__: Sequence[str] = ('VG150_SAMPLE_NUM_VAL', 'encode_boxes_1024', 'write_vg150_h5', 'vg150_dict_json',
                          'image_record', 'write_vg150_sample', 'synthetic_vg150_arrays', 'write_synthetic_vg150')
