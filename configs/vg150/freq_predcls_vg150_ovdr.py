# Open-vocabulary VG150, OvSGTR's OvD+R (novel classes and predicates; Joint = R@K, Novel Object = R@K_novel_obj, Novel Relation = R@K_novel_pred).
# The frequency baseline counts its statistics on the BASE-ONLY training split (the "closed model" row of an
# open-vocabulary table); the test split is unchanged, and its metainfo names the novel classes / predicates, so
# SGRecall / SGMeanRecall add the novel-subset keys (docs/metrics.md, "Open-vocabulary subsets").
#   python tools/build_freq_baseline.py configs/vg150/freq_predcls_vg150_ovdr.py --out freq_vg150_ovdr.pth
#   python tools/test.py configs/vg150/freq_predcls_vg150_ovdr.py freq_vg150_ovdr.pth
_base_ = ['./freq_predcls_vg150.py']
open_vocab_split = 'ovdr'  # VG150Dataset: base-only training split; val / test unchanged
freq_train_dataset = dict(open_vocab_split=open_vocab_split)
val_dataloader = dict(dataset=dict(open_vocab_split=open_vocab_split))
test_dataloader = dict(dataset=dict(open_vocab_split=open_vocab_split))
