# Frequency baseline (MOTIFS FREQ) in PredCls on PSG: a training-free model to run end to end.
#   python tools/build_freq_baseline.py configs/psg/freq_predcls_psg.py --out freq_psg.pth
#   python tools/test.py configs/psg/freq_predcls_psg.py freq_psg.pth
_base_ = ['./sgg_predcls_psg.py', '../_base_/models/freq_baseline.py']
model = dict(num_classes=133, num_predicates=56, mode='predcls')
# the split whose statistics the baseline counts (tools/build_freq_baseline.py)
freq_train_dataset = dict(type='PSGDataset', data_root='data/sample/psg/', ann_file='psg.json', split='train', with_masks=False)
