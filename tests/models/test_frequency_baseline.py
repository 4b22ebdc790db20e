"""Frequency baseline (MOTIFS FREQ / FREQ+OVERLAP): statistics and predictions, checked by hand; statistics counted
on 0 images or 0 relations are refused (function, relation head and tools/build_freq_baseline.py)."""
import os.path as osp

import numpy as np
import pytest
import torch

from mmsgg_eval.models import FrequencyBaseline, count_frequency_statistics
from tests.tool_runs import ROOT, load_tool


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
    counts = count_frequency_statistics(TinyDataset(), num_classes=2, num_predicates=3, progress=False,
                                        background='unlabelled')
    # (0 -> 1): predicate 2 twice, predicate 0 once; background: no (0 -> 1) pair without relation
    assert counts[0, 1].tolist() == [0, 1, 0, 2]
    # (1 -> 0): three candidate pairs without relation, (1 -> 1): two
    assert counts[1, 0, 0] == 3 and counts[1, 1, 0] == 2 and counts[1, 1, 1:].sum() == 0
    overlap = count_frequency_statistics(TinyDataset(), 2, 3, must_overlap=True, progress=False,
                                         background='unlabelled')
    # only overlapping pairs count as background: image 0 (1->0) and image 1 (1->0); (1,1) pairs are apart
    assert overlap[1, 0, 0] == 2 and overlap[1, 1, 0] == 0
    assert (overlap[..., 1:] == counts[..., 1:]).all()  # foreground counts do not depend on overlap


def test_predictions_are_the_normalised_distribution():
    model = FrequencyBaseline(num_classes=2, num_predicates=3)
    with pytest.raises(RuntimeError, match='statistics'):
        model.predict([{'gt_instances': {'bboxes': torch.zeros(2, 4), 'labels': torch.tensor([0, 1])}}])
    model.fit(count_frequency_statistics(TinyDataset(), 2, 3, progress=False, background='unlabelled'))
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
    overlap_model.fit(count_frequency_statistics(TinyDataset(), 2, 3, must_overlap=True, progress=False,
                                                 background='unlabelled'))
    # FREQ+OVERLAP: the apart pairs of an image where some pair overlaps get the background only
    mixed = {'gt_instances': {'bboxes': torch.tensor([[0., 0, 10, 10], [5, 5, 15, 15], [50, 50, 60, 60]]),
                              'labels': torch.tensor([0, 1, 1])}}
    out = overlap_model.predict([mixed])[0]['pred_relations']
    by_pair = {tuple(p): row for p, row in zip(out.pair_idxs.tolist(), out.scores)}
    assert torch.allclose(by_pair[(0, 1)], torch.tensor([0., 1 / 3, 0, 2 / 3]))  # A, B overlap
    for apart in ((0, 2), (2, 0), (1, 2), (2, 1)):
        assert by_pair[apart].tolist() == [1, 0, 0, 0], apart


def overlap_reference(counts, boxes, labels, pairs):
    """FREQ+OVERLAP scores restated from MOTIFS' box_filter: a pair whose boxes overlap (positive area) keeps
    counts / counts.sum() (never-seen class pairs: background); with no overlapping pair in the image, every
    pair does; the other pairs get the background only."""
    def overlap(a, b):
        return min(a[2], b[2]) - max(a[0], b[0]) > 0 and min(a[3], b[3]) - max(a[1], b[1]) > 0
    flags = [overlap(boxes[s], boxes[o]) for s, o in pairs]
    rows = []
    for (s, o), flag in zip(pairs, flags):
        c = [float(v) for v in counts[labels[s]][labels[o]]]
        total = sum(c)
        row = [v / total for v in c] if total else [1.0] + [0.0] * (len(c) - 1)
        rows.append(row if flag or not any(flags) else [1.0] + [0.0] * (len(c) - 1))
    return rows


