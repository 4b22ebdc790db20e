# R@K family and mR@K family for sgdet (legacy VG150/GQA200 protocol; options documented in README), and the
# COCO detection AP of the detections (sgdet/mAP, sgdet/AP@50), as the legacy evaluator reports for SGDet.
val_evaluator = [
    dict(type='SGRecall', mode='sgdet'),
    dict(type='SGMeanRecall', mode='sgdet'),
    dict(type='DetectionAP'),
]
test_evaluator = val_evaluator
