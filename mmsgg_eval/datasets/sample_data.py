"""A small, deterministic sample of each dataset in the REAL on-disk formats (for demos and tests).

``make_sample_data(out_dir)`` writes::

    vg150/   VG-SGG-with-attri.h5, VG-SGG-dicts-with-attri.json, image_data.json, VG_100K/*.jpg
    gqa200/  GQA_200_ID_Info.json, GQA_200_Train.json, GQA_200_Test.json, images/*.jpg
    psg/     psg.json, coco/{train2017,val2017}/*.jpg, coco/panoptic_{train2017,val2017}/*.png
    rsvgd/   Annotations/*.xml, JPEGImages/*.jpg, train.txt, val.txt, test.txt

The VG150 sample uses the real VG150 vocabulary (150 classes, 50 predicates) with long-tailed predicates that
depend on the (subject, object) classes (so a frequency prior is learnable), ``VG150_SAMPLE_NUM_VAL`` val +
about 40 train + 13 test images, some duplicate test triplets, some images dropped by the loader (no boxes / no
relations) and the corrupted image id 1592 in ``image_data.json`` (absent from the h5). Because the sample has
far fewer than 5,000 split-0 images, use ``VG150Dataset(num_val_images=VG150_SAMPLE_NUM_VAL)`` with it.
GQA200/PSG class names outside the real public vocabularies are placeholders.

Images are real JPEG/PNG files (coloured rectangles at the object boxes) so that mmdet's ``LoadImageFromFile``
works. Same seed, same bytes (h5 written without timestamps).
"""
import json
import os
import os.path as osp
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

VG150_CLASSES = (
    'airplane', 'animal', 'arm', 'bag', 'banana', 'basket', 'beach', 'bear', 'bed', 'bench', 'bike', 'bird', 'board',
    'boat', 'book', 'boot', 'bottle', 'bowl', 'box', 'boy', 'branch', 'building', 'bus', 'cabinet', 'cap', 'car', 'cat',
    'chair', 'child', 'clock', 'coat', 'counter', 'cow', 'cup', 'curtain', 'desk', 'dog', 'door', 'drawer', 'ear',
    'elephant', 'engine', 'eye', 'face', 'fence', 'finger', 'flag', 'flower', 'food', 'fork', 'fruit', 'giraffe',
    'girl',
    'glass', 'glove', 'guy', 'hair', 'hand', 'handle', 'hat', 'head', 'helmet', 'hill', 'horse', 'house', 'jacket',
    'jean', 'kid', 'kite', 'lady', 'lamp', 'laptop', 'leaf', 'leg', 'letter', 'light', 'logo', 'man', 'men',
    'motorcycle', 'mountain', 'mouth', 'neck', 'nose', 'number', 'orange', 'pant', 'paper', 'paw', 'people', 'person',
    'phone', 'pillow', 'pizza', 'plane', 'plant', 'plate', 'player', 'pole', 'post', 'pot', 'racket', 'railing', 'rock',
    'roof', 'room', 'screen', 'seat', 'sheep', 'shelf', 'shirt', 'shoe', 'short', 'sidewalk', 'sign', 'sink',
    'skateboard', 'ski', 'skier', 'sneaker', 'snow', 'sock', 'stand', 'street', 'surfboard', 'table', 'tail', 'tie',
    'tile', 'tire', 'toilet', 'towel', 'tower', 'track', 'train', 'tree', 'truck', 'trunk', 'umbrella', 'vase',
    'vegetable', 'vehicle', 'wave', 'wheel', 'window', 'windshield', 'wing', 'wire', 'woman', 'zebra')
VG150_PREDICATES = (
    'above', 'across', 'against', 'along', 'and', 'at', 'attached to', 'behind', 'belonging to', 'between', 'carrying',
    'covered in', 'covering', 'eating', 'flying in', 'for', 'from', 'growing on', 'hanging from', 'has', 'holding',
    'in',
    'in front of', 'laying on', 'looking at', 'lying on', 'made of', 'mounted on', 'near', 'of', 'on', 'on back of',
    'over', 'painted on', 'parked on', 'part of', 'playing', 'riding', 'says', 'sitting on', 'standing on', 'to',
    'under', 'using', 'walking in', 'walking on', 'watching', 'wearing', 'wears', 'with')
