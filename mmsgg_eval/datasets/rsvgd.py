"""RSVGD (DIOR-RSVG visual grounding) from ``Annotations/*.xml`` and the split files.

Follows ``data_loader.py`` of ZhanYang-nwpu/RSVG-pytorch: the ``<object>`` elements of all XML files are
enumerated with one global counter, files in sorted order (numeric stems such as ``00001.xml`` sort by
number, which equals the filename order of the zero-padded DIOR names); ``{split}.txt`` holds one global
index per line. A sample is one (image, description, box); samples come in enumeration order (the legacy loop
order), each index once. Boxes are the integer ``bndbox`` pixels (xyxy, original frame), not clipped.

Checked while reading: ``<size>`` is positive and every ``<bndbox>`` is finite with xmax >= xmin and ymax >=
ymin (a degenerate box is kept); anything else raises :class:`DatasetFormatError` naming the XML file and the
``<object>``.
"""
import os
import os.path as osp
import xml.etree.ElementTree as ET
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..registry import DATASETS
from .base import AnnotationDataset, DatasetFormatError, build_instances

# The 20 DIOR categories, as spelled in the DIOR(-RSVG) XML files.
DIOR_CLASSES = ('airplane', 'airport', 'baseballfield', 'basketballcourt', 'bridge', 'chimney', 'dam',
                'Expressway-Service-area', 'Expressway-toll-station', 'golffield', 'groundtrackfield', 'harbor',
                'overpass', 'ship', 'stadium', 'storagetank', 'tenniscourt', 'trainstation', 'vehicle', 'windmill')
DIOR_IMAGE_SIZE = 800  # all DIOR-RSVG images are 800 x 800; used when an XML has no <size>


def sorted_xml_files(ann_dir: str) -> List[str]:
    """XML file names of ``ann_dir`` in enumeration order (numeric stems by number, then by name)."""
    if not osp.isdir(ann_dir):
        raise FileNotFoundError(f'RSVGD annotation folder not found: looked for {osp.abspath(ann_dir)!r}')
    names = [n for n in os.listdir(ann_dir) if n.lower().endswith('.xml')]

    def key(name: str) -> Tuple[int, int, str]:
        stem = osp.splitext(name)[0]
        return (0, int(stem), name) if stem.isdigit() else (1, 0, name)
    return sorted(names, key=key)


def parse_rsvgd_xml(path: str) -> Dict[str, Any]:
    """One DIOR-RSVG XML: filename, width, height and its objects (name, box xyxy pixels, description)."""
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as err:
        raise DatasetFormatError(f'{path}: not valid XML ({err})') from None
    size = root.find('size')
    try:
        width = int(size.findtext('width')) if size is not None else DIOR_IMAGE_SIZE
        height = int(size.findtext('height')) if size is not None else DIOR_IMAGE_SIZE
    except (TypeError, ValueError):
        raise DatasetFormatError(f'{path}: <size> needs integer <width> and <height>') from None
    if width <= 0 or height <= 0:
        raise DatasetFormatError(f'{path}: <size> is {width} x {height}, expected positive <width> and <height>')
    objects = []
    for k, obj in enumerate(root.findall('object')):
        where = f'{path}: <object> #{k}'
        box = obj.find('bndbox')
        if box is None:
            raise DatasetFormatError(f'{where} has no <bndbox>')
        try:
            coords = [float(box.findtext(t)) for t in ('xmin', 'ymin', 'xmax', 'ymax')]
        except (TypeError, ValueError):
            raise DatasetFormatError(f'{where}: <bndbox> needs numeric xmin, ymin, xmax, ymax') from None
        if not all(np.isfinite(coords)) or coords[2] < coords[0] or coords[3] < coords[1]:
            raise DatasetFormatError(f'{where}: <bndbox> (xmin, ymin, xmax, ymax) = {coords}, expected finite pixels '
                                     f'with xmax >= xmin and ymax >= ymin')
        text = obj.findtext('description')
        if text is None or not text.strip():
            raise DatasetFormatError(f'{where} has no <description>')
        objects.append(dict(name=(obj.findtext('name') or '').strip(), bbox=coords, text=text.strip()))
    filename = (root.findtext('filename') or '').strip() or osp.splitext(osp.basename(path))[0] + '.jpg'
    return dict(filename=filename, width=width, height=height, objects=objects)


