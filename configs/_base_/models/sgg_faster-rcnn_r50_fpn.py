# SceneGraphDetector on mmdet's Faster R-CNN R50-FPN (mmdet::_base_/models/faster-rcnn_r50_fpn.py, the model
# of faster-rcnn_r50_fpn_1x_coco) with the frequency relation head (MOTIFS FREQ). The dataset configs set
# num_classes / num_predicates and the statistics split; `mode` is set per config.
_base_ = ['mmdet::_base_/models/faster-rcnn_r50_fpn.py']
model = dict(
    _delete_=True,
    type='SceneGraphDetector',
    mode='sgdet',
    detector={{_base_.model}},
    relation_head=dict(type='FrequencyRelationHead', num_classes=150, num_predicates=50, must_overlap=False))
