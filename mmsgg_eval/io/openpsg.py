"""OpenPSG's saved test results (``--format openpsg``).

What OpenPSG writes
    ``tools/test.py CONFIG CHECKPOINT --out result.pkl`` pickles (``mmcv.dump``) the list of the model's
    per-image ``Result`` objects (``openpsg/models/relation_heads/approaches/relation_util.py``), entry ``i``
    = test image ``i`` of OpenPSG's ``PSGDataset`` (the order of our :class:`~mmsgg_eval.datasets.PSGDataset`
    test split). The fields read here:

    ==================== ===================================================================================
    ``refine_bboxes``    float [N, 5]: x1, y1, x2, y2 (original image frame, pixels), object score; None = the
                         model predicted nothing (OpenPSG skips the image)
    ``labels``           int [N], 1-based object classes (0 = background)
    ``rel_pair_idxes``   int [R, 2], (subject, object) indices into the objects, in the model's ranking order
    ``rel_dists``        float [R, P+1], predicate probabilities, column 0 = no relation
    ``masks``            bool [N, H, W] panoptic segments (models with masks; OpenPSG's ``pan_seg`` matching)
    ==================== ===================================================================================

    ``pan_results`` and every other field are ignored.

Safe reading
    The file is read with :class:`~mmsgg_eval.io.pickles.SafeUnpickler`, where OpenPSG's ``Result`` class is
    mapped to the inert :class:`~mmsgg_eval.io.pickles.PickledRecord` (its attributes only): nothing of
    OpenPSG is imported or executed and openpsg need not be installed. ``unsafe=True`` (``--unsafe-load``)
    uses the unrestricted unpickler with the same mapping.

Conversion
    Through the legacy reader's conversion (:func:`mmsgg_eval.io.legacy.legacy_to_data_sample`: 1-based labels
    to 0-based, background objects never match, ``rel_dists`` kept as [R, P+1] with its background column);
    the GT comes from the dataset, with the GT masks decoded from the panoptic PNG when the results carry masks.
    OpenPSG's evaluator takes the relations in the given order: ``--format openpsg`` evaluates with
    ``protocol='openpsg'`` unless another is given, and with ``match='box'`` when the results carry no masks
    (:func:`openpsg_metric_defaults`).
"""
import os
import pickle
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch

from .errors import InputFileError, UnsafePickleError
from .pickles import PickledRecord, unpickler
from .samples import DatasetSamples, Located, empty_prediction

__all__ = ['load_openpsg_results', 'openpsg_to_data_sample', 'iter_openpsg_samples', 'openpsg_metric_defaults',
           'has_masks']

_CACHE: Dict[Tuple[str, float, int, bool], List[Any]] = {}


