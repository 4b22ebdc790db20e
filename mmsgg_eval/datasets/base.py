"""Shared machinery of the dataset wrappers.

Conventions of every wrapper:

* ``get_data_info(i)`` returns an mmdet-style dict: ``img_path``, ``img_id``, ``width``, ``height`` (pixels of
  the image file), ``instances`` (list of ``{'bbox': [x1, y1, x2, y2], 'bbox_label': int, 'ignore_flag': 0}``,
  boxes in ORIGINAL image pixels, labels 0-based into ``metainfo['classes']``) and, for scene graphs,
  ``relations`` (int64 [G, 3]: subject index, object index into ``instances``, 0-based predicate into
  ``metainfo['predicates']``).
* ``metainfo`` is complete right after construction (also with ``lazy_init=True``): vocabulary, dataset name,
  the IoU convention (``iou_plus_one``) and, when the training split is readable, the training statistics
  ``predicate_counts`` (list of P ints) and ``train_triplets`` (int64 [T, 3], unique 0-based (subject class,
  object class, predicate)). Files parsed for the metainfo are cached until ``full_init`` has built the data
  list, so nothing is read twice.
* Image files are never opened while indexing (evaluation-only use needs none).
* Malformed files raise :class:`DatasetFormatError` (a ``ValueError``) naming the file and the record; missing
  files raise ``FileNotFoundError`` naming the file and where it was looked for.
"""
import gc
import json
import logging
import os.path as osp
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from mmengine.dataset import BaseDataset
from mmengine.logging import print_log

# How duplicate GT relations of one image are treated (the legacy behaviour differs per split and dataset).
DUPLICATE_MODES = ('keep', 'drop_triplets', 'one_per_pair')


class DatasetFormatError(ValueError):
    """A dataset file does not have the expected format; the message names the file and the record."""


def require_file(path: str, what: str, data_root: str = '') -> str:
    """Return ``path`` when it is an existing file, else raise FileNotFoundError saying where it was looked for."""
    if not osp.isfile(path):
        where = f' (data_root={data_root!r})' if data_root else ''
        raise FileNotFoundError(f'{what} not found: looked for {osp.abspath(path)!r}{where}')
    return path