@pytest.mark.parametrize('seed', range(4))
def test_overlap_falls_back_to_all_pairs_when_no_pair_overlaps(seed):
    """MOTIFS' FREQ+OVERLAP scores every pair of an image where no pair overlaps (box_filter), it does not give
    only background; images with some overlap keep the filter. Both models, random images vs a loop."""
    from mmsgg_eval.models.relation_heads import FrequencyRelationHead, all_ordered_pairs
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 4, (3, 3, 5))
    counts[0, 2] = 0  # a class pair never seen
    baseline = FrequencyBaseline(3, 4, must_overlap=True)
    head = FrequencyRelationHead(3, 4, must_overlap=True)
    baseline.fit(counts)
    head.fit(counts)
    for image in range(6):
        n = int(rng.integers(2, 6))
        if image % 2:  # every box in its own 100-pixel column, touching at most: no pair overlaps
            x = np.arange(n) * 100.0
            boxes = np.stack([x, np.zeros(n), x + 100 * (image % 4 == 1) + 50 * (image % 4 == 3),
                              np.full(n, 40.0)], 1)
        else:
            xy = rng.uniform(0, 60, (n, 2))
            boxes = np.concatenate([xy, xy + rng.uniform(5, 40, (n, 2))], 1)
        labels = rng.integers(0, 3, n)
        pairs = all_ordered_pairs(n).tolist()
        expected = torch.tensor(overlap_reference(counts.tolist(), boxes.tolist(), labels.tolist(), pairs))
        sample = {'gt_instances': {'bboxes': torch.tensor(boxes, dtype=torch.float32),
                                   'labels': torch.tensor(labels)}}
        out = baseline.predict([sample])[0]['pred_relations']
        got = dict(zip(map(tuple, out.pair_idxs.tolist()), out.scores))
        assert torch.allclose(torch.stack([got[tuple(p)] for p in pairs]), expected), (seed, image)
        from mmengine.structures import InstanceData
        objects = InstanceData(bboxes=torch.tensor(boxes, dtype=torch.float32), labels=torch.tensor(labels))
        head_scores = head.predict(None, [objects], [torch.tensor(pairs)], [sample])[0]
        assert torch.allclose(head_scores, expected), (seed, image)
        if image % 2:
            assert (expected[:, 1:].sum(1) > 0).any()  # the fallback gives foreground scores


def test_modes():
    with pytest.raises(ValueError, match='sgdet'):
        FrequencyBaseline(2, 3, mode='sgdet')
    model = FrequencyBaseline(2, 3, mode='sgcls')
    model.fit(np.ones((2, 2, 4)))
    with pytest.raises(ValueError, match='sgcls mode needs predicted object labels'):
        model.predict([{'gt_instances': {'bboxes': torch.zeros(2, 4), 'labels': torch.tensor([0, 1])}}])


# ---------------------------------------------------------------------------- MOTIFS / legacy statistics
def test_motifs_background_channel_by_hand():
    # image 0: A=[0,0,10,10] (class 0), B=[5,5,15,15] (1), C=[50,50,60,60] (1); image 1: A (0), B (1)
    freq = count_frequency_statistics(TinyDataset(), 2, 3, progress=False)
    # every ordered pair counts, with or without a relation, plus one per class pair:
    # (0,1): image 0 A->B, A->C, image 1 A->B = 3 (+1); (1,0): 3 (+1); (1,1): B->C, C->B = 2 (+1); (0,0): 0 (+1)
    assert freq[..., 0].tolist() == [[1, 4], [4, 3]]
    overlap = count_frequency_statistics(TinyDataset(), 2, 3, must_overlap=True, progress=False)
    # only A<->B overlap (positive area), in both images
    assert overlap[..., 0].tolist() == [[1, 3], [3, 1]]
    assert (freq[..., 1:] == overlap[..., 1:]).all() and freq[0, 1, 1:].tolist() == [1, 0, 2]
    # an image where no pair overlaps contributes ALL its pairs (legacy box_filter), touching is no overlap
    apart = TinyDataset()
    apart.infos = [dict(instances=[dict(bbox=[0, 0, 10, 10], bbox_label=1), dict(bbox=[10, 0, 20, 10], bbox_label=1)],
                        relations=np.zeros((0, 3), np.int64)),
                   # a related class-0 pair elsewhere (statistics without any relation are refused)
                   dict(instances=[dict(bbox=[0, 0, 10, 10], bbox_label=0), dict(bbox=[5, 5, 15, 15], bbox_label=0)],
                        relations=np.array([[0, 1, 0]]))]
    assert count_frequency_statistics(apart, 2, 3, must_overlap=True, progress=False)[1, 1, 0] == 2 + 1
    with pytest.raises(ValueError, match='background'):
        count_frequency_statistics(apart, 2, 3, background='none', progress=False)