def load_openpsg_results(path: str, unsafe: bool = False) -> List[Any]:
    """The list of ``Result`` records (:class:`~mmsgg_eval.io.pickles.PickledRecord`) of an OpenPSG
    ``result.pkl``, read safely unless ``unsafe``. The last file read is kept (the CLI peeks at it before
    evaluating)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f'OpenPSG results file not found: {os.path.abspath(path)}')
    stat = os.stat(path)
    key = (os.path.abspath(path), stat.st_mtime, stat.st_size, unsafe)
    if key in _CACHE:
        return _CACHE[key]
    with open(path, 'rb') as f:
        try:
            obj = unpickler(f, unsafe).load()
        except UnsafePickleError as err:
            raise err.located(path) from None
        except (EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError) as err:
            raise InputFileError(path, f'is not a readable OpenPSG result pickle ({type(err).__name__}: {err})') \
                from None
    if not isinstance(obj, (list, tuple)):
        raise InputFileError(path, f'holds a {type(obj).__name__}; OpenPSG\'s tools/test.py --out writes a list '
                                   f'of Result objects')
    for i, record in enumerate(obj):
        if not isinstance(record, PickledRecord):
            raise InputFileError(path, f'entry #{i} is a {type(record).__name__}, not an OpenPSG Result '
                                       f'(openpsg.models.relation_heads.approaches.relation_util.Result)')
    _CACHE.clear()
    _CACHE[key] = list(obj)
    return _CACHE[key]


def has_masks(results: List[Any]) -> bool:
    """True when a result with predictions carries ``masks`` (a model with panoptic segments)."""
    return any(r.masks is not None for r in results if r.refine_bboxes is not None)


def _array(value: Any, what: str) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f'{what}: not an array ({type(value).__name__}: {err})') from None


def gt_masks(dataset: DatasetSamples, idx: int) -> torch.Tensor:
    """Bool [G, H, W] GT masks of dataset sample ``idx``, from the dataset's ``load_gt_masks(idx)``
    (:meth:`mmsgg_eval.datasets.PSGDataset.load_gt_masks` decodes its panoptic PNG); a dataset without it is an
    error that says to match by boxes."""
    loader = getattr(dataset.dataset, 'load_gt_masks', None)
    if loader is None:
        raise ValueError(f'sample_idx={idx}: the results carry masks, but the dataset '
                         f'({type(dataset.dataset).__name__}) gives no GT masks; use --metric-options match=box')
    return torch.from_numpy(np.asarray(loader(idx), dtype=bool))


def openpsg_to_data_sample(result: Any, gt: Dict[str, Any], sample_idx: int, mode: str = 'sgdet',
                           source: str = 'openpsg', masks_gt: Optional[torch.Tensor] = None) -> Dict[str, Any]:
    """One OpenPSG ``Result`` (see the module docstring) and the GT sample of its image -> data-sample dict.

    ``masks_gt``: the GT masks of the image (added to ``gt_instances.masks``, with the result's ``masks`` as
    ``pred_instances.masks``, for mask matching)."""
    from .legacy import legacy_to_data_sample
    what = f'{source}: result #{sample_idx}'
    sample = dict(gt)
    if masks_gt is not None:
        sample['gt_instances'] = dict(sample['gt_instances'], masks=masks_gt)
    if result.refine_bboxes is None:  # OpenPSG skips such an image; so does the metric (no predicted pair)
        sample.update(empty_prediction())
        if masks_gt is not None:  # mask matching reads the (empty) predicted masks too
            sample['pred_instances']['masks'] = masks_gt.new_zeros((0,) + tuple(masks_gt.shape[1:]))
        sample['sample_idx'] = sample_idx
        return sample
    boxes = _array(result.refine_bboxes, f'{what}: refine_bboxes').astype(np.float32)
    if boxes.ndim != 2 or boxes.shape[1] not in (4, 5):
        raise ValueError(f'{what}: `refine_bboxes` has shape {list(boxes.shape)}; expected [N, 5] (box, score)')
    if result.labels is None:
        raise ValueError(f'{what}: no `labels` field')
    pairs = result.rel_pair_idxes
    rel_dists = result.rel_dists
    if pairs is None or rel_dists is None:
        raise ValueError(f'{what}: needs `rel_pair_idxes` and `rel_dists` (relation head output)')
    labels = _array(result.labels, f'{what}: labels').reshape(-1)
    pairs = _array(pairs, f'{what}: rel_pair_idxes').reshape(-1, 2)
    rel_dists = _array(rel_dists, f'{what}: rel_dists')
    if labels.shape[0] != boxes.shape[0]:
        raise ValueError(f'{what}: {boxes.shape[0]} objects in `refine_bboxes` but {labels.shape[0]} `labels`')
    if rel_dists.ndim != 2 or rel_dists.shape[0] != pairs.shape[0]:
        raise ValueError(f'{what}: `rel_dists` has shape {list(rel_dists.shape)} for {pairs.shape[0]} pairs in '
                         f'`rel_pair_idxes`; expected [R, P+1]')
    record = {'bbox': boxes[:, :4], 'pred_labels': labels,
              'pred_scores': boxes[:, 4] if boxes.shape[1] == 5 else None,
              'rel_pair_idxs': pairs, 'pred_rel_scores': rel_dists}
    record = {k: v for k, v in record.items() if v is not None}
    out = legacy_to_data_sample(record, sample, sample_idx=sample_idx, mode=mode, source=source)
    if masks_gt is not None and result.masks is not None:
        masks = _array(result.masks, f'{what}: masks').astype(bool)
        if masks.ndim != 3 or masks.shape[0] != boxes.shape[0]:
            raise ValueError(f'{what}: `masks` has shape {list(masks.shape)} for {boxes.shape[0]} objects')
        out['pred_instances']['masks'] = torch.from_numpy(masks)
    return out


def iter_openpsg_samples(path: str, dataset: DatasetSamples, mode: str = 'sgdet', unsafe: bool = False,
                         with_masks: Optional[bool] = None) -> Iterator[Located]:
    """Data samples of an OpenPSG ``result.pkl`` (entry ``i`` = dataset sample ``i``; GT from ``dataset``).

    ``with_masks``: add the GT masks and the results' masks (None: when the results carry masks). A file with
    more entries than the dataset is an error naming both numbers (fewer: the missing samples' rule)."""
    results = load_openpsg_results(path, unsafe)
    if len(results) > len(dataset):
        raise InputFileError(path, f'holds {len(results)} results, the dataset of the config has {len(dataset)} '
                                   f'samples: wrong config or split?')
    masks = has_masks(results) if with_masks is None else with_masks
    for i, result in enumerate(results):
        where = f'{path} result #{i}'
        masks_gt = gt_masks(dataset, i) if masks else None
        yield where, openpsg_to_data_sample(result, dataset.gt(i), i, mode, path, masks_gt)


def openpsg_metric_defaults(path: str, metric_cfgs: List[dict], protocol: Optional[str], options: dict,
                            unsafe: bool = False) -> List[str]:
    """Set OpenPSG's conventions on the scene-graph metric configs that choose none (in place):
    ``protocol='openpsg'`` unless ``protocol`` (the command line's) or the metric's own is given, and
    ``match='box'`` when the results carry no masks (OpenPSG's ``bbox`` matching) unless set. Returns one
    line per choice made, for the log."""
    notes: List[str] = []
    masks = has_masks(load_openpsg_results(path, unsafe))
    for m in metric_cfgs:
        kind = str(m.get('type', '')).rsplit('.', 1)[-1]
        if kind not in ('SGRecall', 'SGMeanRecall'):
            continue
        if protocol is None and 'protocol' not in m and 'protocol' not in options:
            m['protocol'] = 'openpsg'
            notes.append(f'{kind}: protocol=openpsg (OpenPSG\'s conventions; --protocol sets another)')
        if not masks and 'match' not in m and 'match' not in options:
            m['match'] = 'box'
            notes.append(f'{kind}: match=box (the results carry no masks)')
    return notes
