"""RelCLIPScore: aggregation with a stub encoder whose embeddings make every s known, cropping, caching,
distributed equality, and an end-to-end run with a tiny real open_clip model."""
import json
import math
import os.path as osp
from typing import Dict, List, Optional, Sequence

import numpy as np
import pytest
import torch
from PIL import Image

from mmsgg_eval.encoders import ImagePreprocess
from mmsgg_eval.metrics import RelCLIPScore
from mmsgg_eval.metrics.relclip import penalty_divisor
from tests.metric_tester import Case, check_metric

CLASSES = ['man', 'horse', 'street', 'dog', 'car', 'wheel']
PREDICATES = ['riding', 'on', 'near', 'has']
META = dict(classes=CLASSES, predicates=PREDICATES)

# text -> vector; the stub's image embedding is e0 = [1, 0, 0, 0], so s = max(first component / norm, 0)
TEXTS: Dict[str, List[float]] = {
    'man riding horse': [0.6, 0.8, 0.0, 0.0],
    'man on horse': [0.3, 0.0, math.sqrt(1 - 0.09), 0.0],
    'man near horse': [0.5, 0.5, 0.5, 0.5],
    'horse on man': [-0.2, 0.0, 0.0, math.sqrt(1 - 0.04)],
    'man on street': [0.9, 0.0, 0.0, math.sqrt(1 - 0.81)],
    'horse near street': [0.4, 0.0, math.sqrt(1 - 0.16), 0.0],
    'man has horse': [0.1, 0.0, -math.sqrt(1 - 0.01), 0.0],
    'guy leaning against pony': [0.7, 0.0, math.sqrt(1 - 0.49), 0.0],  # a model's own words
}
DEFAULT_TEXT = [0.1, 0.0, 0.0, math.sqrt(1 - 0.01)]


def vec(text: str) -> torch.Tensor:
    v = torch.tensor(TEXTS.get(text, DEFAULT_TEXT), dtype=torch.float64)
    return v / v.norm()


def s_of(text: str) -> float:
    """s = max(cos(e0, text), 0)."""
    return max(float(vec(text)[0]), 0.0)


def text_cos(a: str, b: str) -> float:
    return float(vec(a) @ vec(b))


class StubEncoder:
    """Encoder protocol stub: constant image embedding e0, text embeddings from TEXTS; records its calls."""
    preprocess = ImagePreprocess('shortest', 8, (8, 8), (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))

    def __init__(self) -> None:
        self.text_calls: List[List[str]] = []
        self.image_calls: List[int] = []

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        assert images.shape[1:] == (3, 8, 8) and 0 <= float(images.min()) and float(images.max()) <= 1
        self.image_calls.append(int(images.shape[0]))
        out = torch.zeros(images.shape[0], 4)
        out[:, 0] = 2.0  # not unit norm: the metric normalises
        return out

    def encode_text(self, texts: Sequence[str]) -> torch.Tensor:
        self.text_calls.append(list(texts))
        return torch.stack([vec(t).float() * 3 for t in texts])


class ColourEncoder(StubEncoder):
    """Image embedding = mean RGB of the crop: s('man riding horse' = red) tells which pixels were cropped."""

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        self.image_calls.append(int(images.shape[0]))
        return torch.cat([images.mean((2, 3)), torch.zeros(images.shape[0], 1)], 1)

    def encode_text(self, texts: Sequence[str]) -> torch.Tensor:
        return torch.tensor([[1.0, 0.0, 0.0, 0.0] if t == 'man riding horse' else [0.0, 0.0, 1.0, 0.0]
                             for t in texts])


@pytest.fixture(scope='module')
def image_path(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp('img') / 'grey.png')
    Image.fromarray(np.full((64, 96, 3), 128, dtype=np.uint8)).save(path)
    return path


def box_row(i: int) -> List[float]:
    """Disjoint 10x10 GT boxes along x."""
    return [20.0 * i, 0.0, 20.0 * i + 10, 10.0]


def make_sample(idx: int, img_path: str, gt_labels: Sequence[int], rels: Sequence[tuple],
                pred_boxes: Optional[Sequence[Sequence[float]]] = None, pred_labels: Optional[Sequence[int]] = None,
                gt_rels: Sequence[tuple] = (), dense: bool = False, gt_boxes=None) -> dict:
    """``rels``: (subject, object, predicate, score) over predicted objects; predictions default to the GT boxes
    and labels. ``gt_rels``: (subject, object, predicate)."""
    gt_boxes = [box_row(i) for i in range(len(gt_labels))] if gt_boxes is None else gt_boxes
    pred_boxes = gt_boxes if pred_boxes is None else pred_boxes
    pred_labels = list(gt_labels) if pred_labels is None else pred_labels
    pairs = torch.tensor([[r[0], r[1]] for r in rels], dtype=torch.long).reshape(-1, 2)
    if dense:
        scores = torch.zeros(len(rels), len(PREDICATES) + 1)
        for j, r in enumerate(rels):
            scores[j, r[2] + 1] = r[3]
        pred_rel = dict(pair_idxs=pairs, scores=scores)
    else:
        pred_rel = dict(pair_idxs=pairs, scores=torch.tensor([r[3] for r in rels], dtype=torch.float32),
                        labels=torch.tensor([r[2] for r in rels], dtype=torch.long))
    return dict(
        sample_idx=idx, img_path=img_path, ori_shape=(64, 96),
        gt_instances=dict(bboxes=torch.tensor(gt_boxes, dtype=torch.float32).reshape(-1, 4),
                          labels=torch.tensor(gt_labels, dtype=torch.long)),
        gt_relations=dict(pair_idxs=torch.tensor([g[:2] for g in gt_rels], dtype=torch.long).reshape(-1, 2),
                          labels=torch.tensor([g[2] for g in gt_rels], dtype=torch.long)),
        pred_instances=dict(bboxes=torch.tensor(pred_boxes, dtype=torch.float32).reshape(-1, 4),
                            labels=torch.tensor(pred_labels, dtype=torch.long),
                            scores=torch.ones(len(pred_labels))),
        pred_relations=pred_rel)


def run_metric(samples: Sequence[dict], encoder=None, batch: int = 2, **kwargs) -> Dict[str, float]:
    metric = RelCLIPScore(encoder=encoder or StubEncoder(), **kwargs)
    metric.dataset_meta = META
    for i in range(0, len(samples), batch):
        metric.process({}, samples[i:i + batch])
    out = metric.evaluate(len(samples))
    return {k.split('/')[-1]: v for k, v in out.items()}


