"""VG150 (Visual Genome, 150 classes / 50 predicates) from the Scene-Graph-Benchmark files (SPEC section 5).

Follows ``maskrcnn_benchmark/data/datasets/visual_genome.py`` of KaihuaTang/Scene-Graph-Benchmark.pytorch
(``load_info``, ``load_image_filenames``, ``load_graphs``, ``get_groundtruth(evaluation=True)``):

* ``image_data.json`` loses the corrupted images 1592, 1722, 4616, 4617 BEFORE it is aligned with the h5:
  h5 image row i is the i-th remaining entry.
* split mask = (split == 0 train/val, 2 test) & (img_to_first_box >= 0) & (img_to_first_rel >= 0);
  val = the FIRST ``num_val_images`` split-0 images of that mask, train = the rest.
* boxes_1024 (cx, cy, w, h) -> x1 = cx - w / 2 stored back into the integer array (truncation toward 0),
  x2 = x1 + w; then / 1024 * max(W, H) (W, H from image_data.json), float32, clamped to [0, W-1] x [0, H-1];
  empty boxes are kept.
* relationships hold GLOBAL object rows, made local by subtracting img_to_first_box.
* duplicate relations are kept outside the training split; the training split keeps one relation per pair
  (legacy draws it at random, here deterministically the first one).
* labels / predicates are 1-based in the file and 0-based here.

Not reproduced: the legacy training-only ``filter_non_overlap`` option and its check that image files exist
(the real files have all 108,073 images).
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple

import logging
import h5py
import numpy as np
from mmengine.logging import print_log

from ..registry import DATASETS
from .base import (DatasetFormatError, SceneGraphDataset, check_range, clip_boxes_legacy, graph_statistics, load_json,
                   ranges, require_file)

CORRUPTED_IMAGE_IDS = (1592, 1722, 4616, 4617)
BOX_SCALE = 1024
H5_KEYS = ('split', 'img_to_first_box', 'img_to_last_box', 'img_to_first_rel', 'img_to_last_rel', 'labels',
           'boxes_1024', 'relationships', 'predicates')
SPLIT_FLAGS = {'train': 0, 'val': 0, 'test': 2}


def load_vg150_vocabulary(dict_file: str, data_root: str = '') -> Tuple[List[str], List[str]]:
    """Class and predicate names in id order (ids 1..N in the file, position 0..N-1 here; no background).

    ``idx_to_label`` / ``idx_to_predicate`` have string keys '1'..'N'; ``label_to_idx`` / ``predicate_to_idx``
    (which the legacy ``load_info`` sorts by) must agree with them when present.
    """
    info = load_json(dict_file, 'VG150 dictionary file', data_root)
    names = []
    for idx_key, inv_key in (('idx_to_label', 'label_to_idx'), ('idx_to_predicate', 'predicate_to_idx')):
        if idx_key not in info:
            raise DatasetFormatError(f'{dict_file}: missing key {idx_key!r}')
        table = info[idx_key]
        try:
            ids = sorted(int(k) for k in table)
        except ValueError:
            raise DatasetFormatError(f'{dict_file}: {idx_key} keys must be integers, got {list(table)[:3]}') from None
        if ids != list(range(1, len(ids) + 1)):
            raise DatasetFormatError(f'{dict_file}: {idx_key} ids must be 1..{len(ids)} without gaps')
        ordered = [table[str(i)] for i in ids]
        inverse = info.get(inv_key)
        if inverse is not None:
            for i, name in enumerate(ordered, 1):
                if int(inverse.get(name, -1)) != i:
                    raise DatasetFormatError(f'{dict_file}: {inv_key}[{name!r}] = {inverse.get(name)} disagrees '
                                             f'with {idx_key}[{i!r}]')
        names.append(ordered)
    return names[0], names[1]


def read_vg150_h5(path: str, data_root: str = '') -> Dict[str, np.ndarray]:
    """The h5 arrays needed for indexing (all read at once; ``labels``/``predicates`` flattened to 1-D)."""
    require_file(path, 'VG150 h5 file', data_root)
    out = {}
    with h5py.File(path, 'r') as f:
        for key in H5_KEYS:
            if key not in f:
                raise DatasetFormatError(f'{path}: missing h5 dataset {key!r} (a VG-SGG h5 has {list(H5_KEYS)})')
            out[key] = f[key][()]
    for key in ('labels', 'predicates'):
        out[key] = out[key].reshape(len(out[key]), -1)[:, 0]
    n_img = len(out['split'])
    for key in H5_KEYS[1:5]:
        if len(out[key]) != n_img:
            raise DatasetFormatError(f'{path}: {key!r} has {len(out[key])} rows, split has {n_img}')
    if out['boxes_1024'].ndim != 2 or out['boxes_1024'].shape[1] != 4 or \
            len(out['boxes_1024']) != len(out['labels']):
        raise DatasetFormatError(f'{path}: boxes_1024 has shape {out["boxes_1024"].shape}, expected '
                                 f'[{len(out["labels"])}, 4]')
    if out['relationships'].ndim != 2 or out['relationships'].shape[1] != 2 or \
            len(out['relationships']) != len(out['predicates']):
        raise DatasetFormatError(f'{path}: relationships has shape {out["relationships"].shape}, expected '
                                 f'[{len(out["predicates"])}, 2]')
    return out


def vg150_split_rows(h5: Dict[str, np.ndarray], split: str, num_val_images: int) -> np.ndarray:
    """h5 image rows of a split, in file order (legacy ``load_graphs`` with filter_empty_rels=True)."""
    mask = (h5['split'] == SPLIT_FLAGS[split]) & (h5['img_to_first_box'] >= 0) & (h5['img_to_first_rel'] >= 0)
    rows = np.flatnonzero(mask)
    if num_val_images > 0 and split == 'val':
        rows = rows[:num_val_images]
    elif num_val_images > 0 and split == 'train':
        rows = rows[num_val_images:]
    return rows


def decode_vg150_boxes(boxes_1024: np.ndarray, longer_side: np.ndarray) -> np.ndarray:
    """Legacy decoding of ``boxes_1024`` rows (cx, cy, w, h) to float32 xyxy in original pixels (unclipped).

    x1 = cx - w / 2 is computed in float64 and stored back into the file's integer dtype (truncation toward
    0, as the legacy in-place assignment does); x2 = x1 + w in that dtype; then ``/ 1024 * longer_side``
    (float64, exact) cast to float32. ``longer_side`` = max(W, H) of each box's image.
    """
    boxes = np.asarray(boxes_1024)
    wh = boxes[:, 2:]
    x1y1 = (boxes[:, :2] - wh / 2).astype(boxes.dtype)
    xyxy = np.concatenate([x1y1, x1y1 + wh], axis=1)
    return (xyxy / BOX_SCALE * np.asarray(longer_side, np.float64)[:, None]).astype(np.float32)


@DATASETS.register_module()
class VG150Dataset(SceneGraphDataset):
    """VG150 from ``VG-SGG-with-attri.h5`` + ``VG-SGG-dicts-with-attri.json`` + ``image_data.json``.

    Args:
        data_root: folder of the files; relative file arguments are joined with it.
        ann_file: the h5 file.
        dict_file: the vocabulary json (``idx_to_label``, ``idx_to_predicate``).
        image_file: ``image_data.json`` (width, height, image_id per image).
        data_prefix: ``dict(img='VG_100K/')``; images are ``{image_id}.jpg`` there (never opened here).
        split: 'train' | 'val' | 'test'.
        num_val_images: size of the val split (the first split-0 images); train is the rest.
        zeroshot_file: optional path (relative to ``data_root`` unless absolute) of the legacy
            ``zeroshot_triplet.pytorch``, put in
            ``metainfo['zeroshot_triplets']`` for the metrics.
        duplicate_rels: see :class:`SceneGraphDataset` (default: keep for val/test, one per pair for train).

    ``metainfo``: classes (150), predicates (50), dataset_name 'VG150', iou_plus_one True, predicate_counts and
    train_triplets of the training split (all its relations, duplicates included, as the legacy statistics).
    """

    METAINFO = dict(dataset_name='VG150', iou_plus_one=True)
    EXTRA_FILES = ('dict_file', 'image_file', 'zeroshot_file')

    def __init__(self, data_root: str = '', ann_file: str = 'VG-SGG-with-attri.h5',
                 dict_file: str = 'VG-SGG-dicts-with-attri.json', image_file: str = 'image_data.json',
                 data_prefix: Optional[dict] = None, split: str = 'test', num_val_images: int = 5000,
                 zeroshot_file: Optional[str] = None, duplicate_rels: Optional[str] = None, **kwargs: Any) -> None:
        self.dict_file = dict_file
        self.image_file = image_file
        self.zeroshot_file = zeroshot_file
        self.num_val_images = int(num_val_images)
        super().__init__(data_root=data_root, ann_file=ann_file,
                         data_prefix=dict(img='VG_100K/') if data_prefix is None else data_prefix,
                         split=split, duplicate_rels=duplicate_rels, **kwargs)

    # ------------------------------------------------------------------ files
    def _h5(self) -> Dict[str, np.ndarray]:
        return self._cached('h5', lambda: read_vg150_h5(self.ann_file, self.data_root))

    def _image_info(self) -> List[dict]:
        """image_data.json without the corrupted ids: entry i describes h5 image row i."""
        def load() -> List[dict]:
            data = load_json(self.image_file, 'VG150 image_data.json', self.data_root)
            if not isinstance(data, list):
                raise DatasetFormatError(f'{self.image_file}: expected a list of image records')
            try:
                kept = [d for d in data if int(d['image_id']) not in CORRUPTED_IMAGE_IDS]
            except (KeyError, TypeError, ValueError):
                raise DatasetFormatError(f'{self.image_file}: every record needs an integer image_id') from None
            for i, d in enumerate(kept):
                if not isinstance(d.get('width'), int) or not isinstance(d.get('height'), int):
                    raise DatasetFormatError(f'{self.image_file}: record of image_id {d["image_id"]} (position '
                                             f'{i} after removing corrupted ids) lacks integer width/height')
            n_h5 = len(self._h5()['split'])
            if len(kept) != n_h5:
                raise DatasetFormatError(
                    f'{self.image_file}: {len(kept)} records after removing the corrupted image ids '
                    f'{CORRUPTED_IMAGE_IDS}, but {self.ann_file} has {n_h5} images; row i of the h5 must match '
                    f'the i-th remaining record')
            return kept
        return self._cached('image_info', load)

    def _describe(self, row: int) -> str:
        info = self._image_info()[row]
        return f'{self.ann_file}: image_id {info["image_id"]} (h5 image row {row})'

    def _graphs(self, rows: np.ndarray, num_classes: int, num_predicates: int) -> Dict[str, np.ndarray]:
        """Objects and local relations of the given h5 image rows, validated (vectorised).

        Returns obj_rows [N] (global object rows, image-major), obj_counts [I], image_of_rel [R] (position in
        ``rows``), relations [R, 3] (local subject, local object, 0-based predicate), labels [N] 0-based.
        """
        h5 = self._h5()
        first_box, last_box = h5['img_to_first_box'][rows].astype(np.int64), h5['img_to_last_box'][rows]
        first_rel, last_rel = h5['img_to_first_rel'][rows].astype(np.int64), h5['img_to_last_rel'][rows]
        obj_counts = last_box.astype(np.int64) - first_box + 1
        rel_counts = np.where(first_rel >= 0, last_rel.astype(np.int64) - first_rel + 1, 0)
        n_obj, n_rel = len(h5['labels']), len(h5['predicates'])
        for name, first, count, total in (('box', first_box, obj_counts, n_obj), ('rel', first_rel, rel_counts, n_rel)):
            bad = np.flatnonzero((count < 0) | ((count > 0) & ((first < 0) | (first + count > total))))
            if bad.size:
                i = int(bad[0])
                raise DatasetFormatError(f'{self._describe(int(rows[i]))}: img_to_first_{name}/img_to_last_{name} '
                                         f'= {first[i]}/{first[i] + count[i] - 1} is not a valid range of the '
                                         f'{total} {name} rows')
        obj_rows = ranges(first_box, obj_counts)
        rel_rows = ranges(first_rel, rel_counts)
        image_of_rel = np.repeat(np.arange(len(rows)), rel_counts)
        labels = h5['labels'][obj_rows].astype(np.int64)
        check_range(labels, 1, num_classes,
                    lambda i: self._describe(int(rows[np.searchsorted(np.cumsum(obj_counts), i, 'right')])) +
                    f', object row {obj_rows[i]}', 'label')
        local = h5['relationships'][rel_rows].astype(np.int64) - first_box[image_of_rel][:, None]
        bad = np.flatnonzero(((local < 0) | (local >= obj_counts[image_of_rel][:, None])).any(1))
        if bad.size:
            i = int(bad[0])
            img = int(image_of_rel[i])
            raise DatasetFormatError(
                f'{self._describe(int(rows[img]))}: relationship row {rel_rows[i]} refers to object rows '
                f'{h5["relationships"][rel_rows[i]].tolist()}, outside the image\'s object rows '
                f'[{first_box[img]}, {first_box[img] + obj_counts[img] - 1}]')
        predicates = h5['predicates'][rel_rows].astype(np.int64)
        check_range(predicates, 1, num_predicates,
                    lambda i: self._describe(int(rows[image_of_rel[i]])) + f', relationship row {rel_rows[i]}',
                    'predicate')
        relations = np.concatenate([local, predicates[:, None] - 1], axis=1)
        return dict(obj_rows=obj_rows, obj_counts=obj_counts, image_of_rel=image_of_rel, relations=relations,
                    labels=labels - 1)

    # ------------------------------------------------------------------ metainfo and data list
    def _file_metainfo(self) -> Dict[str, Any]:
        classes, predicates = load_vg150_vocabulary(self.dict_file, self.data_root)
        meta: Dict[str, Any] = dict(classes=tuple(classes), predicates=tuple(predicates))
        if self.zeroshot_file:
            self._require(self.zeroshot_file, 'VG150 zero-shot triplet file')
            meta['zeroshot_triplets'] = str(self.zeroshot_file)
        train = self._graphs(vg150_split_rows(self._h5(), 'train', self.num_val_images), len(classes),
                             len(predicates))
        stats = graph_statistics(train, len(predicates))
        meta.update(stats)
        if not stats:
            print_log(f'VG150Dataset: the training split of {self.ann_file} is empty (num_val_images='
                      f'{self.num_val_images}); no predicate_counts / train_triplets in metainfo',
                      logger='current', level=logging.WARNING)
        return meta

    def load_data_list(self) -> List[dict]:
        rows = vg150_split_rows(self._h5(), self.split, self.num_val_images)
        graphs = self._graphs(rows, len(self._metainfo['classes']), len(self._metainfo['predicates']))
        info = self._image_info()
        widths = np.array([info[r]['width'] for r in rows], dtype=np.int64)
        heights = np.array([info[r]['height'] for r in rows], dtype=np.int64)
        counts = graphs['obj_counts']
        obj_w, obj_h = np.repeat(widths, counts), np.repeat(heights, counts)
        boxes = decode_vg150_boxes(self._h5()['boxes_1024'][graphs['obj_rows']], np.maximum(obj_w, obj_h))
        boxes = clip_boxes_legacy(boxes, obj_w, obj_h)
        records = []
        for r, w, h in zip(rows.tolist(), widths.tolist(), heights.tolist()):
            image_id = int(info[r]['image_id'])
            records.append(dict(img_path=self._img_path(f'{image_id}.jpg'), img_id=image_id, width=w, height=h))
        return self.build_data_list(records, boxes, graphs['labels'], counts, graphs['image_of_rel'],
                                    graphs['relations'], self.duplicate_mode)


__all__: Sequence[str] = ('VG150Dataset', 'CORRUPTED_IMAGE_IDS', 'decode_vg150_boxes', 'load_vg150_vocabulary',
                          'read_vg150_h5', 'vg150_split_rows')
