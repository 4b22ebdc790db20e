# PSG sgcls evaluation recipe: dataset + runtime + SGRecall/SGMeanRecall (sgcls).
# Put your model on top: list this file in your model config's _base_ (by path), or copy it and
# add `model = dict(...)` producing pred_instances / pred_relations (data contract: README "Using the metrics in your own config").
_base_ = ['../_base_/datasets/psg.py', '../_base_/default_runtime.py', '../_base_/evaluators/sgg_sgcls.py']

# PSG: SGDet matches by mask IoU (the OpenPSG protocol); PredCls/SGCls use the GT segments.
test_evaluator = [dict(type='SGRecall', mode='sgcls', match='box'), dict(type='SGMeanRecall', mode='sgcls', match='box')]
val_evaluator = test_evaluator
