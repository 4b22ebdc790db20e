"""Open Images V6 (OIv6: 601 classes / 30 predicates) from PySGG's files.

Follows ``pysgg/data/datasets/open_image.py`` of SHTUPLUS/PySGG (commit a63942a: ``load_cate_info``,
``load_annotations``, ``OIDataset.get_groundtruth(evaluation=True)``, ``get_statistics``):

* ``annotations/categories_dict.json`` = ``{"obj": [601 names], "rel": [30 names]}``; PySGG prepends
  ``__background__`` to both, here the names stay 0-based as given.
* ``annotations/vrd-{train,val,test}-anno.json``: a list, one dict per image: ``img_fn`` (file name without
  ``.jpg``, under ``images/``), ``img_size`` [W, H], ``bbox`` [[x1, y1, x2, y2]] pixels, ``det_labels`` 0-based
  classes, ``rel`` [[subject index, object index, 0-based predicate]]. Each split reads its own file.
* images with an empty ``rel`` or an empty ``bbox`` are dropped in every split (``filter_empty_rels``).
* boxes are cast to float32 (PySGG's ``BoxList``) and clamped to [0, W-1] x [0, H-1] (``clip_to_image(
  remove_empty=False)`` of the evaluation GT); boxes the clamp makes empty are kept.
* duplicate relations are kept outside the training split (PySGG filters duplicates only when training: one
  predicate per pair drawn at random each time, here deterministically the first one in file order).
* ``iou_plus_one=True``: PySGG's ``BoxList`` IoU counts inclusive pixels (+1).
* training statistics (``predicate_counts``, ``train_triplets``) count every training relation, duplicates
  included, without an overlap filter (PySGG's OI ``get_statistics``: the relation counter of
  ``get_VG_statistics`` runs over the raw training relations).

Checked while reading: every record is a dict with ``img_fn`` (a string), ``img_size`` (two positive
integers), ``bbox`` (rows of 4 finite numbers, x2 >= x1 and y2 >= y1), ``det_labels`` (one integer class in
[0, C-1] per box), ``rel`` (rows of 3 integers: object indices in [0, N-1], predicate in [0, P-1]); anything else
raises :class:`DatasetFormatError` naming the file, the record index (0-based position in the file's list) and
the ``img_fn``.
"""
import os.path as osp
from itertools import chain
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..registry import DATASETS
from .base import (DatasetFormatError, SceneGraphDataset, check_box_order, check_range, clip_boxes_legacy,
                   concat_image_graphs, integer_labels, load_json, numeric_rows)

OIV6_RECORD_KEYS = ('img_fn', 'img_size', 'bbox', 'det_labels', 'rel')
OIV6_ANN_FILE = 'annotations/vrd-{split}-anno.json'
OIV6_CATEGORY_FILE = 'annotations/categories_dict.json'


def load_oiv6_vocabulary(cate_info_file: str, data_root: str = '') -> Dict[str, List[str]]:
    """``classes`` (``obj``) and ``predicates`` (``rel``) of ``categories_dict.json``, 0-based as listed."""
    info = load_json(cate_info_file, 'OIv6 categories file', data_root)
    if not isinstance(info, dict):
        raise DatasetFormatError(f'{cate_info_file}: expected {{"obj": [...], "rel": [...]}}, got '
                                 f'{type(info).__name__}')
    out = {}
    for key, name in (('obj', 'classes'), ('rel', 'predicates')):
        names = info.get(key)
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise DatasetFormatError(f'{cate_info_file}: {key!r} must be a non-empty list of names, got '
                                     f'{type(names).__name__ if not isinstance(names, list) else names[:3]}')
        if names[0] == '__background__':
            raise DatasetFormatError(f'{cate_info_file}: {key!r} starts with "__background__"; PySGG\'s file '
                                     f'lists only the real names (it adds the background itself)')
        out[name] = list(names)
    return out


def _image_size(value: Any, where: str) -> tuple:
    """``img_size`` [W, H] as two positive ints, or DatasetFormatError naming the record."""
    ok = isinstance(value, (list, tuple)) and len(value) == 2 and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and float(v).is_integer() and v > 0 for v in value)
    if not ok:
        raise DatasetFormatError(f'{where}: img_size = {value!r}, expected [width, height] (positive integers, '
                                 f'pixels)')
    return int(value[0]), int(value[1])