# VG150 predicates from most to least frequent (order of the real training counts): the sample's long tail.
VG150_PREDICATES_BY_FREQUENCY = (
    'on', 'has', 'in', 'of', 'wearing', 'near', 'with', 'above', 'holding', 'behind', 'under', 'sitting on', 'wears',
    'standing on', 'in front of', 'attached to', 'at', 'hanging from', 'over', 'for', 'riding', 'carrying', 'eating',
    'walking on', 'playing', 'covering', 'laying on', 'along', 'watching', 'and', 'between', 'belonging to',
    'painted on', 'against', 'looking at', 'from', 'parked on', 'to', 'made of', 'covered in', 'mounted on', 'says',
    'part of', 'across', 'flying in', 'using', 'on back of', 'lying on', 'growing on', 'walking in')
COCO_THING_CLASSES = (
    'person', 'bicycle', 'car', 'motorcycle', 'airplane', 'bus', 'train', 'truck', 'boat', 'traffic light',
    'fire hydrant', 'stop sign', 'parking meter', 'bench', 'bird', 'cat', 'dog', 'horse', 'sheep', 'cow', 'elephant',
    'bear', 'zebra', 'giraffe', 'backpack', 'umbrella', 'handbag', 'tie', 'suitcase', 'frisbee', 'skis', 'snowboard',
    'sports ball', 'kite', 'baseball bat', 'baseball glove', 'skateboard', 'surfboard', 'tennis racket', 'bottle',
    'wine glass', 'cup', 'fork', 'knife', 'spoon', 'bowl', 'banana', 'apple', 'sandwich', 'orange', 'broccoli',
    'carrot', 'hot dog', 'pizza', 'donut', 'cake', 'chair', 'couch', 'potted plant', 'bed', 'dining table', 'toilet',
    'tv', 'laptop', 'mouse', 'remote', 'keyboard', 'cell phone', 'microwave', 'oven', 'toaster', 'sink',
    'refrigerator', 'book', 'clock', 'vase', 'scissors', 'teddy bear', 'hair drier', 'toothbrush')
COCO_STUFF_CLASSES = (
    'banner', 'blanket', 'bridge', 'cardboard', 'counter', 'curtain', 'door-stuff', 'floor-wood', 'flower', 'fruit',
    'gravel', 'house', 'light', 'mirror-stuff', 'net', 'pillow', 'platform', 'playingfield', 'railroad', 'river',
    'road', 'roof', 'sand', 'sea', 'shelf', 'snow', 'stairs', 'tent', 'towel', 'wall-brick', 'wall-stone',
    'wall-tile', 'wall-wood', 'water-other', 'window-blind', 'window-other', 'tree-merged', 'fence-merged',
    'ceiling-merged', 'sky-other-merged', 'cabinet-merged', 'table-merged', 'floor-other-merged', 'pavement-merged',
    'mountain-merged', 'grass-merged', 'dirt-merged', 'paper-merged', 'food-other-merged', 'building-other-merged',
    'rock-merged', 'wall-other-merged', 'rug-merged')
PSG_PREDICATES = (
    'over', 'in front of', 'beside', 'on', 'in', 'attached to', 'hanging from', 'on back of', 'falling off',
    'going down', 'painted on', 'walking on', 'running on', 'crossing', 'standing on', 'lying on', 'sitting on',
    'flying over', 'jumping over', 'jumping from', 'wearing', 'holding', 'carrying', 'looking at', 'guiding',
    'kissing', 'eating', 'drinking', 'feeding', 'biting', 'catching', 'picking', 'playing with', 'chasing',
    'climbing', 'cleaning', 'playing', 'touching', 'pushing', 'pulling', 'opening', 'cooking', 'talking to',
    'throwing', 'slicing', 'driving', 'riding', 'parked on', 'driving on', 'about to hit', 'kicking', 'swinging',
    'entering', 'exiting', 'enclosing', 'leaning on')
DIOR_SAMPLE_CLASSES = ('airplane', 'bridge', 'golffield', 'ship', 'storagetank', 'vehicle', 'windmill',
                       'Expressway-Service-area', 'groundtrackfield', 'tenniscourt')

VG150_SAMPLE_NUM_VAL = 8
_COLOURS = ('red', 'green', 'blue', 'white', 'gray', 'large', 'small')
_PLACES = ('in the upper left', 'in the middle', 'on the right', 'at the bottom', 'next to the road', 'on the left')


