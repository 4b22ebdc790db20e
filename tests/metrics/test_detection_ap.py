"""DetectionAP / functional COCO AP equal pycocotools' COCOeval (randomized), across ranks and pool sizes."""
import contextlib
import io

import numpy as np
import pytest
import torch

from mmsgg_eval.functional.detection import coco_box_iou, coco_match_detections, coco_precision, coco_summary
from mmsgg_eval.metrics.detection import DetectionAP
from tests.metric_tester import Case, check_metric

pytest.importorskip('pycocotools')

NUM_CLASSES = 4
META = dict(classes=tuple(f'c{i}' for i in range(NUM_CLASSES)), dataset_name='toy')


def random_samples(seed, num_images, max_gt=6, max_det=9, huge=False):
    """Detections jittered around GT boxes (plus noise), tied scores, empty images, few classes."""
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(num_images):
        n_gt = int(rng.integers(0, max_gt + 1))
        xy = rng.uniform(0, 200, (n_gt, 2))
        wh = rng.uniform(0, 80, (n_gt, 2)) * (rng.uniform(size=(n_gt, 1)) > 0.05)  # a few empty boxes
        gt = np.concatenate([xy, xy + wh], 1).astype(np.float32)
        if huge and n_gt and rng.uniform() < 0.3:
            gt[0] = [0, 0, 2e5, 2e5]  # area above COCO's 'all' range: an ignored GT box
        gt_labels = rng.integers(0, NUM_CLASSES, n_gt)
        n_det = int(rng.integers(0, max_det + 1))
        src = rng.integers(0, max(n_gt, 1), n_det)
        base = gt[src] if n_gt else rng.uniform(0, 200, (n_det, 4)).astype(np.float32)
        det = base + rng.normal(0, 6, (n_det, 4)).astype(np.float32)
        det[:, 2:] = np.maximum(det[:, 2:], det[:, :2])
        det = np.where(rng.uniform(size=(n_det, 1)) < 0.2, rng.uniform(0, 200, (n_det, 4)), det)
        det[:, 2:] = np.maximum(det[:, 2:], det[:, :2])
        det_labels = np.where(rng.uniform(size=n_det) < 0.8, gt_labels[src] if n_gt else 0,
                              rng.integers(0, NUM_CLASSES, n_det))
        scores = np.round(rng.uniform(0, 1, n_det), 1).astype(np.float32)  # many ties
        samples.append(dict(sample_idx=i, img_id=1000 + i,
                            gt_instances=dict(bboxes=torch.tensor(gt), labels=torch.tensor(gt_labels)),
                            pred_instances=dict(bboxes=torch.tensor(det.astype(np.float32)),
                                                labels=torch.tensor(det_labels), scores=torch.tensor(scores))))
    return samples


