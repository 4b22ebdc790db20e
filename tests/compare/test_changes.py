"""``python -m mmsgg_eval.compare --report DIR``: the images where run B gains or loses GT relations against run
A at K, each changed relation with the cause of the miss on the losing side."""
import json
import os.path as osp

import pytest
import torch

from mmsgg_eval.analysis.relation_changes import relation_changes
from mmsgg_eval.compare import main
from mmsgg_eval.metrics import SGRecall
from mmsgg_eval.metrics.per_image import read_per_image
from tests.sgg_samples import perturbed, random_dataset
from tests.metrics.test_bootstrap import META

NUM = 20


def write_state(directory, samples, per_image=True, **kwargs):
    """States of SGRecall (sgdet, K 5 / 20) in ``directory`` and, with ``per_image``, its per-image records."""
    path = osp.join(directory, 'per_image.jsonl') if per_image else None
    metric = SGRecall(mode='sgdet', topk=(5, 20), save_state=osp.join(directory, 'states', 'SGRecall.state'),
                      per_image_out=path, skip_empty_predictions=False, **kwargs)
    metric.dataset_meta = META
    metric.process({}, samples)
    metric.evaluate(NUM)
    return osp.join(directory, 'states'), read_per_image(path) if per_image else None


def reference_changes(records_a, records_b, k):
    """Gained / lost GT relations per image from the per-image records, from the definition (loops)."""
    out = []
    for ra, rb in zip(records_a, records_b):
        assert ra['sample_idx'] == rb['sample_idx']
        image = {'sample_idx': ra['sample_idx'], 'gained': [], 'lost': []}
        for ga, gb in zip(sorted(ra['gt_relations'], key=lambda g: g['index']),
                          sorted(rb['gt_relations'], key=lambda g: g['index'])):
            hit_a, hit_b = ga['outcome'][str(k)] == 'hit', gb['outcome'][str(k)] == 'hit'
            if hit_a != hit_b:
                image['gained' if hit_b else 'lost'].append(
                    (ga['index'], ga['subject_label'], ga['predicate'], ga['object_label'],
                     (ga if hit_b else gb)['outcome'][str(k)]))
        if image['gained'] or image['lost']:
            image['net'] = len(image['gained']) - len(image['lost'])
            out.append(image)
    return sorted(out, key=lambda r: (r['net'], r['sample_idx']))


def as_tuples(images):
    return [{'sample_idx': r['sample_idx'], 'net': r['net'],
             **{w: [(g['index'], g['subject_label'], g['predicate'], g['object_label'], g['cause']) for g in r[w]]
                for w in ('gained', 'lost')}} for r in images]


def two_state_runs(root):
    """Two SGDet runs with error_analysis on the same random GT (the second one's scores permuted), their states
    written under root/a and root/b: ``dict(root, samples, a, b, rec_a, rec_b)`` (state folders, per-image
    records)."""
    samples, _ = random_dataset(5, NUM, 'sgdet', num_classes=len(META['classes']),
                                num_predicates=len(META['predicates']))
    a, rec_a = write_state(str(root / 'a'), samples, error_analysis=True)
    b, rec_b = write_state(str(root / 'b'), perturbed(samples, 3), error_analysis=True)
    return dict(root=root, samples=samples, a=a, b=b, rec_a=rec_a, rec_b=rec_b)


@pytest.fixture(scope='module')
def two_runs(tmp_path_factory):
    return two_state_runs(tmp_path_factory.mktemp('changes'))


@pytest.mark.parametrize('k', [5, 20])
def test_gained_and_lost_relations_equal_the_per_image_records(two_runs, k):
    report = str(two_runs['root'] / f'report{k}')
    result = main([two_runs['a'], two_runs['b'], '--names', 'A', 'B', '--samples', '20', '--report', report,
                   '--report-k', str(k), '--out-dir', str(two_runs['root'] / f'out{k}')])
    changes = json.load(open(osp.join(report, 'changes.json')))['changes']
    assert len(changes) == 1 and changes[0]['k'] == k and changes[0]['causes_known'] == {'a': True, 'b': True}
    expected = reference_changes(two_runs['rec_a'], two_runs['rec_b'], k)
    assert expected, 'the perturbed run should change some relations'
    assert as_tuples(changes[0]['images']) == [{**r, 'gained': r['gained'], 'lost': r['lost']} for r in expected]
    assert changes[0]['num_gained'] == sum(len(r['gained']) for r in expected)
    assert changes[0]['num_lost'] == sum(len(r['lost']) for r in expected)
    # the net change of found relations is B's hits minus A's (micro counts of R@K)
    hits = [sum(r['num_hit'][f'R@{k}'] or 0 for r in recs) for recs in (two_runs['rec_a'], two_runs['rec_b'])]
    assert changes[0]['num_gained'] - changes[0]['num_lost'] == hits[1] - hits[0]
    text = open(osp.join(report, 'changes.md')).read()
    first = changes[0]['images'][0]
    assert f'| {first["sample_idx"]} |' in text and 'largest net loss' in text
    assert result['outputs']['changes_json'] == osp.join(report, 'changes.json')


