"""Data samples built from a dataset: the ground truth, sample identity, and coverage of the dataset.

Every offline format (prediction stream, JSONL predictions, VLM answers, legacy dumps, grounding JSON) takes
its ground truth and identity from here, so that they are built one way:

* :func:`gt_from_data_info` turns an mmdet-style ``get_data_info(i)`` dict (``instances`` with ``bbox`` xyxy
  pixels and 0-based ``bbox_label``, ``relations`` [G, 3] = (subject index, object index, 0-based predicate),
  ``width`` / ``height``) into the ``gt_instances`` / ``gt_relations`` fields of a data sample;
* :class:`DatasetSamples` resolves a prediction's identity (``sample_idx`` = dataset index, or ``img_id``
  looked up in the dataset; a record with both must name the dataset's sample: a disagreement is an error
  naming the record, its ``img_id`` and the dataset's, whatever the format) and builds the GT sample of an
  index;
* :class:`CoveredSamples` streams located samples to an evaluator and checks that they cover the dataset
  exactly once: a sample predicted twice is an error; samples without a prediction are an error
  (:class:`~mmsgg_eval.io.errors.MissingSamplesError`) unless ``allow_missing``, in which case each is fed as
  an EMPTY prediction whose metainfo carries ``prediction_missing=True`` (the metrics count it as recall 0 and
  never skip it).
"""
import logging
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

import numpy as np
import torch

from ..structures import get_field, to_tensor
from .errors import InputFileError, MissingSamplesError, value_repr

#: Box of a placeholder object that can never match: far outside every image, so its IoU with any GT box is 0
#: under both IoU conventions (and for union boxes). Used for unknown VLM names and legacy background objects.
PLACEHOLDER_BOX = (-1.0e5, -1.0e5, -1.0e5, -1.0e5)

#: Metainfo key set on the empty prediction fed for a dataset sample that has no prediction.
MISSING_KEY = 'prediction_missing'

#: (location, data-sample dict) pairs; the location names the file and line / record in messages.
Located = Tuple[str, Dict[str, Any]]

IDENTITY_KEYS = ('sample_idx', 'img_id', 'img_path', 'ori_shape')
CPU = torch.device('cpu')


def _as(value: Any, dtype: torch.dtype, tail: Tuple[int, ...], field: str) -> torch.Tensor:
    return to_tensor(value, None, field, CPU).detach().to(dtype).reshape((-1,) + tail)


def gt_from_data_info(info: Mapping, with_relations: bool = True, drop_ignored: bool = False,
                      box_dtype: torch.dtype = torch.float32) -> Dict[str, Any]:
    """GT fields (and identity) of a data sample from an mmdet-style data-info dict (see the module docstring).

    ``drop_ignored`` leaves out instances with a true ``ignore_flag`` (grounding; scene graphs keep every
    instance because relations index into the list). Boxes are ``box_dtype`` [N, 4], labels int64 [N];
    ``ori_shape`` = (height, width) when both are given.
    """
    instances = [i for i in info.get('instances', []) if not (drop_ignored and i.get('ignore_flag', 0))]
    gt_instances: Dict[str, Any] = {
        'bboxes': torch.tensor([i['bbox'] for i in instances], dtype=box_dtype).reshape(-1, 4)}
    if all('bbox_label' in i for i in instances):
        gt_instances['labels'] = torch.tensor([i['bbox_label'] for i in instances], dtype=torch.long)
    out: Dict[str, Any] = {'gt_instances': gt_instances}
    if with_relations:
        rels = np.asarray(info.get('relations', np.zeros((0, 3))), np.int64).reshape(-1, 3)
        out['gt_relations'] = {'pair_idxs': torch.from_numpy(rels[:, :2].copy()),
                               'labels': torch.from_numpy(rels[:, 2].copy())}
    for key in ('sample_idx', 'img_id', 'img_path'):
        if key in info:
            out[key] = info[key]
    if 'height' in info and 'width' in info:
        out['ori_shape'] = (int(info['height']), int(info['width']))
    return out


