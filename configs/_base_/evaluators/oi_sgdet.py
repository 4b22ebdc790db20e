# The OIv6 table row for sgdet: mR@K (graph-constrained, per image, over all predicates) and PySGG's OI protocol
# (R@20/50/100 pooled over images, mAP_rel, wmAP_rel, mAP_phr, wmAP_phr, final_score, w_final_score), and the
# COCO detection AP of the detections (sgdet/mAP, sgdet/AP@50), as PySGG's OI evaluator reports for SGDet.
val_evaluator = [
    dict(type='SGMeanRecall', mode='sgdet'),
    dict(type='OIRelationMetric', mode='sgdet'),
    dict(type='DetectionAP'),
]
test_evaluator = val_evaluator
