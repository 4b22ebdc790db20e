"""Pipeline transforms that load scene-graph / grounding annotations and pack them into data samples.

Evaluation pipelines (mmdet 3.x style) load annotations AFTER ``Resize``: the ground truth stays in the
ORIGINAL image frame, while ``img_shape`` / ``scale_factor`` describe the network input.

``mmcv.transforms.BaseTransform`` is pure Python; ``mmdet.structures`` is imported lazily when a sample is
packed (with a plain MMEngine data element as fallback when mmdet is absent), so importing this module needs
no compiled mmcv ops.
"""
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
import torch

from ..registry import TRANSFORMS
from .base import DatasetFormatError

try:
    from mmcv.transforms import BaseTransform
except ImportError:  # pragma: no cover - mmcv missing entirely
    class BaseTransform:  # type: ignore[no-redef]
        """Minimal stand-in for ``mmcv.transforms.BaseTransform``."""

        def __call__(self, results: dict) -> Optional[dict]:
            return self.transform(results)

        def transform(self, results: dict) -> Optional[dict]:
            raise NotImplementedError


def panoptic_png_to_ids(png: np.ndarray) -> np.ndarray:
    """Segment ids of a panoptic PNG given as RGB uint8 [H, W, 3]: id = R + 256 G + 65536 B (int64 [H, W])."""
    png = np.asarray(png)
    if png.ndim != 3 or png.shape[2] < 3:
        raise ValueError(f'a panoptic PNG must be RGB [H, W, 3], got shape {png.shape}')
    png = png[..., :3].astype(np.int64)
    return png[..., 0] + 256 * png[..., 1] + 65536 * png[..., 2]


def load_panoptic_masks(path: str, segment_ids: Sequence[int], backend_args: Optional[dict] = None,
                        expected_size: Optional[Tuple[int, int]] = None, sample: str = '') -> np.ndarray:
    """Boolean masks [N, H, W] of the given segment ids from a panoptic PNG (original image frame).

    Raises :class:`DatasetFormatError` naming the PNG (and ``sample``, e.g. the image) when the file is not a
    readable image, when its size differs from ``expected_size`` = (height, width) of the image, or when a
    segment id does not occur in it (an empty mask: the PNG and the annotation disagree).
    """
    import io

    from mmengine.fileio import get
    from PIL import Image, UnidentifiedImageError
    where = f'{path}' + (f' ({sample})' if sample else '')
    try:
        data = get(path, backend_args=backend_args)
    except FileNotFoundError:
        raise FileNotFoundError(f'panoptic segmentation PNG not found: looked for {path!r}'
                                + (f' ({sample})' if sample else '')) from None
    try:
        with Image.open(io.BytesIO(data)) as img:
            rgb = np.asarray(img.convert('RGB'))
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        raise DatasetFormatError(f'{where}: not a readable panoptic PNG ({type(err).__name__}: {err})') from None
    ids = panoptic_png_to_ids(rgb)
    if expected_size is not None and tuple(ids.shape) != tuple(int(v) for v in expected_size):
        raise DatasetFormatError(f'{where}: the panoptic PNG is {ids.shape[1]} x {ids.shape[0]} (width x height) '
                                 f'but the image is {int(expected_size[1])} x {int(expected_size[0])}')
    seg = np.asarray(list(segment_ids), dtype=np.int64)
    present = np.isin(seg, np.unique(ids))
    if not present.all():
        k = int(np.flatnonzero(~present)[0])
        raise DatasetFormatError(f'{where}: segments_info[{k}] has id {int(seg[k])}, which does not occur in the '
                                 f'panoptic PNG (id = R + 256 G + 65536 B); {int((~present).sum())} of {len(seg)} '
                                 f'segments are missing')
    return ids[None, :, :] == seg[:, None, None]


