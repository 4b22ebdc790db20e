"""Random image graphs and the file writers shared by the sample datasets (numpy; PIL only to save images)."""
import json
import os
import os.path as osp
from typing import Any, Dict, Sequence, Tuple

import numpy as np


def zipf(n: int, exponent: float) -> np.ndarray:
    """Zipf weights 1 / k ** exponent of ranks k = 1..n, normalised to sum to 1 (float64 [n])."""
    w = 1.0 / np.arange(1, n + 1) ** exponent
    return w / w.sum()


def random_boxes(rng: np.random.Generator, width: int, height: int, n: int) -> np.ndarray:
    """Integer xyxy boxes inside a width x height image (int64 [n, 4]); sizes 8%-60% of each side."""
    bw = np.maximum((rng.uniform(0.08, 0.6, n) * width).astype(np.int64), 2)
    bh = np.maximum((rng.uniform(0.08, 0.6, n) * height).astype(np.int64), 2)
    x1 = (rng.uniform(0, 1, n) * (width - bw)).astype(np.int64)
    y1 = (rng.uniform(0, 1, n) * (height - bh)).astype(np.int64)
    return np.stack([x1, y1, x1 + bw, y1 + bh], 1)


def render(rng: np.random.Generator, width: int, height: int, boxes: np.ndarray) -> np.ndarray:
    """RGB uint8 image: a smooth gradient with a flat coloured rectangle per box (compresses small)."""
    base = rng.integers(40, 200, 3)
    ys = np.linspace(0, 1, height, dtype=np.float32)[:, None, None]
    xs = np.linspace(0, 1, width, dtype=np.float32)[None, :, None]
    img = (base + 40 * ys + 30 * xs).clip(0, 255).astype(np.uint8)
    img = np.broadcast_to(img, (height, width, 3)).copy()
    for x1, y1, x2, y2 in np.asarray(boxes, np.int64).reshape(-1, 4).tolist():
        img[max(y1, 0):max(y2, 0), max(x1, 0):max(x2, 0)] = rng.integers(0, 256, 3)
    return img


def save_image(path: str, img: np.ndarray) -> None:
    """Save an RGB uint8 array as PNG (``.png``) or JPEG (quality 85), creating the folder."""
    from PIL import Image
    os.makedirs(osp.dirname(path), exist_ok=True)
    fmt = 'PNG' if path.lower().endswith('.png') else 'JPEG'
    kwargs = dict(quality=85) if fmt == 'JPEG' else dict(optimize=False)
    Image.fromarray(img).save(path, format=fmt, **kwargs)


def dump_json(path: str, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path``, creating the folder."""
    os.makedirs(osp.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        json.dump(obj, f)


def random_relations(rng: np.random.Generator, labels: np.ndarray, n_rel: int, num_predicates: int,
                     by_frequency: Sequence[int], seed: int) -> np.ndarray:
    """[n_rel, 3] (subject idx, object idx, 0-based predicate) on distinct ordered pairs of distinct objects;
    the predicate is the (subject class, object class) pair's preferred one 70% of the time, else Zipf-random
    (long tail)."""
    n = len(labels)
    pairs = np.array([(s, o) for s in range(n) for o in range(n) if s != o], np.int64).reshape(-1, 2)
    pairs = pairs[rng.permutation(len(pairs))[:n_rel]]
    p = zipf(num_predicates, 1.3)
    out = np.zeros((len(pairs), 3), np.int64)
    for k, (s, o) in enumerate(pairs.tolist()):
        pair_rng = np.random.default_rng([seed, int(labels[s]), int(labels[o])])
        preferred = by_frequency[pair_rng.choice(num_predicates, p=p)]
        out[k] = (s, o, preferred if rng.uniform() < 0.7 else by_frequency[rng.choice(num_predicates, p=p)])
    return out


def random_graph(rng: np.random.Generator, num_classes: int, num_predicates: int, by_frequency: Sequence[int],
                 seed: int, n_obj: Tuple[int, int] = (3, 10), n_rel: Tuple[int, int] = (2, 8),
                 size: Tuple[int, int] = (300, 700), label_exponent: float = 0.6) -> Dict[str, Any]:
    """One random image graph: width, height, boxes (int xyxy pixels), labels (0-based, Zipf over classes with
    ``label_exponent``), relations."""
    width, height = (int(v) for v in rng.integers(size[0], size[1] + 1, 2))
    n = int(rng.integers(n_obj[0], n_obj[1] + 1))
    labels = rng.choice(num_classes, n, p=zipf(num_classes, label_exponent))
    n_relations = int(rng.integers(n_rel[0], n_rel[1] + 1))
    rels = random_relations(rng, labels, n_relations, num_predicates, by_frequency, seed)
    return dict(width=width, height=height, boxes=random_boxes(rng, width, height, n), labels=labels,
                relations=rels)
