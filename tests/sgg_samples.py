"""Random samples for differential tests: scene graphs from :mod:`mmsgg_eval.testing.random_samples` (one module
for the tests and the benchmark workloads), other predictions for the same GT, grounding cases on and next to
the Pr@t thresholds, SGRecall / SGMeanRecall run over such samples (:func:`scene_graph_keys`), and other code
bases' result classes made importable under their real paths (:func:`importable_as`)."""
import contextlib
import copy
import random
import sys
import types
from fractions import Fraction
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from mmsgg_eval.metrics import SGMeanRecall, SGRecall
from mmsgg_eval.testing.random_samples import box_masks, random_dataset, random_image  # noqa: F401

#: the class and predicate counts of the metric tests' random scene graphs, and their ``dataset_meta``
NUM_CLASSES, NUM_PREDICATES = 4, 5
META = dict(classes=[f'c{i}' for i in range(NUM_CLASSES)], predicates=[f'p{i}' for i in range(NUM_PREDICATES)],
            dataset_name='random')


def feed_like_an_evaluator(metrics, samples, batch_size, meta=None):
    """Give every metric the same batch objects, as mmengine's Evaluator does (one dataset_meta for all:
    ``meta``, default :data:`META`)."""
    for m in metrics:
        m.dataset_meta = META if meta is None else meta
    for start in range(0, len(samples), batch_size):
        batch = samples[start:start + batch_size]
        for m in metrics:
            m.process({}, batch)


#: GroundingPr's default thresholds, as exact decimal strings (the cases sit on and next to them)
GROUNDING_THRESHOLDS = ('0.5', '0.6', '0.7', '0.8', '0.9')


def boxes_at_iou_ratio(p: int, q: int, rng: random.Random) -> List[List[float]]:
    """(gt, pred) integer boxes with IoU exactly p/q, in one of several geometric configurations."""
    m = 2 * rng.randint(1, 20)
    x0, y0, h = rng.randint(0, 300), rng.randint(0, 300), rng.randint(1, 50)
    kind = rng.randrange(3)
    if kind == 0:    # pred inside GT, same height: IoU = w / W
        gt, pred = [x0, y0, x0 + q * m, y0 + h], [x0, y0, x0 + p * m, y0 + h]
    elif kind == 1:  # GT inside pred
        pred, gt = [x0, y0, x0 + q * m, y0 + h], [x0 + m, y0, x0 + m + p * m, y0 + h]
    else:            # shifted copies: IoU = (a - s) / (a + s)
        a, s = (p + q) * m // 2, (q - p) * m // 2
        gt, pred = [x0, y0, x0 + a, y0 + h], [x0 + s, y0, x0 + s + a, y0 + h]
    if rng.random() < 0.5:  # transpose x and y
        gt, pred = [gt[1], gt[0], gt[3], gt[2]], [pred[1], pred[0], pred[3], pred[2]]
    return [[float(v) for v in gt], [float(v) for v in pred]]


def random_grounding_case(rng: random.Random, thresholds: Sequence[str] = GROUNDING_THRESHOLDS) -> Dict[str, Any]:
    """One grounding case (``gt`` box, ``pred`` boxes, ``scores``): integer boxes on or next to a threshold,
    disjoint, degenerate, float, no prediction."""
    kind = rng.randrange(9)
    scores: Optional[List[float]] = None
    if kind <= 2:
        t = Fraction(rng.choice(thresholds))
        gt, pred = boxes_at_iou_ratio(t.numerator, t.denominator, rng)
        if kind == 2:  # one pixel off the threshold, either way
            pred[2] += rng.choice((-1.0, 1.0)) if pred[2] - 1 > pred[0] else 1.0
    elif kind == 3:  # disjoint or touching
        gt = [10.0, 10.0, 50.0, 40.0]
        dx = rng.choice((40.0, 41.0, 100.0))
        pred = [gt[0] + dx, gt[1], gt[2] + dx, gt[3]]
    elif kind == 4:  # degenerate (zero-area) boxes
        gt = rng.choice(([5.0, 5.0, 5.0, 20.0], [5.0, 5.0, 30.0, 30.0], [7.0, 7.0, 7.0, 7.0]))
        pred = rng.choice(([5.0, 5.0, 5.0, 20.0], [10.0, 10.0, 10.0, 25.0], [7.0, 7.0, 7.0, 7.0],
                           [5.0, 5.0, 30.0, 30.0]))
    elif kind == 5:  # float boxes, arbitrary
        x, y = rng.uniform(0, 700), rng.uniform(0, 700)
        gt = [x, y, x + rng.uniform(0, 100), y + rng.uniform(0, 100)]
        x, y = x + rng.uniform(-30, 30), y + rng.uniform(-30, 30)
        pred = [x, y, x + rng.uniform(0, 100), y + rng.uniform(0, 100)]
    elif kind == 6:  # dyadic float boxes exactly on a threshold, and decimal offsets next to it
        t = Fraction(rng.choice(thresholds))
        gt, pred = boxes_at_iou_ratio(t.numerator, t.denominator, rng)
        off = rng.choice((0.25, 0.5, 0.1, 0.3))
        gt = [v + off for v in gt]
        pred = [v + off for v in pred]
    elif kind == 7:
        gt = [0.0, 0.0, 10.0, 10.0]
        pred = []
    else:  # several predictions with scores (ties included) or without scores
        gt = [100.0, 100.0, 200.0, 180.0]
        preds = [[100.0 + rng.randint(-40, 40), 100.0 + rng.randint(-40, 40), 0, 0] for _ in range(rng.randint(1, 5))]
        for b in preds:
            b[2], b[3] = b[0] + rng.randint(0, 120), b[1] + rng.randint(0, 120)
        if rng.random() < 0.7:
            scores = [float(rng.choice((0.1, 0.5, 0.9))) for _ in preds]
        return {'gt': gt, 'pred': preds, 'scores': scores}
    return {'gt': gt, 'pred': [pred] if pred else [], 'scores': scores}