def _where(path: str, pos: int, rec: Any) -> str:
    """How an error names a record: the file, the record index and the ``img_fn``."""
    return f'{path}: record {pos} (img_fn {rec.get("img_fn") if isinstance(rec, dict) else None!r})'


def _check_fields(path: str, pos: int, rec: Any) -> None:
    """The record-level checks (a dict with every key, ``img_fn`` a string, list fields); raises naming it."""
    where = _where(path, pos, rec)
    missing = [k for k in OIV6_RECORD_KEYS if k not in rec] if isinstance(rec, dict) else list(OIV6_RECORD_KEYS)
    if missing:
        raise DatasetFormatError(f'{where}: missing {missing} (each record has {list(OIV6_RECORD_KEYS)})')
    if not isinstance(rec['img_fn'], str):
        raise DatasetFormatError(f'{where}: img_fn must be a string (the image file name without .jpg)')
    for key in ('bbox', 'det_labels', 'rel'):
        if not isinstance(rec[key], list):
            raise DatasetFormatError(f'{where}: {key} must be a list, got {type(rec[key]).__name__}')


def _kept_positions(path: str, data: List[Any]) -> List[int]:
    """Positions of the records PySGG keeps (non-empty ``rel`` and ``bbox``), file order; every record's fields
    are checked (:func:`_check_fields` names the first bad one)."""
    keys = frozenset(OIV6_RECORD_KEYS)
    kept = []
    for pos, rec in enumerate(data):
        if not (isinstance(rec, dict) and keys <= rec.keys() and isinstance(rec['img_fn'], str)
                and isinstance(rec['bbox'], list) and isinstance(rec['det_labels'], list)
                and isinstance(rec['rel'], list)):
            _check_fields(path, pos, rec)
        if rec['rel'] and rec['bbox']:  # PySGG filter_empty_rels (every split)
            kept.append(pos)
    return kept


def _image_sizes(path: str, data: List[Any], kept: List[int]) -> np.ndarray:
    """int64 [I, 2] ``img_size`` (W, H) of the kept records, checked at once (positive integers; a bad one is
    named by :func:`_image_size`)."""
    sizes = [data[pos]['img_size'] for pos in kept]
    if not sizes:
        return np.zeros((0, 2), dtype=np.int64)
    try:
        types = set(map(type, chain.from_iterable(sizes)))
        out = np.array(sizes, dtype=np.float64)
    except (TypeError, ValueError):
        types, out = set(), None
    if types <= {int, float} and out is not None and out.shape == (len(kept), 2) and \
            bool(((out > 0) & (out == np.round(out))).all()):
        return out.astype(np.int64)
    for pos in kept:
        _image_size(data[pos]['img_size'], _where(path, pos, data[pos]))
    raise DatasetFormatError(f'{path}: malformed img_size')  # pragma: no cover - _image_size raised


def _check_record(path: str, pos: int, rec: dict, num_classes: int, num_predicates: int) -> None:
    """Validate one kept record field by field; raises DatasetFormatError naming the record, the field and the
    row (used to name the first bad record that the vectorised checks found)."""
    where = _where(path, pos, rec)
    b = numeric_rows(rec['bbox'], 4, np.float64, where, 'bbox', '[x1, y1, x2, y2] (pixels)')
    check_box_order(b, where, 'bbox')
    bad = [k for k, v in enumerate(rec['det_labels']) if not isinstance(v, (int, float)) or isinstance(v, bool)]
    if bad:
        raise DatasetFormatError(f'{where}: det_labels[{bad[0]}] = {rec["det_labels"][bad[0]]!r}, expected an '
                                 f'integer class')
    c = integer_labels(rec['det_labels'], where, 'det_labels')
    if len(c) != len(b):
        raise DatasetFormatError(f'{where}: {len(b)} boxes but {len(c)} det_labels')
    r = numeric_rows(rec['rel'], 3, np.int64, where, 'rel', '[subject, object, predicate] (integers)')
    check_range(c, 0, num_classes - 1, lambda i: f'{where}, object {i}', 'class')
    check_range(r[:, :2], 0, len(b) - 1, lambda i: f'{where}, rel {i // 2}', 'object index')
    check_range(r[:, 2], 0, num_predicates - 1, lambda i: f'{where}, rel {i}', 'predicate')