def cocoeval_reference(samples, plus_one, legacy, max_dets=(1, 10, 100)):
    """pycocotools on the samples: legacy = GT ids from 0 and float32 detection sizes (the legacy evaluator)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval
    extra = 1.0 if plus_one else 0.0
    anns, dets = [], []
    for s in samples:
        for box, lab in zip(s['gt_instances']['bboxes'].tolist(), s['gt_instances']['labels'].tolist()):
            anns.append({'area': (box[3] - box[1] + extra) * (box[2] - box[0] + extra),
                         'bbox': [box[0], box[1], box[2] - box[0] + extra, box[3] - box[1] + extra],
                         'category_id': lab, 'id': len(anns) + (0 if legacy else 1), 'image_id': s['sample_idx'],
                         'iscrowd': 0})
        p = s['pred_instances']
        b = p['bboxes'].float() if legacy else p['bboxes'].double()
        wh = (b[:, 2:] - b[:, :2] + extra).double()
        for xy, size, score, lab in zip(b[:, :2].double().tolist(), wh.tolist(), p['scores'].tolist(),
                                        p['labels'].tolist()):
            dets.append({'image_id': s['sample_idx'], 'category_id': lab, 'bbox': xy + size, 'score': score})
    gt = COCO()
    gt.dataset = {'images': [{'id': s['sample_idx']} for s in samples], 'annotations': anns,
                  'categories': [{'id': c, 'name': str(c)} for c in range(NUM_CLASSES)]}
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
        dt = gt.loadRes(dets) if dets else COCO()
        ev = COCOeval(gt, dt, 'bbox')
        ev.params.imgIds = [s['sample_idx'] for s in samples]
        ev.params.maxDets = list(max_dets)
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return ev


def run_metric(samples, batch_size=3, **kwargs):
    metric = DetectionAP(**kwargs)
    metric.dataset_meta = META
    for start in range(0, len(samples), batch_size):
        metric.process({}, samples[start:start + batch_size])
    return metric.evaluate(len(samples))


@pytest.mark.parametrize('seed', range(6))
@pytest.mark.parametrize('plus_one,legacy', [(True, True), (False, False), (True, False)])
def test_equals_cocoeval(seed, plus_one, legacy):
    samples = random_samples(seed, 12, huge=seed % 2 == 0)
    ev = cocoeval_reference(samples, plus_one, legacy)
    ours = run_metric(samples, iou_plus_one=plus_one, legacy_quirks=legacy, pool_samples=1 + seed % 4)
    assert ours['sgdet/mAP'] == 100.0 * ev.stats[0]
    assert ours['sgdet/AP@50'] == 100.0 * ev.stats[1]


@pytest.mark.parametrize('seed', range(3))
def test_precision_table_equals_cocoeval(seed):
    """The whole [T, R, K] precision table (area 'all', maxDets 100), not only its means; maxDets per class."""
    samples = random_samples(100 + seed, 15, max_det=14)
    for max_dets, column in ((100, 2), (2, 1)):  # the top-2 per image and class: pycocotools' maxDets=2 column
        ev = cocoeval_reference(samples, False, False, max_dets=(1, 2, 100))
        metric = DetectionAP(iou_plus_one=False, legacy_quirks=False, max_dets=max_dets)
        metric.dataset_meta = META
        metric.process({}, samples)
        metric.flush()
        tables = metric.accumulator.reduce_to_cpu(None, 'test')
        d, g = tables['detections'], tables['gt']
        counts = torch.zeros(NUM_CLASSES, dtype=torch.long).scatter_add_(0, g['label'].long(), g['count'].long())
        ours = coco_precision(d['score'], d['label'], d['matched'], d['ignored'], counts)
        np.testing.assert_array_equal(ours, ev.eval['precision'][:, :, :, 0, column])
        if max_dets == 100:
            assert coco_summary(ours)['mAP'] == ev.stats[0]


def test_iou_is_bit_identical_to_pycocotools():
    from pycocotools import mask as mask_utils
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 300, (20, 4)).astype(np.float32)
    a[:, 2:] = a[:, :2] + rng.uniform(0, 100, (20, 2)).astype(np.float32)
    b = a[rng.permutation(20)[:7]] + rng.normal(0, 5, (7, 4)).astype(np.float32)
    b[:, 2:] = np.maximum(b[:, 2:], b[:, :2])
    for plus_one in (False, True):
        e = 1.0 if plus_one else 0.0
        xywh = lambda x: [[r[0], r[1], r[2] - r[0] + e, r[3] - r[1] + e] for r in x.astype(np.float64).tolist()]
        ref = mask_utils.iou(xywh(a), xywh(b), [0] * len(b))
        ours = coco_box_iou(torch.tensor(a), torch.tensor(b), plus_one).numpy()
        np.testing.assert_array_equal(ours, ref)


def test_legacy_quirks_change_what_they_say():
    """Annotation id 0 (first GT box of sample 0): a perfect detection of it is a false positive."""
    box = torch.tensor([[10.0, 10.0, 50.0, 60.0]])
    samples = [dict(sample_idx=0, gt_instances=dict(bboxes=box, labels=torch.tensor([1])),
                    pred_instances=dict(bboxes=box.clone(), labels=torch.tensor([1]), scores=torch.tensor([0.9])))]
    assert run_metric(samples, legacy_quirks=False)['sgdet/AP@50'] == pytest.approx(100.0)  # 1 / (1 + eps)
    assert run_metric(samples, legacy_quirks=True)['sgdet/AP@50'] == 0.0
    ev = cocoeval_reference(samples, False, True)
    assert ev.stats[1] == 0.0


def test_report_line_says_whether_the_legacy_quirk_is_on():
    """The one-line report names the quirk and how to turn it off (the default reproduces the legacy numbers)."""
    box = torch.tensor([[10.0, 10.0, 50.0, 60.0]])
    samples = [dict(sample_idx=0, gt_instances=dict(bboxes=box, labels=torch.tensor([1])),
                    pred_instances=dict(bboxes=box.clone(), labels=torch.tensor([1]), scores=torch.tensor([0.9])))]
    lines = {}
    for legacy in (True, False):
        metric = DetectionAP(legacy_quirks=legacy)
        metric.dataset_meta = META
        metric.process({}, samples)
        metric.evaluate(1)
        lines[legacy] = metric.last_report['text']
    assert 'legacy quirks on' in lines[True] and 'legacy_quirks=False for plain COCO' in lines[True]
    assert lines[False].endswith('(plain COCO (legacy_quirks=False))')
    assert DetectionAP().legacy_quirks  # the default stays the legacy evaluator's numbers


def test_padding_duplicates_and_pool_sizes_do_not_change_results():
    samples = random_samples(7, 11)
    once = run_metric(samples, pool_samples=256)
    assert run_metric(samples + samples[:4], pool_samples=2) == once
    assert run_metric(samples[::-1], pool_samples=5) == once  # order of processing: irrelevant (sample_idx)


def test_world_sizes_and_pools_equal_single_process_and_cocoeval():
    """1, 2 and 3 gloo ranks (uneven shards of 13 images) and pool sizes 1 / 3 give the same keys, which are
    pycocotools' numbers (the defaults: no +1, the legacy quirks)."""
    samples = random_samples(3, 13)
    ev = cocoeval_reference(samples, False, True)
    case = Case((DetectionAP,), {}, samples, META, {'mAP': 100.0 * ev.stats[0], 'AP@50': 100.0 * ev.stats[1]},
                name='DetectionAP seed 3', batch_size=2)
    single = check_metric([case], world_sizes=(1, 2, 3), pool_samples=(3, 1), kernels=('torch',))[0]
    assert single['AP@50'] > 0