def expected_image(m: int, scores: Sequence[float], penalty: bool = True) -> float:
    """Hand formula of one image's RelCLIPScore (fraction)."""
    k = len(scores)
    if k == 0:
        return 0.0
    p = m * (m - 1) / 2
    divisor = max(math.log(max(p - k, 1)) + 1e-5, 1.0) if penalty else 1.0
    return sum(scores) / k / divisor


M, H, S = 0, 1, 2  # class indices man, horse, street
RIDING, ON, NEAR, HAS = 0, 1, 2, 3


# ------------------------------------------------------------------------------------------------ formula
def test_topk_matching_and_pair_deduplication(image_path):
    gt = [M, H, S]
    pred_boxes = [box_row(0),                    # p0 = g0 (IoU 1)
                  [21.0, 0.0, 31.0, 10.0],        # p1 -> g1 (IoU 0.818)
                  [1.0, 0.0, 11.0, 10.0],         # p2 -> g0 as well
                  [44.0, 0.0, 54.0, 10.0],        # p3: IoU 0.43 with g2 -> unmatched
                  [40.0, 0.0, 60.0, 10.0]]        # p4: IoU exactly 0.5 with g2 -> matched (>=)
    pred_labels = [M, H, M, S, S]
    rels = [(1, 4, NEAR, 0.3),   # r6: (g1, g2), only inside top-7
            (0, 3, NEAR, 0.6),   # r3: p3 unmatched
            (1, 0, ON, 0.7),     # r2: (g1, g0) reverse pair counts
            (0, 1, RIDING, 0.9),  # r0: (g0, g1)
            (0, 4, ON, 0.4),     # r5: (g0, g2)
            (2, 1, NEAR, 0.8),   # r1: (g0, g1) again -> dropped (worse rank than r0)
            (0, 2, NEAR, 0.5)]   # r4: both boxes on g0 -> dropped
    sample = make_sample(0, image_path, gt, rels, pred_boxes, pred_labels)
    top6 = ['man riding horse', 'horse on man', 'man on street']
    out = run_metric([sample], topk=6)
    assert out['CLIPScore'] == pytest.approx(100 * np.mean([s_of(t) for t in top6]), abs=1e-5)
    assert out['RelCLIPScore'] == pytest.approx(100 * expected_image(3, [s_of(t) for t in top6]), abs=1e-5)
    top7 = top6 + ['horse near street']
    out = run_metric([sample], topk=7)
    assert out['CLIPScore'] == pytest.approx(100 * np.mean([s_of(t) for t in top7]), abs=1e-5)
    out = run_metric([sample], topk=1)
    assert out['CLIPScore'] == pytest.approx(100 * s_of('man riding horse'), abs=1e-5)
    # p - k = 3 - 1 = 2 -> D = max(log 2 + alpha, 1) = 1
    assert out['RelCLIPScore'] == pytest.approx(out['CLIPScore'], abs=1e-9)
    # the given order instead of the score ranking: first relation is (p1 -> p4) 'horse near street'
    out = run_metric([sample], topk=1, rank='given')
    assert out['CLIPScore'] == pytest.approx(100 * s_of('horse near street'), abs=1e-5)


@pytest.mark.parametrize('m,k', [(2, 2), (3, 3), (3, 2), (3, 1), (4, 3), (5, 1), (6, 4)])
def test_penalty_guard(image_path, m, k):
    """p - k in {-1, 0, 1, 2, 3, 9, 11}: D = max(log(max(p - k, 1)) + 1e-5, 1)."""
    texts_by_pair = [((0, 1), 'man riding horse', RIDING), ((1, 0), 'horse on man', ON),
                     ((0, 2), 'man on street', ON), ((1, 2), 'horse near street', NEAR)]
    gt = [M, H, S] + [3] * (m - 3) if m >= 3 else [M, H]
    rels = [(a, b, pred, 1.0 - 0.1 * j) for j, ((a, b), _, pred) in enumerate(texts_by_pair[:k])]
    scores = [s_of(t) for _, t, _ in texts_by_pair[:k]]
    out = run_metric([make_sample(0, image_path, gt, rels)])
    p = m * (m - 1) / 2
    divisor = max(math.log(max(p - k, 1)) + 1e-5, 1.0)
    assert out['RelCLIPScore'] == pytest.approx(100 * np.mean(scores) / divisor, abs=1e-5)
    assert out['CLIPScore'] == pytest.approx(100 * np.mean(scores), abs=1e-5)
    assert float(penalty_divisor(torch.tensor([p]), torch.tensor([k]))) == pytest.approx(divisor, rel=1e-12)
    if p - k == 3:
        assert divisor == pytest.approx(math.log(3) + 1e-5)
    elif p - k <= 2:
        assert divisor == 1.0
    no_penalty = run_metric([make_sample(0, image_path, gt, rels)], penalty=False)
    assert no_penalty['RelCLIPScore'] == pytest.approx(no_penalty['CLIPScore'], abs=1e-12)


def test_small_images_skipped_and_empty_images_count(image_path):
    two = make_sample(0, image_path, [M, H], [(0, 1, RIDING, 0.9)])
    one = make_sample(1, image_path, [M], [(0, 0, RIDING, 0.9)])  # m = 1: skipped
    zero = make_sample(2, image_path, [], [], pred_boxes=[box_row(0), box_row(1)], pred_labels=[M, H])
    zero['pred_relations'] = dict(pair_idxs=torch.tensor([[0, 1]]), scores=torch.tensor([0.5]),
                                  labels=torch.tensor([RIDING]))  # m = 0: skipped
    none_counted = make_sample(3, image_path, [M, H, S], [(0, 0, NEAR, 0.9)])  # k = 0 -> 0, counts
    no_preds = make_sample(4, image_path, [M, H], [])  # no prediction at all -> 0, counts
    metric = RelCLIPScore(encoder=StubEncoder())
    metric.dataset_meta = META
    metric.process({}, [two, one, zero])
    metric.process({}, [none_counted, no_preds])
    out = metric.evaluate(5)
    assert metric.last_report['num_images'] == 3
    assert out['relclip/CLIPScore'] == pytest.approx(100 * s_of('man riding horse') / 3, abs=1e-5)
    assert out['relclip/RelCLIPScore'] == pytest.approx(100 * s_of('man riding horse') / 3, abs=1e-5)
    only_small = run_metric([one, zero])
    assert only_small == {'RelCLIPScore': 0.0, 'CLIPScore': 0.0, 'RefRelCLIPScore': 0.0}