def load_json(path: str, what: str, data_root: str = '') -> Any:
    """Parse a JSON file, with errors naming the file."""
    require_file(path, what, data_root)
    try:
        with open(path, 'r') as f:
            return json.load(f)
    except json.JSONDecodeError as err:
        raise DatasetFormatError(f'{path}: not valid JSON ({err})') from None


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + c)`` for every (s, c), vectorised (int64)."""
    starts = np.asarray(starts, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.cumsum(counts) - counts
    return np.repeat(starts - offsets, counts) + np.arange(total, dtype=np.int64)


def split_by_counts(values: np.ndarray, counts: np.ndarray) -> List[np.ndarray]:
    """Split ``values`` (first axis) into consecutive chunks of the given sizes."""
    return np.split(values, np.cumsum(counts)[:-1]) if len(counts) else []


def row_codes(rows: np.ndarray) -> np.ndarray:
    """One int64 code per row of non-negative integers [N, K], equal iff the rows are equal (mixed radix)."""
    rows = np.asarray(rows, dtype=np.int64).reshape(len(rows), -1)
    if rows.size and rows.min() < 0:
        raise ValueError('row_codes expects non-negative integers')
    radix = rows.max(0) + 1 if len(rows) else np.ones(rows.shape[1], np.int64)
    if float(np.prod(radix.astype(np.float64))) >= 2.0 ** 62:
        raise OverflowError('rows too large to encode in int64')
    codes = np.zeros(len(rows), dtype=np.int64)
    for col in range(rows.shape[1]):
        codes = codes * radix[col] + rows[:, col]
    return codes


def first_occurrence(keys: np.ndarray) -> np.ndarray:
    """Boolean mask keeping the first occurrence of every row of ``keys`` [N, K] (original order kept)."""
    keep = np.zeros(len(keys), dtype=bool)
    if len(keys):
        _, first = np.unique(row_codes(keys), return_index=True)
        keep[first] = True
    return keep


def duplicate_mask(image_of_rel: np.ndarray, relations: np.ndarray, mode: str) -> np.ndarray:
    """Relations to keep under a duplicate mode (vectorised over all images; order preserved).

    Args:
        image_of_rel: int [R], the image of each relation.
        relations: int [R, 3] local (subject, object, predicate).
        mode: 'keep' (legacy VG150/GQA200 evaluation: duplicate triplets kept), 'drop_triplets' (PSG test:
            exact duplicate triplets dropped, several predicates per pair kept) or 'one_per_pair' (legacy training
            splits: one relation per (subject, object) pair; the legacy loaders draw that predicate at random
            each time an image is loaded, here the first one in file order is kept, deterministically).
    """
    if mode == 'keep' or len(relations) == 0:
        return np.ones(len(relations), dtype=bool)
    cols = 3 if mode == 'drop_triplets' else 2
    keys = np.concatenate([np.asarray(image_of_rel, np.int64)[:, None],
                           np.asarray(relations, np.int64)[:, :cols]], axis=1)
    return first_occurrence(keys)


def relation_statistics(subject_labels: np.ndarray, object_labels: np.ndarray, predicates: np.ndarray,
                        num_predicates: int) -> Dict[str, Any]:
    """Training statistics from 0-based class / predicate labels of every training relation.

    Returns ``predicate_counts`` (list of ``num_predicates`` ints) and ``train_triplets`` (int64 [T, 3], unique
    sorted (subject class, object class, predicate)).
    """
    predicates = np.asarray(predicates, dtype=np.int64)
    counts = np.bincount(predicates, minlength=num_predicates)[:num_predicates]
    triplets = np.stack([np.asarray(subject_labels, np.int64), np.asarray(object_labels, np.int64), predicates], 1)
    _, first = np.unique(row_codes(triplets), return_index=True)  # codes sort like the rows
    triplets = triplets[first].reshape(-1, 3)
    return dict(predicate_counts=[int(c) for c in counts], train_triplets=triplets)


def graph_statistics(graphs: Dict[str, np.ndarray], num_predicates: int) -> Dict[str, Any]:
    """:func:`relation_statistics` of parsed graphs (``labels`` [N] 0-based, ``obj_counts`` [I], ``image_of_rel``
    [R], ``relations`` [R, 3] local); empty dict when there is no relation."""
    rels = graphs['relations']
    if len(rels) == 0:
        return {}
    counts = np.asarray(graphs['obj_counts'], np.int64)
    base = (np.cumsum(counts) - counts)[graphs['image_of_rel']]
    labels = graphs['labels']
    return relation_statistics(labels[base + rels[:, 0]], labels[base + rels[:, 1]], rels[:, 2], num_predicates)


def build_instances(boxes: np.ndarray, labels: np.ndarray) -> List[dict]:
    """mmdet-style instance dicts from float32 boxes [N, 4] (xyxy, original pixels) and 0-based labels [N].

    The Python floats hold the float32 values exactly, so ``np.float32`` reconstructs them bit for bit.
    """
    return instance_dicts(np.asarray(boxes, np.float32).reshape(-1, 4).tolist(),
                          np.asarray(labels, np.int64).reshape(-1).tolist())


def instance_dicts(boxes: List[List[float]], labels: List[int]) -> List[dict]:
    """``[{'bbox': box, 'bbox_label': label, 'ignore_flag': 0}, ...]`` from Python lists."""
    return [{'bbox': b, 'bbox_label': lab, 'ignore_flag': 0} for b, lab in zip(boxes, labels)]


def clip_boxes_legacy(boxes: np.ndarray, widths: np.ndarray, heights: np.ndarray) -> np.ndarray:
    """Legacy ``BoxList.clip_to_image(remove_empty=False)``: clamp float32 xyxy to [0, W-1] x [0, H-1].

    ``widths`` / ``heights`` are per box (broadcast from the box's image). Empty boxes are kept.
    """
    boxes = np.asarray(boxes, dtype=np.float32).copy()
    max_x = (np.asarray(widths, np.float32) - 1)
    max_y = (np.asarray(heights, np.float32) - 1)
    for col, hi in ((0, max_x), (1, max_y), (2, max_x), (3, max_y)):
        boxes[:, col] = np.minimum(np.maximum(boxes[:, col], np.float32(0)), hi)
    return boxes


def concat_image_graphs(records: List[dict], boxes: List[np.ndarray], labels: List[np.ndarray],
                        relations: List[np.ndarray], clip: bool) -> Dict[str, Any]:
    """The parsed graphs of kept images, concatenated (the layout ``build_data_list`` / ``graph_statistics`` read).

    Args:
        records: one dict per kept image with integer ``width`` / ``height`` (pixels), returned as given.
        boxes / labels / relations: per image: xyxy pixels [N_i, 4], 0-based labels [N_i], local (subject,
            object, 0-based predicate) [R_i, 3].
        clip: clamp the float32 boxes to [0, W-1] x [0, H-1] (:func:`clip_boxes_legacy`).

    Returns records, boxes float32 [N, 4], labels int64 [N], obj_counts [I], image_of_rel [R], relations [R, 3].
    """
    obj_counts = np.asarray([len(b) for b in boxes], dtype=np.int64)
    rel_counts = np.asarray([len(r) for r in relations], dtype=np.int64)
    all_boxes = np.concatenate(boxes).astype(np.float32) if boxes else np.zeros((0, 4), np.float32)
    if clip:
        widths = np.repeat([rec['width'] for rec in records], obj_counts)
        heights = np.repeat([rec['height'] for rec in records], obj_counts)
        all_boxes = clip_boxes_legacy(all_boxes, widths, heights)
    return dict(records=records, boxes=all_boxes,
                labels=np.concatenate(labels).astype(np.int64) if labels else np.zeros(0, np.int64),
                obj_counts=obj_counts,
                image_of_rel=np.repeat(np.arange(len(records)), rel_counts),
                relations=np.concatenate(relations).astype(np.int64) if relations else np.zeros((0, 3), np.int64))


def check_range(values: np.ndarray, low: int, high: int, describe: Callable[[int], str], what: str) -> None:
    """Raise DatasetFormatError when an entry of ``values`` lies outside [low, high]; ``describe(i)`` names it
    (``i`` = flat index into ``values``)."""
    values = np.asarray(values).reshape(-1)
    bad = np.flatnonzero((values < low) | (values > high))
    if bad.size:
        i = int(bad[0])
        raise DatasetFormatError(f'{describe(i)}: {what} {values[i].item()} outside [{low}, {high}] '
                                 f'({bad.size} such entries)')


def numeric_rows(values: Any, width: int, dtype: Any, where: str, field: str, expected: str) -> np.ndarray:
    """``values`` (a list of rows) as a [K, width] array of ``dtype``; DatasetFormatError naming ``where`` (the
    file and record), the field and the first bad row (ragged, non-numeric, not finite, non-integer for an
    integer ``dtype``)."""
    try:
        out = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):  # ragged rows or non-numbers
        out = None
    if out is None or out.ndim != 2 or out.shape[1] != width:
        if not isinstance(values, (list, tuple)):
            raise DatasetFormatError(f'{where}: {field} must be a list of rows {expected}, got '
                                     f'{type(values).__name__}')
        for k, row in enumerate(values):
            if not isinstance(row, (list, tuple)) or len(row) != width or \
                    not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in row):
                raise DatasetFormatError(f'{where}: {field}[{k}] = {row!r}, expected {expected}')
        raise DatasetFormatError(f'{where}: {field} must be rows {expected}')  # pragma: no cover - defensive
    bad = np.flatnonzero(~np.isfinite(out).all(1))
    if bad.size:
        k = int(bad[0])
        raise DatasetFormatError(f'{where}: {field}[{k}] = {out[k].tolist()} is not finite, expected {expected}')
    if np.dtype(dtype).kind in 'iu':
        bad = np.flatnonzero((out != np.round(out)).any(1))
        if bad.size:
            k = int(bad[0])
            raise DatasetFormatError(f'{where}: {field}[{k}] = {out[k].tolist()}, expected {expected}')
    return out.astype(dtype)


def integer_labels(values: Any, where: str, field: str) -> np.ndarray:
    """A flat list of integer labels as int64 [N]; DatasetFormatError naming ``where`` and the field otherwise."""
    try:
        out = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise DatasetFormatError(f'{where}: {field} must be a flat list of integer classes') from None
    if not np.all(out == np.round(out)):
        raise DatasetFormatError(f'{where}: {field} holds non-integer classes {out.tolist()[:5]}')
    return out.astype(np.int64)


def check_box_order(boxes: np.ndarray, where: str, field: str) -> None:
    """DatasetFormatError naming ``where``, the field and the first xyxy row with x2 < x1 or y2 < y1 (empty boxes,
    x2 == x1 or y2 == y1, are valid)."""
    inverted = np.flatnonzero((boxes[:, 2] < boxes[:, 0]) | (boxes[:, 3] < boxes[:, 1]))
    if inverted.size:
        k = int(inverted[0])
        raise DatasetFormatError(f'{where}: {field}[{k}] = {boxes[k].tolist()}, expected x2 >= x1 and '
                                 f'y2 >= y1 ({inverted.size} such boxes)')


class AnnotationDataset(BaseDataset):
    """Base of the wrappers: split validation, extra annotation paths, metainfo read from the files.

    Subclasses set ``SPLITS`` and ``METAINFO`` (``dataset_name``, ``iou_plus_one``), list their extra file
    arguments in ``EXTRA_FILES`` (joined with ``data_root`` like ``ann_file``) and implement
    :meth:`_file_metainfo` and ``load_data_list``. Use :meth:`_cached` for parsed files needed by both.
    """

    SPLITS: Tuple[str, ...] = ('train', 'val', 'test')
    EXTRA_FILES: Tuple[str, ...] = ()

    def __init__(self, *args: Any, split: str = 'test', **kwargs: Any) -> None:
        if split not in self.SPLITS:
            raise ValueError(f'{type(self).__name__}: split must be one of {self.SPLITS}, got {split!r}')
        self.split = split
        self._cache: Dict[str, Any] = {}
        super().__init__(*args, **kwargs)

    def _join_prefix(self) -> None:
        super()._join_prefix()
        for attr in self.EXTRA_FILES:
            path = getattr(self, attr)
            if path and not osp.isabs(path) and self.data_root:
                setattr(self, attr, osp.join(self.data_root, path))
        meta = self._file_metainfo()
        for key in ('classes', 'predicates'):
            given = self._metainfo.get(key)
            if given is not None and key in meta and len(given) != len(meta[key]):
                raise ValueError(f'{type(self).__name__}: metainfo[{key!r}] has {len(given)} entries but the '
                                 f'annotation files define {len(meta[key])}')
        for key, value in meta.items():
            self._metainfo.setdefault(key, value)
        if 'classes' in self._metainfo:
            self._metainfo['classes'] = tuple(self._metainfo['classes'])
        if 'predicates' in self._metainfo:
            self._metainfo['predicates'] = tuple(self._metainfo['predicates'])

    def full_init(self) -> None:
        if self._fully_initialized:
            return
        gc_was_enabled = gc.isenabled()
        gc.disable()  # building and pickling ~1M small dicts: the cyclic GC would rescan them over and over
        try:
            super().full_init()
        finally:
            self._cache.clear()
            if gc_was_enabled:
                gc.enable()

    def _serialize_data(self) -> Tuple[np.ndarray, np.ndarray]:
        if not self.data_list:  # mmengine cannot serialise an empty list (e.g. an empty training split)
            return np.zeros(0, dtype=np.uint8), np.zeros(0, dtype=np.int64)
        return super()._serialize_data()

    def _cached(self, key: str, loader: Callable[[], Any]) -> Any:
        """``loader()`` once per key until the data list is built."""
        if key not in self._cache:
            self._cache[key] = loader()
        return self._cache[key]

    def _require(self, path: str, what: str) -> str:
        return require_file(path, what, self.data_root)

    def _file_metainfo(self) -> Dict[str, Any]:
        """Metainfo read from the annotation files (vocabulary, training statistics)."""
        raise NotImplementedError

    def _img_path(self, name: str) -> str:
        return osp.join(self.data_prefix.get('img', ''), name)


class SceneGraphDataset(AnnotationDataset):
    """Base of the scene-graph wrappers (VG150, GQA200, PSG).

    Args:
        split: which split to index.
        duplicate_rels: None = the legacy behaviour of the dataset and split (see :func:`duplicate_mask`), or
            one of 'keep', 'drop_triplets', 'one_per_pair'.
    """

    def __init__(self, *args: Any, split: str = 'test', duplicate_rels: Optional[str] = None,
                 **kwargs: Any) -> None:
        if duplicate_rels is not None and duplicate_rels not in DUPLICATE_MODES:
            raise ValueError(f'duplicate_rels must be None or one of {DUPLICATE_MODES}, got {duplicate_rels!r}')
        self.duplicate_rels = duplicate_rels
        super().__init__(*args, split=split, **kwargs)

    def default_duplicate_mode(self) -> str:
        """Legacy treatment of duplicate relations for ``self.split``."""
        return 'one_per_pair' if self.split == 'train' else 'keep'

    @property
    def duplicate_mode(self) -> str:
        return self.duplicate_rels or self.default_duplicate_mode()

    def vocabulary_metainfo(self, vocab: Dict[str, Sequence[str]],
                            parse_train: Callable[[str, int, int], Dict[str, np.ndarray]]) -> Dict[str, Any]:
        """``classes`` / ``predicates`` of ``vocab`` plus ``predicate_counts`` / ``train_triplets`` counted on
        ``self.train_file`` (read by ``parse_train(path, num_classes, num_predicates)``); a named training file
        that does not exist is a warning and no statistics."""
        meta: Dict[str, Any] = dict(classes=tuple(vocab['classes']), predicates=tuple(vocab['predicates']))
        if self.train_file and osp.isfile(self.train_file):
            train = parse_train(self.train_file, len(vocab['classes']), len(vocab['predicates']))
            meta.update(graph_statistics(train, len(vocab['predicates'])))
        elif self.train_file:
            print_log(f'{type(self).__name__}: training file {self.train_file!r} not found; no predicate_counts / '
                      f'train_triplets in metainfo', logger='current', level=logging.WARNING)
        return meta

    @staticmethod
    def build_data_list(records: Sequence[dict], boxes: np.ndarray, labels: np.ndarray, obj_counts: np.ndarray,
                        image_of_rel: np.ndarray, relations: np.ndarray, mode: str) -> List[dict]:
        """Attach ``instances`` and ``relations`` to per-image ``records`` (vectorised slicing).

        Args:
            records: one dict per image (img_path, img_id, width, height, ...), updated in place.
            boxes: float32 [N, 4] all objects of all images, concatenated in image order.
            labels: int [N] 0-based labels.
            obj_counts: int [I] objects per image.
            image_of_rel: int [R] image (position in ``records``) of each relation, non-decreasing.
            relations: int [R, 3] local (subject, object, 0-based predicate).
            mode: duplicate mode, see :func:`duplicate_mask`.
        """
        keep = duplicate_mask(image_of_rel, relations, mode)
        image_of_rel, relations = np.asarray(image_of_rel)[keep], np.asarray(relations, np.int64)[keep]
        rel_counts = np.bincount(image_of_rel, minlength=len(records))
        box_list = np.asarray(boxes, np.float32).tolist()
        label_list = np.asarray(labels, np.int64).tolist()
        rel_chunks = split_by_counts(relations.astype(np.int64).reshape(-1, 3), rel_counts)
        starts = np.cumsum(obj_counts) - obj_counts
        for record, start, count, rels in zip(records, starts.tolist(), np.asarray(obj_counts).tolist(),
                                              rel_chunks):
            record['instances'] = instance_dicts(box_list[start:start + count], label_list[start:start + count])
            record['relations'] = rels.copy()
        return list(records)


    # ------------------------------------------------------------------ detection training (mmdet tools)
    def filter_data(self) -> List[dict]:
        """mmdet's ``filter_cfg`` for detector training (``BaseDetDataset`` semantics), off in test mode.

        ``filter_cfg=dict(filter_empty_gt=True, min_size=32)`` drops images without a (non-ignored) box and
        images whose shorter side is below ``min_size`` pixels; how many were dropped is logged. The entries'
        ``instances`` are mmdet's ``[{bbox, bbox_label, ignore_flag}]``, so mmdet's ``LoadAnnotations`` +
        ``PackDetInputs`` (with any augmentation, e.g. ``RandomFlip``) train a detector on the split.
        """
        if self.test_mode or not self.filter_cfg:
            return self.data_list
        unknown = set(self.filter_cfg) - {'filter_empty_gt', 'min_size'}
        if unknown:
            raise ValueError(f'{type(self).__name__}: filter_cfg keys must be filter_empty_gt / min_size, got '
                             f'{sorted(unknown)}')
        filter_empty_gt = bool(self.filter_cfg.get('filter_empty_gt', False))
        min_size = int(self.filter_cfg.get('min_size', 0))
        kept = []
        for info in self.data_list:
            if filter_empty_gt and not any(not inst.get('ignore_flag', 0) for inst in info['instances']):
                continue
            if min(int(info['width']), int(info['height'])) >= min_size:
                kept.append(info)
        if len(kept) < len(self.data_list):
            print_log(f'{type(self).__name__} ({self.split}): filter_cfg={dict(self.filter_cfg)} dropped '
                      f'{len(self.data_list) - len(kept)} of {len(self.data_list)} images', logger='current')
        return kept
