# PSG (box mode) as an mmdet detection dataset (see vg150_detection.py): boxes of the 133 thing + stuff
# classes; the training split for the detector; the test loader of psg.py (no masks) scored by DetectionAP.
_base_ = ['./psg.py']
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
    dataset=dict(type='PSGDataset', data_root={{_base_.data_root}}, ann_file='psg.json',
                 data_prefix=dict(img='coco/', seg='coco/'), split='train', with_masks=False,
                 filter_cfg=dict(filter_empty_gt=True, min_size=32), pipeline=train_pipeline))
test_dataloader = dict(dataset=dict(with_masks=False))
val_dataloader = dict(dataset=dict(with_masks=False))
val_evaluator = dict(type='DetectionAP', prefix='bbox')
test_evaluator = val_evaluator
