# DIOR-RSVG visual grounding evaluation recipe: dataset + runtime + GroundingPr.
# Add your grounding model (one predicted box per (image, description) in pred_instances, original pixels).
_base_ = ['../_base_/datasets/rsvgd.py', '../_base_/default_runtime.py', '../_base_/evaluators/grounding.py']
