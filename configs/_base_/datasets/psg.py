# PSG (OpenPSG psg.json + COCO images and panoptic PNGs). data_root defaults to the sample written by
# `python tools/make_sample_data.py --out data/sample`; for the real data use e.g. data_root='data/',
# ann_file='psg/psg.json', data_prefix=dict(img='coco/', seg='coco/').
# PSG has no val split: both dataloaders use the test split. Masks are decoded from the panoptic PNGs
# (with_masks=True) for mask-IoU matching; set with_masks=False for box matching only.
dataset_type = 'PSGDataset'
data_root = 'data/sample/psg/'
backend_args = None

test_pipeline = [
    dict(type='LoadImageFromFile', backend_args=backend_args),
    dict(type='Resize', scale=(1333, 800), keep_ratio=True),
    dict(type='LoadSceneGraphAnnotations', backend_args=backend_args),
    dict(type='PackSceneGraphInputs'),
]
test_dataloader = dict(
    batch_size=1,
    num_workers=2,
    persistent_workers=True,
    drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        ann_file='psg.json',
        data_prefix=dict(img='coco/', seg='coco/'),
        split='test',
        with_masks=True,
        pipeline=test_pipeline,
        test_mode=True))
val_dataloader = test_dataloader