@TRANSFORMS.register_module()
class LoadSceneGraphAnnotations(BaseTransform):
    """Turn a data info's ``instances`` / ``relations`` / ``segments_info`` / ``text`` into GT arrays.

    Adds to ``results``: ``gt_bboxes`` float32 [N, 4] (xyxy, original pixels), ``gt_bboxes_labels`` int64 [N]
    (0-based), ``gt_ignore_flags`` bool [N]; ``gt_relations`` int64 [G, 3] (subject idx, object idx, 0-based
    predicate) when the info has ``relations``; ``gt_masks`` (PSG) decoded from the panoptic PNG
    ``seg_map_path``, one mask per entry of ``segments_info``, as mmdet ``BitmapMasks`` (``mask_format=
    'bitmap'``) or a bool array [N, H, W] (``'bool'``); ``text`` is kept as is.

    Args:
        with_rel: load relations; None = when the info has ``relations``.
        with_mask: load masks; None = when the info has ``seg_map_path``.
        mask_format: 'bitmap' (mmdet BitmapMasks, needs mmdet) or 'bool'.
        backend_args: file backend arguments for the PNG (mmengine.fileio).
    """

    def __init__(self, with_rel: Optional[bool] = None, with_mask: Optional[bool] = None,
                 mask_format: str = 'bitmap', backend_args: Optional[dict] = None) -> None:
        if mask_format not in ('bitmap', 'bool'):
            raise ValueError(f"mask_format must be 'bitmap' or 'bool', got {mask_format!r}")
        self.with_rel = with_rel
        self.with_mask = with_mask
        self.mask_format = mask_format
        self.backend_args = backend_args

    def transform(self, results: Dict[str, Any]) -> Dict[str, Any]:
        instances = results.get('instances', [])
        results['gt_bboxes'] = np.asarray([i['bbox'] for i in instances], dtype=np.float32).reshape(-1, 4)
        results['gt_bboxes_labels'] = np.asarray([i['bbox_label'] for i in instances], dtype=np.int64)
        results['gt_ignore_flags'] = np.asarray([bool(i.get('ignore_flag', 0)) for i in instances], dtype=bool)
        with_rel = 'relations' in results if self.with_rel is None else self.with_rel
        if with_rel:
            if 'relations' not in results:
                raise KeyError(f'{type(self).__name__}(with_rel=True): the data info of {results.get("img_path")!r} '
                               f'has no `relations`')
            results['gt_relations'] = np.asarray(results['relations'], dtype=np.int64).reshape(-1, 3)
        with_mask = 'seg_map_path' in results if self.with_mask is None else self.with_mask
        if with_mask:
            if 'seg_map_path' not in results:
                raise KeyError(f'{type(self).__name__}(with_mask=True): the data info of {results.get("img_path")!r} '
                               f'has no `seg_map_path` (PSGDataset(with_masks=True) provides it)')
            segments = results.get('segments_info', [])
            if len(segments) != len(instances):
                raise ValueError(f'{results["seg_map_path"]}: {len(segments)} segments for {len(instances)} instances')
            size = (results['height'], results['width']) if 'height' in results and 'width' in results else None
            image = results.get('img_id', results.get('img_path'))
            masks = load_panoptic_masks(results['seg_map_path'], [s['id'] for s in segments], self.backend_args,
                                        expected_size=size, sample=f'image {image!r}')
            if self.mask_format == 'bitmap':
                from mmdet.structures.mask import BitmapMasks
                masks = BitmapMasks(masks.astype(np.uint8), masks.shape[1], masks.shape[2])
            results['gt_masks'] = masks
        return results

    def __repr__(self) -> str:
        return (f'{type(self).__name__}(with_rel={self.with_rel}, with_mask={self.with_mask}, '
                f'mask_format={self.mask_format!r})')


def _new_data_sample() -> Any:
    try:
        from mmdet.structures import DetDataSample
    except ImportError:  # mmdet absent: same fields on a plain data element
        from mmengine.structures import BaseDataElement as DetDataSample
    return DetDataSample()


def _image_to_tensor(img: np.ndarray) -> torch.Tensor:
    """HWC (or HW) image -> CHW tensor, as mmdet's PackDetInputs."""
    if img.ndim < 3:
        img = np.expand_dims(img, -1)
    if not img.flags.c_contiguous:
        return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))
    return torch.from_numpy(img).permute(2, 0, 1).contiguous()


@TRANSFORMS.register_module()
class PackSceneGraphInputs(BaseTransform):
    """Pack the image and the scene-graph / grounding GT into ``dict(inputs=..., data_samples=DetDataSample)``.

    ``data_samples`` carries ``gt_instances`` (bboxes float32 [N, 4] in the ORIGINAL image frame, labels int64,
    masks when loaded), ``gt_relations`` = InstanceData(pair_idxs int64 [G, 2], labels int64 [G]) when loaded,
    and the metainfo keys present among ``meta_keys`` (``sample_idx`` and, for RSVGD, ``text`` included).
    ``ori_shape`` falls back to (height, width) of the data info for pipelines that load no image.
    """

    def __init__(self, meta_keys: Sequence[str] = ('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor',
                                                   'flip', 'flip_direction', 'sample_idx', 'text')) -> None:
        self.meta_keys = tuple(meta_keys)

    def transform(self, results: Dict[str, Any]) -> Dict[str, Any]:
        from mmengine.structures import InstanceData
        packed: Dict[str, Any] = {}
        if 'img' in results:
            packed['inputs'] = _image_to_tensor(results['img'])
        sample = _new_data_sample()
        if 'gt_bboxes' in results:
            gt = InstanceData()
            gt.bboxes = torch.as_tensor(np.asarray(results['gt_bboxes'], dtype=np.float32)).reshape(-1, 4)
            gt.labels = torch.as_tensor(np.asarray(results['gt_bboxes_labels'], dtype=np.int64))
            if 'gt_masks' in results:
                gt.masks = results['gt_masks']
            sample.gt_instances = gt
        if 'gt_relations' in results:
            rels = torch.as_tensor(np.asarray(results['gt_relations'], dtype=np.int64)).reshape(-1, 3)
            sample.gt_relations = InstanceData(pair_idxs=rels[:, :2].contiguous(), labels=rels[:, 2].contiguous())
        meta = {k: results[k] for k in self.meta_keys if k in results}
        if 'ori_shape' in self.meta_keys and 'ori_shape' not in meta and 'height' in results:
            meta['ori_shape'] = (int(results['height']), int(results['width']))
        sample.set_metainfo(meta)
        packed['data_samples'] = sample
        return packed

    def __repr__(self) -> str:
        return f'{type(self).__name__}(meta_keys={self.meta_keys})'


__all__: Sequence[str] = ('LoadSceneGraphAnnotations', 'PackSceneGraphInputs', 'load_panoptic_masks',
                          'panoptic_png_to_ids')
