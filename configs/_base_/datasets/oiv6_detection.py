# Open Images V6 as an mmdet detection dataset (see vg150_detection.py): the training split for the detector;
# the val / test loaders of oiv6.py scored by DetectionAP.
_base_ = ['./oiv6.py']
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
    dataset=dict(type='OIv6Dataset', data_root={{_base_.data_root}}, cate_info_file='annotations/categories_dict.json',
                 data_prefix=dict(img='images/'), split='train',
                 filter_cfg=dict(filter_empty_gt=True, min_size=32), pipeline=train_pipeline))
val_evaluator = dict(type='DetectionAP', prefix='bbox')
test_evaluator = val_evaluator
