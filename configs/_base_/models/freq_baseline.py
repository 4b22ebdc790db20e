# The frequency baseline (MOTIFS FREQ); num_classes / num_predicates are set by the dataset configs' users.
model = dict(
    type='FrequencyBaseline',
    num_classes=150,
    num_predicates=50,
    must_overlap=False,
    mode='predcls',
    data_preprocessor=dict(type='DetDataPreprocessor', mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
                           bgr_to_rgb=True, pad_size_divisor=32),
)
