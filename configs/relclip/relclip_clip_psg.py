# RelCLIPScore with OpenAI CLIP ViT-L/14 (open_clip) on PSG, SGDet outputs.
# Local checkpoint only (the OpenAI TorchScript ViT-L-14.pt or an open_clip state dict).
_base_ = ['../_base_/datasets/psg.py', '../_base_/default_runtime.py']

clip_checkpoint = 'checkpoints/ViT-L-14.pt'
encoder = dict(type='OpenCLIPEncoder', model_name='ViT-L-14-quickgelu', pretrained=clip_checkpoint)
test_evaluator = [dict(type='RelCLIPScore', encoder=encoder, topk=20, mode='sgdet')]
val_evaluator = test_evaluator
