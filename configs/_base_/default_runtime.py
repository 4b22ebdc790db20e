# Runtime shared by the mmsgg_eval configs (evaluation only).
default_scope = 'mmdet'
custom_imports = dict(imports=['mmsgg_eval'], allow_failed_imports=False)

env_cfg = dict(
    cudnn_benchmark=False,
    mp_cfg=dict(mp_start_method='fork', opencv_num_threads=0),
    # nccl on GPUs; tools/test.py switches to gloo when no GPU is present
    # (override with --cfg-options env_cfg.dist_cfg.backend=gloo)
    dist_cfg=dict(backend='nccl'),
)
default_hooks = dict(
    timer=dict(type='IterTimerHook'),
    logger=dict(type='LoggerHook', interval=50),
    # draws nothing unless asked: tools/test.py --show-dir DIR (ours and mmdet's) turns it on
    visualization=dict(type='DetVisualizationHook'),
)
# one picture per image (GT | prediction panels, hits and misses at K): mmsgg_eval/visualization/
visualizer = dict(type='SceneGraphLocalVisualizer', vis_backends=[dict(type='LocalVisBackend')], name='visualizer')
log_processor = dict(type='LogProcessor', window_size=50, by_epoch=True)
log_level = 'INFO'
load_from = None
resume = False
test_cfg = dict(type='TestLoop')
val_cfg = dict(type='ValLoop')