def gt_fields(gt: Any) -> Dict[str, Any]:
    """GT fields and identity of ``gt``: a data sample / dict holding ``gt_instances`` and ``gt_relations``
    (copied as CPU tensors), or a data-info dict (``instances``, ``relations``), or None (no fields)."""
    if gt is None:
        return {}
    if isinstance(gt, Mapping) and 'instances' in gt and 'gt_instances' not in gt:
        return gt_from_data_info(gt)
    out: Dict[str, Any] = {}
    inst, rels = get_field(gt, 'gt_instances'), get_field(gt, 'gt_relations')
    if inst is not None:
        gi = {'bboxes': _as(get_field(inst, 'bboxes'), torch.float32, (4,), 'gt_instances.bboxes'),
              'labels': _as(get_field(inst, 'labels'), torch.long, (), 'gt_instances.labels')}
        if get_field(inst, 'masks') is not None:
            gi['masks'] = get_field(inst, 'masks')
        out['gt_instances'] = gi
    if rels is not None:
        out['gt_relations'] = {'pair_idxs': _as(get_field(rels, 'pair_idxs'), torch.long, (2,),
                                                'gt_relations.pair_idxs'),
                               'labels': _as(get_field(rels, 'labels'), torch.long, (), 'gt_relations.labels')}
    for key in IDENTITY_KEYS:
        value = get_field(gt, key)
        if value is not None:
            out[key] = value
    return out


def empty_prediction() -> Dict[str, Any]:
    """``pred_instances`` / ``pred_relations`` predicting nothing (0 objects, 0 single-label relations)."""
    return {'pred_instances': {'bboxes': torch.zeros((0, 4)), 'labels': torch.zeros(0, dtype=torch.long),
                               'scores': torch.zeros(0)},
            'pred_relations': {'pair_idxs': torch.zeros((0, 2), dtype=torch.long), 'scores': torch.zeros(0),
                               'labels': torch.zeros(0, dtype=torch.long)}}