def test_negative_cosine_clamped_and_dense_scores(image_path):
    rels = [(1, 0, ON, 0.9), (0, 1, RIDING, 0.8)]  # 'horse on man' has cos -0.2 -> s = 0
    dense = run_metric([make_sample(0, image_path, [M, H], rels, dense=True)])
    single = run_metric([make_sample(0, image_path, [M, H], rels)])
    assert dense == single
    assert dense['CLIPScore'] == pytest.approx(100 * (0.0 + 0.6) / 2, abs=1e-5)


def test_reference_variant(image_path):
    gt_rels = [(0, 1, RIDING), (0, 1, ON)]  # pair (g0, g1) annotated twice; (g1, g0) not annotated
    rels = [(0, 1, NEAR, 0.9), (1, 0, ON, 0.8)]
    with_ref = make_sample(0, image_path, [M, H, S], rels, gt_rels=gt_rels)
    a = s_of('man near horse')
    b = max(text_cos('man near horse', 'man riding horse'), text_cos('man near horse', 'man on horse'), 0.0)
    assert b == pytest.approx(text_cos('man near horse', 'man riding horse'))
    h = 2 * a * b / (a + b)
    no_ref = make_sample(1, image_path, [M, H], [(1, 0, ON, 0.9)], gt_rels=[(0, 1, RIDING)])
    # a GT pair whose only GT text is dissimilar (negative cosine): b = 0 -> harmonic mean 0
    clamp = make_sample(2, image_path, [M, H], [(0, 1, HAS, 0.9)], gt_rels=[(0, 1, ON)])
    assert text_cos('man has horse', 'man on horse') < 0
    out = run_metric([with_ref])
    assert out['RefRelCLIPScore'] == pytest.approx(100 * h, abs=1e-5)
    out = run_metric([with_ref, no_ref, clamp])
    assert out['RefRelCLIPScore'] == pytest.approx(100 * (h + 0.0 + 0.0) / 3, abs=1e-5)
    assert out['CLIPScore'] == pytest.approx(
        100 * (np.mean([a, s_of('horse on man')]) + s_of('horse on man') + s_of('man has horse')) / 3, abs=1e-5)


def test_predcls_keeps_duplicate_gt_boxes_distinct(image_path):
    gt_boxes = [box_row(0), box_row(0), box_row(1)]
    sample = make_sample(0, image_path, [M, H, S], [(0, 1, RIDING, 0.9), (2, 2, ON, 0.8)], gt_boxes=gt_boxes)
    sample.pop('pred_instances')
    out = run_metric([sample], mode='predcls')
    assert out['CLIPScore'] == pytest.approx(100 * s_of('man riding horse'), abs=1e-5)
    sgdet = run_metric([make_sample(0, image_path, [M, H, S], [(0, 1, RIDING, 0.9)], gt_boxes=gt_boxes)])
    assert sgdet['CLIPScore'] == 0.0  # in sgdet both boxes match the first GT box: same object, not counted
    with pytest.raises(ValueError, match='mode'):
        RelCLIPScore(encoder=StubEncoder(), mode='phrdet')


# ------------------------------------------------------------------------------------------------ machinery
def test_text_cache_chunks_and_single_decode(image_path, monkeypatch):
    from mmsgg_eval.metrics import relclip
    decoded = []
    original = relclip.decode_image
    monkeypatch.setattr(relclip, 'decode_image', lambda path, args=None: decoded.append(path) or original(path))
    stub = StubEncoder()
    rels = [(0, 1, RIDING, 0.9), (1, 0, ON, 0.8), (0, 2, ON, 0.7), (1, 2, NEAR, 0.6), (2, 0, NEAR, 0.5)]
    samples = [make_sample(i, image_path, [M, H, S], rels) for i in range(3)]
    run_metric(samples, encoder=stub, batch=3, batch_size=4)
    assert len(decoded) == 3  # one decode per image, not per relation
    assert stub.image_calls == [4, 4, 4, 3]  # 15 crops in chunks of batch_size
    encoded = [t for call in stub.text_calls for t in call]
    assert len(encoded) == len(set(encoded)) == 5  # each distinct string encoded once


def test_crops_come_from_the_right_image_and_region(tmp_path):
    left_red = np.zeros((40, 80, 3), dtype=np.uint8)
    left_red[:, :40, 0] = 255
    left_red[:, 40:, 2] = 255
    path_a = str(tmp_path / 'a.png')
    Image.fromarray(left_red).save(path_a)
    path_b = str(tmp_path / 'b.png')  # a different size, all blue
    blue = np.zeros((100, 30, 3), dtype=np.uint8)
    blue[..., 2] = 255
    Image.fromarray(blue).save(path_b)
    boxes = [[0.0, 0.0, 10.0, 10.0], [20.0, 20.0, 30.0, 30.0], [50.0, 0.0, 60.0, 10.0], [70.0, 20.0, 80.0, 40.0]]
    labels = [M, H, M, H]  # every text is 'man riding horse'
    left = make_sample(0, path_a, labels, [(0, 1, RIDING, 0.9)], gt_boxes=boxes)
    right = make_sample(1, path_a, labels, [(2, 3, RIDING, 0.9)], gt_boxes=boxes)
    other = make_sample(2, path_b, labels, [(0, 1, RIDING, 0.9)], gt_boxes=boxes)
    for s in (left, right, other):
        s['ori_shape'] = None
    out = run_metric([left, right, other], encoder=ColourEncoder(), batch=3, penalty=False)
    assert out['CLIPScore'] == pytest.approx(100 / 3, abs=1e-4)  # only the red crop scores 1
    # boxes given in a half-size ori_shape frame are rescaled to the file
    half = make_sample(0, path_a, labels, [(0, 1, RIDING, 0.9)],
                       gt_boxes=[[v / 2 for v in b] for b in boxes])
    half['ori_shape'] = (20, 40)
    with pytest.warns(UserWarning, match='ori_shape'):
        assert run_metric([half], encoder=ColourEncoder())['CLIPScore'] == pytest.approx(100, abs=1e-4)


