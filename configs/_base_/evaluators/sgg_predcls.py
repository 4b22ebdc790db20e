# R@K family and mR@K family for predcls (legacy VG150/GQA200 protocol; options documented in README).
val_evaluator = [
    dict(type='SGRecall', mode='predcls'),
    dict(type='SGMeanRecall', mode='predcls'),
]
test_evaluator = val_evaluator
