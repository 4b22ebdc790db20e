# VG150 as an mmdet detection dataset (training a detector for SGDet / SGCls): mmdet's LoadAnnotations +
# RandomFlip + PackDetInputs on the training split; validation / test on the val / test split with the
# scene-graph evaluation pipeline (GT in the original frame) scored by DetectionAP (COCO mAP, AP@50).
# data_root defaults to the sample written by `python tools/make_sample_data.py --out data/sample`
# (with it, set num_val_images=8).
dataset_type = 'VG150Dataset'
data_root = 'data/sample/vg150/'
num_val_images = 5000
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
files = dict(
    type=dataset_type,
    data_root=data_root,
    ann_file='VG-SGG-with-attri.h5',
    dict_file='VG-SGG-dicts-with-attri.json',
    image_file='image_data.json',
    data_prefix=dict(img='VG_100K/'),
    num_val_images=num_val_images)
train_dataloader = dict(
    batch_size=2,
    num_workers=2,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    batch_sampler=dict(type='AspectRatioBatchSampler'),
    dataset=dict(files, split='train', filter_cfg=dict(filter_empty_gt=True, min_size=32), pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1,
    num_workers=2,
    persistent_workers=True,
    drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(files, split='val', test_mode=True, pipeline=test_pipeline))
test_dataloader = dict(val_dataloader, dataset=dict(files, split='test', test_mode=True, pipeline=test_pipeline))
val_evaluator = dict(type='DetectionAP', prefix='bbox')
test_evaluator = val_evaluator