def test_errors_name_sample_and_field(image_path):
    sample = make_sample(7, image_path, [M, H], [(0, 1, RIDING, 0.9)])
    sample.pop('img_path')
    with pytest.raises(ValueError, match=r'sample_idx=7.*img_path'):
        run_metric([sample])
    metric = RelCLIPScore(encoder=StubEncoder())
    with pytest.raises(ValueError, match='dataset_meta'):
        metric.process({}, [make_sample(0, image_path, [M, H], [])])
    with pytest.raises(ValueError, match='template'):
        RelCLIPScore(encoder=StubEncoder(), template='{subject} {verb}')


def test_registered_and_built_from_config():
    from mmsgg_eval.registry import METRICS
    metric = METRICS.build(dict(type='RelCLIPScore', encoder=StubEncoder(), topk=5, prefix='negclip'))
    assert isinstance(metric, RelCLIPScore) and metric.topk == 5 and metric.prefix == 'negclip'


# ------------------------------------------------------------------------------------------------ distributed
def dataset(image_path: str) -> List[dict]:
    pairs = [((0, 1), RIDING), ((1, 0), ON), ((0, 2), ON), ((1, 2), NEAR)]
    out = []
    for i in range(7):
        m = 2 + i % 4
        gt = [M, H, S, 3, 4][:m]
        rels = [(a, b, p, 1.0 - 0.1 * j) for j, ((a, b), p) in enumerate(pairs[:1 + i % 4]) if max(a, b) < m]
        out.append(make_sample(i, image_path, gt, rels, gt_rels=[(0, 1, i % 3)]))
    return out


def test_distributed_equals_single_process(image_path):
    """1 and 2 gloo ranks, 7 samples: the sampler pads sample 0 a second time (on rank 1); results are
    bit-identical."""
    case = Case((RelCLIPScore,), dict(encoder=StubEncoder()), dataset(image_path), META, {}, name='relclip',
                batch_size=2)
    check_metric([case], world_sizes=(1, 2), pool_samples=(None,), kernels=('torch',))


# ------------------------------------------------------------------------------------------------ real model
def test_end_to_end_with_tiny_open_clip(tmp_path):
    pytest.importorskip('open_clip')
    from open_clip.transform import PreprocessCfg, image_transform_v2

    from mmsgg_eval.encoders import build_encoder
    from tests.encoders.test_clip_encoders import make_openclip_dir, smooth_image
    encoder = build_encoder(dict(type='OpenCLIPEncoder',
                                 model_name=f'local-dir:{make_openclip_dir(str(tmp_path / "oc"))}'))
    paths = []
    for i, (h, w) in enumerate([(120, 160), (90, 90)]):
        paths.append(str(tmp_path / f'{i}.png'))
        Image.fromarray(smooth_image(h, w, i).permute(1, 2, 0).numpy()).save(paths[-1])
    boxes = [[0.0, 0.0, 40.0, 60.0], [30.0, 20.0, 80.0, 90.0], [50.0, 10.0, 88.0, 40.0]]
    rels = [(0, 1, RIDING, 0.9), (1, 2, NEAR, 0.8), (2, 0, ON, 0.7)]
    samples = [make_sample(i, p, [M, H, S], rels, gt_boxes=boxes, gt_rels=[(0, 1, ON)]) for i, p in enumerate(paths)]
    for s in samples:
        s['ori_shape'] = None
    # random weights give mostly negative cosines: score (cos + 1) / 2 so the comparison below is informative
    encoder.similarity_to_score = lambda cos: (cos + 1) / 2
    first = run_metric(samples, encoder=encoder, batch=2)
    assert run_metric(samples, encoder=encoder, batch=1) == pytest.approx(first, abs=1e-4)
    assert set(first) == {'RelCLIPScore', 'CLIPScore', 'RefRelCLIPScore'}
    assert 0 <= first['RelCLIPScore'] <= first['CLIPScore'] <= 100
    # straightforward reference: PIL crop of each union box + the model's own transform, one relation at a time
    transform = image_transform_v2(PreprocessCfg(**encoder.model.visual.preprocess_cfg), is_train=False)
    texts = ['man riding horse', 'horse near street', 'street on man']
    unions = [[0, 0, 80, 90], [30, 10, 88, 90], [0, 0, 88, 60]]
    per_image = []
    for path in paths:
        img = Image.open(path).convert('RGB')
        s = []
        for text, union in zip(texts, unions):
            with torch.no_grad():
                pixels = transform(img.crop(union))[None]
                e_img = torch.nn.functional.normalize(encoder.model.encode_image(pixels), dim=-1)
                e_txt = torch.nn.functional.normalize(encoder.encode_text([text]), dim=-1)
            s.append((float((e_img * e_txt).sum()) + 1) / 2)
        per_image.append(np.mean(s))
    assert first['CLIPScore'] == pytest.approx(100 * np.mean(per_image), abs=0.05)  # measured ~0.002


# ------------------------------------------------------------------------------------------------ own words
def with_texts(sample: dict, texts: Sequence[tuple], drop_labels: bool = True) -> dict:
    """Contract for open-vocabulary models: pred_relations.texts; predicate / object labels dropped."""
    sample = dict(sample, pred_relations=dict(sample['pred_relations'], texts=list(texts)))
    if drop_labels:
        sample['pred_relations'].pop('labels', None)
        sample['pred_instances'] = {k: v for k, v in sample['pred_instances'].items() if k != 'labels'}
    return sample


def test_texts_contract_scores_the_models_words(image_path):
    # words outside the vocabulary ('guy', 'leaning_against'), labels absent: s comes from the words only
    rels = [(0, 1, RIDING, 0.9), (0, 2, ON, 0.8)]
    base = make_sample(0, image_path, [M, H, S], rels, gt_rels=[(0, 1, RIDING)])
    sample = with_texts(base, [('guy', 'leaning_against', 'pony'), ('man', 'on', 'street')])
    out = run_metric([sample], penalty=False)
    s = [s_of('guy leaning against pony'), s_of('man on street')]
    assert out['CLIPScore'] == pytest.approx(100 * np.mean(s))
    b = max(text_cos('guy leaning against pony', 'man riding horse'), 0)  # GT text: dataset names
    a = s[0]
    assert out['RefRelCLIPScore'] == pytest.approx(100 * 2 * a * b / (a + b))
    # the same words as the dataset names give exactly the closed-vocabulary numbers
    same = with_texts(base, [('man', 'riding', 'horse'), ('man', 'on', 'street')])
    assert run_metric([same]) == pytest.approx(run_metric([base]))
    # text_source='closed' ignores the words
    assert run_metric([with_texts(base, [('guy', 'x', 'pony')] * 2, drop_labels=False)], text_source='closed') \
        == pytest.approx(run_metric([base]))


