# FREQ (MOTIFS frequency baseline) in PredCls (objects = the GT boxes and labels; the detector is not run) on OIv6, on a Faster R-CNN R50-FPN
# detector trained with configs/oiv6/faster-rcnn_r50_fpn_oiv6.py:
#   python tools/train.py configs/oiv6/faster-rcnn_r50_fpn_oiv6.py
#   python tools/test.py configs/oiv6/freq_predcls_faster-rcnn_r50_fpn_oiv6.py \
#       work_dirs/faster-rcnn_r50_fpn_oiv6/epoch_12.pth
# The detector checkpoint loads into model.detector; the relation head counts its statistics on
# `freq_train_dataset` when the model is built (annotations only).
_base_ = ['./sgg_predcls_oiv6.py', '../_base_/models/sgg_faster-rcnn_r50_fpn.py']
freq_train_dataset = dict(type='OIv6Dataset', data_root='data/sample/oiv6/', split='train')
model = dict(
    mode='predcls',
    detector=dict(roi_head=dict(bbox_head=dict(num_classes=601))),
    relation_head=dict(num_classes=601, num_predicates=30, statistics_dataset=freq_train_dataset))
