"""Open-vocabulary splits (base / novel objects and predicates): the novel-subset keys against a loop restatement,
world sizes 1 = 2 = 3 bit for bit, the OvSGTR tables, the base-only VG150 training set, and bad names."""
import itertools
import json
import os

import numpy as np
import pytest
import torch

from mmsgg_eval.metrics import SGMeanRecall, SGRecall, SGBenchMetric
from mmsgg_eval.open_vocab import (SPLITS, VG150_NOVEL_OBJECT_PARENTS, VG150_NOVEL_PREDICATES, base_training_graphs,
                                   parent_choice, split_table)
from tests.dist_utils import padded_shard, run_distributed
from tests.reference_sgg import reference_metrics
from tests.sgg_samples import random_dataset
from tests.metrics.scene_graph.test_recall import META, NUM_CLASSES, NUM_PREDICATES, run_metrics

NOVEL_OBJECTS, NOVEL_PREDICATES = ['c1', 'c3'], ['p0', 'p4']
KS = (1, 3, 20)


def subset_triplets(objects, predicates):
    """The (subject, object, predicate) triplets of each subset, as a zero-shot-style set for the reference."""
    every = set(itertools.product(range(NUM_CLASSES), range(NUM_CLASSES), range(NUM_PREDICATES)))
    return {'novel_obj': {t for t in every if t[0] in objects and t[1] in objects},
            'novel_pred': {t for t in every if t[2] in predicates},
            'base': {t for t in every if t[0] not in objects and t[1] not in objects and t[2] not in predicates}}


@pytest.mark.parametrize('mode,option', [('predcls', {}), ('sgdet', {}), ('sgcls', dict(recall_average='micro')),
                                         ('sgdet', dict(mr_average='present'))])
