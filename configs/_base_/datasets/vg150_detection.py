# VG150 as an mmdet detection dataset (training a detector for SGDet / SGCls): mmdet's LoadAnnotations +
# RandomFlip + PackDetInputs on the training split; validation / test on the val / test loaders of vg150.py
# (GT in the original frame) scored by DetectionAP (COCO mAP, AP@50).
_base_ = ['./vg150.py']
train_pipeline = [
    dict(type='LoadImageFromFile', backend_args={{_base_.backend_args}}),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale=(1333, 800), keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
train_dataloader = dict(
    batch_size=2,
    num_workers=2,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    batch_sampler=dict(type='AspectRatioBatchSampler'),
    dataset=dict(type='VG150Dataset', data_root={{_base_.data_root}}, ann_file='VG-SGG-with-attri.h5',
                 dict_file='VG-SGG-dicts-with-attri.json', image_file='image_data.json',
                 data_prefix=dict(img='VG_100K/'), num_val_images={{_base_.num_val_images}}, split='train',
                 filter_cfg=dict(filter_empty_gt=True, min_size=32), pipeline=train_pipeline))
val_evaluator = dict(type='DetectionAP', prefix='bbox')
test_evaluator = val_evaluator
