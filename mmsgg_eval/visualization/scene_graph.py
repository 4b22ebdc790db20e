"""``SceneGraphLocalVisualizer``: one picture per image, GT panel | prediction panel (as mmdet draws).

Each panel is the image with the boxes (``index:class``; PSG: the masks, drawn as mmdet draws them) of the
objects of the relations it lists, one arrow subject -> object per object pair, numbered, and a legend strip
under the image that lists the numbered relations (numbers on the arrows and a side list read better than
predicate names on the arrows once an image has 20+ relations; pairs with several relations get one arrow
with all their numbers).

* prediction panel: the top ``topk_drawn`` (default 20) triplets of the graph-constrained list, each
  coloured *hit* (:data:`HIT`: it is the first hit of a GT relation within ``k``, default 50) or *miss*
  (:data:`MISS`);
* GT panel: every GT relation, *found* at ``k`` (:data:`HIT`, its first-hit rank is below ``k``) or *not
  found* (:data:`MISS`, with what the model ranked highest on the GT pair instead, when it did).

The decision is the metric's own: a record of :mod:`mmsgg_eval.metrics.per_image` (the rows of
``SGRecall`` for this one image: the same ranking and matching code). Boxes are xyxy pixels of the original
image (the frame the metric evaluates in); the image is RGB.
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from mmdet.visualization import DetLocalVisualizer

from ..registry import VISUALIZERS

from .drawing import HIT, MISS, OTHER, draw_record, relation_items  # noqa: F401  (the colours are API)


@VISUALIZERS.register_module(force=True)  # replaces the lazy placeholder of mmsgg_eval.visualization
class SceneGraphLocalVisualizer(DetLocalVisualizer):
    """mmdet's ``DetLocalVisualizer`` for scene graphs (see the module docstring).

    Args:
        k: the K of "hit within K" (default 50).
        topk_drawn: graph-constrained triplets drawn in the prediction panel (default 20).
        metric: the scene-graph metric config whose decision is drawn (default ``SGRecall`` with the data
            sample's ``pred_mode``, else ``mode``); its ``dataset_meta`` is this visualizer's.
        mode: the mode when neither ``metric`` nor the sample gives one (default 'predcls').
        font_size: legend / label font size in pixels (default: from the image size).
        Other arguments: ``DetLocalVisualizer``'s.
    """

    def __init__(self, name: str = 'visualizer', image: Optional[np.ndarray] = None,
                 vis_backends: Optional[Dict] = None,
                 save_dir: Optional[str] = None, k: int = 50, topk_drawn: int = 20,
                 metric: Optional[Dict[str, Any]] = None, mode: str = 'predcls', font_size: Optional[int] = None,
                 line_width: float = 2, alpha: float = 0.8, **kwargs: Any) -> None:
        super().__init__(name=name, image=image, vis_backends=vis_backends, save_dir=save_dir,
                         line_width=line_width, alpha=alpha, **kwargs)
        from ..metrics.options import positive_int
        self.k = positive_int(k, 'k', type(self).__name__)
        self.topk_drawn = positive_int(topk_drawn, 'topk_drawn', type(self).__name__)
        self.metric_cfg = dict(metric) if metric else None
        self.mode = mode
        self.font_size = font_size
        self._metrics: Dict[Any, Any] = {}

    # ------------------------------------------------------------------ the metric's decision
    def record_of(self, data_sample: Any) -> Dict[str, Any]:
        """The per-image record of ``data_sample`` computed by the metric (one image at a time)."""
        from ..metrics.per_image import image_record
        from ..structures import get_field
        cfg = dict(self.metric_cfg or {})
        cfg.setdefault('type', 'SGRecall')
        cfg.setdefault('mode', get_field(data_sample, 'pred_mode') or self.mode)
        cfg['topk'] = sorted(set(cfg.get('topk', (20, 50, 100))) | {self.k})
        key = repr(sorted(cfg.items()))
        metric = self._metrics.get(key)
        if metric is None:
            from ..registry import METRICS, resolve_registered
            metric = METRICS.build(resolve_registered(METRICS, cfg))
            self._metrics[key] = metric
        metric.dataset_meta = self.dataset_meta
        return image_record(metric, data_sample, max(self.topk_drawn, 1))

    def draw_record(self, image: np.ndarray, record: Dict[str, Any], draw_gt: bool = True, draw_pred: bool = True,
                    gt_masks: Optional[Dict[int, np.ndarray]] = None, pred_masks: Optional[Dict[int, np.ndarray]] = None,
                    gt_objects: Sequence[Tuple[int, str, Sequence[float]]] = ()) -> np.ndarray:
        """The picture of a per-image record with this visualizer's ``k``, ``topk_drawn``, font size and line
        width (:func:`~.drawing.draw_record`)."""
        return draw_record(image, record, self.k, self.topk_drawn, draw_gt, draw_pred, gt_masks, pred_masks,
                           gt_objects, self.font_size, self.line_width)

    def add_datasample(self, name: str, image: np.ndarray, data_sample: Any = None, draw_gt: bool = True,
                       draw_pred: bool = True, show: bool = False, wait_time: float = 0,
                       out_file: Optional[str] = None, pred_score_thr: float = 0.3, step: int = 0) -> None:
        """Draw a data sample (GT panel | prediction panel) and save it to ``out_file`` or the backends, with
        ``DetLocalVisualizer.add_datasample``'s meaning; a sample without relations is drawn by mmdet's code.
        ``pred_score_thr`` is not used: the relations drawn are the metric's top ``topk_drawn``."""
        from mmengine.dist import is_main_process  # main rank only, as mmdet's
        if not is_main_process():
            return
        from ..structures import get_field
        if data_sample is None or get_field(data_sample, 'pred_relations') is None:
            return super().add_datasample(name, image, data_sample, draw_gt, draw_pred, show, wait_time, out_file,
                                          pred_score_thr, step)
        if hasattr(data_sample, 'cpu'):
            data_sample = data_sample.cpu()
        record = self.record_of(data_sample)
        gt_masks = _masks_of(get_field(data_sample, 'gt_instances'))
        pred_masks = _masks_of(get_field(data_sample, 'pred_instances'))
        if record.get('mode') == 'predcls':
            pred_masks = gt_masks
        drawn = self.draw_record(image, record, draw_gt, draw_pred, gt_masks, pred_masks,
                                 _objects_of(get_field(data_sample, 'gt_instances'), self.dataset_meta))
        self.set_image(drawn)  # as mmdet's: the drawn image is the visualizer's image afterwards
        if show:
            self.show(drawn, win_name=name, wait_time=wait_time)
        if out_file is not None:
            import mmcv
            mmcv.imwrite(drawn[..., ::-1], out_file)
        else:
            self.add_image(name, drawn, step)


def _masks_of(instances: Any) -> Optional[Dict[int, np.ndarray]]:
    """{index: [H, W] bool} of the instances' ``masks`` (tensor, array or mmdet ``BitmapMasks``), or None."""
    from ..structures import get_field
    masks = get_field(instances, 'masks')
    if masks is None:
        return None
    if hasattr(masks, 'to_ndarray'):
        masks = masks.to_ndarray()
    masks = masks.cpu().numpy() if hasattr(masks, 'cpu') else np.asarray(masks)
    return {i: m.astype(bool) for i, m in enumerate(masks)}


def _objects_of(instances: Any, meta: Optional[Dict[str, Any]]) -> List[Tuple[int, str, List[float]]]:
    """(index, class name, box) of every GT object (drawn grey when it is in no relation)."""
    from ..structures import get_field
    boxes, labels = get_field(instances, 'bboxes'), get_field(instances, 'labels')
    if boxes is None or labels is None:
        return []
    if hasattr(boxes, 'tensor'):
        boxes = boxes.tensor
    boxes = np.asarray(boxes.cpu() if hasattr(boxes, 'cpu') else boxes, dtype=np.float32).reshape(-1, 4)
    labels = np.asarray(labels.cpu() if hasattr(labels, 'cpu') else labels).reshape(-1)
    classes = list((meta or {}).get('classes') or ())
    return [(i, classes[int(c)] if 0 <= int(c) < len(classes) else str(int(c)), boxes[i].tolist())
            for i, c in enumerate(labels)]
