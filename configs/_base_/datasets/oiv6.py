# Open Images V6 (PySGG's files: annotations/categories_dict.json, annotations/vrd-{train,val,test}-anno.json,
# images/{img_fn}.jpg). data_root defaults to the sample written by
# `python tools/make_sample_data.py --out data/sample`; for the real data use PySGG's folder, e.g.
# data_root='datasets/openimages/open_image_v6/'. Each split reads its own file (ann_file=None:
# annotations/vrd-{split}-anno.json); images without relations or boxes are dropped, GT boxes are clamped to
# the image, duplicate GT relations are kept (PySGG's evaluation GT).
dataset_type = 'OIv6Dataset'
data_root = 'data/sample/oiv6/'
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
    cate_info_file='annotations/categories_dict.json',
    train_file='annotations/vrd-train-anno.json',
    data_prefix=dict(img='images/'),
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
