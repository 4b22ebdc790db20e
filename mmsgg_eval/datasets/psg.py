"""PSG (Panoptic Scene Graph: 133 classes / 56 predicates) from ``psg.json``.

Follows ``openpsg/datasets/psg.py`` of Jingkang50/OpenPSG (``PanopticSceneGraphDataset`` with
``all_bboxes=True``, as its relation configs use):

* classes = ``thing_classes`` + ``stuff_classes`` (0-based ``category_id``); predicates ``predicate_classes``
  (0-based in the file; OpenPSG adds 1 internally, here they stay 0-based).
* images without relations are dropped; test = records whose ``image_id`` is in ``test_image_ids``,
  train = the others.
* every segment is an object (things and stuff; ``annotations`` is index-aligned with ``segments_info``);
  relation indices point into that list. Boxes are the ``annotations`` xyxy boxes, float32, not clipped.
* test keeps several predicates per pair but drops exact duplicate triplets (first occurrence kept); train
  keeps one relation per pair (OpenPSG draws it at random, here the first one).
* masks: the panoptic PNG at ``seg_map_path`` decodes to segment ids R + 256 G + 65536 B; see
  :class:`~mmsgg_eval.datasets.transforms.LoadSceneGraphAnnotations` (it requires the PNG to have the
  image's size and every segment id to occur in it).
* training statistics count every training relation (all predicates of a pair, duplicates included).

Checked while reading: every annotation has ``bbox`` (4 numbers, x2 >= x1 and y2 >= y1 after the XYWH
conversion) and ``category_id``, every segment an integer ``id``, every relation 3 integers; anything else
raises :class:`DatasetFormatError` naming the file, the image_id, the entry and the field.
"""
import os.path as osp
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ..registry import DATASETS
from .base import DatasetFormatError, SceneGraphDataset, check_range, graph_statistics, load_json

PSG_KEYS = ('thing_classes', 'stuff_classes', 'predicate_classes', 'test_image_ids', 'data')
BOX_MODE_XYXY_ABS, BOX_MODE_XYWH_ABS = 0, 1  # detectron2 BoxMode values


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_integer(value: Any) -> bool:
    return _is_number(value) and float(value).is_integer()


