# RSVGD / DIOR-RSVG visual grounding (Annotations/*.xml, JPEGImages/*.jpg, train.txt / val.txt / test.txt).
# data_root defaults to the sample written by `python tools/make_sample_data.py --out data/sample`.
# One sample per (image, description, box); the description is in the data sample's metainfo `text`.
dataset_type = 'RSVGDDataset'
data_root = 'data/sample/rsvgd/'
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
    ann_dir='Annotations',
    img_dir='JPEGImages',
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