def is_sample_index(value: Any) -> bool:
    """True for a non-negative integer (bool, float and digit strings are not indices)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and value >= 0


class DatasetSamples:
    """Identity resolution and GT samples of a dataset (anything with ``__len__`` and ``get_data_info(i)``)."""

    def __init__(self, dataset: Any):
        self.dataset = dataset
        self._by_img_id: Optional[Dict[str, List[int]]] = None

    def __len__(self) -> int:
        return len(self.dataset)

    def info(self, idx: int) -> Dict[str, Any]:
        return dict(self.dataset.get_data_info(idx), sample_idx=idx)

    def gt(self, idx: int, **kwargs: Any) -> Dict[str, Any]:
        """The GT data sample of dataset index ``idx`` (:func:`gt_from_data_info` arguments in ``kwargs``)."""
        return gt_from_data_info(self.info(idx), **kwargs)

    def indices_of_img_id(self, img_id: Any) -> List[int]:
        """Dataset indices whose ``img_id`` equals ``img_id`` (compared as strings)."""
        if self._by_img_id is None:
            self._by_img_id = {}
            for i in range(len(self.dataset)):
                self._by_img_id.setdefault(str(self.dataset.get_data_info(i).get('img_id')), []).append(i)
        return self._by_img_id.get(str(img_id), [])

    def check_identity(self, where: str, record: Mapping, hint: str = '') -> None:
        """``InputFileError`` when a record carrying both a ``sample_idx`` (a valid index) and an ``img_id``
        (not null) names another image than the dataset's sample at that index (compared as strings, as
        :meth:`indices_of_img_id`): predictions of another split or dataset, or records whose two identities
        contradict each other. One ``get_data_info`` per record; a dataset without ``img_id`` is not checked.
        ``hint`` is appended to the message (e.g. where the file says it comes from)."""
        idx, img_id = record.get('sample_idx'), record.get('img_id')
        if img_id is None or not is_sample_index(idx) or idx >= len(self.dataset):
            return
        expected = self.dataset.get_data_info(int(idx)).get('img_id')
        if expected is not None and str(img_id) != str(expected):
            raise InputFileError(where, f'{value_repr(img_id)} disagrees with the dataset: its sample at '
                                        f'sample_idx={idx} is img_id={value_repr(expected)} (predictions of '
                                        f'another split or dataset, or sample_idx and img_id that do not belong '
                                        f'together?{hint})', f'sample_idx={idx}', 'img_id')

    def resolve(self, where: str, record: Mapping) -> int:
        """Dataset index of a prediction record from its ``sample_idx`` or, without one, its ``img_id``; a
        record with both must agree with the dataset (:meth:`check_identity`)."""
        n = len(self.dataset)
        if 'sample_idx' in record:
            idx = record['sample_idx']
            if not is_sample_index(idx):
                raise InputFileError(where, f'must be a non-negative integer (the dataset index), got '
                                            f'{value_repr(idx)}', field='sample_idx')
            if idx >= n:
                raise InputFileError(where, f'= {idx} is outside the dataset (indices 0..{n - 1})',
                                     field='sample_idx')
            self.check_identity(where, record)
            return int(idx)
        img_id = record.get('img_id')
        if isinstance(img_id, bool) or not isinstance(img_id, (str, int)):
            raise InputFileError(where, f'must be a string or an integer, got {value_repr(img_id)}', field='img_id')
        found = self.indices_of_img_id(img_id)
        if not found:
            raise InputFileError(where, f'{img_id!r} is not in the dataset', field='img_id')
        if len(found) > 1:
            raise InputFileError(where, f'{img_id!r} names {len(found)} dataset samples ({found[:5]}); give '
                                        f'`sample_idx` instead', field='img_id')
        return found[0]


class CoveredSamples:
    """Samples of a file for an evaluator, covering the dataset exactly once (see the module docstring).

    ``samples`` yields ``(location, sample)`` with ``sample['sample_idx']`` set; ``source`` names the input in
    messages; ``missing_sample(idx)`` builds the sample fed for an index without a prediction (default: the
    GT of the dataset with :func:`empty_prediction`). ``len()`` is the dataset length (what
    ``Evaluator.offline_evaluate`` passes to ``evaluate``); after a full iteration ``num_read`` and
    ``missing`` (sorted indices) describe the input. ``size`` replaces the dataset length for inputs that
    carry their own ground truth (legacy dumps: the images of the file). ``on_sample`` is called once per yielded sample
    (progress bars); ``quiet`` drops the warning about allowed missing samples. A consumer that stops after
    ``len()`` samples (``Evaluator.offline_evaluate`` does) calls :meth:`finish` to read the input to its end,
    so that what follows (a stream's closing record, a surplus record) is checked too.
    """

    def __init__(self, samples: Iterable[Located], dataset: DatasetSamples, source: str,
                 allow_missing: bool = False, missing_sample: Optional[Callable[[int], Dict[str, Any]]] = None,
                 on_sample: Optional[Callable[[], None]] = None, quiet: bool = False, size: Optional[int] = None):
        self.samples, self.dataset, self.source = samples, dataset, source
        self.size = len(dataset) if size is None else int(size)
        self.allow_missing, self.quiet = allow_missing, quiet
        self.missing_sample = missing_sample or (lambda idx: dict(self.dataset.gt(idx), **empty_prediction()))
        self.on_sample = on_sample
        self.num_read = 0
        self.missing: List[int] = []
        self._active: Optional[Iterator[Dict[str, Any]]] = None

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        self._active = self._generate()
        return self._active

    def finish(self) -> None:
        """Read the rest of the input (after a consumer stopped at ``len()`` samples); a surplus is an error."""
        if self._active is None:
            return
        active, self._active = self._active, None
        for sample in active:
            raise InputFileError(self.source, f'holds more samples than the {self.size} of the dataset '
                                              f'(sample_idx={sample.get("sample_idx")!r} after the last one)')

    def _generate(self) -> Iterator[Dict[str, Any]]:
        n = self.size
        seen: Dict[int, str] = {}
        self.num_read = 0
        for where, sample in self.samples:
            idx = sample.get('sample_idx')
            if not is_sample_index(idx) or idx >= n:
                raise InputFileError(where, f'must be a dataset index in 0..{n - 1}, got {value_repr(idx)}',
                                     field='sample_idx')
            idx = int(idx)
            if idx in seen:
                raise InputFileError(where, f'sample_idx={idx} was already predicted at {seen[idx]}; each dataset '
                                            f'sample must be predicted once', field='sample_idx')
            seen[idx] = where
            self.num_read += 1
            self._tick()
            yield sample
        self.missing = [i for i in range(n) if i not in seen]
        if not self.missing:
            return
        if not self.allow_missing:
            raise MissingSamplesError(self.source, self.missing, n)
        if not self.quiet:
            from mmengine.logging import print_log
            print_log(f'{self.source}: {len(self.missing)} of the {n} dataset samples have no prediction (first '
                      f'sample_idx: {self.missing[:10]}); --allow-missing: they are scored as empty predictions '
                      f'(recall 0)', logger='current', level=logging.WARNING)
        for idx in self.missing:
            sample = self.missing_sample(idx)
            sample[MISSING_KEY] = True
            self._tick()
            yield sample

    def _tick(self) -> None:
        if self.on_sample is not None:
            self.on_sample()