def legacy_get_vg_statistics(root, num_val_im, must_overlap):
    """Scene-Graph-Benchmark ``get_VG_statistics`` restated from its code: ``load_graphs`` of the training split
    with filter_non_overlap=True (``boxlist_iou`` +1 convention, float32, on the 1024-scale boxes; images
    left without a relation dropped), fg over every remaining relation, bg over ``box_filter`` pairs
    (``bbox_overlaps(to_move=0) > 0``, all pairs when none), then bg += 1. 1-based classes, [C+1, C+1, P+1]."""
    import h5py
    with h5py.File(f'{root}/VG-SGG-with-attri.h5', 'r') as f:
        h5 = {k: f[k][()] for k in f}
    mask = (h5['split'] == 0) & (h5['img_to_first_box'] >= 0) & (h5['img_to_first_rel'] >= 0)
    index = np.flatnonzero(mask)[num_val_im:]
    boxes_all = h5['boxes_1024'].astype(np.int32).copy()
    boxes_all[:, :2] = boxes_all[:, :2] - boxes_all[:, 2:] / 2
    boxes_all[:, 2:] = boxes_all[:, :2] + boxes_all[:, 2:]
    n_cls, n_pred = 6, 5
    fg = np.zeros((n_cls, n_cls, n_pred), np.int64)
    bg = np.zeros((n_cls, n_cls), np.int64)
    for i in index:
        b0, b1 = h5['img_to_first_box'][i], h5['img_to_last_box'][i]
        r0, r1 = h5['img_to_first_rel'][i], h5['img_to_last_rel'][i]
        boxes = boxes_all[b0:b1 + 1]
        classes = h5['labels'][b0:b1 + 1, 0]
        rels = np.column_stack([h5['relationships'][r0:r1 + 1] - b0, h5['predicates'][r0:r1 + 1, 0]])
        t = torch.as_tensor(boxes, dtype=torch.float32)
        lt = torch.max(t[:, None, :2], t[:, :2])
        rb = torch.min(t[:, None, 2:], t[:, 2:])
        wh = (rb - lt + 1).clamp(min=0)
        inter = wh[..., 0] * wh[..., 1]
        area = (t[:, 2] - t[:, 0] + 1) * (t[:, 3] - t[:, 1] + 1)
        iou = (inter / (area[:, None] + area - inter)).numpy()
        inc = np.where(iou[rels[:, 0], rels[:, 1]] > 0.0)[0]
        if inc.size == 0:
            continue
        rels = rels[inc]
        for s, o, p in rels:
            fg[classes[s], classes[o], p] += 1
        lt = np.maximum(boxes[:, None, :2], boxes[None, :, :2]).astype(float)
        rb = np.minimum(boxes[:, None, 2:], boxes[None, :, 2:]).astype(float)
        wh = (rb - lt).clip(min=0)
        overlaps = wh[..., 0] * wh[..., 1] > 0
        np.fill_diagonal(overlaps, 0)
        everything = ~np.eye(len(boxes), dtype=bool)
        pairs = np.column_stack(np.where(overlaps if must_overlap and overlaps.any() else everything))
        for s, o in pairs:
            bg[classes[s], classes[o]] += 1
    bg += 1
    fg[:, :, 0] = bg
    return fg


def legacy_statistics_files(tmp_path):
    """Hand-built VG150 files where the overlap filter matters: boxes (cx, cy, w, h at 1024) on 500 x 375 images."""
    from tests.datasets.test_vg150 import im, write_vg
    a, touching, far = [100, 100, 40, 40], [130, 100, 20, 40], [600, 300, 40, 40]
    # `edge` starts at x = 1024 (500 px, past the last column 499); `right` (980..1040) overlaps it
    right, edge = [1010, 300, 60, 40], [1044, 300, 40, 40]
    images = [im(1, 0, n_obj=2, rels=[(0, 1)], preds=[2]),  # val
              # a-touching share the column x = 120 (+1 convention: overlap; positive area: none); a-far apart
              im(2, 0, boxes=[a, touching, far], labels=[1, 2, 3], rels=[(0, 1), (0, 2), (2, 0)], preds=[1, 2, 3]),
              im(3, 0, boxes=[a, far], labels=[1, 3], rels=[(0, 1)], preds=[1]),  # only a far pair: image dropped
              # right -> edge overlap (clipping would collapse `edge` onto x = 499), duplicates counted
              im(4, 0, boxes=[right, edge, a], labels=[4, 5, 4], rels=[(0, 1), (0, 1)], preds=[4, 4]),
              im(5, 2, n_obj=2, rels=[(0, 1)], preds=[3])]  # test
    return write_vg(str(tmp_path / 'vg'), images)


