"""GQA200 (200 classes / 100 predicates) from the SHA-GCL files.

Follows ``maskrcnn_benchmark/data/datasets/gqa.py`` of dongxingning/SHA-GCL-for-SGG (``load_info``,
``load_graphs``, ``get_groundtruth(evaluation=True)``):

* train reads ``GQA_200_Train.json``; val and test read ``GQA_200_Test.json``.
* for val/test the entry at raw position 5579 of the file (0-based, counted before any filtering; the legacy
  counter ``items == 5580``) is skipped (``skip_legacy_bad_image``).
* images without boxes or without relations are dropped; val = the first ``num_val_images`` remaining test
  images and test = all of them (legacy: the test split contains the val images).
* boxes are pixel xyxy, cast to float32 and clamped to [0, W-1] x [0, H-1] (W, H from ``img_info_all``);
  classes 1..200 and predicates 1..100 become 0-based; ``__background__`` is dropped from the vocabulary.
* duplicate relations are kept outside the training split (training: one per pair, first in file order).
* training statistics (``predicate_counts``, ``train_triplets``) count every training relation, duplicates
  included: the reference ``get_GQA_statistics`` builds its training set with ``filter_duplicate_rels=False``
  and, unlike VG150, its ``load_graphs`` ignores ``filter_non_overlap`` (no overlap filter).

Checked while reading: every box row is 4 numbers with x2 >= x1 and y2 >= y1 (empty boxes are kept), every
relationship row 3 integers; anything else raises :class:`DatasetFormatError` naming the file, the image
(file name and position), the field and the row.
"""
import os.path as osp
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ..registry import DATASETS
from .base import (DatasetFormatError, SceneGraphDataset, check_box_order, check_range, concat_image_graphs,
                   integer_labels, load_json, numeric_rows)

GQA_KEYS = ('filenames_all', 'img_info_all', 'gt_boxes_all', 'gt_classes_all', 'relationships_all')
LEGACY_BAD_POSITION = 5579


def load_gqa200_vocabulary(info_file: str, data_root: str = '') -> Dict[str, List[str]]:
    """``classes`` / ``predicates`` (0-based, background removed) from ``GQA_200_ID_Info.json``."""
    info = load_json(info_file, 'GQA200 info file', data_root)
    out = {}
    for key, name in (('ind_to_classes', 'classes'), ('ind_to_predicates', 'predicates')):
        if key not in info:
            raise DatasetFormatError(f'{info_file}: missing key {key!r}')
        names = list(info[key])
        if not names or names[0] != '__background__':
            raise DatasetFormatError(f'{info_file}: {key}[0] must be "__background__", got {names[:1]}')
        out[name] = names[1:]
    return out


def parse_gqa200_split(path: str, num_classes: int, num_predicates: int, skip_position: Optional[int],
                       data_root: str = '', clip: bool = True) -> Dict[str, Any]:
    """Kept images of a GQA200 split file (file order) with their objects and relations, validated.

    Returns records (img_path-less dicts: filename, width, height, position), boxes float32 [N, 4] (clipped to
    the image unless ``clip=False``), labels [N] 0-based, obj_counts [I], image_of_rel [R], relations [R, 3]
    (local s, o, 0-based predicate).
    """
    data = load_json(path, 'GQA200 annotation file', data_root)
    for key in GQA_KEYS:
        if key not in data:
            raise DatasetFormatError(f'{path}: missing key {key!r} (a GQA200 file has {list(GQA_KEYS)})')
    columns = [data[k] for k in GQA_KEYS]
    if len({len(c) for c in columns}) != 1:
        raise DatasetFormatError(f'{path}: the lists {list(GQA_KEYS)} have different lengths '
                                 f'{[len(c) for c in columns]}')
    records, boxes, labels, rels = [], [], [], []
    for pos, (name, info, b, c, r) in enumerate(zip(*columns)):
        if pos == skip_position or len(r) == 0 or len(b) == 0:
            continue
        where = f'{path}: image {name!r} (position {pos})'
        b = numeric_rows(b, 4, np.float64, where, 'gt_boxes_all', '[x1, y1, x2, y2] (pixels)')
        check_box_order(b, where, 'gt_boxes_all')
        c = integer_labels(c, where, 'gt_classes_all')
        r = numeric_rows(r, 3, np.int64, where, 'relationships_all', '[subject, object, predicate] (integers)')
        if len(c) != len(b):
            raise DatasetFormatError(f'{where}: {len(b)} boxes but {len(c)} classes')
        check_range(c, 1, num_classes, lambda i: f'{where}, object {i}', 'class')
        check_range(r[:, :2], 0, len(b) - 1, lambda i: f'{where}, relationship {i // 2}', 'object index')
        check_range(r[:, 2], 1, num_predicates, lambda i: f'{where}, relationship {i}', 'predicate')
        try:
            width, height = int(info['width']), int(info['height'])
        except (KeyError, TypeError, ValueError):
            raise DatasetFormatError(f'{where}: img_info needs integer width and height') from None
        records.append(dict(filename=name, width=width, height=height, position=pos))
        boxes.append(b)
        labels.append(c - 1)
        rels.append(np.concatenate([r[:, :2], r[:, 2:] - 1], axis=1))
    return concat_image_graphs(records, boxes, labels, rels, clip)