def _flat(records: List[dict], key: str, width: int) -> Optional[np.ndarray]:
    """float64 [sum of lengths, width] (width 0: a flat vector) of ``rec[key]`` over the records; None when the
    rows do not form such an array (ragged rows, non-numbers, nested labels)."""
    values = list(chain.from_iterable(rec[key] for rec in records))
    if width == 0 and not set(map(type, values)) <= {int, float}:  # bools and nested lists are refused
        return None
    try:
        out = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if out.shape != ((len(values), width) if width else (len(values),)):
        return None
    return out


def _first_bad(flags: np.ndarray, image: np.ndarray) -> int:
    """Smallest kept-record index among the flagged elements (-1 when none)."""
    return int(image[flags].min()) if flags.any() else -1


def _vectorised(records: List[dict], num_classes: int,
                num_predicates: int) -> Tuple[Optional[Dict[str, np.ndarray]], List[int]]:
    """Boxes / labels / relations of the kept records as flat arrays, checked in one pass. Returns (arrays, [])
    when every check passes, else (None, indices into ``records`` to check one by one: the first bad one, or
    all of them when the rows do not even form arrays)."""
    boxes, labels, rels = _flat(records, 'bbox', 4), _flat(records, 'det_labels', 0), _flat(records, 'rel', 3)
    if boxes is None or labels is None or rels is None:
        return None, list(range(len(records)))
    n_box = np.array([len(rec['bbox']) for rec in records], dtype=np.int64)
    n_lab = np.array([len(rec['det_labels']) for rec in records], dtype=np.int64)
    n_rel = np.array([len(rec['rel']) for rec in records], dtype=np.int64)
    index = np.arange(len(records))
    box_image, lab_image, rel_image = np.repeat(index, n_box), np.repeat(index, n_lab), np.repeat(index, n_rel)
    rel_objects = n_box[rel_image][:, None]
    bad = [_first_bad(~np.isfinite(boxes).all(1) | (boxes[:, 2] < boxes[:, 0]) | (boxes[:, 3] < boxes[:, 1]),
                      box_image),
           _first_bad(n_lab != n_box, index),
           _first_bad((labels != np.round(labels)) | (labels < 0) | (labels > num_classes - 1), lab_image),
           _first_bad(~np.isfinite(rels).all(1) | (rels != np.round(rels)).any(1) | (rels[:, :2] < 0).any(1) |
                      (rels[:, :2] >= rel_objects).any(1) | (rels[:, 2] < 0) | (rels[:, 2] > num_predicates - 1),
                      rel_image)]
    bad = [k for k in bad if k >= 0]
    if bad:
        return None, [min(bad)]
    return dict(boxes=boxes, labels=labels.astype(np.int64), obj_counts=n_box, image_of_rel=rel_image,
                relations=rels.astype(np.int64)), []


def parse_oiv6_split(path: str, num_classes: int, num_predicates: int, data_root: str = '',
                     clip: bool = True) -> Dict[str, Any]:
    """Kept images of a ``vrd-*-anno.json`` file (file order) with their objects and relations, validated.

    Returns records (dicts: img_fn, width, height, position = index in the file's list), boxes float32 [N, 4]
    (pixels, clamped to [0, W-1] x [0, H-1] unless ``clip=False``), labels [N] 0-based, obj_counts [I],
    image_of_rel [R], relations [R, 3] (local subject, local object, 0-based predicate). The checks run
    vectorised over the whole file; a failing file is then read record by record to name the first bad one.
    """
    data = load_json(path, 'OIv6 annotation file', data_root)
    if not isinstance(data, list):
        raise DatasetFormatError(f'{path}: expected a list of image records (dicts with {list(OIV6_RECORD_KEYS)}), '
                                 f'got {type(data).__name__}')
    kept = _kept_positions(path, data)
    sizes = _image_sizes(path, data, kept)
    records = [data[pos] for pos in kept]
    flat, suspects = _vectorised(records, num_classes, num_predicates) if kept else (None, [])
    for k in suspects:
        _check_record(path, kept[k], records[k], num_classes, num_predicates)
    if suspects:  # pragma: no cover - the record checks raise on what the vectorised checks refuse
        raise DatasetFormatError(f'{path}: malformed bbox / det_labels / rel rows')
    out = [dict(img_fn=rec['img_fn'], width=w, height=h, position=pos)
           for pos, rec, (w, h) in zip(kept, records, sizes.tolist())]
    if not kept:
        return concat_image_graphs(out, [], [], [], clip)
    boxes = flat['boxes'].astype(np.float32)
    if clip:
        boxes = clip_boxes_legacy(boxes, np.repeat(sizes[:, 0], flat['obj_counts']),
                                  np.repeat(sizes[:, 1], flat['obj_counts']))
    return dict(records=out, boxes=boxes, labels=flat['labels'], obj_counts=flat['obj_counts'],
                image_of_rel=flat['image_of_rel'], relations=flat['relations'])


