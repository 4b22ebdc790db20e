"""The HTML report, the pictures' legends and per_image.jsonl show first-hit ranks in one base (0-based,
as the per-image records hold them: a relation is found at K when its rank is below K)."""
import re

from mmsgg_eval.analysis.browse import image_page
from mmsgg_eval.visualization.drawing import relation_items


def record():
    sub, obj = [10.0, 10.0, 50.0, 50.0], [100.0, 100.0, 150.0, 150.0]
    rels = [dict(index=0, subject=0, object=1, subject_label='c0', object_label='c1', predicate='p2', rank_gc=3,
                 rank_ngc=2, zeroshot=False, pair_rank=3, pair_predicate='p2', subject_box=sub, object_box=obj),
            dict(index=1, subject=1, object=0, subject_label='c1', object_label='c0', predicate='p1', rank_gc=None,
                 rank_ngc=7, zeroshot=False, pair_rank=0, pair_predicate='p3', subject_box=obj, object_box=sub)]
    preds = [dict(rank=r, subject=0, object=1, subject_label='c0', object_label='c1', predicate='p2' if r == 3
                  else 'p3', score=0.9 - 0.1 * r, hits=[0] if r == 3 else [], subject_box=sub, object_box=obj)
             for r in range(5)]
    return dict(sample_idx=0, img_id='a', mode='predcls', gt_relations=rels, predictions=preds)


def test_html_ranks_are_the_records_ranks():
    html = image_page(record(), 50, 20, relation_items)
    gt_rows = re.findall(r'<tr class="(?:hit|miss)"><td>(\d+)</td><td>[^<]*</td><td>(p\d)</td><td>[^<]*</td>'
                         r'<td>([^<]*)</td><td>([^<]*)</td>', html)
    assert gt_rows == [('1', 'p2', '3', '2'), ('2', 'p1', '–', '7')]
    pred_ranks = re.findall(r'<tr class="(?:hit|miss)"><td>(\d+)</td><td>0:c0</td><td>p\d</td><td>1:c1</td>'
                            r'<td>0\.\d{4}</td>', html)
    assert pred_ranks == ['0', '1', '2', '3', '4']
    assert 'rank (0-based)' in html


def test_picture_legends_use_the_same_base():
    gt, pred = relation_items(record(), 50, 20)
    assert gt[0]['note'] == 'rank 3'
    assert [p['number'] for p in pred] == [0, 1, 2, 3, 4]
