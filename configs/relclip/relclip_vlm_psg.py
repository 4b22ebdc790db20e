# VLM answers (JSONL of raw model text) on PSG: VLMSceneGraphMetric (closed vocabulary) and RelCLIPScore /
# RefRelCLIPScore (NegCLIP) on the model's OWN words, with the box-ratio / distance breakdown.
#   python -m mmsgg_eval.eval configs/relclip/relclip_vlm_psg.py answers.jsonl --format vlm
_base_ = ['./relclip_negclip_psg.py']

vlm_options = dict(canvas=1000, box_format='xyxy')
vlm_evaluator = [
    dict(type='VLMSceneGraphMetric', **vlm_options),
    dict(type='RelCLIPScore', encoder={{_base_.encoder}}, vlm=vlm_options, rank='given', topk=100,
         region_breakdown=True, prefix='negclip'),
]