def test_bad_inputs_name_the_sample_and_field():
    samples = random_samples(0, 2)
    bad = dict(samples[1], pred_instances=dict(samples[1]['pred_instances'], labels=torch.tensor([7] * 9)[:len(
        samples[1]['pred_instances']['scores'])]))
    if len(bad['pred_instances']['scores']):
        with pytest.raises(ValueError, match=r'sample_idx=1.*pred_instances.labels'):
            run_metric([bad])
    missing = dict(samples[0])
    missing.pop('pred_instances')
    with pytest.raises(ValueError, match=r'sample_idx=0.*pred_instances.bboxes'):
        run_metric([missing])
    metric = DetectionAP()
    with pytest.raises(ValueError, match='classes'):
        metric.process({}, samples)


def test_functional_shapes_on_an_empty_batch():
    z = torch.zeros
    out = coco_match_detections(z(1, 0, 4), z(1, 0), z(1, 0, dtype=torch.long), z(1, 0, dtype=torch.bool),
                                z(1, 0, 4), z(1, 0, dtype=torch.long), z(1, 0, dtype=torch.bool), NUM_CLASSES)
    assert out['matched'].shape == (1, 0, 10) and int(out['gt_counts'].sum()) == 0


def test_report_files_keep_their_names_and_are_never_overwritten(tmp_path):
    """report_dir: ``{prefix}.detection.metrics.json`` (keys and counts) and its tables; a second DetectionAP of
    the same run and prefix (other settings) writes ``{prefix}.detection.2.*`` instead of overwriting them."""
    import json
    import warnings
    samples = random_samples(4, 7)
    first, second = DetectionAP(report_dir=str(tmp_path)), DetectionAP(report_dir=str(tmp_path), max_dets=1)
    results = []
    for metric in (first, second):
        metric.dataset_meta = META  # one dataset_meta object, as an Evaluator gives its metrics
        metric.process({}, samples)
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            results.append(metric.evaluate(len(samples)))
    kept_all = sum(len(s['pred_instances']['scores']) for s in samples)  # at most 9 per image: all kept
    kept_one = sum(len(set(s['pred_instances']['labels'].tolist())) for s in samples)  # one per image and class
    for stem, result, kept in (('sgdet.detection', results[0], kept_all),
                               ('sgdet.detection.2', results[1], kept_one)):
        saved = json.load(open(tmp_path / f'{stem}.metrics.json'))
        assert saved['metrics'] == {'mAP': result['sgdet/mAP'], 'AP@50': result['sgdet/AP@50']}
        assert (saved['num_images'], saved['num_detections']) == (7, kept)
        assert saved['num_gt_boxes'] == sum(len(s['gt_instances']['labels']) for s in samples)
        assert (tmp_path / f'{stem}.tables.main.csv').exists()
    assert results[0] != results[1]  # max_dets=1 keeps fewer detections
    assert first.last_report['text'].startswith('Detection AP (toy, 7 images')


