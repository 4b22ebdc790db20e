# OIv6 sgdet evaluation recipe: dataset + runtime + SGMeanRecall/OIRelationMetric (sgdet).
# Put your model on top: list this file in your model config's _base_ (by path), or copy it and
# add `model = dict(...)` producing pred_instances / pred_relations (data contract: README "Using the metrics in your own config").
_base_ = ['../_base_/datasets/oiv6.py', '../_base_/default_runtime.py', '../_base_/evaluators/oi_sgdet.py']