def test_texts_contract_errors(image_path):
    base = make_sample(3, image_path, [M, H], [(0, 1, RIDING, 0.9)])
    with pytest.raises(ValueError, match=r'sample_idx=3.*pred_relations.texts.*1 pairs'):
        run_metric([with_texts(base, [('a', 'b', 'c'), ('d', 'e', 'f')])])
    with pytest.raises(ValueError, match=r'sample_idx=3.*texts\[0\]'):
        run_metric([with_texts(base, ['man riding horse'])])
    with pytest.raises(ValueError, match=r"sample_idx=3.*text_source='open'"):
        run_metric([base], text_source='open')
    with pytest.raises(ValueError, match='text_source'):
        RelCLIPScore(encoder=StubEncoder(), text_source='words')


# VLM answers: the words of the model reach the text tower, objects of unknown class included
VLM_TEXTS = {'guy leaning against pony': [0.6, 0.8, 0.0, 0.0]}  # s = 0.6
GT_TEXT_VEC = [0.8, 0.0, 0.6, 0.0]  # every dataset-name text; cos with the VLM text = 0.48


class WordStubEncoder(StubEncoder):
    """Image embedding e0; text embeddings: VLM_TEXTS, else GT_TEXT_VEC."""

    def encode_text(self, texts: Sequence[str]) -> torch.Tensor:
        self.text_calls.append(list(texts))
        return torch.tensor([VLM_TEXTS.get(t, GT_TEXT_VEC) for t in texts], dtype=torch.float32)


def _register_word_stub():
    from mmsgg_eval.encoders import ENCODERS
    ENCODERS.register_module(name='WordStubEncoder', module=WordStubEncoder, force=True)


@pytest.fixture(scope='module')
def psg_sample(tmp_path_factory):
    from mmsgg_eval.datasets import PSGDataset
    from mmsgg_eval.testing import make_sample_data
    out = tmp_path_factory.mktemp('psg_sample')
    make_sample_data(str(out), datasets=['psg'])
    root = str(out / 'psg') + '/'
    return dict(root=root, dataset=PSGDataset(data_root=root, ann_file='psg.json', data_prefix=dict(img='coco/',
                                              seg='coco/'), split='test', with_masks=False, pipeline=[]))


def unique_relation(info: dict) -> Optional[tuple]:
    """A GT relation whose subject and object boxes differ from every other GT box (IoU matching is unambiguous)."""
    boxes = [tuple(inst['bbox']) for inst in info['instances']]
    for s, o, _ in np.asarray(info['relations']).tolist():
        if boxes.count(boxes[s]) == 1 and boxes.count(boxes[o]) == 1:
            return s, o
    return None


def vlm_answers(dataset, failed=(1,)) -> List[dict]:
    """One answer per image (pixel boxes): a GT relation's boxes, named in the model's own words; images in
    ``failed`` (and images without a usable relation) get an answer that is no graph."""
    lines = []
    for i in range(len(dataset)):
        info = dataset.get_data_info(i)
        pair = None if i in failed else unique_relation(info)
        if pair is None:
            lines.append({'sample_idx': i, 'output': 'I cannot tell.'})
            continue
        graph = {'objects': [{'id': 'guy.1', 'bbox': info['instances'][pair[0]]['bbox']},
                             {'id': 'pony.2', 'bbox': info['instances'][pair[1]]['bbox']}],
                 'relationships': [{'subject': 'guy.1', 'predicate': 'leaning_against', 'object': 'pony.2'}]}
        lines.append({'sample_idx': i, 'output': '```json\n' + json.dumps(graph) + '\n```'})
    return lines


def test_vlm_answers_offline_use_the_models_words(psg_sample, tmp_path):
    """Offline `--format vlm` with a config's vlm_evaluator: hand-derived RelCLIPScore / RefRelCLIPScore."""
    from mmsgg_eval.offline import evaluate_file
    _register_word_stub()
    dataset = psg_sample['dataset']
    path = tmp_path / 'answers.jsonl'
    path.write_text('\n'.join(json.dumps(x) for x in vlm_answers(dataset)))
    config = tmp_path / 'vlm_config.py'
    root = osp.abspath(osp.join(osp.dirname(__file__), '..', '..'))
    config.write_text(
        f"_base_ = ['{root}/configs/relclip/relclip_vlm_psg.py']\n"
        "vlm_evaluator = [dict(type='RelCLIPScore', encoder=dict(type='WordStubEncoder'), vlm=dict(canvas=None),\n"
        "                      rank='given', prefix='words'),\n"
        "                 dict(type='RelCLIPScore', encoder=dict(type='WordStubEncoder'), vlm=dict(canvas=None),\n"
        "                      text_source='closed', prefix='closed')]\n")
    res = evaluate_file(str(config), str(path), fmt='vlm', work_dir=str(tmp_path / 'out'), progress=False,
                        cfg_options={'test_dataloader.dataset.data_root': psg_sample['root']})
    s, b = 0.6, 0.48  # cos(e0, [0.6, 0.8, 0, 0]); cos([0.6, 0.8, 0, 0], [0.8, 0, 0.6, 0])
    ref = 2 * s * b / (s + b)
    n = len(dataset)
    answered = [i != 1 and unique_relation(dataset.get_data_info(i)) is not None for i in range(n)]
    assert sum(answered) >= 2
    per_image = []
    for i in range(n):
        m = len(dataset.get_data_info(i)['instances'])
        assert m >= 2
        per_image.append(s / max(math.log(max(m * (m - 1) / 2 - 1, 1)) + 1e-5, 1.0) if answered[i] else 0.0)
    assert res['words/CLIPScore'] == pytest.approx(100 * s * sum(answered) / n)
    assert res['words/RefRelCLIPScore'] == pytest.approx(100 * ref * sum(answered) / n)
    assert res['words/RelCLIPScore'] == pytest.approx(100 * np.mean(per_image))
    # closed vocabulary: 'guy' / 'pony' are no PSG classes, nothing can be scored
    assert res['closed/CLIPScore'] == 0.0 and res['closed/RefRelCLIPScore'] == 0.0