# ---------------------------------------------------------------------------------------------- helpers
def _zipf(n: int, exponent: float) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** exponent
    return w / w.sum()


def _random_boxes(rng: np.random.Generator, width: int, height: int, n: int) -> np.ndarray:
    """Integer xyxy boxes inside a width x height image (int64 [n, 4]); sizes 8%-60% of each side."""
    bw = np.maximum((rng.uniform(0.08, 0.6, n) * width).astype(np.int64), 2)
    bh = np.maximum((rng.uniform(0.08, 0.6, n) * height).astype(np.int64), 2)
    x1 = (rng.uniform(0, 1, n) * (width - bw)).astype(np.int64)
    y1 = (rng.uniform(0, 1, n) * (height - bh)).astype(np.int64)
    return np.stack([x1, y1, x1 + bw, y1 + bh], 1)


def _render(rng: np.random.Generator, width: int, height: int, boxes: np.ndarray) -> np.ndarray:
    """RGB uint8 image: a smooth gradient with a flat coloured rectangle per box (compresses small)."""
    base = rng.integers(40, 200, 3)
    ys = np.linspace(0, 1, height, dtype=np.float32)[:, None, None]
    xs = np.linspace(0, 1, width, dtype=np.float32)[None, :, None]
    img = (base + 40 * ys + 30 * xs).clip(0, 255).astype(np.uint8)
    img = np.broadcast_to(img, (height, width, 3)).copy()
    for x1, y1, x2, y2 in np.asarray(boxes, np.int64).reshape(-1, 4).tolist():
        img[max(y1, 0):max(y2, 0), max(x1, 0):max(x2, 0)] = rng.integers(0, 256, 3)
    return img


def _save_image(path: str, img: np.ndarray) -> None:
    from PIL import Image
    os.makedirs(osp.dirname(path), exist_ok=True)
    fmt = 'PNG' if path.lower().endswith('.png') else 'JPEG'
    kwargs = dict(quality=85) if fmt == 'JPEG' else dict(optimize=False)
    Image.fromarray(img).save(path, format=fmt, **kwargs)