def test_the_first_bad_sample_of_a_pool_is_named():
    """A pool is validated at once; the error is the one reading its samples in order finds first (a value rule
    of an earlier sample before a missing field or a count mismatch of a later one, and the other way round)."""
    samples = [s for s in random_samples(5, 8) if len(s['pred_instances']['scores'])][:3]
    assert len(samples) == 3
    nan_scores = dict(samples[0], pred_instances=dict(samples[0]['pred_instances'],
                                                      scores=samples[0]['pred_instances']['scores'] * float('nan')))
    no_gt = {k: v for k, v in samples[1].items() if k != 'gt_instances'}
    short = dict(samples[2], pred_instances=dict(samples[2]['pred_instances'],
                                                 labels=samples[2]['pred_instances']['labels'][:0]))
    name = lambda s: f"sample_idx={s['sample_idx']}"  # noqa: E731
    for pool, sample, field in (([nan_scores, no_gt], nan_scores, 'pred_instances.scores'),
                                ([no_gt, nan_scores], no_gt, 'gt_instances.bboxes'),
                                ([samples[1], short, nan_scores], short, 'pred_instances.labels'),
                                ([samples[1], nan_scores, short], nan_scores, 'pred_instances.scores')):
        with pytest.raises(ValueError, match=rf"{name(sample)}\b.*{field}"):
            run_metric(pool, batch_size=len(pool))


def test_a_pool_of_plain_tensors_reads_as_other_containers_do():
    """The pool reader takes dict samples of tensors as they are; other containers (numpy arrays, lists, a tensor
    that needs a gradient) go through the per-sample reader: the same padded pool either way."""
    from mmsgg_eval.metrics.detection import _plain_fields, read_pool
    samples = random_samples(9, 7)
    assert _plain_fields(samples) is not None
    others = []
    for i, s in enumerate(samples):
        pred, gt = s['pred_instances'], s['gt_instances']
        converted = dict(s, pred_instances=dict(bboxes=pred['bboxes'].numpy(), labels=pred['labels'].tolist(),
                                                scores=pred['scores'].clone().requires_grad_(i == 3)),
                         gt_instances=dict(bboxes=gt['bboxes'].tolist(), labels=gt['labels'].numpy()))
        others.append(converted)
    assert _plain_fields(others) is None
    want, got = read_pool(others, NUM_CLASSES), read_pool(samples, NUM_CLASSES)
    assert want.keys() == got.keys()
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(got[key], value.detach().to(got[key].dtype)), key  # (lists read as float64)
        else:
            assert got[key] == value, key


def test_the_score_order_by_integer_keys_equals_the_float_sort():
    """COCOeval.accumulate's mergesort of -score, taken on order-preserving int64 keys: the same permutation,
    ties (+0.0 / -0.0 included) in row order, at every magnitude."""
    from mmsgg_eval.functional.detection import _sortable_key64
    g = torch.Generator().manual_seed(0)
    for i in range(60):
        values = torch.cat([torch.randn(500, dtype=torch.float64, generator=g) * 10.0 ** (i * 10 - 300),
                            torch.randint(0, 5, (300,), generator=g).double() / 4,
                            torch.tensor([0.0, -0.0, float('inf'), -float('inf'), 5e-324, -5e-324, 1.0, 1.0],
                                         dtype=torch.float64)])
        values = values[torch.randperm(values.numel(), generator=g)]
        assert torch.equal(torch.sort(~_sortable_key64(values), stable=True).indices,
                           torch.sort(-values, stable=True).indices), i


def _with_values(sample, group, key, values):
    return dict(sample, **{group: dict(sample[group], **{key: values})})


