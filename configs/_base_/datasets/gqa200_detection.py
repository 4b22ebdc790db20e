# GQA200 as an mmdet detection dataset (see vg150_detection.py): training split for the detector, val
# (first 5000 kept test images) / test scored by DetectionAP.
dataset_type = 'GQA200Dataset'
data_root = 'data/sample/gqa200/'
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
files = dict(type=dataset_type, data_root=data_root, info_file='GQA_200_ID_Info.json',
             train_file='GQA_200_Train.json', data_prefix=dict(img='images/'))
train_dataloader = dict(
    batch_size=2,
    num_workers=2,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    batch_sampler=dict(type='AspectRatioBatchSampler'),
    dataset=dict(files, ann_file='GQA_200_Train.json', split='train',
                 filter_cfg=dict(filter_empty_gt=True, min_size=32), pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1,
    num_workers=2,
    persistent_workers=True,
    drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(files, ann_file='GQA_200_Test.json', split='val', num_val_images=5000, skip_legacy_bad_image=True,
                 test_mode=True, pipeline=test_pipeline))
test_dataloader = dict(val_dataloader, dataset=dict(val_dataloader['dataset'], split='test'))
val_evaluator = dict(type='DetectionAP', prefix='bbox')
test_evaluator = val_evaluator