def test_vg150_training_statistics_legacy_and_all(tmp_path):
    from mmsgg_eval.datasets import VG150Dataset
    root = legacy_statistics_files(tmp_path)
    legacy = VG150Dataset(data_root=root, split='test', num_val_images=1, lazy_init=True).metainfo
    # legacy (default): image 2 keeps only a->touching (predicate 1), image 3 has no overlapping relation,
    # image 4 keeps its duplicate pair twice (predicate 4)
    assert legacy['predicate_counts'] == [1, 0, 0, 2]
    assert legacy['train_triplets'].tolist() == [[0, 1, 0], [3, 4, 3]]
    full = VG150Dataset(data_root=root, split='test', num_val_images=1, lazy_init=True,
                        train_statistics='all').metainfo
    assert full['predicate_counts'] == [2, 1, 1, 2]
    assert full['train_triplets'].tolist() == [[0, 1, 0], [0, 2, 0], [0, 2, 1], [2, 0, 2], [3, 4, 3]]
    reference = legacy_get_vg_statistics(root, 1, must_overlap=True)
    assert legacy['predicate_counts'] == reference[1:, 1:, 1:].sum((0, 1)).tolist()
    with pytest.raises(ValueError, match='train_statistics'):
        VG150Dataset(data_root=root, num_val_images=1, train_statistics='filtered')
    # the split itself with the legacy filter: image 3 is gone, image 2 keeps one relation
    train = VG150Dataset(data_root=root, split='train', num_val_images=1, filter_non_overlap=True,
                         duplicate_rels='keep')
    assert [train.get_data_info(i)['img_id'] for i in range(len(train))] == [2, 4]
    assert train.get_data_info(0)['relations'].tolist() == [[0, 1, 0]]
    assert train.get_data_info(1)['relations'].tolist() == [[0, 1, 3], [0, 1, 3]]
    assert len(VG150Dataset(data_root=root, split='train', num_val_images=1)) == 3  # default: no filter
    unclipped = VG150Dataset(data_root=root, split='train', num_val_images=1, clip_boxes=False)
    assert unclipped.get_data_info(2)['instances'][1]['bbox'][2] > 499  # past the border, not clamped


@pytest.mark.parametrize('must_overlap', [False, True])
def test_freq_statistics_equal_the_legacy_get_vg_statistics(tmp_path, must_overlap):
    from mmsgg_eval.datasets import VG150Dataset
    root = legacy_statistics_files(tmp_path)
    train = VG150Dataset(data_root=root, split='train', num_val_images=1, **VG150Dataset.FREQUENCY_STATISTICS_ARGS)
    ours = count_frequency_statistics(train, 5, 4, must_overlap=must_overlap, progress=False)
    reference = legacy_get_vg_statistics(root, 1, must_overlap)
    assert ours.tolist() == reference[1:, 1:].tolist()
    # the unclipped boxes matter: clipped, `edge` collapses onto x = 499 and no longer overlaps `far`
    clipped = VG150Dataset(data_root=root, split='train', num_val_images=1, filter_non_overlap=True,
                           duplicate_rels='keep')
    if must_overlap:
        assert count_frequency_statistics(clipped, 5, 4, must_overlap=True, progress=False).tolist() != ours.tolist()


def test_models_package_has_no_import_cycle():
    """Every relative import of mmsgg_eval/models (function-level ones included) between its modules: no cycle
    (the statistics live in models/frequency_statistics.py, imported by the baseline and the head)."""
    import ast
    import os
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'mmsgg_eval', 'models')
    modules = {}  # dotted name below mmsgg_eval.models ('' = the package) -> (path, its package's parts)
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith('.py'):
                parts = os.path.relpath(os.path.join(folder, name), root)[:-3].split(os.sep)
                package = parts[:-1]
                if parts[-1] == '__init__':
                    parts = package
                modules['.'.join(parts)] = (os.path.join(folder, name), package)
    graph = {}
    for mod, (path, package) in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(open(path, encoding='utf-8').read())):
            if not isinstance(node, ast.ImportFrom) or not node.level or node.level - 1 > len(package):
                continue  # absolute, or above mmsgg_eval.models
            base = package[:len(package) - (node.level - 1)] + (node.module.split('.') if node.module else [])
            for target in ['.'.join(base)] + ['.'.join(base + [a.name]) for a in node.names]:
                if target in modules and target != mod:
                    deps.add(target)
        graph[mod] = deps

    def reachable(start):
        seen, todo = set(), list(graph[start])
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(graph[m])
        return seen
    assert graph['frequency_baseline'] >= {'frequency_statistics'}
    assert [m for m in graph if m in reachable(m)] == []


class Records:
    """mmdet-style data infos with the attributes the messages name."""

    def __init__(self, infos, data_root='/data/nowhere/', ann_file='/data/nowhere/train.json', **kwargs):
        self.infos, self.data_root, self.ann_file = infos, data_root, ann_file
        self.metainfo = dict(classes=('a', 'b'), predicates=('p', 'q', 'r'))

    def __len__(self):
        return len(self.infos)

    def get_data_info(self, i):
        return self.infos[i]


