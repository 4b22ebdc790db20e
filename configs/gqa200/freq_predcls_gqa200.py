# Frequency baseline (MOTIFS FREQ) in PredCls on GQA200: a training-free model to run end to end.
#   python tools/build_freq_baseline.py configs/gqa200/freq_predcls_gqa200.py --out freq_gqa200.pth
#   python tools/test.py configs/gqa200/freq_predcls_gqa200.py freq_gqa200.pth
_base_ = ['./sgg_predcls_gqa200.py', '../_base_/models/freq_baseline.py']
model = dict(num_classes=200, num_predicates=100, mode='predcls')
# the split whose statistics the baseline counts (tools/build_freq_baseline.py)
freq_train_dataset = dict(type='GQA200Dataset', data_root='data/sample/gqa200/', ann_file='GQA_200_Train.json', info_file='GQA_200_ID_Info.json', split='train')