def test_vlm_parse_keeps_the_models_words():
    from mmsgg_eval.io.vlm import parse_vlm_output, to_data_sample
    text = json.dumps({'objects': [{'id': 'Traffic_Light.1', 'bbox': [0, 0, 10, 10]},
                                   {'id': 'o2', 'label': ' Horse ', 'bbox': [0, 0, 1000, 1000]}],
                       'relationships': [{'subject': 'Traffic_Light.1', 'predicate': 'Leaning-Against ',
                                          'object': 'o2'}]})
    result = parse_vlm_output(text, (100, 100), CLASSES, PREDICATES)
    assert result.object_words == ['Traffic_Light', 'Horse'] and result.predicate_words == ['Leaning-Against']
    assert result.names == ['traffic light', 'horse']  # normalised names unchanged
    sample = to_data_sample(result, dict(gt_instances=dict(bboxes=torch.zeros(0, 4), labels=torch.zeros(0)),
                                         gt_relations=dict(pair_idxs=torch.zeros(0, 2), labels=torch.zeros(0))))
    words = sample['open_vocab']
    assert words['pred_relations']['texts'] == [('Traffic_Light', 'Leaning-Against', 'Horse')]
    assert words['pred_instances']['bboxes'].shape == (2, 4)  # the unknown-class object is kept
    assert words['pred_relations']['labels'].tolist() == [-1]
    assert sample['pred_instances']['labels'].tolist() == [1, 0]  # closed-vocabulary part as before


# ------------------------------------------------------------------------------------------------ regions
def test_region_breakdown(image_path):
    # image 64 x 96 (diagonal sqrt(96^2 + 64^2)); GT boxes: 0 big, 1 small inside, 2 far right, 3 next to 0
    boxes = [[0.0, 0.0, 30.0, 30.0], [5.0, 5.0, 15.0, 15.0], [80.0, 40.0, 96.0, 64.0], [30.0, 0.0, 60.0, 30.0]]
    rels = [(0, 1, RIDING, 0.9), (0, 2, ON, 0.8), (0, 3, NEAR, 0.7)]
    sample = make_sample(0, image_path, [M, H, S, 3], rels, gt_boxes=boxes,
                         gt_rels=[(0, 1, RIDING), (0, 2, NEAR), (0, 3, NEAR)])
    out = run_metric([sample], region_breakdown=True)
    texts = ['man riding horse', 'man on street', 'man near dog']
    s = [s_of(t) for t in texts]
    gt_texts = ['man riding horse', 'man near street', 'man near dog']
    refs = []
    for t, g, a in zip(texts, gt_texts, s):
        b = max(text_cos(t, g), 0.0)
        refs.append(2 * a * b / (a + b) if a + b > 0 else 0.0)
    # ratios: 100/900 (low), 384/900 (high), 900/900 (high); distances / diagonal: small, far, 30 px
    diag = math.hypot(96, 64)
    dist = [math.hypot(5, 5) / diag, math.hypot(88 - 15, 52 - 15) / diag, 30 / diag]
    assert dist[1] >= 0.2 and dist[2] >= 0.2 and dist[0] < 0.2
    hits = [1.0, 0.0, 1.0]
    assert out['Precision'] == pytest.approx(100 * 2 / 3)
    assert out['CLIPScore@low_ratio'] == pytest.approx(100 * s[0])
    assert out['CLIPScore@high_ratio'] == pytest.approx(100 * (s[1] + s[2]) / 2)
    assert out['RefRelCLIPScore@high_ratio'] == pytest.approx(100 * (refs[1] + refs[2]) / 2)
    assert out['Precision@low_ratio'] == 100.0 and out['Precision@high_ratio'] == pytest.approx(50.0)
    assert out['CLIPScore@near'] == pytest.approx(100 * s[0]) and out['Precision@near'] == 100.0
    assert out['CLIPScore@far'] == pytest.approx(100 * (s[1] + s[2]) / 2)
    assert out['Precision@far'] == pytest.approx(100 * (hits[1] + hits[2]) / 2)
    # no relation in a group: NaN; default keys unchanged by the option
    assert math.isnan(run_metric([make_sample(0, image_path, [M, H], [(0, 1, RIDING, 0.9)],
                                              gt_boxes=[[0, 0, 10, 10], [10, 0, 20, 10]])],
                                 region_breakdown=True)['CLIPScore@low_ratio'])
    plain = run_metric([sample])
    assert set(plain) == {'RelCLIPScore', 'CLIPScore', 'RefRelCLIPScore'}
    assert all(out[k] == pytest.approx(v) for k, v in plain.items())


def test_named_variants():
    from mmsgg_eval.registry import METRICS
    blip = METRICS.build(dict(type='RelBLIPScore', encoder=StubEncoder()))
    siglip = METRICS.build(dict(type='RelSIGLIPScore', encoder=StubEncoder()))
    assert blip.prefix == 'relblip' and blip.key_names() == ('RelBLIPScore', 'BLIPScore', 'RefRelBLIPScore')
    assert siglip.prefix == 'relsiglip' and siglip.key_names()[0] == 'RelSIGLIPScore'
    with pytest.raises(FileNotFoundError, match='not a local directory'):
        METRICS.build(dict(type='RelBLIPScore', encoder='/nonexistent/blip2'))
    with pytest.raises(TypeError, match='string'):
        RelCLIPScore(encoder='ViT-B-32')


# ------------------------------------------------------------------------------------------------ configs
def all_pair_predictions(dataset, num_predicates: int) -> List[dict]:
    """JSONL predictions on the GT boxes: every ordered pair, seeded random [R, P + 1] scores."""
    rng = np.random.default_rng(0)
    records = []
    for i in range(len(dataset)):
        info = dataset.get_data_info(i)
        n = len(info['instances'])
        pairs = [[a, b] for a in range(n) for b in range(n) if a != b]
        records.append({'sample_idx': i,
                        'pred_instances': {'bboxes': [inst['bbox'] for inst in info['instances']],
                                           'labels': [inst['bbox_label'] for inst in info['instances']],
                                           'scores': [1.0] * n},
                        'pred_relations': {'pair_idxs': pairs,
                                           'scores': rng.random((len(pairs), num_predicates + 1)).tolist()}})
    return records