def _dump_json(path: str, obj: Any) -> None:
    os.makedirs(osp.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        json.dump(obj, f)


def _relations(rng: np.random.Generator, labels: np.ndarray, n_rel: int, num_predicates: int,
               by_frequency: Sequence[int], seed: int) -> np.ndarray:
    """[n_rel, 3] (subject idx, object idx, 0-based predicate) on distinct ordered pairs of distinct objects;
    the predicate is the (subject class, object class) pair's preferred one 70% of the time, else Zipf-random
    (long tail)."""
    n = len(labels)
    pairs = np.array([(s, o) for s in range(n) for o in range(n) if s != o], np.int64).reshape(-1, 2)
    pairs = pairs[rng.permutation(len(pairs))[:n_rel]]
    p = _zipf(num_predicates, 1.3)
    out = np.zeros((len(pairs), 3), np.int64)
    for k, (s, o) in enumerate(pairs.tolist()):
        pair_rng = np.random.default_rng([seed, int(labels[s]), int(labels[o])])
        preferred = by_frequency[pair_rng.choice(num_predicates, p=p)]
        out[k] = (s, o, preferred if rng.uniform() < 0.7 else by_frequency[rng.choice(num_predicates, p=p)])
    return out


def _graph(rng: np.random.Generator, num_classes: int, num_predicates: int, by_frequency: Sequence[int],
           seed: int, n_obj: Tuple[int, int] = (3, 10), n_rel: Tuple[int, int] = (2, 8),
           size: Tuple[int, int] = (300, 700), label_exponent: float = 0.6) -> Dict[str, Any]:
    """One random image graph: width, height, boxes (int xyxy pixels), labels (0-based, Zipf over classes with
    ``label_exponent``), relations."""
    width, height = (int(v) for v in rng.integers(size[0], size[1] + 1, 2))
    n = int(rng.integers(n_obj[0], n_obj[1] + 1))
    labels = rng.choice(num_classes, n, p=_zipf(num_classes, label_exponent))
    rels = _relations(rng, labels, int(rng.integers(n_rel[0], n_rel[1] + 1)), num_predicates, by_frequency, seed)
    return dict(width=width, height=height, boxes=_random_boxes(rng, width, height, n), labels=labels,
                relations=rels)


# ---------------------------------------------------------------------------------------------- VG150
def encode_boxes_1024(boxes_xyxy: np.ndarray, longer_side: np.ndarray) -> np.ndarray:
    """Pixel xyxy -> VG-SGG ``boxes_1024`` (cx, cy, w, h at longer side 1024), int32, w and h >= 1."""
    scale = 1024.0 / np.asarray(longer_side, np.float64)[:, None]
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
    """The VG150 sample (see the module docstring). Returns a summary of what was written."""
    rng = np.random.default_rng([seed, 150])
    by_freq = [VG150_PREDICATES.index(p) for p in VG150_PREDICATES_BY_FREQUENCY]
    kinds = ['split0'] * (num_val + num_train) + ['test'] * num_test + ['no_rel', 'no_rel', 'no_box']
    order = rng.permutation(len(kinds))
    kinds = [kinds[i] for i in order]
    images, graphs = [], []
    next_id = 1585
    for kind in kinds:
        if next_id in (1592,):  # a corrupted id: in image_data.json, absent from the h5
            images.append(image_record(next_id, 500, 375))
            next_id += 1
        # concentrated classes (as in VG, where a few dozen classes dominate): class pairs recur between the
        # training and test splits, so the frequency baseline of the demo has something to learn
        g = _graph(rng, len(VG150_CLASSES), len(VG150_PREDICATES), by_freq, seed, label_exponent=1.6)
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
    _dump_json(osp.join(root, 'VG-SGG-dicts-with-attri.json'), vg150_dict_json(predicate_counts=train_counts))
    _dump_json(osp.join(root, 'image_data.json'), images)
    if with_images:
        for g in graphs:
            _save_image(osp.join(root, 'VG_100K', f'{g["image_id"]}.jpg'),
                        _render(rng, g['width'], g['height'], g['boxes']))
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
    ids = np.arange(10, 10 + num_images + len([i for i in (1592, 1722, 4616, 4617) if i < 10 + num_images]))
    ids = ids[~np.isin(ids, (1592, 1722, 4616, 4617))][:num_images]
    records = [image_record(i, w, h) for i, w, h in zip(ids.tolist(), widths.tolist(), heights.tolist())]
    return dict(split=split, obj_counts=obj_counts, rel_counts=rel_counts,
                labels=rng.choice(150, n, p=_zipf(150, 0.6)) + 1, boxes_1024=boxes,
                relationships=local + obj_start[rel_img][:, None],
                predicates=rng.choice(50, r, p=_zipf(50, 1.3)) + 1, image_data=records)


def write_synthetic_vg150(out_dir: str, num_images: int, seed: int = 0) -> str:
    """Write a synthetic VG150 (h5 + dict + image_data.json, no images) of ``num_images`` images; returns out_dir."""
    arrays = synthetic_vg150_arrays(num_images, seed)
    write_vg150_h5(osp.join(out_dir, 'VG-SGG-with-attri.h5'), arrays['split'], arrays['obj_counts'],
                   arrays['rel_counts'], arrays['labels'], arrays['boxes_1024'], arrays['relationships'],
                   arrays['predicates'])
    _dump_json(osp.join(out_dir, 'VG-SGG-dicts-with-attri.json'), vg150_dict_json())
    _dump_json(osp.join(out_dir, 'image_data.json'), arrays['image_data'])
    return out_dir


# ---------------------------------------------------------------------------------------------- GQA200
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
            g = _graph(rng, len(classes), len(predicates), by_freq, seed, label_exponent=1.6)
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
                _save_image(osp.join(root, 'images', fname), _render(rng, g['width'], g['height'], boxes))
            next_id += 1
        _dump_json(osp.join(root, f'GQA_200_{name}.json'), files)
    _dump_json(osp.join(root, 'GQA_200_ID_Info.json'), dict(
        ind_to_classes=['__background__'] + classes, ind_to_predicates=['__background__'] + predicates,
        rel_count={p: int(c) for p, c in zip(predicates, rel_count)},
        rel_name_to_id={p: i for i, p in enumerate(predicates, 1)}))
    return dict(root=root, num_train=num_train, num_test=num_test)


# ---------------------------------------------------------------------------------------------- PSG
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
        g = _graph(rng, len(classes), len(PSG_PREDICATES), by_freq, seed, n_obj=(3, 7), n_rel=(2, 6),
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
        _save_image(osp.join(root, 'coco', f'panoptic_{folder}', f'{stem}.png'), png)
        _save_image(osp.join(root, 'coco', folder, f'{stem}.jpg'), _render(rng, w, h, g['boxes']))
        data.append(dict(file_name=f'{folder}/{stem}.jpg', height=h, width=w, image_id=str(image_id),
                         pan_seg_file_name=f'panoptic_{folder}/{stem}.png', segments_info=segments,
                         annotations=annotations, relations=rels.tolist()))
        if kind == 'test':
            test_ids.append(str(image_id))
    _dump_json(osp.join(root, 'psg.json'), dict(
        data=data, thing_classes=list(COCO_THING_CLASSES), stuff_classes=list(COCO_STUFF_CLASSES),
        predicate_classes=list(PSG_PREDICATES), test_image_ids=test_ids))
    return dict(root=root, num_train=num_train, num_test=num_test)


# ---------------------------------------------------------------------------------------------- RSVGD
def rsvgd_xml(filename: str, objects: Sequence[dict], width: int = 800, height: int = 800) -> str:
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
    """``Annotations/*.xml`` (1-4 objects each) + 800 x 800 ``JPEGImages/*.jpg`` + train/val/test.txt."""
    rng = np.random.default_rng([seed, 20])
    root = osp.join(out_dir, 'rsvgd')
    total = 0
    for k in range(1, num_images + 1):
        n = int(rng.integers(1, 5))
        boxes = _random_boxes(rng, 800, 800, n)
        objects = []
        for b in boxes:
            name = DIOR_SAMPLE_CLASSES[int(rng.integers(len(DIOR_SAMPLE_CLASSES)))]
            text = f'The {_COLOURS[int(rng.integers(len(_COLOURS)))]} {name} {_PLACES[int(rng.integers(len(_PLACES)))]}'
            objects.append(dict(name=name, bbox=b.tolist(), description=text))
        stem = f'{k:05d}'
        os.makedirs(osp.join(root, 'Annotations'), exist_ok=True)
        with open(osp.join(root, 'Annotations', f'{stem}.xml'), 'w') as f:
            f.write(rsvgd_xml(f'{stem}.jpg', objects))
        _save_image(osp.join(root, 'JPEGImages', f'{stem}.jpg'), _render(rng, 800, 800, boxes))
        total += n
    perm = rng.permutation(total)
    n_val, n_test = max(1, total * 15 // 100), max(1, total // 4)
    splits = dict(val=perm[:n_val], test=perm[n_val:n_val + n_test], train=perm[n_val + n_test:])
    for name, idx in splits.items():
        with open(osp.join(root, f'{name}.txt'), 'w') as f:
            f.write(''.join(f'{i}\n' for i in np.sort(idx).tolist()))
    return dict(root=root, num_objects=total, **{f'num_{k}': len(v) for k, v in splits.items()})


# ---------------------------------------------------------------------------------------------- entry point
WRITERS = dict(vg150=write_vg150_sample, gqa200=write_gqa200_sample, psg=write_psg_sample, rsvgd=write_rsvgd_sample)


def make_sample_data(out_dir: str, seed: int = 0, datasets: Optional[Sequence[str]] = None) -> Dict[str, Dict]:
    """Write the sample of each dataset (default all of ``WRITERS``) under ``out_dir/<name>/``.

    Returns {name: summary dict with 'root' and counts}. Deterministic for a given seed.
    """
    names = list(WRITERS) if datasets is None else list(datasets)
    unknown = [n for n in names if n not in WRITERS]
    if unknown:
        raise ValueError(f'unknown sample dataset(s) {unknown}; choose from {list(WRITERS)}')
    return {name: WRITERS[name](out_dir, seed=seed) for name in names}


__all__: Sequence[str] = ('make_sample_data', 'write_vg150_h5', 'write_synthetic_vg150', 'synthetic_vg150_arrays',
                          'encode_boxes_1024', 'vg150_dict_json', 'image_record', 'rsvgd_xml', 'VG150_CLASSES',
                          'VG150_PREDICATES', 'VG150_SAMPLE_NUM_VAL')
