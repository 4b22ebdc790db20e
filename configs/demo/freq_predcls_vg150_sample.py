# The demo: frequency baseline, PredCls, on the bundled VG150 sample (python tools/make_sample_data.py).
# The sample has 8 validation images (the real data: 5000), so the training split is the rest of split 0.
_base_ = ['../vg150/freq_predcls_vg150.py']
data_root = 'data/sample/vg150/'
test_dataloader = dict(num_workers=0, persistent_workers=False,
                       dataset=dict(data_root=data_root, num_val_images=8))
val_dataloader = dict(num_workers=0, persistent_workers=False,
                      dataset=dict(data_root=data_root, num_val_images=8))
freq_train_dataset = dict(data_root=data_root, num_val_images=8)
default_hooks = dict(logger=dict(interval=5))
