# FREQ (MOTIFS frequency baseline) in PredCls (objects = the GT boxes and labels; the detector is not run) on GQA200, on a Faster R-CNN R50-FPN
# detector trained with configs/gqa200/faster-rcnn_r50_fpn_gqa200.py:
#   python tools/train.py configs/gqa200/faster-rcnn_r50_fpn_gqa200.py
#   python tools/test.py configs/gqa200/freq_predcls_faster-rcnn_r50_fpn_gqa200.py \
#       work_dirs/faster-rcnn_r50_fpn_gqa200/epoch_12.pth
# The detector checkpoint loads into model.detector; the relation head counts its statistics on
# `freq_train_dataset` when the model is built (annotations only).
_base_ = ['./sgg_predcls_gqa200.py', '../_base_/models/sgg_faster-rcnn_r50_fpn.py']
freq_train_dataset = dict(type='GQA200Dataset', data_root='data/sample/gqa200/', ann_file='GQA_200_Train.json', info_file='GQA_200_ID_Info.json', split='train')
model = dict(
    mode='predcls',
    detector=dict(roi_head=dict(bbox_head=dict(num_classes=200))),
    relation_head=dict(num_classes=200, num_predicates=100, statistics_dataset=freq_train_dataset))
