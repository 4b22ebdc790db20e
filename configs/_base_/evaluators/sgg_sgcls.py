# R@K family and mR@K family for sgcls (legacy VG150/GQA200 protocol; options documented in README).
val_evaluator = [
    dict(type='SGRecall', mode='sgcls'),
    dict(type='SGMeanRecall', mode='sgcls'),
]
test_evaluator = val_evaluator