def test_novel_subsets_equal_a_loop_restatement(mode, option):
    objects, predicates = [1, 3], [0, 4]
    for seed in range(3):
        samples, refs = random_dataset(seed + 31, 40, mode, num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
        ours = run_metrics(samples, batch_size=7, mode=mode, topk=KS, novel_objects=NOVEL_OBJECTS,
                           novel_predicates=NOVEL_PREDICATES, **option)
        ref_options = dict(recall_average=option.get('recall_average', 'image'),
                           mr_average=option.get('mr_average', 'all'))
        checked = 0
        for subset, triplets in subset_triplets(objects, predicates).items():
            ref = reference_metrics(refs, NUM_PREDICATES, mode, ks=KS, zeroshot=triplets,
                                    groups={'novel_pred': predicates}, **ref_options)
            for k in KS:
                for ours_key, ref_key in ((f'R@{k}_{subset}', f'zR@{k}'), (f'ngR@{k}_{subset}', f'ngzR@{k}')):
                    assert ours[ours_key] == pytest.approx(ref[ref_key], abs=1e-9), (subset, ours_key)
                    checked += ours[ours_key] > 0
                if subset == 'novel_pred':
                    assert ours[f'mR@{k}_novel_pred'] == pytest.approx(ref[f'mR@{k}_novel_pred'], abs=1e-9)
        assert checked > 0  # the subsets are not all empty / all missed
        plain = run_metrics(samples, batch_size=7, mode=mode, topk=KS, **option)
        assert all(ours[k] == v for k, v in plain.items())  # the other keys are unchanged


def test_novel_keys_come_from_dataset_meta_and_named_splits():
    samples, _ = random_dataset(5, 20, 'predcls', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    explicit = run_metrics(samples, mode='predcls', novel_objects=NOVEL_OBJECTS, novel_predicates=NOVEL_PREDICATES)
    metric = SGRecall(mode='predcls')
    metric.dataset_meta = dict(META, open_vocab=dict(split='custom', novel_objects=NOVEL_OBJECTS,
                                                     novel_predicates=NOVEL_PREDICATES))
    metric.process({}, samples)
    from_meta = {k.split('/', 1)[1]: v for k, v in metric.evaluate(20).items()}
    assert {k: v for k, v in explicit.items() if k in from_meta} == from_meta
    assert 'R@20_novel_obj' in from_meta and 'R@20_base' in from_meta
    assert metric.last_report['open_vocab']['novel_objects'] == NOVEL_OBJECTS


@pytest.mark.parametrize('kwargs,match', [
    (dict(novel_objects=['nope']), r"1 classes not in the dataset's classes: \['nope'\]"),
    (dict(novel_predicates=['p0', 'flying']), r"predicates not in the dataset's predicates: \['flying'\]"),
    (dict(novel_split='ovsgtr-ovd'), r'45 classes not in the dataset'),  # VG150 names on a 4-class dataset
])
def test_unknown_novel_names_fail_at_the_first_process(kwargs, match):
    samples, _ = random_dataset(5, 4, 'predcls', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    metric = SGRecall(mode='predcls', **kwargs)
    metric.dataset_meta = META
    with pytest.raises(ValueError, match=match):
        metric.process({}, samples)


def test_bad_novel_arguments():
    with pytest.raises(ValueError, match='unknown open-vocabulary split'):
        SGRecall(novel_split='ovsgtr')
    with pytest.raises(ValueError, match='not both'):
        SGRecall(novel_split='ovsgtr-ovr', novel_objects=['c1'])
    with pytest.raises(ValueError, match='novel_objects must be a list of names'):
        SGRecall(novel_objects='c1')
    with pytest.raises(ValueError, match='SGBenchMetric does not use novel_objects'):
        SGBenchMetric(novel_objects=['c1'])


LENGTH = 23


def evaluate_shard(rank, world_size):
    samples, _ = random_dataset(77, LENGTH, 'sgdet', num_classes=NUM_CLASSES, num_predicates=NUM_PREDICATES)
    mine = [samples[i] for i in padded_shard(LENGTH, world_size, rank)]
    out = {}
    for cls in (SGRecall, SGMeanRecall):
        metric = cls(mode='sgdet', novel_objects=NOVEL_OBJECTS, novel_predicates=NOVEL_PREDICATES, pool_samples=3)
        metric.dataset_meta = META
        for start in range(0, len(mine), 4):
            metric.process({}, mine[start:start + 4])
        out.update(metric.evaluate(LENGTH))
    return out


@pytest.mark.parametrize('world_size', [2, 3])
def test_novel_keys_are_identical_for_every_world_size(world_size):
    single = evaluate_shard(0, 1)
    novel = {k for k in single if k.endswith(('_novel_obj', '_novel_pred', '_base'))}
    assert len(novel) >= 24 and any(single[k] > 0 for k in novel)
    for res in run_distributed(evaluate_shard, world_size):
        assert res == single


# ---------------------------------------------------------------------------- the OvSGTR tables
def test_ovsgtr_tables_partition_the_vg150_vocabulary(fixtures_dir):
    with open(os.path.join(fixtures_dir, 'vg150', 'VG-SGG-dicts-with-attri.json')) as f:
        vocab = json.load(f)
    classes = [vocab['idx_to_label'][str(i)] for i in range(1, 151)]
    predicates = [vocab['idx_to_predicate'][str(i)] for i in range(1, 51)]
    assert len(VG150_NOVEL_OBJECT_PARENTS) == 45 and set(VG150_NOVEL_OBJECT_PARENTS) <= set(classes)
    base = set(classes) - set(VG150_NOVEL_OBJECT_PARENTS)
    assert len(base) == 105
    assert all(parent in base for parents in VG150_NOVEL_OBJECT_PARENTS.values() for parent in parents)
    assert len(VG150_NOVEL_PREDICATES) == 15 and set(VG150_NOVEL_PREDICATES) <= set(predicates)
    # OvSGTR's evaluation index lists (1-based, datasets/sgg_metrics.py) name the same classes and predicates
    ovd_ids = [9, 10, 11, 20, 22, 23, 26, 27, 28, 37, 38, 40, 41, 45, 52, 53, 54, 57, 58, 60, 61, 64, 66, 74, 78, 87,
               91, 95, 97, 99, 111, 112, 113, 115, 121, 124, 126, 127, 134, 135, 136, 144, 145, 149, 150]
    ovr_ids = [9, 36, 38, 45, 22, 30, 34, 37, 16, 46, 39, 7, 14, 31, 49]
    assert sorted(classes[i - 1] for i in ovd_ids) == sorted(VG150_NOVEL_OBJECT_PARENTS)
    assert sorted(predicates[i - 1] for i in ovr_ids) == sorted(VG150_NOVEL_PREDICATES)
    assert split_table('ovdr')['novel_objects'] == tuple(VG150_NOVEL_OBJECT_PARENTS)
    assert set(SPLITS) == {'ovsgtr-ovd', 'ovsgtr-ovr', 'ovsgtr-ovdr'}


# ---------------------------------------------------------------------------- base-only training graphs
def _toy_graphs():
    """Two images over classes a (base), n1 (novel, parent a or b), n2 (novel, no parent), b (base);
    predicates x (base), y (novel)."""
    return dict(obj_counts=np.array([3, 2]), labels=np.array([0, 1, 2, 2, 3]), obj_rows=np.arange(5),
                image_of_rel=np.array([0, 0, 0, 1]),
                relations=np.array([[0, 1, 0], [1, 2, 0], [0, 1, 1], [0, 1, 0]]))


def test_base_training_graphs_ovd_ovr_ovdr():
    classes, predicates = ['a', 'n1', 'n2', 'b'], ['x', 'y']
    parents = {'n1': ('a', 'b'), 'n2': ()}
    ovd, kept = base_training_graphs(_toy_graphs(), classes, predicates, 'ovd', seed=0, parents=parents,
                                     novel_predicates=['y'])
    # image 0: n2 dropped with its relation; n1 relabelled to a or b; image 1 has only n2 + b: < 2 boxes left
    assert kept.tolist() == [0]
    assert ovd['obj_counts'].tolist() == [2] and ovd['obj_rows'].tolist() == [0, 1]
    assert ovd['labels'][0] == 0 and ovd['labels'][1] in (0, 3)
    assert ovd['relations'].tolist() == [[0, 1, 0], [0, 1, 1]]
    ovr, kept = base_training_graphs(_toy_graphs(), classes, predicates, 'ovr', parents=parents,
                                     novel_predicates=['y'])
    assert kept.tolist() == [0, 1] and ovr['relations'].tolist() == [[0, 1, 0], [1, 2, 0], [0, 1, 0]]
    assert ovr['labels'].tolist() == [0, 1, 2, 2, 3]
    ovdr, kept = base_training_graphs(_toy_graphs(), classes, predicates, 'ovdr', parents=parents,
                                      novel_predicates=['y'])
    assert kept.tolist() == [0] and ovdr['relations'].tolist() == [[0, 1, 0]]


def test_parent_choice_is_seeded_and_uniform():
    counts = np.array([2] * 4000 + [0, 3])
    a, b = parent_choice(counts, 7), parent_choice(counts, 7)
    assert (a == b).all() and a[-2] == -1 and 0 <= a[-1] < 3
    share = (a[:4000] == 1).mean()
    assert 0.45 < share < 0.55
    assert not (parent_choice(counts, 8) == a).all()


def _vg150_sample(tmp_path):
    from mmsgg_eval.testing import write_vg150_sample
    return write_vg150_sample(str(tmp_path))['root']


@pytest.mark.parametrize('setting', ['ovd', 'ovr', 'ovdr'])
def test_vg150_base_only_training_split(tmp_path, setting):
    from mmsgg_eval.datasets import VG150Dataset
    from mmsgg_eval.testing import VG150_SAMPLE_NUM_VAL
    root = _vg150_sample(tmp_path)
    common = dict(data_root=root, num_val_images=VG150_SAMPLE_NUM_VAL, pipeline=[])
    plain_train = VG150Dataset(split='train', **common)
    train = VG150Dataset(split='train', open_vocab_split=setting, **common)
    test = VG150Dataset(split='test', open_vocab_split=setting, **common)
    plain_test = VG150Dataset(split='test', **common)
    classes, predicates = train.metainfo['classes'], train.metainfo['predicates']
    table = split_table(setting)
    novel_obj = {classes.index(c) for c in table['novel_objects']}
    novel_pred = {predicates.index(p) for p in table['novel_predicates']}
    labels, preds = [], []
    for i in range(len(train)):
        info = train.get_data_info(i)
        labels += [inst['bbox_label'] for inst in info['instances']]
        preds += [int(r[2]) for r in np.asarray(info['relations']).reshape(-1, 3)]
        assert len(np.asarray(info['relations']).reshape(-1, 3)) > 0
    assert not novel_obj & set(labels) and not novel_pred & set(preds)
    assert 0 < len(train) <= len(plain_train)
    # the test split is unchanged; its metainfo names the split and holds the base-only training statistics
    assert len(test) == len(plain_test)
    assert [test.get_data_info(i)['instances'] for i in range(len(test))] == \
        [plain_test.get_data_info(i)['instances'] for i in range(len(test))]
    meta = test.metainfo['open_vocab']
    assert meta['split'] == f'ovsgtr-{setting}' and meta['seed'] == 0
    train_triplets = np.asarray(test.metainfo['train_triplets']).reshape(-1, 3)
    assert not novel_pred & set(train_triplets[:, 2].tolist())
    assert not novel_obj & set(train_triplets[:, :2].reshape(-1).tolist())
    # seeded: the same set twice
    again = VG150Dataset(split='train', open_vocab_split=setting, **common)
    assert [again.get_data_info(i)['instances'] for i in range(len(again))] == \
        [train.get_data_info(i)['instances'] for i in range(len(train))]


# ---------------------------------------------------------------------------- end to end (mmdet pipeline)
def test_ovdr_end_to_end_through_tools_test_and_the_offline_cli(tmp_path):
    """FREQ counted on the base-only training split of the VG150 sample, evaluated on the test split with the
    novel keys by tools/test.py, and the same keys from its saved predictions by the offline CLI."""
    pytest.importorskip('mmdet.datasets', reason='the MMDet pipeline path needs mmdet with compiled mmcv')
    from tests.end_to_end.test_vg150_tools import ROOT, read_metrics, run
    config = os.path.join(ROOT, 'configs', 'vg150', 'freq_predcls_vg150_ovdr.py')
    root = _vg150_sample(tmp_path) + '/'
    options = [f'test_dataloader.dataset.data_root={root}', 'test_dataloader.dataset.num_val_images=8',
               f'freq_train_dataset.data_root={root}', 'freq_train_dataset.num_val_images=8',
               'test_dataloader.num_workers=0', 'test_dataloader.persistent_workers=False']
    ckpt = str(tmp_path / 'freq.pth')
    out = run(['tools/build_freq_baseline.py', config, '--out', ckpt, '--cfg-options', *options])
    assert out.returncode == 0, out.stderr[-3000:]
    work, pred = tmp_path / 'online', tmp_path / 'preds.pkl'
    out = run(['tools/test.py', config, ckpt, '--work-dir', str(work), '--out', str(pred), '--cfg-options', *options])
    assert out.returncode == 0, out.stderr[-3000:]
    online = read_metrics(work)
    novel = {k: v for k, v in online.items() if k.endswith(('_novel_obj', '_novel_pred', '_base'))}
    for key in ('predcls/R@50_novel_obj', 'predcls/R@50_novel_pred', 'predcls/mR@50_novel_pred',
                'predcls/R@50_base', 'predcls/ngR@50_novel_obj'):
        assert key in novel, sorted(novel)
    assert 'open-vocabulary subsets' in out.stdout + out.stderr
    off = tmp_path / 'offline'
    out = run(['-m', 'mmsgg_eval.eval', config, str(pred), '--work-dir', str(off), '--no-progress',
               '--cfg-options', *options])
    assert out.returncode == 0, out.stderr[-3000:]
    offline = read_metrics(off)
    assert {k: offline[k] for k in novel} == novel


# ---------------------------------------------------------------------------- VLM answers (free text)
def test_vlm_answers_get_the_novel_subsets_on_their_mapped_words():
    """The model's words ('guy riding horse' with synonyms) are mapped to dataset names, then the novel keys of
    the scene-graph rows apply: the hit 'riding' relation is in the novel-predicate subset."""
    from mmsgg_eval.metrics.vlm import VLMSceneGraphMetric
    from tests.metrics.test_vlm import GT, META as VLM_META, VALID
    metric = VLMSceneGraphMetric(iou_plus_one=False, topk=(20,), novel_predicates=['riding'])
    metric.dataset_meta = VLM_META
    metric.process(None, [dict(GT, sample_idx=0, pred_text=VALID), dict(GT, sample_idx=1, pred_text='oops')])
    out = metric.evaluate(2)
    assert out['vlm/Recall_novel_pred'] == 50.0 and out['vlm/R@20_novel_pred'] == 50.0  # 1 of the 2 answers parsed
    assert out['vlm/mRecall_novel_pred'] == 50.0 and 'vlm/Recall_base' in out
    assert metric.last_report['open_vocab']['novel_predicates'] == ['riding']
    bad = VLMSceneGraphMetric(novel_objects=['unicorn'])
    bad.dataset_meta = VLM_META
    with pytest.raises(ValueError, match="unicorn"):
        bad.process(None, [dict(GT, sample_idx=0, pred_text=VALID)])
