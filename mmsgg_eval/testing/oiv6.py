"""The OIv6 sample in PySGG's file format (``annotations/categories_dict.json``,
``annotations/vrd-{train,val,test}-anno.json``, ``images/{img_fn}.jpg``).

601 classes (a few real Open Images names, then placeholders) and the 30 real OIv6 predicates. Every split has
images the reader drops (an empty ``rel``, an empty ``bbox``), exact duplicate GT triplets and several predicates
on one pair (kept outside training), and boxes touching or crossing the image border (x1 = 0, x2 = W, y2 = H or
beyond: clamped to [0, W-1] x [0, H-1] by the reader, as PySGG's evaluation GT).
"""
import os.path as osp
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from .graphs import dump_json, random_graph, render, save_image
from .vocabularies import OIV6_PREDICATES, OIV6_SAMPLE_REAL_CLASSES

OIV6_NUM_CLASSES = 601
#: images per split of the sample that the reader keeps (the dropped ones come on top)
OIV6_SAMPLE_SIZES = dict(train=40, val=8, test=16)


def oiv6_vocabulary() -> Tuple[List[str], List[str]]:
    """The sample's ``categories_dict.json`` lists: 601 classes (real names first, placeholders after) and the
    30 OIv6 predicates."""
    classes = list(OIV6_SAMPLE_REAL_CLASSES) + [f'object_{i:03d}' for i in range(len(OIV6_SAMPLE_REAL_CLASSES),
                                                                                OIV6_NUM_CLASSES)]
    return classes, list(OIV6_PREDICATES)


def _touch_border(rng: np.random.Generator, boxes: np.ndarray, width: int, height: int) -> np.ndarray:
    """Move some box edges onto or past the image border (as Open Images boxes from normalised coordinates)."""
    boxes = boxes.copy()
    for k in range(len(boxes)):
        u = rng.uniform()
        if u < 0.15:
            boxes[k, 2] = width  # x2 = W: clamped to W - 1
        elif u < 0.25:
            boxes[k, 3] = height + int(rng.integers(0, 3))  # y2 = H or past it
        elif u < 0.35:
            boxes[k, 0] = 0
    return boxes


def _record(rng: np.random.Generator, classes: List[str], by_freq: Sequence[int], seed: int, kind: str,
            duplicates: bool) -> Tuple[dict, np.ndarray]:
    """One ``vrd-*-anno.json`` record of the given kind ('graph', 'no_rel', 'no_box') and its image boxes."""
    g = random_graph(rng, len(classes), len(OIV6_PREDICATES), by_freq, seed, n_obj=(2, 7), n_rel=(1, 5),
                     label_exponent=1.6)
    width, height = g['width'], g['height']
    boxes, labels, rels = _touch_border(rng, g['boxes'], width, height), g['labels'], g['relations']
    if duplicates and rng.uniform() < 0.4:  # an exact duplicate GT triplet
        rels = np.concatenate([rels, rels[:1]])
    if duplicates and rng.uniform() < 0.3:  # a second predicate on an annotated pair
        rels = np.concatenate([rels, [[rels[0, 0], rels[0, 1], (rels[0, 2] + 1) % len(OIV6_PREDICATES)]]])
    if kind == 'no_rel':
        rels = rels[:0]
    if kind == 'no_box':
        boxes, labels, rels = boxes[:0], labels[:0], rels[:0]
    img_fn = f'{int(rng.integers(0, 2 ** 62)):016x}'
    record = dict(img_fn=img_fn, img_size=[width, height], bbox=boxes.tolist(), det_labels=labels.tolist(),
                  rel=rels.tolist())
    return record, boxes


def write_oiv6_sample(out_dir: str, seed: int = 0, with_images: bool = True) -> Dict[str, Any]:
    """``oiv6/annotations/{categories_dict.json, vrd-{train,val,test}-anno.json}`` (+ ``oiv6/images/*.jpg``);
    the same annotation files with or without images.

    Returns the root and the number of kept images per split (``OIV6_SAMPLE_SIZES``)."""
    rng = np.random.default_rng([seed, 601])
    image_rng = np.random.default_rng([seed, 601, 1])  # the annotations do not depend on ``with_images``
    classes, predicates = oiv6_vocabulary()
    by_freq = list(rng.permutation(len(predicates)))
    root = osp.join(out_dir, 'oiv6')
    for split, count in OIV6_SAMPLE_SIZES.items():
        kinds = ['graph'] * count + ['no_rel', 'no_box']
        kinds = [kinds[i] for i in rng.permutation(len(kinds))]
        records = []
        for kind in kinds:
            record, boxes = _record(rng, classes, by_freq, seed, kind, duplicates=True)
            records.append(record)
            if with_images:
                width, height = record['img_size']
                save_image(osp.join(root, 'images', f'{record["img_fn"]}.jpg'), render(image_rng, width, height, boxes))
        dump_json(osp.join(root, 'annotations', f'vrd-{split}-anno.json'), records)
    dump_json(osp.join(root, 'annotations', 'categories_dict.json'), dict(obj=classes, rel=predicates))
    return dict(root=root, **{f'num_{split}': count for split, count in OIV6_SAMPLE_SIZES.items()})


__all__: Sequence[str] = ('OIV6_NUM_CLASSES', 'OIV6_SAMPLE_SIZES', 'oiv6_vocabulary', 'write_oiv6_sample')
