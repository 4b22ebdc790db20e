"""Example prediction files for the samples (``tools/make_sample_data.py --predictions``): what a user's own files
look like in each offline input format, for the README's commands, the docs' examples and the tests.

* :func:`sgdet_records`: JSONL predictions (one dict per image): the GT boxes moved by one pixel, every ordered
  pair, random [R, P+1] scores (column 0 = no relation) with the GT predicate raised on about half of the GT
  relations;
* :func:`vlm_answer_lines`: VLM answers giving back the GT graph as JSON on a 0-1000 canvas, image 1 answered
  with prose (a failure);
* :func:`grounding_predictions`: one box per RSVGD sample, every other one shifted by its width (a miss).

Seeded, so the files and their numbers are the same on every machine.
"""
import json
import os
import os.path as osp
from typing import Any, Dict, List

import numpy as np


def sgdet_records(dataset: Any, seed: int = 0) -> List[Dict[str, Any]]:
    """JSONL prediction records of every sample of ``dataset`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    num_pred = len(dataset.metainfo['predicates'])
    out = []
    for i in range(len(dataset)):
        info = dataset.get_data_info(i)
        boxes = np.array([inst['bbox'] for inst in info['instances']], dtype=np.float32).reshape(-1, 4) + 1.0
        labels = [inst['bbox_label'] for inst in info['instances']]
        n = len(labels)
        pairs = [[a, b] for a in range(n) for b in range(n) if a != b]
        scores = rng.random((len(pairs), num_pred + 1)).round(4)
        for s, o, p in np.asarray(info['relations']).reshape(-1, 3).tolist():
            if rng.random() < 0.5:
                scores[pairs.index([s, o]), p + 1] = 2.0
        out.append({'sample_idx': i, 'img_id': info.get('img_id'),
                    'pred_instances': {'bboxes': boxes.tolist(), 'labels': labels, 'scores': [0.9] * n},
                    'pred_relations': {'pair_idxs': pairs, 'scores': scores.tolist()}})
    return out


def vlm_answer_lines(dataset: Any) -> List[Dict[str, Any]]:
    """VLM answers (``{"sample_idx", "img_id", "output"}``) of every sample (see the module docstring)."""
    classes, predicates = dataset.metainfo['classes'], dataset.metainfo['predicates']
    lines = []
    for i in range(len(dataset)):
        info = dataset.get_data_info(i)
        if i == 1:
            lines.append({'sample_idx': i, 'img_id': info.get('img_id'), 'output': 'I cannot see the image.'})
            continue
        w, h = info['width'], info['height']
        objs = [{'id': f'{classes[inst["bbox_label"]]}.{j}',
                 'bbox': [round(inst['bbox'][0] / w * 1000), round(inst['bbox'][1] / h * 1000),
                          round(inst['bbox'][2] / w * 1000), round(inst['bbox'][3] / h * 1000)]}
                for j, inst in enumerate(info['instances'])]
        rels = [{'subject': objs[s]['id'], 'predicate': predicates[p], 'object': objs[o]['id']}
                for s, o, p in np.asarray(info['relations']).reshape(-1, 3).tolist()]
        text = '```json\n' + json.dumps({'objects': objs, 'relationships': rels}) + '\n```'
        lines.append({'sample_idx': i, 'img_id': info.get('img_id'), 'output': text})
    return lines


def grounding_predictions(dataset: Any) -> List[Dict[str, Any]]:
    """One ``{"sample_idx", "bbox"}`` (xyxy pixels) per grounding sample (see the module docstring)."""
    preds = []
    for i in range(len(dataset)):
        x1, y1, x2, y2 = dataset.get_data_info(i)['instances'][0]['bbox']
        shift = 0 if i % 2 == 0 else (x2 - x1)
        preds.append({'sample_idx': i, 'bbox': [x1 + shift, y1, x2 + shift, y2]})
    return preds


def write_jsonl(path: str, rows: List[Dict[str, Any]]) -> None:
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    with open(path, 'w') as f:
        f.write(''.join(json.dumps(r) + '\n' for r in rows))


def write_sample_predictions(out_dir: str, datasets: List[str]) -> Dict[str, str]:
    """Example prediction files next to the samples under ``out_dir``: ``vg150/predictions.jsonl`` and
    ``vg150/vlm_answers.jsonl`` (the VG150 test split), ``rsvgd/predictions.json`` (the RSVGD test split).
    Returns {name: path}."""
    written: Dict[str, str] = {}
    if 'vg150' in datasets:
        from mmsgg_eval.datasets import VG150Dataset
        from .vg150 import VG150_SAMPLE_NUM_VAL
        ds = VG150Dataset(data_root=osp.join(out_dir, 'vg150') + '/', split='test', pipeline=[],
                          num_val_images=VG150_SAMPLE_NUM_VAL)
        written['vg150_jsonl'] = osp.join(out_dir, 'vg150', 'predictions.jsonl')
        write_jsonl(written['vg150_jsonl'], sgdet_records(ds))
        written['vg150_vlm'] = osp.join(out_dir, 'vg150', 'vlm_answers.jsonl')
        write_jsonl(written['vg150_vlm'], vlm_answer_lines(ds))
    if 'rsvgd' in datasets:
        from mmsgg_eval.datasets import RSVGDDataset
        ds = RSVGDDataset(data_root=osp.join(out_dir, 'rsvgd') + '/', split='test', pipeline=[])
        written['rsvgd_grounding'] = osp.join(out_dir, 'rsvgd', 'predictions.json')
        with open(written['rsvgd_grounding'], 'w') as f:
            json.dump(grounding_predictions(ds), f)
    return written
