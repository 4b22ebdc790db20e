# PSG (box mode) as an mmdet detection dataset (see vg150_detection.py): boxes of the 133 thing + stuff
# classes; training split for the detector, the test split (PSG has no val split) scored by DetectionAP.
dataset_type = 'PSGDataset'
data_root = 'data/sample/psg/'
backend_args = None

train_pipeline = [
    dict(type='LoadImageFromFile', backend_args=backend_args),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale=(1333, 800), keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile', backend_args=backend_args),
    dict(type='Resize', scale=(1333, 800), keep_ratio=True),
    dict(type='LoadSceneGraphAnnotations'),
    dict(type='PackSceneGraphInputs'),
]
files = dict(type=dataset_type, data_root=data_root, ann_file='psg.json', data_prefix=dict(img='coco/', seg='coco/'),
             with_masks=False)
train_dataloader = dict(
    batch_size=2,
    num_workers=2,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    batch_sampler=dict(type='AspectRatioBatchSampler'),
    dataset=dict(files, split='train', filter_cfg=dict(filter_empty_gt=True, min_size=32), pipeline=train_pipeline))
test_dataloader = dict(
    batch_size=1,
    num_workers=2,
    persistent_workers=True,
    drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(files, split='test', test_mode=True, pipeline=test_pipeline))
val_dataloader = test_dataloader
val_evaluator = dict(type='DetectionAP', prefix='bbox')
test_evaluator = val_evaluator