@pytest.mark.parametrize('config', ['relclip_negclip_psg', 'relsiglip_psg', 'relblip_psg'])
def test_configs_run_end_to_end_with_tiny_local_models(psg_sample, tmp_path, config):
    """configs/relclip/*: built from the config, a tiny random model loaded from a local path, offline JSONL."""
    from mmengine.config import Config

    from mmsgg_eval.offline import evaluate_file
    from mmsgg_eval.registry import METRICS
    from tests.encoders import test_clip_encoders as test_encoders
    if config == 'relclip_negclip_psg':
        pytest.importorskip('open_clip')
        model = test_encoders.make_openclip_dir(str(tmp_path / 'model'))
        options = {'test_evaluator.0.encoder.model_name': f'local-dir:{model}',
                   'test_evaluator.0.encoder.pretrained': None}
        keys, prefix = ('RelCLIPScore', 'CLIPScore', 'RefRelCLIPScore'), 'negclip'
    else:
        pytest.importorskip('transformers')
        if config == 'relblip_psg':
            model = test_encoders.make_blip2_dir(str(tmp_path / 'model'))
            keys, prefix = ('RelBLIPScore', 'BLIPScore', 'RefRelBLIPScore'), 'relblip'
        else:
            model = test_encoders.make_hf_dir(str(tmp_path / 'model'), 'siglip')
            keys, prefix = ('RelSIGLIPScore', 'SIGLIPScore', 'RefRelSIGLIPScore'), 'relsiglip'
        options = {'test_evaluator.0.encoder.model_path': model}
    options['test_dataloader.dataset.data_root'] = psg_sample['root']
    dataset = psg_sample['dataset']
    path = tmp_path / 'preds.jsonl'
    records = all_pair_predictions(dataset, len(dataset.metainfo['predicates']))
    path.write_text('\n'.join(json.dumps(r) for r in records))
    cfg_path = osp.join(osp.abspath(osp.join(osp.dirname(__file__), '..', '..')), 'configs', 'relclip', f'{config}.py')
    res = evaluate_file(cfg_path, str(path), work_dir=str(tmp_path / 'out'), cfg_options=options, progress=False)
    assert set(res) == {f'{prefix}/{k}' for k in keys}
    assert all(0.0 <= v <= 100.0 for v in res.values()) and res[f'{prefix}/{keys[1]}'] > 0
    # the same metric fed directly (no offline machinery) gives the same numbers
    cfg = Config.fromfile(cfg_path)
    cfg.merge_from_dict(options)
    metric = METRICS.build(cfg.test_evaluator[0])
    metric.dataset_meta = dataset.metainfo
    from mmsgg_eval.io.vlm import gt_from_data_info
    samples = []
    for r in records:
        s = gt_from_data_info(dict(dataset.get_data_info(r['sample_idx']), sample_idx=r['sample_idx']))
        s.update({k: {kk: np.asarray(vv) for kk, vv in v.items()} for k, v in r.items() if isinstance(v, dict)})
        samples.append(s)
    metric.process({}, samples)
    assert metric.evaluate(len(samples)) == pytest.approx(res, abs=1e-6)


def test_shipped_vlm_config_with_tiny_negclip(psg_sample, tmp_path):
    """configs/relclip/relclip_vlm_psg.py as shipped (VLMSceneGraphMetric + RelCLIPScore with region keys), the
    NegCLIP checkpoint replaced by a tiny local open_clip model."""
    pytest.importorskip('open_clip')
    from mmsgg_eval.offline import evaluate_file
    from tests.encoders import test_clip_encoders as test_encoders
    model = test_encoders.make_openclip_dir(str(tmp_path / 'model'))
    dataset = psg_sample['dataset']
    answers = []
    for line in vlm_answers(dataset, failed=()):  # pixel boxes -> the 0-1000 canvas of the shipped config
        info = dataset.get_data_info(line['sample_idx'])
        if line['output'].startswith('```'):
            graph = json.loads(line['output'][len('```json\n'):-len('\n```')])
            for obj in graph['objects']:
                x1, y1, x2, y2 = obj['bbox']
                obj['bbox'] = [x1 / info['width'] * 1000, y1 / info['height'] * 1000, x2 / info['width'] * 1000,
                               y2 / info['height'] * 1000]
            line = dict(line, output=json.dumps(graph))
        answers.append(line)
    path = tmp_path / 'answers.jsonl'
    path.write_text('\n'.join(json.dumps(x) for x in answers))
    root = osp.abspath(osp.join(osp.dirname(__file__), '..', '..'))
    res = evaluate_file(osp.join(root, 'configs', 'relclip', 'relclip_vlm_psg.py'), str(path), fmt='vlm',
                        work_dir=str(tmp_path / 'out'), progress=False,
                        cfg_options={'test_dataloader.dataset.data_root': psg_sample['root'],
                                     'vlm_evaluator.1.encoder.model_name': f'local-dir:{model}',
                                     'vlm_evaluator.1.encoder.pretrained': None})
    assert res['vlm/FailureRate'] == 0.0 and 0.0 <= res['negclip/CLIPScore'] <= 100.0  # random weights: ~0
    assert {'negclip/Precision', 'negclip/CLIPScore@low_ratio', 'negclip/RefRelCLIPScore@far'} <= set(res)


def words_dataset(image_path: str) -> List[dict]:
    """The distributed dataset, half of it in the texts contract (model words), varied box geometry."""
    out = []
    for i, s in enumerate(dataset(image_path)):
        if i % 2:
            words = [('guy', 'leaning_against', 'pony')] + [('man', 'on', 'street')] * 3
            s = with_texts(s, words[:s['pred_relations']['pair_idxs'].shape[0]])
        out.append(s)
    return out


def test_distributed_equals_single_process_with_words_and_regions(image_path):
    """1 and 3 gloo ranks, 7 samples (uneven shards, padding duplicates), words + region rows: identical results."""
    case = Case((RelCLIPScore,), dict(encoder=StubEncoder(), region_breakdown=True), words_dataset(image_path), META,
                {}, name='relclip words + regions', batch_size=2)
    single = check_metric([case], world_sizes=(1, 3), pool_samples=(None,), kernels=('torch',))[0]
    assert single['Precision'] == single['Precision']  # not NaN: some relations carry a GT relation


