# The demo's SGCls: FREQ on the GT boxes classified by the demo detector's RoI head (VG150 sample).
_base_ = ['./freq_sgdet_faster-rcnn_r18_fpn_vg150_sample.py']
model = dict(mode='sgcls')
test_evaluator = [dict(type='SGRecall', mode='sgcls'), dict(type='SGMeanRecall', mode='sgcls')]
val_evaluator = test_evaluator
