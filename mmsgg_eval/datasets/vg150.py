"""VG150 (Visual Genome, 150 classes / 50 predicates) from the Scene-Graph-Benchmark files.

Follows ``maskrcnn_benchmark/data/datasets/visual_genome.py`` of KaihuaTang/Scene-Graph-Benchmark.pytorch
(``load_info``, ``load_image_filenames``, ``load_graphs``, ``get_groundtruth(evaluation=True)``,
``get_VG_statistics``):

* ``image_data.json`` loses the corrupted images 1592, 1722, 4616, 4617 BEFORE it is aligned with the h5:
  h5 image row i is the i-th remaining entry.
* split mask = (split == 0 train/val, 2 test) & (img_to_first_box >= 0) & (img_to_first_rel >= 0);
  val = the FIRST ``num_val_images`` split-0 images of that mask, train = the rest.
* boxes_1024 (cx, cy, w, h) -> x1 = cx - w / 2 stored back into the integer array (truncation toward 0),
  x2 = x1 + w; then / 1024 * max(W, H) (W, H from image_data.json), float32, clamped to [0, W-1] x [0, H-1];
  boxes that clamping makes empty are kept (legacy ``clip_to_image(remove_empty=False)``).
* relationships hold GLOBAL object rows, made local by subtracting img_to_first_box.
* duplicate relations are kept outside the training split; the training split keeps one relation per pair
  (legacy draws it at random, here deterministically the first one).
* labels / predicates are 1-based in the file and 0-based here.
* training statistics (``predicate_counts``, ``train_triplets``) follow ``get_VG_statistics``: its training
  set is built with ``filter_non_overlap=True``, so a relation counts only when its subject and object boxes
  overlap (IoU > 0 with the +1-pixel convention on the 1024-scale integer boxes, i.e. min(x2) - max(x1) + 1
  > 0 and the same in y); duplicates are counted. ``train_statistics='all'`` counts every training relation.
* ``filter_non_overlap=True`` applies the same filter to the training split itself (the legacy training
  loader with ``REQUIRE_BOX_OVERLAP`` in SGDet, and the set ``get_VG_statistics`` counts on): relations
  without overlap are dropped, and images left without a relation are dropped.

Checked while reading (the legacy loader asserts the same on the whole file): every ``boxes_1024`` row of
the indexed images has w > 0 and h > 0, and every ``image_data.json`` record has a positive width and
height; anything else raises :class:`DatasetFormatError` naming the image and the row.

Not reproduced: the legacy check that image files exist (the real files have all 108,073 images).
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple

import logging
import numpy as np
from mmengine.logging import print_log

from ..open_vocab import base_training_graphs, split_table
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
    import h5py  # here: `import mmsgg_eval` (every config) does not pay for it
    require_file(path, 'VG150 h5 file', data_root)
    out = {}
    try:
        f = h5py.File(path, 'r')
    except OSError as err:  # garbage or truncated header: h5py's message does not name the file
        raise DatasetFormatError(f'{path}: not a readable HDF5 file ({err})') from None
    with f:
        for key in H5_KEYS:
            if key not in f:
                raise DatasetFormatError(f'{path}: missing h5 dataset {key!r} (a VG-SGG h5 has {list(H5_KEYS)})')
            try:
                out[key] = f[key][()]
            except (OSError, ValueError, TypeError) as err:  # truncated data, unreadable chunk
                raise DatasetFormatError(f'{path}: h5 dataset {key!r} cannot be read ({type(err).__name__}: '
                                         f'{err}); the file may be truncated') from None
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
    xyxy = legacy_xyxy_1024(boxes_1024)
    return (xyxy / BOX_SCALE * np.asarray(longer_side, np.float64)[:, None]).astype(np.float32)


def legacy_xyxy_1024(boxes_1024: np.ndarray) -> np.ndarray:
    """``boxes_1024`` rows (cx, cy, w, h) to xyxy at the 1024 scale in the file's integer dtype, as the legacy
    in-place conversion: x1 = cx - w / 2 computed in float64 and truncated toward 0, x2 = x1 + w."""
    boxes = np.asarray(boxes_1024)
    wh = boxes[:, 2:]
    x1y1 = (boxes[:, :2] - wh / 2).astype(boxes.dtype)
    return np.concatenate([x1y1, x1y1 + wh], axis=1)


def boxes_touch_plus_one(boxes_a: np.ndarray, boxes_b: np.ndarray) -> np.ndarray:
    """Element-wise IoU > 0 of integer xyxy boxes in the +1-pixel convention (legacy ``boxlist_iou``):
    min(x2) - max(x1) + 1 > 0 and min(y2) - max(y1) + 1 > 0 (boxes with w, h >= 1, so the union is > 0)."""
    a, b = np.asarray(boxes_a, np.int64), np.asarray(boxes_b, np.int64)
    iw = np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]) + 1
    ih = np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]) + 1
    return (iw > 0) & (ih > 0)


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
        train_statistics: 'legacy' (default): ``predicate_counts`` / ``train_triplets`` as the legacy
            ``get_VG_statistics`` counts them (training relations whose boxes overlap, duplicates included);
            'all': every training relation, duplicates included.
        filter_non_overlap: training split only: drop relations whose boxes do not overlap and the images
            left without relation (legacy ``filter_non_overlap``); default False (the legacy PredCls / SGCls
            training loader).
        clip_boxes: clamp boxes to the image (True, the legacy evaluation GT); False keeps the decoded boxes
            unclipped, as ``get_VG_statistics`` sees them (used for the frequency-baseline background).
        open_vocab_split: None, or 'ovd' | 'ovr' | 'ovdr': the open-vocabulary setting of OvSGTR
            (:mod:`mmsgg_eval.open_vocab`): the TRAINING split (and the training statistics in ``metainfo``, so
            the frequency baseline) becomes base-only (novel boxes relabelled to a parent class or dropped;
            novel predicates dropped); val / test are unchanged. ``metainfo['open_vocab']`` names the novel
            classes and predicates, which the scene-graph metrics then report separately.
        open_vocab_seed: seed of the parent class picked for each relabelled novel training box.

    ``metainfo``: classes (150), predicates (50), dataset_name 'VG150', iou_plus_one True, predicate_counts and
    train_triplets of the training split (see ``train_statistics``).
    """

    # dataset arguments under which the training split is the one the legacy frequency statistics
    # (``get_VG_statistics``, used by MOTIFS' FREQ) count on: overlap-filtered, duplicates kept, boxes unclipped
    FREQUENCY_STATISTICS_ARGS = dict(filter_non_overlap=True, duplicate_rels='keep', clip_boxes=False)

    METAINFO = dict(dataset_name='VG150', iou_plus_one=True)
    EXTRA_FILES = ('dict_file', 'image_file', 'zeroshot_file')

    def __init__(self, data_root: str = '', ann_file: str = 'VG-SGG-with-attri.h5',
                 dict_file: str = 'VG-SGG-dicts-with-attri.json', image_file: str = 'image_data.json',
                 data_prefix: Optional[dict] = None, split: str = 'test', num_val_images: int = 5000,
                 zeroshot_file: Optional[str] = None, duplicate_rels: Optional[str] = None,
                 train_statistics: str = 'legacy', filter_non_overlap: bool = False, clip_boxes: bool = True,
                 open_vocab_split: Optional[str] = None, open_vocab_seed: int = 0, **kwargs: Any) -> None:
        self.open_vocab = None if open_vocab_split is None else split_table(open_vocab_split)
        self.open_vocab_seed = int(open_vocab_seed)
        if train_statistics not in ('legacy', 'all'):
            raise ValueError(f"VG150Dataset: train_statistics must be 'legacy' or 'all', got {train_statistics!r}")
        self.train_statistics = train_statistics
        self.filter_non_overlap = bool(filter_non_overlap)
        self.clip_boxes = bool(clip_boxes)
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
                w, h = d.get('width'), d.get('height')
                if not isinstance(w, int) or not isinstance(h, int) or isinstance(w, bool) or isinstance(h, bool):
                    raise DatasetFormatError(f'{self.image_file}: record of image_id {d["image_id"]} (position '
                                             f'{i} after removing corrupted ids) lacks integer width/height')
                if w <= 0 or h <= 0:
                    raise DatasetFormatError(f'{self.image_file}: record of image_id {d["image_id"]} (position '
                                             f'{i} after removing corrupted ids): width {w} x height {h}, expected '
                                             f'positive pixel sizes')
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
        sizes = h5['boxes_1024'][obj_rows, 2:]
        bad = np.flatnonzero((sizes <= 0).any(1))
        if bad.size:
            i = int(bad[0])
            img = int(np.searchsorted(np.cumsum(obj_counts), i, 'right'))
            raise DatasetFormatError(f'{self._describe(int(rows[img]))}, object row {obj_rows[i]}: boxes_1024 '
                                     f'(cx, cy, w, h) = {h5["boxes_1024"][obj_rows[i]].tolist()}, expected w > 0 '
                                     f'and h > 0 ({bad.size} such rows)')
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

    def _overlapping(self, graphs: Dict[str, np.ndarray]) -> np.ndarray:
        """bool [R]: the relation's subject and object boxes overlap (legacy ``filter_non_overlap`` test)."""
        counts = np.asarray(graphs['obj_counts'], np.int64)
        base = (np.cumsum(counts) - counts)[graphs['image_of_rel']]
        rels = graphs['relations']
        xyxy = legacy_xyxy_1024(self._h5()['boxes_1024'][graphs['obj_rows']])
        return boxes_touch_plus_one(xyxy[base + rels[:, 0]], xyxy[base + rels[:, 1]])

    @staticmethod
    def _keep_relations(graphs: Dict[str, np.ndarray], keep: np.ndarray) -> Dict[str, np.ndarray]:
        """``graphs`` with only the relations where ``keep`` (objects unchanged)."""
        return dict(graphs, image_of_rel=graphs['image_of_rel'][keep], relations=graphs['relations'][keep])

    @staticmethod
    def _keep_images(rows: np.ndarray, graphs: Dict[str, np.ndarray],
                     keep: np.ndarray) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
        """(rows, graphs) restricted to the images where ``keep`` [I] (order kept)."""
        counts = np.asarray(graphs['obj_counts'], np.int64)
        obj_keep = np.repeat(keep, counts)
        new_pos = np.cumsum(keep) - 1
        rel_keep = keep[graphs['image_of_rel']]
        return rows[keep], dict(obj_rows=graphs['obj_rows'][obj_keep], obj_counts=counts[keep],
                                image_of_rel=new_pos[graphs['image_of_rel'][rel_keep]],
                                relations=graphs['relations'][rel_keep], labels=graphs['labels'][obj_keep])

    def _base_only(self, graphs: Dict[str, np.ndarray], classes: Sequence[str],
                   predicates: Sequence[str]) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
        """The open-vocabulary base-only version of training graphs, and the image positions kept."""
        return base_training_graphs(graphs, classes, predicates, self.open_vocab['setting'], self.open_vocab_seed,
                                    novel_predicates=self.open_vocab['novel_predicates'] or None)

    # ------------------------------------------------------------------ metainfo and data list
    def _file_metainfo(self) -> Dict[str, Any]:
        classes, predicates = load_vg150_vocabulary(self.dict_file, self.data_root)
        meta: Dict[str, Any] = dict(classes=tuple(classes), predicates=tuple(predicates))
        if self.zeroshot_file:
            self._require(self.zeroshot_file, 'VG150 zero-shot triplet file')
            meta['zeroshot_triplets'] = str(self.zeroshot_file)
        train = self._graphs(vg150_split_rows(self._h5(), 'train', self.num_val_images), len(classes),
                             len(predicates))
        if self.open_vocab is not None:
            train = self._base_only(train, classes, predicates)[0]
            meta['open_vocab'] = dict(split=self.open_vocab['name'], setting=self.open_vocab['setting'],
                                      novel_objects=list(self.open_vocab['novel_objects']),
                                      novel_predicates=list(self.open_vocab['novel_predicates']),
                                      seed=self.open_vocab_seed, source=self.open_vocab['source'])
        if self.train_statistics == 'legacy':  # get_VG_statistics: training set with filter_non_overlap=True
            train = self._keep_relations(train, self._overlapping(train))
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
        if self.open_vocab is not None and self.split == 'train':
            graphs, kept = self._base_only(graphs, self._metainfo['classes'], self._metainfo['predicates'])
            rows = rows[kept]
        if self.filter_non_overlap and self.split == 'train':
            graphs = self._keep_relations(graphs, self._overlapping(graphs))
            rows, graphs = self._keep_images(rows, graphs, np.bincount(graphs['image_of_rel'],
                                                                        minlength=len(rows)) > 0)
        info = self._image_info()
        widths = np.array([info[r]['width'] for r in rows], dtype=np.int64)
        heights = np.array([info[r]['height'] for r in rows], dtype=np.int64)
        counts = graphs['obj_counts']
        obj_w, obj_h = np.repeat(widths, counts), np.repeat(heights, counts)
        boxes = decode_vg150_boxes(self._h5()['boxes_1024'][graphs['obj_rows']], np.maximum(obj_w, obj_h))
        if self.clip_boxes:
            boxes = clip_boxes_legacy(boxes, obj_w, obj_h)
        records = []
        for r, w, h in zip(rows.tolist(), widths.tolist(), heights.tolist()):
            image_id = int(info[r]['image_id'])
            records.append(dict(img_path=self._img_path(f'{image_id}.jpg'), img_id=image_id, width=w, height=h))
        return self.build_data_list(records, boxes, graphs['labels'], counts, graphs['image_of_rel'],
                                    graphs['relations'], self.duplicate_mode)


__all__: Sequence[str] = ('VG150Dataset', 'CORRUPTED_IMAGE_IDS', 'boxes_touch_plus_one', 'decode_vg150_boxes',
                          'legacy_xyxy_1024', 'load_vg150_vocabulary', 'read_vg150_h5', 'vg150_split_rows')
