"""Frequency baseline (MOTIFS FREQ / FREQ+OVERLAP): statistics and predictions, checked by hand."""
import numpy as np
import pytest
import torch

from mmsgg_eval.models import FrequencyBaseline, count_frequency_statistics


class TinyDataset:
    """Two training images in mmdet-style data-info form."""

    def __init__(self):
        self.infos = [
            dict(instances=[dict(bbox=[0, 0, 10, 10], bbox_label=0), dict(bbox=[5, 5, 15, 15], bbox_label=1),
                            dict(bbox=[50, 50, 60, 60], bbox_label=1)],
                 relations=np.array([[0, 1, 2], [0, 2, 2]])),
            dict(instances=[dict(bbox=[0, 0, 10, 10], bbox_label=0), dict(bbox=[5, 5, 15, 15], bbox_label=1)],
                 relations=np.array([[0, 1, 0]])),
        ]

    def __len__(self):
        return len(self.infos)

    def get_data_info(self, i):
        return self.infos[i]


def test_counts_and_background_channel():
    counts = count_frequency_statistics(TinyDataset(), num_classes=2, num_predicates=3, progress=False)
    # (0 -> 1): predicate 2 twice, predicate 0 once; background: no (0 -> 1) pair without relation
    assert counts[0, 1].tolist() == [0, 1, 0, 2]
    # (1 -> 0): three candidate pairs without relation, (1 -> 1): two
    assert counts[1, 0, 0] == 3 and counts[1, 1, 0] == 2 and counts[1, 1, 1:].sum() == 0
    overlap = count_frequency_statistics(TinyDataset(), 2, 3, must_overlap=True, progress=False)
    # only overlapping pairs count as background: image 0 (1->0) and image 1 (1->0); (1,1) pairs are apart
    assert overlap[1, 0, 0] == 2 and overlap[1, 1, 0] == 0
    assert (overlap[..., 1:] == counts[..., 1:]).all()  # foreground counts do not depend on overlap


def test_predictions_are_the_normalised_distribution():
    model = FrequencyBaseline(num_classes=2, num_predicates=3)
    with pytest.raises(RuntimeError, match='statistics'):
        model.predict([{'gt_instances': {'bboxes': torch.zeros(2, 4), 'labels': torch.tensor([0, 1])}}])
    model.fit(count_frequency_statistics(TinyDataset(), 2, 3, progress=False))
    sample = {'gt_instances': {'bboxes': torch.tensor([[0., 0, 10, 10], [5, 5, 15, 15]]),
                               'labels': torch.tensor([0, 1])}}
    out = model.predict([sample])[0]
    pairs = out['pred_relations'].pair_idxs.tolist()
    scores = out['pred_relations'].scores
    assert sorted(pairs) == [[0, 1], [1, 0]]
    row = scores[pairs.index([0, 1])]
    assert torch.allclose(row, torch.tensor([0., 1 / 3, 0, 2 / 3]))
    assert pairs[0] == [0, 1]  # ranked first: best predicate probability 2/3 vs 0
    assert out['pred_mode'] == 'predcls'
    overlap_model = FrequencyBaseline(2, 3, must_overlap=True)
    overlap_model.fit(count_frequency_statistics(TinyDataset(), 2, 3, must_overlap=True, progress=False))
    far = {'gt_instances': {'bboxes': torch.tensor([[0., 0, 10, 10], [50, 50, 60, 60]]),
                            'labels': torch.tensor([0, 1])}}
    far_scores = overlap_model.predict([far])[0]['pred_relations'].scores
    assert torch.equal(far_scores[:, 0], torch.ones(2)) and far_scores[:, 1:].sum() == 0


def test_modes():
    with pytest.raises(ValueError, match='sgdet'):
        FrequencyBaseline(2, 3, mode='sgdet')
    model = FrequencyBaseline(2, 3, mode='sgcls')
    model.fit(np.ones((2, 2, 4)))
    with pytest.raises(ValueError, match='sgcls mode needs predicted object labels'):
        model.predict([{'gt_instances': {'bboxes': torch.zeros(2, 4), 'labels': torch.tensor([0, 1])}}])
