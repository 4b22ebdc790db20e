# R@K family and mR@K family for sgdet (legacy VG150/GQA200 protocol; options documented in README).
val_evaluator = [
    dict(type='SGRecall', mode='sgdet'),
    dict(type='SGMeanRecall', mode='sgdet'),
]
test_evaluator = val_evaluator
