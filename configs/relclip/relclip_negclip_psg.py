# RelCLIPScore with NegCLIP (ViT-B/32, open_clip) on PSG, SGDet outputs (box matching at IoU 0.5, top-20).
# Local checkpoint only: set `negclip_checkpoint` to your negclip.pth (nothing is downloaded).
# Offline: python -m mmsgg_eval.eval configs/relclip/relclip_negclip_psg.py preds.jsonl
# Alignment study: python tools/analysis/relation_alignment.py configs/relclip/relclip_negclip_psg.py
_base_ = ['../_base_/datasets/psg.py', '../_base_/default_runtime.py']

negclip_checkpoint = 'checkpoints/negclip.pth'
encoder = dict(type='OpenCLIPEncoder', model_name='ViT-B-32-quickgelu', pretrained=negclip_checkpoint)
test_evaluator = [dict(type='RelCLIPScore', encoder=encoder, topk=20, mode='sgdet', prefix='negclip')]
val_evaluator = test_evaluator
