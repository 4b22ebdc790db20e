# VG150 (Scene-Graph-Benchmark files: VG-SGG-with-attri.h5, VG-SGG-dicts-with-attri.json, image_data.json,
# VG_100K/*.jpg). data_root defaults to the sample written by `python tools/make_sample_data.py --out data/sample`.
# num_val_images: 5000 for the real data (legacy val = first 5000 split-0 images, train = the rest); the sample
# has only 8 val images (mmsgg_eval.testing.VG150_SAMPLE_NUM_VAL): override it with 8 there,
# otherwise its training split is empty and metainfo has no predicate_counts / train_triplets.
dataset_type = 'VG150Dataset'
data_root = 'data/sample/vg150/'
num_val_images = 5000
backend_args = None

# mmdet 3.x evaluation pipeline: GT is loaded after Resize and stays in the original image frame.
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
    ann_file='VG-SGG-with-attri.h5',
    dict_file='VG-SGG-dicts-with-attri.json',
    image_file='image_data.json',
    data_prefix=dict(img='VG_100K/'),
    num_val_images=num_val_images,
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