def read_split_indices(path: str, num_objects: Optional[int] = None, data_root: str = '') -> np.ndarray:
    """Global object indices of a split file, sorted and unique (the legacy enumeration order).

    Raises when a line is not an integer or an index is outside [0, num_objects).
    """
    if not osp.isfile(path):
        where = f' (data_root={data_root!r})' if data_root else ''
        raise FileNotFoundError(f'RSVGD split file not found: looked for {osp.abspath(path)!r}{where}')
    values = []
    with open(path, 'r') as f:
        for line_no, line in enumerate(f, 1):
            if line.strip():
                try:
                    values.append(int(line.strip()))
                except ValueError:
                    raise DatasetFormatError(f'{path}: line {line_no} is not an integer: {line.strip()!r}') from None
    idx = np.asarray(values, dtype=np.int64)
    if num_objects is not None and idx.size:
        bad = np.flatnonzero((idx < 0) | (idx >= num_objects))
        if bad.size:
            raise DatasetFormatError(f'{path}: line {int(bad[0]) + 1} holds object index {idx[bad[0]]}, but the '
                                     f'annotation files define {num_objects} objects (indices 0..{num_objects - 1})')
    return np.unique(idx)


@DATASETS.register_module()
class RSVGDDataset(AnnotationDataset):
    """DIOR-RSVG grounding samples: one per (image, description, box).

    Args:
        data_root: dataset folder holding ``ann_dir``, ``img_dir`` and the split files.
        split: 'train' | 'val' | 'test'; reads ``{split}.txt`` (or ``split_file``).
        ann_dir: folder of the XML files.
        img_dir: folder of the images (``<filename>`` of each XML; never opened here).
        split_file: explicit split file path (relative to ``data_root``); default ``{split}.txt``.

    Each data info: img_path, img_id (XML stem), width, height, instances (one box, bbox_label into
    ``metainfo['classes']``), text (the description, stripped), ann_id (global object index).
    ``metainfo``: classes (the 20 DIOR categories unless given), dataset_name 'RSVGD', iou_plus_one False.
    """

    METAINFO = dict(dataset_name='RSVGD', iou_plus_one=False)
    EXTRA_FILES = ('ann_dir', 'split_file')

    def __init__(self, data_root: str = '', split: str = 'test', ann_dir: str = 'Annotations',
                 img_dir: str = 'JPEGImages', split_file: Optional[str] = None, **kwargs: Any) -> None:
        self.ann_dir = ann_dir
        self.split_file = split_file or f'{split}.txt'
        kwargs.setdefault('data_prefix', dict(img=img_dir))
        super().__init__(data_root=data_root, ann_file='', split=split, **kwargs)

    def _file_metainfo(self) -> Dict[str, Any]:
        return dict(classes=DIOR_CLASSES)

    def load_data_list(self) -> List[dict]:
        files = sorted_xml_files(self.ann_dir)
        parsed = [parse_rsvgd_xml(osp.join(self.ann_dir, name)) for name in files]
        counts = np.array([len(p['objects']) for p in parsed], dtype=np.int64)
        selected = read_split_indices(self.split_file, int(counts.sum()), self.data_root)
        file_of = np.searchsorted(np.cumsum(counts), selected, side='right')
        starts = np.cumsum(counts) - counts
        lookup = {name: i for i, name in enumerate(self._metainfo['classes'])}
        lookup_lower = {name.lower(): i for i, name in enumerate(self._metainfo['classes'])}
        out = []
        for g, f in zip(selected.tolist(), file_of.tolist()):
            doc, k = parsed[f], g - int(starts[f])
            obj = doc['objects'][k]
            label = lookup.get(obj['name'], lookup_lower.get(obj['name'].lower()))
            if label is None:
                raise DatasetFormatError(f'{osp.join(self.ann_dir, files[f])}: <object> #{k} (global index {g}) has '
                                         f'name {obj["name"]!r}, not among metainfo classes')
            out.append(dict(img_path=self._img_path(doc['filename']), img_id=osp.splitext(files[f])[0],
                            width=doc['width'], height=doc['height'],
                            instances=build_instances(np.asarray([obj['bbox']], np.float32), [label]),
                            text=obj['text'], ann_id=g))
        return out


__all__: Sequence[str] = ('RSVGDDataset', 'DIOR_CLASSES', 'parse_rsvgd_xml', 'read_split_indices',
                          'sorted_xml_files')
