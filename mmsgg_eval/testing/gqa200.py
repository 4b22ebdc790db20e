"""The GQA200 sample in the SHA-GCL file format (``GQA_200_ID_Info.json``, ``GQA_200_{Train,Test}.json``, images).

Its vocabulary is a placeholder: the VG150 names extended to 200 classes and 100 predicates.
"""
import os.path as osp
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from .graphs import dump_json, random_graph, render, save_image
from .vocabularies import VG150_CLASSES, VG150_PREDICATES


def gqa200_vocabulary() -> Tuple[List[str], List[str]]:
    """Placeholder GQA200 vocabulary: the VG150 names extended to 200 classes / 100 predicates (no background)."""
    classes = list(VG150_CLASSES) + [f'object_{i:03d}' for i in range(151, 201)]
    predicates = list(VG150_PREDICATES) + [f'relation_{i:03d}' for i in range(51, 101)]
    return classes, predicates


def write_gqa200_sample(out_dir: str, seed: int = 0, num_train: int = 20, num_test: int = 12,
                        with_images: bool = True) -> Dict[str, Any]:
    """``GQA_200_ID_Info.json`` + ``GQA_200_Train.json`` + ``GQA_200_Test.json`` (+ images)."""
    rng = np.random.default_rng([seed, 200])
    classes, predicates = gqa200_vocabulary()
    by_freq = list(rng.permutation(len(predicates)))
    root = osp.join(out_dir, 'gqa200')
    rel_count = np.zeros(len(predicates), np.int64)
    next_id = 2354786
    for name, count, extra in (('Train', num_train, ()), ('Test', num_test, ('no_rel', 'no_box'))):
        files = dict(filenames_all=[], img_info_all=[], gt_boxes_all=[], gt_classes_all=[], relationships_all=[])
        for kind in ['graph'] * count + list(extra):
            g = random_graph(rng, len(classes), len(predicates), by_freq, seed, label_exponent=1.6)
            boxes, labels, rels = g['boxes'], g['labels'], g['relations']
            if kind == 'no_rel':
                rels = rels[:0]
            if kind == 'no_box':
                boxes, labels, rels = boxes[:0], labels[:0], rels[:0]
            if name == 'Train':
                rel_count += np.bincount(rels[:, 2], minlength=len(predicates))
            fname = f'{next_id}.jpg'
            files['filenames_all'].append(fname)
            files['img_info_all'].append(dict(width=g['width'], height=g['height'], image_id=str(next_id)))
            files['gt_boxes_all'].append(boxes.tolist())
            files['gt_classes_all'].append((labels + 1).tolist())
            files['relationships_all'].append(np.concatenate([rels[:, :2], rels[:, 2:] + 1], 1).tolist())
            if with_images:
                save_image(osp.join(root, 'images', fname), render(rng, g['width'], g['height'], boxes))
            next_id += 1
        dump_json(osp.join(root, f'GQA_200_{name}.json'), files)
    dump_json(osp.join(root, 'GQA_200_ID_Info.json'), dict(
        ind_to_classes=['__background__'] + classes, ind_to_predicates=['__background__'] + predicates,
        rel_count={p: int(c) for p, c in zip(predicates, rel_count)},
        rel_name_to_id={p: i for i, p in enumerate(predicates, 1)}))
    return dict(root=root, num_train=num_train, num_test=num_test)


__all__: Sequence[str] = ('gqa200_vocabulary', 'write_gqa200_sample')
