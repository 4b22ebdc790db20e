"""The RSVGD sample in the DIOR-RSVG format: ``Annotations/*.xml`` with referring expressions, ``JPEGImages/*.jpg``,
``{train,val,test}.txt`` of object indices."""
import os
import os.path as osp
from typing import Any, Dict, Sequence

import numpy as np

from ..datasets.rsvgd import DIOR_IMAGE_SIZE
from .graphs import random_boxes, render, save_image
from .vocabularies import DIOR_SAMPLE_CLASSES

_COLOURS = ('red', 'green', 'blue', 'white', 'gray', 'large', 'small')
_PLACES = ('in the upper left', 'in the middle', 'on the right', 'at the bottom', 'next to the road', 'on the left')


def rsvgd_xml(filename: str, objects: Sequence[dict], width: int = DIOR_IMAGE_SIZE,
              height: int = DIOR_IMAGE_SIZE) -> str:
    """A DIOR-RSVG annotation XML; objects: dicts with name, bbox (xmin, ymin, xmax, ymax ints), description."""
    parts = ['<?xml version="1.0" encoding="UTF-8" standalone="yes"?>', '<annotation>',
             f'  <filename>{filename}</filename>', '  <source>', '    <database>DIOR</database>', '  </source>',
             '  <size>', f'    <width>{width}</width>', f'    <height>{height}</height>', '    <depth>3</depth>',
             '  </size>', '  <segmented>0</segmented>']
    for obj in objects:
        x1, y1, x2, y2 = (int(v) for v in obj['bbox'])
        parts += ['  <object>', f'    <name>{obj["name"]}</name>', '    <pose>Unspecified</pose>', '    <bndbox>',
                  f'      <xmin>{x1}</xmin>', f'      <ymin>{y1}</ymin>', f'      <xmax>{x2}</xmax>',
                  f'      <ymax>{y2}</ymax>', '    </bndbox>', f'    <description>{obj["description"]}</description>',
                  '  </object>']
    parts.append('</annotation>')
    return '\n'.join(parts)


def write_rsvgd_sample(out_dir: str, seed: int = 0, num_images: int = 8) -> Dict[str, Any]:
    """``Annotations/*.xml`` (1-4 objects each) + square ``JPEGImages/*.jpg`` (``DIOR_IMAGE_SIZE``) +
    train/val/test.txt."""
    rng = np.random.default_rng([seed, 20])
    root = osp.join(out_dir, 'rsvgd')
    total = 0
    for k in range(1, num_images + 1):
        n = int(rng.integers(1, 5))
        boxes = random_boxes(rng, DIOR_IMAGE_SIZE, DIOR_IMAGE_SIZE, n)
        objects = []
        for b in boxes:
            name = DIOR_SAMPLE_CLASSES[int(rng.integers(len(DIOR_SAMPLE_CLASSES)))]
            text = f'The {_COLOURS[int(rng.integers(len(_COLOURS)))]} {name} {_PLACES[int(rng.integers(len(_PLACES)))]}'
            objects.append(dict(name=name, bbox=b.tolist(), description=text))
        stem = f'{k:05d}'
        os.makedirs(osp.join(root, 'Annotations'), exist_ok=True)
        with open(osp.join(root, 'Annotations', f'{stem}.xml'), 'w') as f:
            f.write(rsvgd_xml(f'{stem}.jpg', objects))
        save_image(osp.join(root, 'JPEGImages', f'{stem}.jpg'), render(rng, DIOR_IMAGE_SIZE, DIOR_IMAGE_SIZE, boxes))
        total += n
    perm = rng.permutation(total)
    n_val, n_test = max(1, total * 15 // 100), max(1, total // 4)
    splits = dict(val=perm[:n_val], test=perm[n_val:n_val + n_test], train=perm[n_val + n_test:])
    for name, idx in splits.items():
        with open(osp.join(root, f'{name}.txt'), 'w') as f:
            f.write(''.join(f'{i}\n' for i in np.sort(idx).tolist()))
    return dict(root=root, num_objects=total, **{f'num_{k}': len(v) for k, v in splits.items()})


__all__: Sequence[str] = ('rsvgd_xml', 'write_rsvgd_sample')
