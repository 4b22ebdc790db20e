# Open-vocabulary VG150, OvSGTR's OvD (novel object classes: 45 of 150; keys R@K_novel_obj / ngR@K_novel_obj, R@K_base).
# The frequency baseline counts its statistics on the BASE-ONLY training split (the "closed model" row of an
# open-vocabulary table); the test split is unchanged, and its metainfo names the novel classes / predicates, so
# SGRecall / SGMeanRecall add the novel-subset keys (docs/metrics.md, "Open-vocabulary subsets").
#   python tools/build_freq_baseline.py configs/vg150/freq_predcls_vg150_ovd.py --out freq_vg150_ovd.pth
#   python tools/test.py configs/vg150/freq_predcls_vg150_ovd.py freq_vg150_ovd.pth
_base_ = ['./freq_predcls_vg150.py']
open_vocab_split = 'ovd'  # VG150Dataset: base-only training split; val / test unchanged
freq_train_dataset = dict(open_vocab_split=open_vocab_split)
val_dataloader = dict(dataset=dict(open_vocab_split=open_vocab_split))
test_dataloader = dict(dataset=dict(open_vocab_split=open_vocab_split))
