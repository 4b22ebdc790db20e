# The demo's SGDet: FREQ on the demo detector (faster-rcnn_r18_fpn_vg150_sample.py) on the bundled VG150 sample.
#   python tools/train.py configs/demo/faster-rcnn_r18_fpn_vg150_sample.py --work-dir work_dirs/demo_det
#   python tools/test.py configs/demo/freq_sgdet_faster-rcnn_r18_fpn_vg150_sample.py work_dirs/demo_det/iter_10.pth
# score_thr=0: the demo detector is barely trained, its scores are low; every image keeps 80 detections.
_base_ = ['../vg150/freq_sgdet_faster-rcnn_r50_fpn_vg150.py']
data_root = 'data/sample/vg150/'
image_scale = (192, 192)
sample_files = dict(data_root=data_root, num_val_images=8)
model = dict(
    detector=dict(backbone=dict(depth=18, init_cfg=None), neck=dict(in_channels=[64, 128, 256, 512]),
                  test_cfg=dict(rcnn=dict(score_thr=0.0))),
    relation_head=dict(statistics_dataset=sample_files))
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=image_scale, keep_ratio=True),
    dict(type='LoadSceneGraphAnnotations'),
    dict(type='PackSceneGraphInputs'),
]
test_dataloader = dict(num_workers=0, persistent_workers=False, dataset=dict(sample_files, pipeline=test_pipeline))
val_dataloader = test_dataloader
default_hooks = dict(logger=dict(interval=5))
# where SGDet recall is lost (error_analysis=True: miss@K_{cause} keys, the "R@K | lost: ..." lines, the
# per-predicate table of causes); with this barely trained detector most misses are detection causes
test_evaluator = [dict(type='SGRecall', mode='sgdet', error_analysis=True),
                  dict(type='SGMeanRecall', mode='sgdet', error_analysis=True), dict(type='DetectionAP')]
val_evaluator = test_evaluator