def test_states_without_per_image_rows_pair_relations_by_position(two_runs, tmp_path):
    a, _ = write_state(str(tmp_path / 'a'), two_runs['samples'], per_image=False, error_analysis=True)
    b, _ = write_state(str(tmp_path / 'b'), perturbed(two_runs['samples'], 3), per_image=False, error_analysis=True)
    main([a, b, '--samples', '20', '--report', str(tmp_path / 'r'), '--out-dir', str(tmp_path / 'o')])
    changes = json.load(open(str(tmp_path / 'r' / 'changes.json')))['changes'][0]
    assert as_tuples(changes['images']) == reference_changes(two_runs['rec_a'], two_runs['rec_b'], 20)


def test_runs_without_error_analysis_list_changes_without_causes(two_runs, tmp_path):
    a, _ = write_state(str(tmp_path / 'a'), two_runs['samples'], per_image=False)
    b, _ = write_state(str(tmp_path / 'b'), perturbed(two_runs['samples'], 3), per_image=False)
    main([a, b, '--names', 'A', 'B', '--samples', '20', '--report', str(tmp_path / 'r'),
          '--out-dir', str(tmp_path / 'o')])
    changes = json.load(open(str(tmp_path / 'r' / 'changes.json')))['changes'][0]
    expected = reference_changes(two_runs['rec_a'], two_runs['rec_b'], 20)
    assert changes['causes_known'] == {'a': False, 'b': False}
    assert as_tuples(changes['images']) == [{**r, **{w: [g[:4] + (None,) for g in r[w]] for w in ('gained', 'lost')}}
                                            for r in expected]
    assert 'without `error_analysis=True`' in open(str(tmp_path / 'r' / 'changes.md')).read()


def test_a_k_the_metric_lacks_is_a_one_line_error(two_runs, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main([two_runs['a'], two_runs['b'], '--samples', '20', '--report', str(tmp_path / 'r'), '--report-k', '7',
              '--out-dir', str(tmp_path / 'o')])
    assert exc.value.code == 1
    assert '--report-k 7: not a K of SGRecall' in capsys.readouterr().err


def test_relations_that_differ_are_not_paired():
    def tables(triplets):
        n = len(triplets)
        return {'relations': {'sample_idx': torch.zeros(n, dtype=torch.long), 'triplet': torch.tensor(triplets),
                              'rank_gc': torch.zeros(n, dtype=torch.long)},
                'images': {'sample_idx': torch.zeros(1, dtype=torch.long), 'num_pred': torch.ones(1),
                           'missing': torch.zeros(1, dtype=torch.bool)}}
    with pytest.raises(ValueError, match='cannot be paired'):
        relation_changes(tables([0, 1]), tables([0, 2]), 5, ['c0', 'c1'], ['p0', 'p1', 'p2'])
    same = relation_changes(tables([0, 1]), tables([0, 1]), 5, ['c0', 'c1'], ['p0', 'p1', 'p2'])
    assert same['images'] == [] and same['num_gained'] == same['num_lost'] == 0


def _rank_worker(rank, world_size, samples, state_path):
    from tests.dist_utils import padded_shard
    metric = SGRecall(mode='sgdet', topk=(5, 20), save_state=state_path, skip_empty_predictions=False,
                      error_analysis=True)
    metric.dataset_meta = META
    shard = padded_shard(len(samples), world_size, rank)
    for start in range(0, len(shard), 3):  # uneven batches; the padding repeats the first samples
        metric.process({}, [samples[i] for i in shard[start:start + 3]])
    metric.evaluate(len(samples))
    return True


def test_states_of_a_three_rank_run_give_the_same_list(two_runs, tmp_path):
    from tests.dist_utils import run_distributed
    run_distributed(_rank_worker, 3, two_runs['samples'], str(tmp_path / 'dist' / 'SGRecall.state'))
    main([str(tmp_path / 'dist'), two_runs['b'], '--samples', '20', '--report', str(tmp_path / 'r'),
          '--out-dir', str(tmp_path / 'o')])
    changes = json.load(open(str(tmp_path / 'r' / 'changes.json')))['changes'][0]
    assert as_tuples(changes['images']) == reference_changes(two_runs['rec_a'], two_runs['rec_b'], 20)
