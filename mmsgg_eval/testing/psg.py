"""The PSG sample: ``psg.json`` with COCO-style images and panoptic PNGs (the real COCO / PSG vocabularies)."""
import os.path as osp
from typing import Any, Dict, Sequence

import numpy as np

from .graphs import dump_json, random_graph, render, save_image
from .vocabularies import COCO_STUFF_CLASSES, COCO_THING_CLASSES, PSG_PREDICATES


def write_psg_sample(out_dir: str, seed: int = 0, num_train: int = 8, num_test: int = 4) -> Dict[str, Any]:
    """``psg.json`` + COCO-style images and panoptic PNGs (segment id = R + 256 G + 65536 B)."""
    rng = np.random.default_rng([seed, 56])
    classes = COCO_THING_CLASSES + COCO_STUFF_CLASSES
    by_freq = list(rng.permutation(len(PSG_PREDICATES)))
    root = osp.join(out_dir, 'psg')
    data, test_ids = [], []
    kinds = ['train'] * num_train + ['test'] * num_test + ['no_rel']
    for k, kind in enumerate(kinds):
        folder = 'val2017' if kind == 'test' else 'train2017'
        image_id = 139 + 17 * k
        g = random_graph(rng, len(classes), len(PSG_PREDICATES), by_freq, seed, n_obj=(3, 7), n_rel=(2, 6),
                         size=(320, 640), label_exponent=1.6)
        h, w = g['height'], g['width']
        # paint the largest segment first so that every segment keeps visible pixels
        order = np.argsort(-((g['boxes'][:, 2] - g['boxes'][:, 0]) * (g['boxes'][:, 3] - g['boxes'][:, 1])),
                           kind='stable')
        seg_ids = rng.choice(np.arange(1, 1 << 24), len(order), replace=False)
        id_map = np.zeros((h, w), np.int64)
        for j in order:
            x1, y1, x2, y2 = g['boxes'][j].tolist()
            id_map[y1:y2, x1:x2] = seg_ids[j]
        segments, annotations = [], []
        for j in range(len(seg_ids)):
            ys, xs = np.nonzero(id_map == seg_ids[j])
            if len(xs) == 0:  # fully covered: give it one pixel of its own at its box corner
                id_map[g['boxes'][j][1], g['boxes'][j][0]] = seg_ids[j]
                ys, xs = np.nonzero(id_map == seg_ids[j])
            cat = int(g['labels'][j])
            segments.append(dict(id=int(seg_ids[j]), category_id=cat, iscrowd=0,
                                 isthing=int(cat < len(COCO_THING_CLASSES)), area=int(len(xs))))
            annotations.append(dict(bbox=[int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1],
                                    bbox_mode=0, category_id=cat))
        rels = g['relations'][:0] if kind == 'no_rel' else g['relations']
        if kind == 'test' and len(rels):  # an exact duplicate triplet: dropped by the test loader
            rels = np.concatenate([rels, rels[:1]])
        stem = f'{image_id:012d}'
        png = np.stack([id_map % 256, id_map // 256 % 256, id_map // 65536], -1).astype(np.uint8)
        save_image(osp.join(root, 'coco', f'panoptic_{folder}', f'{stem}.png'), png)
        save_image(osp.join(root, 'coco', folder, f'{stem}.jpg'), render(rng, w, h, g['boxes']))
        data.append(dict(file_name=f'{folder}/{stem}.jpg', height=h, width=w, image_id=str(image_id),
                         pan_seg_file_name=f'panoptic_{folder}/{stem}.png', segments_info=segments,
                         annotations=annotations, relations=rels.tolist()))
        if kind == 'test':
            test_ids.append(str(image_id))
    dump_json(osp.join(root, 'psg.json'), dict(
        data=data, thing_classes=list(COCO_THING_CLASSES), stuff_classes=list(COCO_STUFF_CLASSES),
        predicate_classes=list(PSG_PREDICATES), test_image_ids=test_ids))
    return dict(root=root, num_train=num_train, num_test=num_test)


__all__: Sequence[str] = ('write_psg_sample',)
