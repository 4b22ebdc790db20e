# RelBLIPScore (s = BLIP-2 image-text-matching probability of the "match" class) on PSG, SGDet outputs.
# A local transformers Blip2ForImageTextRetrieval directory (e.g. a save_pretrained copy of
# Salesforce/blip2-itm-vit-g with its tokenizer and image processor).
_base_ = ['../_base_/datasets/psg.py', '../_base_/default_runtime.py']

blip2_dir = 'checkpoints/blip2-itm-vit-g'
encoder = dict(type='BLIP2ITMEncoder', model_path=blip2_dir)
test_evaluator = [dict(type='RelBLIPScore', encoder=encoder, topk=20, mode='sgdet', batch_size=32)]
val_evaluator = test_evaluator
