# Frequency baseline (MOTIFS FREQ) in PredCls on VG150: a training-free model to run end to end.
#   python tools/build_freq_baseline.py configs/vg150/freq_predcls_vg150.py --out freq_vg150.pth
#   python tools/test.py configs/vg150/freq_predcls_vg150.py freq_vg150.pth
_base_ = ['./sgg_predcls_vg150.py', '../_base_/models/freq_baseline.py']
model = dict(num_classes=150, num_predicates=50, mode='predcls')
# the split whose statistics the baseline counts (tools/build_freq_baseline.py)
freq_train_dataset = dict(type='VG150Dataset', data_root='data/sample/vg150/', ann_file='VG-SGG-with-attri.h5', dict_file='VG-SGG-dicts-with-attri.json', image_file='image_data.json', data_prefix=dict(img='VG_100K/'), split='train', num_val_images=5000)
