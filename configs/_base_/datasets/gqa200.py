# GQA200 (SHA-GCL files: GQA_200_ID_Info.json, GQA_200_Train.json, GQA_200_Test.json, images/*.jpg).
# data_root defaults to the sample written by `python tools/make_sample_data.py --out data/sample`.
# val = the first 5000 kept test images; the legacy skip of test position 5579 is on (skip_legacy_bad_image).
dataset_type = 'GQA200Dataset'
data_root = 'data/sample/gqa200/'
backend_args = None

test_pipeline = [
    dict(type='LoadImageFromFile', backend_args=backend_args),
    dict(type='Resize', scale=(1333, 800), keep_ratio=True),
    dict(type='LoadSceneGraphAnnotations'),
    dict(type='PackSceneGraphInputs'),
]
# evaluation dataset shared by the val / test loaders (only the split differs)
eval_dataset = dict(
    type=dataset_type,
    data_root=data_root,
    ann_file='GQA_200_Test.json',
    info_file='GQA_200_ID_Info.json',
    train_file='GQA_200_Train.json',
    data_prefix=dict(img='images/'),
    num_val_images=5000,
    skip_legacy_bad_image=True,
    pipeline=test_pipeline,
    test_mode=True)
val_dataloader = dict(
    batch_size=1,
    num_workers=2,
    persistent_workers=True,
    drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(eval_dataset, split='val'))
test_dataloader = dict(val_dataloader, dataset=dict(eval_dataset, split='test'))
