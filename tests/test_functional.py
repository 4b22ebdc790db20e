"""Functional layer against slow references: stable top-k, IoU conventions, no-graph-constraint pruning."""
import numpy as np
import pytest
import torch

from mmsgg_eval.functional import box_iou, mask_iou, paired_box_iou, stable_topk
from tests.reference_sgg import iou as reference_iou


@pytest.mark.parametrize('quantised', [False, True])
def test_stable_topk_equals_a_stable_sort(quantised):
    g = torch.Generator().manual_seed(1)
    for trial in range(200):
        batch = 3
        length = int(torch.randint(1, 700, (1,), generator=g))
        k = int(torch.randint(1, 160, (1,), generator=g))
        x = torch.rand(batch, length, generator=g)
        if quantised:
            x = (x * 5).round() / 5  # many ties, also at the k-th value
        valid = torch.rand(batch, length, generator=g) > 0.15
        order, order_valid = stable_topk(x, valid, k)
        for b in range(batch):
            ref = sorted((i for i in range(length) if valid[b, i]), key=lambda i: -float(x[b, i]))[:k]
            n = len(ref)
            assert order[b, :n].tolist() == ref
            assert order_valid[b].tolist() == [True] * n + [False] * (min(k, length) - n)


@pytest.mark.parametrize('plus_one', [True, False])
def test_box_iou_matches_float32_reference(plus_one):
    rng = np.random.default_rng(0)
    a = np.round(rng.uniform(0, 50, (30, 4)))
    b = np.round(rng.uniform(0, 50, (20, 4)))
    a[:, 2:] = np.maximum(a[:, 2:], a[:, :2])
    b[:, 2:] = np.maximum(b[:, 2:], b[:, :2])
    ours = box_iou(torch.tensor(a), torch.tensor(b), plus_one)
    ref = np.array([[reference_iou(x, y, plus_one) for y in b] for x in a], dtype=np.float32)
    assert np.array_equal(ours.numpy(), ref)  # bit-identical
    paired = paired_box_iou(torch.tensor(a[:20]), torch.tensor(b), plus_one)
    assert torch.equal(paired, ours[torch.arange(20), torch.arange(20)])


def test_iou_conventions_on_known_boxes():
    a = torch.tensor([[0., 0, 9, 9]])
    b = torch.tensor([[0., 0, 9, 4]])
    assert box_iou(a, b, plus_one=True).item() == 0.5       # 50 / 100 pixels
    assert box_iou(a, b, plus_one=False).item() == pytest.approx(36 / 81)
    zero = torch.tensor([[3., 3, 3, 3]])
    assert box_iou(zero, zero, plus_one=False).item() == 0.0  # no NaN for empty boxes
    assert box_iou(zero, zero, plus_one=True).item() == 1.0   # one pixel


def test_mask_iou():
    m = torch.zeros(3, 8, 8, dtype=torch.bool)
    m[0, :4, :4] = True
    m[1, :4, :2] = True
    iou = mask_iou(m, m)
    assert iou[0, 1].item() == 0.5 and iou[0, 0].item() == 1.0
    assert iou[2, 2].item() == 0.0  # two empty masks