@pytest.mark.parametrize('seed', range(4))
def test_the_compiled_pool_reading_equals_the_general_one(seed):
    """read_pool by the compiled padding (one call per field, the value rules read while copying) against the
    general reading (kernels off): the same padded pool, masks and sample ids on random pools (empty images, pools
    of equal lengths, boxes with x2 < x1 and negative scores, which DetectionAP accepts though the padding's own
    rule flags them), and the same error naming the same sample and field for each value DetectionAP refuses."""
    from mmsgg_eval.functional import compiled
    from mmsgg_eval.metrics.detection import _compiled_pool, read_pool
    if not compiled.built():
        pytest.skip('the compiled kernels (mmsgg_eval._ext) are not built')
    samples = random_samples(seed, 9)
    flipped = samples[2]['pred_instances']['bboxes'][:, [2, 1, 0, 3]].contiguous()  # x2 < x1: accepted
    samples[2] = _with_values(samples[2], 'pred_instances', 'bboxes', flipped)
    samples[4] = _with_values(samples[4], 'pred_instances', 'scores', -samples[4]['pred_instances']['scores'])
    equal = [_with_values(_with_values(_with_values(s, 'pred_instances', 'bboxes', torch.ones(3, 4)),
                                       'pred_instances', 'labels', torch.tensor([0, 1, 2])),
                          'pred_instances', 'scores', torch.tensor([0.5, 0.25, 0.5])) for s in samples[:3]]
    empty = [_with_values(_with_values(_with_values(s, 'pred_instances', 'bboxes', torch.zeros(0, 4)),
                                       'pred_instances', 'labels', torch.zeros(0, dtype=torch.long)),
                          'pred_instances', 'scores', torch.zeros(0)) for s in samples[:2]]
    for pool in (samples, equal, empty, samples[:1]):
        assert _compiled_pool(pool) is not None  # (the compiled reading did read it)
        got = read_pool(pool, NUM_CLASSES)
        with compiled.disabled():
            want = read_pool(pool, NUM_CLASSES)
        assert got.keys() == want.keys()
        for key, value in want.items():
            if isinstance(value, torch.Tensor):
                assert got[key].dtype == value.dtype and torch.equal(got[key], value), key
            else:
                assert got[key] == value, key
    nan = float('nan')
    refused = [('pred_instances', 'labels', lambda v: torch.full_like(v, NUM_CLASSES)),
               ('gt_instances', 'labels', lambda v: v - 5),
               ('gt_instances', 'bboxes', lambda v: v * float('inf')),
               ('pred_instances', 'bboxes', lambda v: v * nan),
               ('pred_instances', 'scores', lambda v: v * nan)]
    clean = random_samples(seed, 9)  # (no entry the padding's stricter rule flags: each refusal is the only one)
    for group, key, change in refused:
        at = next(i for i, s in enumerate(clean) if i > 2 and s[group][key].numel())
        pool = list(clean)
        pool[at] = _with_values(pool[at], group, key, change(pool[at][group][key]))
        messages = []
        for off in (False, True):
            with compiled.disabled() if off else contextlib.nullcontext():
                with pytest.raises(ValueError, match=rf"sample_idx={at}\b.*{group}.{key}") as err:
                    read_pool(pool, NUM_CLASSES)
            messages.append(str(err.value))
        assert messages[0] == messages[1]


def test_numpy_pools_take_the_compiled_reading():
    """A pool whose fields are numpy arrays (read-only ones among them) is read by the compiled padding, in place,
    into the pool its tensors give."""
    from mmsgg_eval.functional import compiled
    from mmsgg_eval.metrics.detection import _compiled_pool, read_pool
    if not compiled.built():
        pytest.skip('the compiled kernels (mmsgg_eval._ext) are not built')

    def as_numpy(value):
        array = value.numpy().copy()
        array.flags.writeable = False
        return array

    samples = random_samples(3, 7)
    arrays = [{k: ({kk: as_numpy(vv) if isinstance(vv, torch.Tensor) else vv for kk, vv in v.items()}
                   if isinstance(v, dict) else v) for k, v in s.items()} for s in samples]
    assert _compiled_pool(arrays) is not None
    got, want = read_pool(arrays, NUM_CLASSES), read_pool(samples, NUM_CLASSES)
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert torch.equal(got[key], value) if isinstance(value, torch.Tensor) else got[key] == value, key
