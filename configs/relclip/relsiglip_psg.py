# RelSIGLIPScore (s = SigLIP's sigmoid probability) on PSG, SGDet outputs.
# A local transformers SigLIP directory (save_pretrained of model, tokenizer and image processor).
_base_ = ['../_base_/datasets/psg.py', '../_base_/default_runtime.py']

siglip_dir = 'checkpoints/siglip-base-patch16-224'
encoder = dict(type='HFSigLIPEncoder', model_path=siglip_dir)
test_evaluator = [dict(type='RelSIGLIPScore', encoder=encoder, topk=20, mode='sgdet')]
val_evaluator = test_evaluator