RELATION_FREE = [dict(instances=[dict(bbox=[0, 0, 10, 10], bbox_label=0), dict(bbox=[5, 5, 15, 15], bbox_label=1)],
                      relations=np.zeros((0, 3), np.int64)),
                 dict(instances=[dict(bbox=[0, 0, 10, 10], bbox_label=1)])]


def test_statistics_of_nothing_are_refused():
    from mmsgg_eval.models import count_frequency_statistics
    with pytest.raises(ValueError, match=r"Records\(data_root='/data/nowhere/'.*: 0 images"):
        count_frequency_statistics(Records([]), 2, 3, progress=False)
    for background in ('motifs', 'unlabelled'):
        with pytest.raises(ValueError, match=r"data_root='/data/nowhere/'.*0 relations counted on its 2 images"):
            count_frequency_statistics(Records(RELATION_FREE), 2, 3, progress=False, background=background)
    with pytest.raises(ValueError, match='^the source: 0 images'):
        count_frequency_statistics(Records([]), 2, 3, progress=False, source='the source')
    # one relation is enough
    infos = RELATION_FREE + [dict(instances=RELATION_FREE[0]['instances'], relations=np.array([[0, 1, 2]]))]
    assert count_frequency_statistics(Records(infos), 2, 3, progress=False)[0, 1, 3] == 1


def _vg150_root(tmp_path) -> str:
    from mmsgg_eval.testing import write_vg150_sample
    return write_vg150_sample(str(tmp_path / 'data'), with_images=False)['root'] + '/'


def test_relation_head_refuses_an_empty_statistics_dataset(tmp_path):
    from mmsgg_eval.models.relation_heads import FrequencyRelationHead
    root = _vg150_root(tmp_path)
    dataset = dict(type='VG150Dataset', data_root=root, split='train', num_val_images=10 ** 6)
    with pytest.raises(ValueError, match=r'FrequencyRelationHead.statistics_dataset VG150Dataset\(data_root='
                                         rf"'{root}'.*: 0 images"):
        FrequencyRelationHead(150, 50, statistics_dataset=dataset)


def _tool():
    return load_tool('build_freq_baseline')


def test_cli_refuses_zero_training_images(tmp_path, capsys):
    root = _vg150_root(tmp_path)
    config = osp.join(ROOT, 'configs', 'demo', 'freq_predcls_vg150_sample.py')
    out = tmp_path / 'freq.pth'
    # the val split swallows every split-0 image (num_val_images > their number): 0 training images
    argv = [config, '--out', str(out), '--cfg-options', f'freq_train_dataset.data_root={root}',
            'freq_train_dataset.num_val_images=100000']
    with pytest.raises(SystemExit) as exit_info:
        _tool().main(argv)
    assert exit_info.value.code == 1 and not out.exists()
    err = capsys.readouterr().err
    assert 'Traceback' not in err
    line = err.strip().splitlines()[0]
    assert line.startswith('tools/build_freq_baseline.py: error: ')
    assert 'freq_train_dataset' in line and f"data_root='{root}'" in line and '0 images' in line
    # the same config on the right split builds (the control)
    _tool().main(argv[:-1] + ['freq_train_dataset.num_val_images=8'])
    assert out.exists()


def test_cli_refuses_zero_relations(tmp_path, capsys):
    from mmsgg_eval.registry import DATASETS

    class RelationFreeDataset(Records):
        def __init__(self, **kwargs):
            super().__init__(RELATION_FREE, data_root=kwargs.get('data_root'), ann_file=kwargs.get('ann_file'))

    DATASETS.register_module(name='Issue26RelationFreeDataset', module=RelationFreeDataset, force=True)
    config = tmp_path / 'freq_cfg.py'
    config.write_text("default_scope = 'mmdet'\n"
                      "model = dict(type='FrequencyBaseline', num_classes=2, num_predicates=3, mode='predcls')\n"
                      "train_dataloader = dict(dataset=dict(type='Issue26RelationFreeDataset', "
                      "data_root='/data/coco/', ann_file='instances_train.json'))\n")
    out = tmp_path / 'freq.pth'
    with pytest.raises(SystemExit) as exit_info:
        _tool().main([str(config), '--out', str(out)])
    assert exit_info.value.code == 1 and not out.exists()
    err = capsys.readouterr().err
    assert 'Traceback' not in err
    line = err.strip().splitlines()[0]
    assert line.startswith('tools/build_freq_baseline.py: error: ') and 'train_dataloader.dataset' in line
    assert "data_root='/data/coco/'" in line and '0 relations counted on its 2 images' in line
    with pytest.raises(ValueError, match='0 relations'):  # --debug: the exception itself
        _tool().main([str(config), '--out', str(out), '--debug'])
