# The OIv6 table row for predcls: mR@K (graph-constrained, per image, over all predicates) and PySGG's OI protocol
# (R@20/50/100 pooled over images, mAP_rel, wmAP_rel, mAP_phr, wmAP_phr, final_score, w_final_score).
val_evaluator = [
    dict(type='SGMeanRecall', mode='predcls'),
    dict(type='OIRelationMetric', mode='predcls'),
]
test_evaluator = val_evaluator
