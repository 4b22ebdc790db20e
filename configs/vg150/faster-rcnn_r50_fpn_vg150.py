# Faster R-CNN R50-FPN (mmdet's recipe: mmdet::faster_rcnn/faster-rcnn_r50_fpn_1x_coco.py, i.e. the model,
# 1x schedule and runtime below) trained on the VG150 boxes (150 classes), the detector of the SGDet / SGCls
# configs (freq_sgdet_faster-rcnn_r50_fpn_vg150.py):
#   python tools/train.py configs/vg150/faster-rcnn_r50_fpn_vg150.py
#   python $(python -c "import mmdet,os;print(os.path.dirname(mmdet.__file__))")/.mim/tools/train.py \
#       configs/vg150/faster-rcnn_r50_fpn_vg150.py      # mmdet's own tool: the same (custom_imports)
# Validation: DetectionAP (COCO mAP / AP@50) on the val split. The backbone starts from torchvision's
# ImageNet ResNet-50 (mmdet's init_cfg); set model.backbone.init_cfg=None for a random start.
_base_ = [
    'mmdet::_base_/models/faster-rcnn_r50_fpn.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
    '../_base_/datasets/vg150_detection.py',
]
custom_imports = dict(imports=['mmsgg_eval'], allow_failed_imports=False)
model = dict(roi_head=dict(bbox_head=dict(num_classes=150)))
