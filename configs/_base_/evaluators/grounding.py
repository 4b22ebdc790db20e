# RSVGD / DIOR-RSVG grounding: Pr@0.5..0.9 (IoU >= tau; strict=True for the MGVLF '>' convention), meanIoU, cumIoU.
val_evaluator = dict(type='GroundingPr', thresholds=(0.5, 0.6, 0.7, 0.8, 0.9), strict=False)
test_evaluator = val_evaluator
