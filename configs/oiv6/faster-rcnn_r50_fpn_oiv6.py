# Faster R-CNN R50-FPN (mmdet's faster-rcnn_r50_fpn_1x_coco recipe) trained on the OIv6 boxes (601 classes):
#   python tools/train.py configs/oiv6/faster-rcnn_r50_fpn_oiv6.py
_base_ = [
    'mmdet::_base_/models/faster-rcnn_r50_fpn.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
    '../_base_/datasets/oiv6_detection.py',
]
custom_imports = dict(imports=['mmsgg_eval'], allow_failed_imports=False)
model = dict(roi_head=dict(bbox_head=dict(num_classes=601)))