# ------------------------------------------------------------------------------- functional parts (clip_score)
def _loop_counted(sample: dict, mode: str, topk: int, iou_thr: float, rank: str) -> List[tuple]:
    """Reference, one image, from the definitions: (position in the ranked list, pair index, GT subject, GT
    object) of every counted relation. Triplet score = best predicate score x subject score x object score
    (float32; PredCls: object scores 1), stable descending (or the given order); a box's GT object is the first
    GT box of highest IoU when that IoU >= ``iou_thr`` (sgdet) or the box itself (sgcls / predcls)."""
    rel, inst = sample['pred_relations'], sample['pred_instances']
    pairs = rel['pair_idxs'].tolist()
    scores = rel['scores']
    best = scores[:, 1:].max(1).values if scores.dim() == 2 else scores
    obj_scores = torch.ones(len(sample['gt_instances']['labels'])) if mode == 'predcls' else inst['scores'].float()
    triplet = [float(best[j].float() * obj_scores[a] * obj_scores[b]) for j, (a, b) in enumerate(pairs)]
    ranked = list(range(len(pairs))) if rank == 'given' else \
        sorted(range(len(pairs)), key=lambda j: -triplet[j])  # sorted() is stable
    gt_boxes = sample['gt_instances']['bboxes'].tolist()

    def gt_of(i):
        if mode != 'sgdet':
            return i
        box = inst['bboxes'][i].tolist()
        best_iou, best_g = -1.0, None
        for g, gb in enumerate(gt_boxes):
            iw = max(min(box[2], gb[2]) - max(box[0], gb[0]), 0.0)
            ih = max(min(box[3], gb[3]) - max(box[1], gb[1]), 0.0)
            union = (box[2] - box[0]) * (box[3] - box[1]) + (gb[2] - gb[0]) * (gb[3] - gb[1]) - iw * ih
            iou = iw * ih / union if union > 0 else 0.0
            if iou > best_iou:
                best_iou, best_g = iou, g
        return best_g if best_g is not None and best_iou >= iou_thr else None

    out, seen = [], set()
    for position, j in enumerate(ranked[:topk]):
        gs, go = gt_of(pairs[j][0]), gt_of(pairs[j][1])
        if gs is None or go is None or gs == go or (gs, go) in seen:
            continue
        seen.add((gs, go))
        out.append((position, j, gs, go))
    return out


def _random_relclip_samples(rng, num_images: int, image: str) -> List[dict]:
    samples = []
    for i in range(num_images):
        m = int(rng.integers(0, 7))
        xy = rng.uniform(0, 60, (m, 2))
        gt_boxes = np.concatenate([xy, xy + rng.uniform(8, 40, (m, 2))], 1)
        n = int(rng.integers(max(m - 1, 0), m + 1))
        # mostly a jittered copy of GT box i (some of another GT box: two boxes on one GT object), some far off
        src = np.where(rng.random(n) < 0.8, np.arange(n), rng.integers(0, max(m, 1), n))
        pred_boxes = gt_boxes[src] + rng.normal(0, 1.5, (n, 4)) if m else np.zeros((0, 4))
        pred_boxes[rng.random(n) < 0.15] += 40
        pred_boxes[:, 2:] = np.maximum(pred_boxes[:, 2:], pred_boxes[:, :2] + 1)
        rels = [(int(rng.integers(0, n)), int(rng.integers(0, n)), int(rng.integers(0, len(PREDICATES))),
                 float(rng.choice([0.25, 0.5, 0.75]))) for _ in range(int(rng.integers(0, 16)) if n else 0)]
        sample = make_sample(i, image, rng.integers(0, len(CLASSES), m).tolist(), rels,
                             pred_boxes=pred_boxes.tolist(), pred_labels=rng.integers(0, len(CLASSES), n).tolist(),
                             dense=bool(rng.random() < 0.5), gt_boxes=gt_boxes.tolist())
        sample['pred_instances']['scores'] = torch.tensor(rng.choice([0.5, 1.0], n), dtype=torch.float32)
        samples.append(sample)
    return samples


@pytest.mark.parametrize('seed', range(4))
def test_counted_relations_equal_a_loop_reference(image_path, seed):
    from mmsgg_eval.functional.clip_score import counted_relations
    from mmsgg_eval.structures import collate_scene_graphs
    rng = np.random.default_rng(seed)
    samples = _random_relclip_samples(rng, 7, image_path)
    for mode in ('sgdet', 'sgcls', 'predcls'):
        batch = collate_scene_graphs(samples, mode, len(CLASSES), len(PREDICATES))
        for rank, topk in (('score', 4), ('given', 3), ('score', 50)):
            counted, order, _, gt_sub, gt_obj = counted_relations(batch, topk, mode, 0.5, rank)
            for b, sample in enumerate(samples):
                got = [(p, int(order[b, p]), int(gt_sub[b, p]), int(gt_obj[b, p]))
                       for p in counted[b].nonzero().flatten().tolist()]
                assert got == _loop_counted(sample, mode, topk, 0.5, rank), (seed, mode, rank, b)


def test_image_scores_and_region_groups_follow_their_definitions():
    from mmsgg_eval.functional.clip_score import harmonic_mean, image_scores, region_groups
    m, k = torch.tensor([2, 5, 7, 3]), torch.tensor([1, 0, 4, 3])
    sums, n_ref, ref = torch.tensor([0.5, 0.0, 2.0, 1.5], dtype=torch.float64), torch.tensor([1, 0, 2, 0]), \
        torch.tensor([0.25, 0.0, 1.0, 0.0], dtype=torch.float64)
    rel, mean_s, mean_ref = image_scores(m, k, sums, n_ref, ref, alpha=1e-5)
    for i in range(4):
        p, mi, ki = m[i] * (m[i] - 1) / 2, float(sums[i]) / int(k[i]) if int(k[i]) else 0.0, int(k[i])
        divisor = max(math.log(max(float(p) - ki, 1)) + 1e-5, 1)
        assert float(mean_s[i]) == pytest.approx(mi, rel=1e-15) and float(rel[i]) == pytest.approx(mi / divisor)
        assert float(mean_ref[i]) == (float(ref[i]) / int(n_ref[i]) if int(n_ref[i]) else 0.0)
    assert torch.equal(image_scores(m, k, sums, n_ref, ref, penalty=False)[0], mean_s)
    assert harmonic_mean(torch.tensor([0.0, 0.5]), torch.tensor([0.0, 1.0])).tolist() == pytest.approx([0, 2 / 3])
    groups = region_groups(torch.tensor([0.1, 0.2, 0.9]), torch.tensor([0.5, 0.1, 0.2]), 0.2, 0.2)
    assert {g: v.tolist() for g, v in groups.items()} == {
        'low_ratio': [True, False, False], 'high_ratio': [False, True, True],
        'near': [False, True, False], 'far': [True, False, True]}