@DATASETS.register_module()
class OIv6Dataset(SceneGraphDataset):
    """Open Images V6 from PySGG's ``annotations/categories_dict.json`` + ``annotations/vrd-{split}-anno.json``.

    Args:
        data_root: folder of the files (PySGG's ``open_image_v6/``); relative file arguments are joined with it.
        ann_file: the split file; None = ``annotations/vrd-{split}-anno.json``.
        cate_info_file: the vocabulary json (``obj``, ``rel``).
        train_file: training file read for ``predicate_counts`` / ``train_triplets`` (None or missing: none).
        data_prefix: ``dict(img='images/')``; images are ``{img_fn}.jpg`` there (never opened).
        split: 'train' | 'val' | 'test'.
        duplicate_rels: see :class:`SceneGraphDataset` (default: keep for val/test, one per pair for train).
        clip_boxes: clamp boxes to the image (True, PySGG's evaluation GT); False keeps the file's boxes, as
            PySGG's frequency statistics see them (used for the frequency-baseline background).

    ``metainfo``: classes (601 in the real file), predicates (30), dataset_name 'OIv6', iou_plus_one True,
    predicate_counts and train_triplets of every training relation. ``img_id`` is the ``img_fn``.
    """

    # dataset arguments under which the training split is the one PySGG's frequency statistics
    # (``get_VG_statistics`` on the OI training set) count on: duplicates kept, boxes as in the file
    FREQUENCY_STATISTICS_ARGS = dict(duplicate_rels='keep', clip_boxes=False)

    METAINFO = dict(dataset_name='OIv6', iou_plus_one=True)
    EXTRA_FILES = ('cate_info_file', 'train_file')

    def __init__(self, data_root: str = '', ann_file: Optional[str] = None,
                 cate_info_file: str = OIV6_CATEGORY_FILE,
                 train_file: Optional[str] = OIV6_ANN_FILE.format(split='train'),
                 data_prefix: Optional[dict] = None, split: str = 'test', duplicate_rels: Optional[str] = None,
                 clip_boxes: bool = True, **kwargs: Any) -> None:
        self.clip_boxes = bool(clip_boxes)
        self.cate_info_file = cate_info_file
        self.train_file = train_file
        if ann_file is None:
            ann_file = OIV6_ANN_FILE.format(split=split)
        super().__init__(data_root=data_root, ann_file=ann_file,
                         data_prefix=dict(img='images/') if data_prefix is None else data_prefix,
                         split=split, duplicate_rels=duplicate_rels, **kwargs)

    def _parsed(self, path: str, num_classes: int, num_predicates: int) -> Dict[str, Any]:
        return self._cached(f'{self.clip_boxes}:{osp.abspath(path)}', lambda: parse_oiv6_split(
            path, num_classes, num_predicates, self.data_root, clip=self.clip_boxes))

    def _file_metainfo(self) -> Dict[str, Any]:
        return self.vocabulary_metainfo(load_oiv6_vocabulary(self.cate_info_file, self.data_root), self._parsed)

    def load_data_list(self) -> List[dict]:
        parsed = self._parsed(self.ann_file, len(self._metainfo['classes']), len(self._metainfo['predicates']))
        out = [dict(img_path=self._img_path(f'{rec["img_fn"]}.jpg'), img_id=rec['img_fn'], width=rec['width'],
                    height=rec['height']) for rec in parsed['records']]
        return self.build_data_list(out, parsed['boxes'], parsed['labels'], parsed['obj_counts'],
                                    parsed['image_of_rel'], parsed['relations'], self.duplicate_mode)


__all__: Sequence[str] = ('OIv6Dataset', 'load_oiv6_vocabulary', 'parse_oiv6_split')