def grounding_sample(case: Dict[str, Any], idx: Optional[int], dtype=torch.float32,
                     shape=(800, 800)) -> Dict[str, Any]:
    """The data sample of a grounding case (GroundingPr's input), ``sample_idx`` = ``idx`` unless None."""
    sample = {'img_id': f'img{idx}', 'ori_shape': shape,
              'gt_instances': {'bboxes': torch.tensor([case['gt']], dtype=dtype)},
              'pred_instances': {'bboxes': torch.tensor(case['pred'], dtype=dtype).reshape(-1, 4)}}
    if idx is not None:
        sample['sample_idx'] = idx
    if case.get('scores') is not None:
        sample['pred_instances']['scores'] = torch.tensor(case['scores'])
    return sample


def perturbed(samples: List[dict], seed: int) -> List[dict]:
    """The same GT with other predictions: each image's relation scores permuted over its pairs."""
    g = torch.Generator().manual_seed(seed)
    out = copy.deepcopy(samples)
    for s in out:
        scores = s['pred_relations']['scores']
        s['pred_relations']['scores'] = scores[torch.randperm(scores.shape[0], generator=g)]
    return out


def scene_graph_keys(samples: List[dict], batch_size: int = 4, classes=(SGRecall, SGMeanRecall), meta: dict = META,
                     **kwargs) -> Tuple[Dict[str, float], Any]:
    """Every key (prefix removed) of each metric of ``classes`` (built with ``kwargs``, given ``meta``) over
    ``samples``, fed ``batch_size`` samples per ``process()`` call, and the last metric."""
    out, metric = {}, None
    for cls in classes:
        metric = cls(**kwargs)
        metric.dataset_meta = meta
        for start in range(0, len(samples), batch_size):
            metric.process({}, samples[start:start + batch_size])
        res = metric.evaluate(len(samples))
        prefix = metric.prefix + '/'
        out.update({k[len(prefix):]: v for k, v in res.items()})
    return out, metric


@contextlib.contextmanager
def importable_as(cls: type, module: str) -> Iterator[type]:
    """``cls`` importable as ``module.<its name>`` (every package of the dotted path a stand-in module), as pickle
    saves and loads another code base's result class; the previous ``sys.modules`` entries come back after."""
    parts = module.split('.')
    names = ['.'.join(parts[:i + 1]) for i in range(len(parts))]
    cls.__module__ = module
    saved = {m: sys.modules.get(m) for m in names}
    for m in names:
        sys.modules[m] = types.ModuleType(m)
    setattr(sys.modules[module], cls.__qualname__, cls)
    try:
        yield cls
    finally:
        for m, mod in saved.items():
            if mod is None:
                sys.modules.pop(m, None)
            else:  # pragma: no cover
                sys.modules[m] = mod


def perfect_predcls(dataset) -> List[Any]:
    """Every packed data sample of ``dataset`` (a pipeline ending in ``PackSceneGraphInputs``) with its GT relations
    as its PredCls prediction: [G, P + 1] scores, 1 in the GT predicate's column (column 0: no relation)."""
    samples = []
    width = len(dataset.metainfo['predicates']) + 1
    for i in range(len(dataset)):
        s = dataset[i]['data_samples']
        rels = s.gt_relations
        scores = torch.zeros(len(rels.labels), width)
        scores[torch.arange(len(rels.labels)), rels.labels + 1] = 1
        s.pred_relations = type(rels)(pair_idxs=rels.pair_idxs, scores=scores)
        samples.append(s)
    return samples
