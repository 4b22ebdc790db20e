"""Mask matching (``match='mask'``, PSG): SGRecall / SGMeanRecall against the loop reference with mask IoU
(tests/reference_sgg.py, ``match='mask'``: |A and B| / |A or B| pixel by pixel) on random masks that are not box
shaped, over world sizes, ``pool_samples`` and the score kernels (tests/metric_tester.py)."""
import pytest

from mmsgg_eval.metrics import SGMeanRecall, SGRecall
from tests.metric_tester import Case, check_metric
from tests.reference_sgg import reference_metrics
from tests.sgg_samples import random_dataset
from tests.metrics.scene_graph.test_recall import GROUP_IDX, GROUPS, META, NUM_CLASSES, NUM_PREDICATES

KS = (1, 5, 20)


def mask_case(mode, seed, **options):
    samples, refs = random_dataset(seed, 23, mode, num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES,
                                   masks=True)
    kwargs = dict(mode=mode, match='mask', topk=KS, ng_topk=9, iou_plus_one=True, predicate_groups=GROUPS,
                  zeroshot_triplets=[(0, 1, 2), (1, 1, 0)], **options)
    reference = reference_metrics(refs, NUM_PREDICATES, mode, ks=KS, ng_topk=9, zeroshot={(0, 1, 2), (1, 1, 0)},
                                  groups=GROUP_IDX, match='mask', thr=options.get('iou_thr', 0.5),
                                  recall_average=options.get('recall_average', 'image'))
    return Case((SGRecall, SGMeanRecall), kwargs, samples, META, reference, name=f'{mode} seed {seed} {options}'), refs


@pytest.mark.parametrize('mode', ['predcls', 'sgcls', 'sgdet'])
def test_mask_matching_equals_the_mask_reference(mode):
    cases = [mask_case(mode, seed)[0] for seed in (5, 6)]
    cases.append(mask_case(mode, 7, iou_thr=0.3, recall_average='micro')[0])
    world_sizes = (1, 3) if mode == 'sgdet' else (1,)  # one multi-process run (the rows of masks are no different)
    results = check_metric(cases, world_sizes=world_sizes)
    assert any(r['R@20'] > 0 for r in results)


def test_the_mask_reference_is_not_the_box_reference():
    """The masks drop pixels at random: mask IoU decides differently from box IoU, so the test above fails
    for a metric that matched boxes."""
    case, refs = mask_case('sgdet', 5)
    boxes = reference_metrics(refs, NUM_PREDICATES, 'sgdet', ks=KS, ng_topk=9, plus_one=True,
                              zeroshot={(0, 1, 2), (1, 1, 0)}, groups=GROUP_IDX)
    assert any(abs(boxes[k] - case.reference[k]) > 1e-6 for k in case.reference)