def parse_psg_records(path: str, records: Sequence[dict], num_classes: int,
                      num_predicates: int) -> Dict[str, Any]:
    """Objects and relations of PSG ``data`` records, validated (record order kept).

    Returns boxes float32 [N, 4] xyxy, labels [N] 0-based, obj_counts [I], image_of_rel [R], relations [R, 3]
    (local subject, local object, 0-based predicate), segments (per record: list of segment dicts).
    """
    boxes, labels, rels, obj_counts, rel_counts, segments = [], [], [], [], [], []
    for d in records:
        where = f'{path}: image_id {d.get("image_id")!r} ({d.get("file_name")!r})'
        anns, segs = d.get('annotations', []), d.get('segments_info', [])
        if len(anns) != len(segs):
            raise DatasetFormatError(f'{where}: {len(anns)} annotations but {len(segs)} segments_info entries '
                                     f'(they must be index-aligned)')
        for k, a in enumerate(anns):
            for key in ('bbox', 'category_id'):
                if not isinstance(a, dict) or key not in a:
                    raise DatasetFormatError(f'{where}: annotations[{k}] lacks {key!r} (each annotation needs '
                                             f'bbox [x1, y1, x2, y2] and category_id)')
            box = a['bbox']
            if not isinstance(box, (list, tuple)) or len(box) != 4 or not all(_is_number(v) for v in box):
                raise DatasetFormatError(f'{where}: annotations[{k}].bbox = {box!r}, expected 4 numbers '
                                         f'[x1, y1, x2, y2] (or x, y, w, h with bbox_mode 1)')
            if not _is_integer(a['category_id']):
                raise DatasetFormatError(f'{where}: annotations[{k}].category_id = {a["category_id"]!r}, expected '
                                         f'an integer')
        b = np.asarray([a['bbox'] for a in anns], dtype=np.float64).reshape(-1, 4)
        modes = np.asarray([a.get('bbox_mode', BOX_MODE_XYXY_ABS) for a in anns], dtype=np.int64)
        if np.any((modes != BOX_MODE_XYXY_ABS) & (modes != BOX_MODE_XYWH_ABS)):
            raise DatasetFormatError(f'{where}: unsupported bbox_mode {sorted(set(modes.tolist()))} '
                                     f'(0 = XYXY_ABS, 1 = XYWH_ABS)')
        xywh = modes == BOX_MODE_XYWH_ABS
        b[xywh, 2:] += b[xywh, :2]
        bad = np.flatnonzero(~np.isfinite(b).all(1) | (b[:, 2] < b[:, 0]) | (b[:, 3] < b[:, 1]))
        if bad.size:
            k = int(bad[0])
            raise DatasetFormatError(f'{where}: annotations[{k}].bbox = {anns[k]["bbox"]!r} (bbox_mode '
                                     f'{int(modes[k])}), expected finite numbers with x2 >= x1 and y2 >= y1')
        c = np.asarray([a['category_id'] for a in anns], dtype=np.int64)
        check_range(c, 0, num_classes - 1, lambda i: f'{where}, annotation {i}', 'category_id')
        rel_rows = d['relations']
        for k, rel in enumerate(rel_rows):
            if not isinstance(rel, (list, tuple)) or len(rel) != 3 or not all(_is_integer(v) for v in rel):
                raise DatasetFormatError(f'{where}: relations[{k}] = {rel!r}, expected [subject, object, '
                                         f'predicate] (3 integers)')
        for k, seg in enumerate(segs):
            if not isinstance(seg, dict) or 'id' not in seg or not _is_integer(seg['id']):
                raise DatasetFormatError(f'{where}: segments_info[{k}] has no integer `id` (got '
                                         f'{seg.get("id") if isinstance(seg, dict) else seg!r}); the id is the '
                                         f'segment\'s colour R + 256 G + 65536 B in the panoptic PNG')
            if 'category_id' not in seg:
                raise DatasetFormatError(f'{where}: segments_info[{k}] lacks `category_id`')
        r = np.asarray(rel_rows, dtype=np.int64).reshape(-1, 3)
        check_range(r[:, :2], 0, len(anns) - 1, lambda i: f'{where}, relation {i // 2}', 'object index')
        check_range(r[:, 2], 0, num_predicates - 1, lambda i: f'{where}, relation {i}', 'predicate')
        boxes.append(b)
        labels.append(c)
        rels.append(r)
        obj_counts.append(len(anns))
        rel_counts.append(len(r))
        segments.append([dict(id=int(s['id']), category=int(s['category_id']), is_thing=int(s.get('isthing', 1)))
                         for s in segs])
    rel_counts = np.asarray(rel_counts, dtype=np.int64)
    return dict(boxes=np.concatenate(boxes).astype(np.float32) if boxes else np.zeros((0, 4), np.float32),
                labels=np.concatenate(labels) if labels else np.zeros(0, np.int64),
                obj_counts=np.asarray(obj_counts, dtype=np.int64),
                image_of_rel=np.repeat(np.arange(len(records)), rel_counts),
                relations=np.concatenate(rels) if rels else np.zeros((0, 3), np.int64),
                segments=segments)


