# PSG sgdet evaluation recipe: dataset + runtime + SGRecall/SGMeanRecall (sgdet).
# Put your model on top: list this file in your model config's _base_ (by path), or copy it and
# add `model = dict(...)` producing pred_instances / pred_relations (data contract: README "Using the metrics in your own config").
_base_ = ['../_base_/datasets/psg.py', '../_base_/default_runtime.py', '../_base_/evaluators/sgg_sgdet.py']

# PSG: SGDet matches by mask IoU (the OpenPSG protocol); PredCls/SGCls use the GT segments.
test_evaluator = [dict(type='SGRecall', mode='sgdet', match='mask'), dict(type='SGMeanRecall', mode='sgdet', match='mask')]
val_evaluator = test_evaluator
