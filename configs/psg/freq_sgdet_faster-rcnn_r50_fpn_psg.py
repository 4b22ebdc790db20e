# FREQ (MOTIFS frequency baseline) in SGDet (objects = the detections, all ordered pairs) on PSG (box mode), on a Faster R-CNN R50-FPN
# detector trained with configs/psg/faster-rcnn_r50_fpn_psg.py:
#   python tools/train.py configs/psg/faster-rcnn_r50_fpn_psg.py
#   python tools/test.py configs/psg/freq_sgdet_faster-rcnn_r50_fpn_psg.py \
#       work_dirs/faster-rcnn_r50_fpn_psg/epoch_12.pth
# The detector checkpoint loads into model.detector; the relation head counts its statistics on
# `freq_train_dataset` when the model is built (annotations only).
_base_ = ['./sgg_sgdet_psg.py', '../_base_/models/sgg_faster-rcnn_r50_fpn.py']
freq_train_dataset = dict(type='PSGDataset', data_root='data/sample/psg/', ann_file='psg.json', split='train', with_masks=False)
model = dict(
    mode='sgdet',
    detector=dict(roi_head=dict(bbox_head=dict(num_classes=133)),
                  # the legacy SGDet protocol keeps 80 detections per image
                  test_cfg=dict(rcnn=dict(max_per_img=80))),
    relation_head=dict(num_classes=133, num_predicates=56, statistics_dataset=freq_train_dataset))
# box mode: no panoptic masks, box-IoU matching
test_dataloader = dict(dataset=dict(with_masks=False))
val_dataloader = dict(dataset=dict(with_masks=False))
test_evaluator = [dict(type='SGRecall', mode='sgdet'), dict(type='SGMeanRecall', mode='sgdet'),
                  dict(type='DetectionAP')]
val_evaluator = test_evaluator