@DATASETS.register_module()
class PSGDataset(SceneGraphDataset):
    """PSG from ``psg.json``; images and panoptic PNGs under ``data_prefix`` (never opened while indexing).

    Args:
        data_root: folder of the files; relative file arguments are joined with it.
        ann_file: ``psg.json``.
        data_prefix: ``dict(img='coco/', seg='coco/')``: ``file_name`` / ``pan_seg_file_name`` are relative to
            them (in the real data e.g. ``val2017/...jpg`` and ``panoptic_val2017/...png`` under COCO).
        split: 'train' | 'test'.
        with_masks: put ``seg_map_path`` and ``segments_info`` in each data info so that
            ``LoadSceneGraphAnnotations`` decodes per-object masks.
        duplicate_rels: see :class:`SceneGraphDataset` (default: drop_triplets for test, one_per_pair for train).

    ``metainfo``: classes (133 = things + stuff), thing_classes, stuff_classes, predicates (56), dataset_name
    'PSG', iou_plus_one False, predicate_counts / train_triplets of the training records (all relations).
    """

    METAINFO = dict(dataset_name='PSG', iou_plus_one=False)
    SPLITS = ('train', 'test')

    def __init__(self, data_root: str = '', ann_file: str = 'psg.json', data_prefix: Optional[dict] = None,
                 split: str = 'test', with_masks: bool = True, duplicate_rels: Optional[str] = None,
                 **kwargs: Any) -> None:
        self.with_masks = with_masks
        super().__init__(data_root=data_root, ann_file=ann_file,
                         data_prefix=dict(img='coco/', seg='coco/') if data_prefix is None else data_prefix,
                         split=split, duplicate_rels=duplicate_rels, **kwargs)

    def default_duplicate_mode(self) -> str:
        return 'one_per_pair' if self.split == 'train' else 'drop_triplets'

    def _psg(self) -> Dict[str, Any]:
        def load() -> Dict[str, Any]:
            data = load_json(self.ann_file, 'PSG annotation file', self.data_root)
            for key in PSG_KEYS:
                if key not in data:
                    raise DatasetFormatError(f'{self.ann_file}: missing key {key!r} (psg.json has {list(PSG_KEYS)})')
            test_ids = {str(i) for i in data['test_image_ids']}
            split = {'train': [], 'test': []}
            for pos, d in enumerate(data['data']):
                for key in ('file_name', 'height', 'width', 'image_id', 'segments_info', 'annotations', 'relations'):
                    if key not in d:
                        raise DatasetFormatError(f'{self.ann_file}: data[{pos}] (image_id '
                                                 f'{d.get("image_id")!r}) lacks {key!r}')
                if len(d['relations']):
                    split['test' if str(d['image_id']) in test_ids else 'train'].append(d)
            return dict(thing_classes=list(data['thing_classes']), stuff_classes=list(data['stuff_classes']),
                        predicates=list(data['predicate_classes']), records=split)
        return self._cached('psg', load)

    def _file_metainfo(self) -> Dict[str, Any]:
        psg = self._psg()
        classes = psg['thing_classes'] + psg['stuff_classes']
        meta: Dict[str, Any] = dict(classes=tuple(classes), thing_classes=tuple(psg['thing_classes']),
                                    stuff_classes=tuple(psg['stuff_classes']), predicates=tuple(psg['predicates']))
        train = self._cached('train', lambda: parse_psg_records(self.ann_file, psg['records']['train'],
                                                                len(classes), len(psg['predicates'])))
        meta.update(graph_statistics(train, len(psg['predicates'])))
        return meta

    def load_data_list(self) -> List[dict]:
        psg = self._psg()
        records = psg['records'][self.split]
        parsed = self._cached(self.split, lambda: parse_psg_records(
            self.ann_file, records, len(self._metainfo['classes']), len(self._metainfo['predicates'])))
        out = []
        for d, segments in zip(records, parsed['segments']):
            info = dict(img_path=self._img_path(d['file_name']),
                        img_id=str(d['image_id']), width=int(d['width']), height=int(d['height']))
            if self.with_masks:
                if 'pan_seg_file_name' not in d:
                    raise DatasetFormatError(f'{self.ann_file}: image_id {d["image_id"]!r} lacks pan_seg_file_name '
                                             f'(needed with with_masks=True)')
                info['seg_map_path'] = osp.join(self.data_prefix.get('seg', ''), d['pan_seg_file_name'])
                info['segments_info'] = segments
            out.append(info)
        return self.build_data_list(out, parsed['boxes'], parsed['labels'], parsed['obj_counts'],
                                    parsed['image_of_rel'], parsed['relations'], self.duplicate_mode)

    def load_gt_masks(self, idx: int) -> np.ndarray:
        """Bool [G, H, W] GT masks of sample ``idx`` (one per instance, original image frame) decoded from its
        panoptic PNG, as ``LoadSceneGraphAnnotations`` decodes them (needs ``with_masks=True``); used by readers
        of saved predictions that match by masks (``--format openpsg``)."""
        from .transforms import load_panoptic_masks
        info = self.get_data_info(idx)
        if 'seg_map_path' not in info:
            raise DatasetFormatError(f'sample_idx={idx}: no panoptic PNG (`seg_map_path`): PSGDataset(with_masks=True) '
                                     f'gives the masks')
        return load_panoptic_masks(info['seg_map_path'], [s['id'] for s in info['segments_info']],
                                   expected_size=(info['height'], info['width']), sample=f'img_id={info["img_id"]}')


__all__: Sequence[str] = ('PSGDataset', 'parse_psg_records')
