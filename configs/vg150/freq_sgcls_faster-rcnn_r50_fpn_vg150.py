# FREQ (MOTIFS frequency baseline) in SGCls (objects = the GT boxes classified by the detector's RoI head) on VG150, on a Faster R-CNN R50-FPN
# detector trained with configs/vg150/faster-rcnn_r50_fpn_vg150.py:
#   python tools/train.py configs/vg150/faster-rcnn_r50_fpn_vg150.py
#   python tools/test.py configs/vg150/freq_sgcls_faster-rcnn_r50_fpn_vg150.py \
#       work_dirs/faster-rcnn_r50_fpn_vg150/epoch_12.pth
# The detector checkpoint loads into model.detector; the relation head counts its statistics on
# `freq_train_dataset` when the model is built (annotations only).
_base_ = ['./sgg_sgcls_vg150.py', '../_base_/models/sgg_faster-rcnn_r50_fpn.py']
freq_train_dataset = dict(type='VG150Dataset', data_root='data/sample/vg150/', ann_file='VG-SGG-with-attri.h5', dict_file='VG-SGG-dicts-with-attri.json', image_file='image_data.json', data_prefix=dict(img='VG_100K/'), split='train', num_val_images=5000)
model = dict(
    mode='sgcls',
    detector=dict(roi_head=dict(bbox_head=dict(num_classes=150))),
    relation_head=dict(num_classes=150, num_predicates=50, statistics_dataset=freq_train_dataset))
