# The demo detector: configs/vg150/faster-rcnn_r50_fpn_vg150.py on the bundled VG150 sample
# (python tools/make_sample_data.py), made small enough for a CPU: ResNet-18 from a random start (no
# download), 192-pixel inputs, 10 iterations. Its detections are barely better than chance; it
# exercises the whole SGDet path (tools/demo.sh), not a real detector.
_base_ = ['../vg150/faster-rcnn_r50_fpn_vg150.py']
data_root = 'data/sample/vg150/'
image_scale = (192, 192)
model = dict(backbone=dict(depth=18, init_cfg=None), neck=dict(in_channels=[64, 128, 256, 512]))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale=image_scale, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=image_scale, keep_ratio=True),
    dict(type='LoadSceneGraphAnnotations'),
    dict(type='PackSceneGraphInputs'),
]
sample_files = dict(data_root=data_root, num_val_images=8)
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        dataset=dict(sample_files, filter_cfg=dict(filter_empty_gt=True, min_size=0),
                                     pipeline=train_pipeline))
val_dataloader = dict(num_workers=0, persistent_workers=False, dataset=dict(sample_files, pipeline=test_pipeline))
test_dataloader = dict(num_workers=0, persistent_workers=False, dataset=dict(sample_files, pipeline=test_pipeline))
max_iters = 10
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=max_iters, val_interval=max_iters)
param_scheduler = [dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=10)]
optim_wrapper = dict(optimizer=dict(lr=0.01))
default_hooks = dict(checkpoint=dict(by_epoch=False, interval=max_iters, max_keep_ckpts=1),
                     logger=dict(interval=10))
log_processor = dict(by_epoch=False)