@DATASETS.register_module()
class GQA200Dataset(SceneGraphDataset):
    """GQA200 from ``GQA_200_ID_Info.json`` + ``GQA_200_Train.json`` / ``GQA_200_Test.json``.

    Args:
        data_root: folder of the files; relative file arguments are joined with it.
        ann_file: the split file; None = ``GQA_200_Train.json`` for train, ``GQA_200_Test.json`` for val/test.
        info_file: the vocabulary json (``ind_to_classes``, ``ind_to_predicates`` with ``__background__``).
        train_file: training file read for ``predicate_counts`` / ``train_triplets`` (None or missing: none).
        data_prefix: ``dict(img='images/')``; images are the ``filenames_all`` entries there (never opened).
        split: 'train' | 'val' | 'test'.
        num_val_images: size of val (the first kept test images).
        skip_legacy_bad_image: skip raw position 5579 of the val/test file like the legacy loader.
        duplicate_rels: see :class:`SceneGraphDataset`.
        clip_boxes: clamp boxes to the image (True, the legacy evaluation GT); False keeps the file's boxes, as
            ``get_GQA_statistics`` sees them (used for the frequency-baseline background).
    """

    # dataset arguments under which the training split is the one the reference frequency statistics
    # (``get_GQA_statistics``) count on: duplicates kept, boxes as in the file, no overlap filter
    FREQUENCY_STATISTICS_ARGS = dict(duplicate_rels='keep', clip_boxes=False)

    METAINFO = dict(dataset_name='GQA200', iou_plus_one=True)
    EXTRA_FILES = ('info_file', 'train_file')

    def __init__(self, data_root: str = '', ann_file: Optional[str] = None,
                 info_file: str = 'GQA_200_ID_Info.json', train_file: Optional[str] = 'GQA_200_Train.json',
                 data_prefix: Optional[dict] = None, split: str = 'test', num_val_images: int = 5000,
                 skip_legacy_bad_image: bool = True, duplicate_rels: Optional[str] = None, clip_boxes: bool = True,
                 **kwargs: Any) -> None:
        self.clip_boxes = bool(clip_boxes)
        if ann_file is None:
            ann_file = 'GQA_200_Train.json' if split == 'train' else 'GQA_200_Test.json'
        self.info_file = info_file
        self.train_file = train_file
        self.num_val_images = int(num_val_images)
        self.skip_legacy_bad_image = skip_legacy_bad_image
        super().__init__(data_root=data_root, ann_file=ann_file,
                         data_prefix=dict(img='images/') if data_prefix is None else data_prefix,
                         split=split, duplicate_rels=duplicate_rels, **kwargs)

    def _parsed(self, path: str, split: str, num_classes: int, num_predicates: int) -> Dict[str, Any]:
        skip = LEGACY_BAD_POSITION if self.skip_legacy_bad_image and split in ('val', 'test') else None
        return self._cached(f'{split}:{path}', lambda: parse_gqa200_split(path, num_classes, num_predicates, skip,
                                                                           self.data_root, clip=self.clip_boxes))

    def _file_metainfo(self) -> Dict[str, Any]:
        return self.vocabulary_metainfo(load_gqa200_vocabulary(self.info_file, self.data_root),
                                        lambda path, *sizes: self._parsed(path, 'train', *sizes))

    def load_data_list(self) -> List[dict]:
        parsed = self._parsed(self.ann_file, self.split, len(self._metainfo['classes']),
                              len(self._metainfo['predicates']))
        records, obj_counts = parsed['records'], parsed['obj_counts']
        boxes, labels, image_of_rel, relations = (parsed['boxes'], parsed['labels'], parsed['image_of_rel'],
                                                  parsed['relations'])
        if self.split == 'val' and self.num_val_images > 0 and len(records) > self.num_val_images:
            n = self.num_val_images
            n_obj = int(obj_counts[:n].sum())
            keep_rel = image_of_rel < n
            records, obj_counts, boxes, labels = records[:n], obj_counts[:n], boxes[:n_obj], labels[:n_obj]
            image_of_rel, relations = image_of_rel[keep_rel], relations[keep_rel]
        out = [dict(img_path=self._img_path(rec['filename']), img_id=osp.splitext(rec['filename'])[0],
                    width=rec['width'], height=rec['height']) for rec in records]
        return self.build_data_list(out, boxes, labels, obj_counts, image_of_rel, relations, self.duplicate_mode)


__all__: Sequence[str] = ('GQA200Dataset', 'load_gqa200_vocabulary', 'parse_gqa200_split')
