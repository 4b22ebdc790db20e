# Frequency baseline (MOTIFS FREQ) in PredCls on OIv6: a training-free model to run end to end.
#   python tools/build_freq_baseline.py configs/oiv6/freq_predcls_oiv6.py --out freq_oiv6.pth
#   python tools/test.py configs/oiv6/freq_predcls_oiv6.py freq_oiv6.pth
_base_ = ['./sgg_predcls_oiv6.py', '../_base_/models/freq_baseline.py']
model = dict(num_classes=601, num_predicates=30, mode='predcls')
# the split whose statistics the baseline counts (tools/build_freq_baseline.py)
freq_train_dataset = dict(type='OIv6Dataset', data_root='data/sample/oiv6/', split='train')
