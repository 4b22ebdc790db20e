"""Relation alignment study: theta / precision / per-predicate means / confused triplets against a loop
reference written from eq. 7 (expected values under random tie-breaking), on the bundled PSG and VG150 samples,
through the package API and the tools/analysis CLI; dual and joint scorers; ties."""
import json
import os.path as osp
import runpy
import zlib
from collections import Counter, defaultdict
from typing import Dict, List, Sequence

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mmsgg_eval.analysis import alignment_summary, rank_statistics, run_relation_alignment
from mmsgg_eval.encoders import ENCODERS, ImagePreprocess, crop_regions
from mmsgg_eval.metrics.relclip import decode_image

ROOT = osp.abspath(osp.join(osp.dirname(__file__), '..', '..'))
TEMPLATE = '{subject} {predicate} {object}'
# four text vectors only: texts sharing one tie exactly, whatever the image
LEVELS = torch.tensor([[1.0, 0.2, 0.1, 0.0], [0.2, 1.0, 0.3, 0.5], [0.1, 0.1, 1.0, 0.2], [0.5, 0.5, 0.5, 0.5]])


def level(text: str) -> int:
    return zlib.crc32(text.encode()) % len(LEVELS)


@ENCODERS.register_module(force=True)
class AlignStubEncoder:
    """Dual encoder: image embedding = mean colour of the crop (+ a constant), text embedding one of LEVELS."""
    preprocess = ImagePreprocess('shortest', 8, (8, 8), (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        return torch.cat([images.float().mean((2, 3)), torch.full((images.shape[0], 1), 0.3)], 1)

    def encode_text(self, texts: Sequence[str]) -> torch.Tensor:
        return LEVELS[[level(t) for t in texts]]


@ENCODERS.register_module(force=True)
class JointStubEncoder(AlignStubEncoder):
    """Joint scorer: s = red of the crop x (level + 1) / 4 (ties among texts of one level)."""

    def pair_scores(self, features: torch.Tensor, texts: Sequence[str]) -> torch.Tensor:
        return features[:, 0] * torch.tensor([(level(t) + 1) / 4 for t in texts])


@pytest.fixture(scope='module')
def samples(tmp_path_factory):
    from mmsgg_eval.datasets import PSGDataset, VG150Dataset
    from mmsgg_eval.testing import VG150_SAMPLE_NUM_VAL, make_sample_data
    out = tmp_path_factory.mktemp('alignment')
    make_sample_data(str(out), datasets=['psg', 'vg150'])
    psg_root, vg_root = str(out / 'psg') + '/', str(out / 'vg150') + '/'
    return {
        'psg': dict(root=psg_root, dataset=PSGDataset(data_root=psg_root, ann_file='psg.json',
                                                      data_prefix=dict(img='coco/', seg='coco/'), split='test',
                                                      with_masks=False, pipeline=[])),
        'vg150': dict(root=vg_root, dataset=VG150Dataset(data_root=vg_root, split='test',
                                                         num_val_images=VG150_SAMPLE_NUM_VAL, pipeline=[])),
    }


def reference_rows(dataset, encoder, extra=None) -> List[Dict]:
    """Loop reference: one GT relation at a time, one crop and one text at a time, eq. 7 with the tie rule
    "ties broken uniformly at random, expected values": rank0 = #higher + #equal / 2,
    precision = [#higher = 0] / (1 + #equal)."""
    meta = dataset.metainfo
    classes, predicates = meta['classes'], meta['predicates']
    infos = [dataset.get_data_info(i) for i in range(len(dataset))]
    candidates = defaultdict(set)
    for info in infos:
        labels = [inst['bbox_label'] for inst in info['instances']]
        for s, o, p in np.asarray(info['relations']).reshape(-1, 3).tolist():
            candidates[(labels[s], labels[o])].add(p)
    for s, o, p in ([] if extra is None else np.asarray(extra).reshape(-1, 3).tolist()):
        if (s, o) in candidates:
            candidates[(s, o)].add(p)
    rows = []
    for i, info in enumerate(infos):
        rels = np.asarray(info['relations']).reshape(-1, 3).tolist()
        if not rels:
            continue
        img = decode_image(info['img_path'])
        for s, o, p in rels:
            bs, bo = info['instances'][s]['bbox'], info['instances'][o]['bbox']
            union = torch.tensor([[min(bs[0], bo[0]), min(bs[1], bo[1]), max(bs[2], bo[2]), max(bs[3], bo[3])]],
                                 dtype=torch.float32)
            crop = crop_regions([img], torch.zeros(1, dtype=torch.long), union, encoder.preprocess)
            sc, oc = info['instances'][s]['bbox_label'], info['instances'][o]['bbox_label']
            score = {}
            for q in sorted(candidates[(sc, oc)]):
                text = TEMPLATE.format(subject=classes[sc], predicate=predicates[q], object=classes[oc])
                if hasattr(encoder, 'pair_scores'):
                    score[q] = float(encoder.pair_scores(encoder.encode_image(crop), [text])[0])
                else:
                    e_img = F.normalize(encoder.encode_image(crop), dim=-1)
                    e_txt = F.normalize(encoder.encode_text([text]), dim=-1)
                    score[q] = max(float((e_img * e_txt).sum()), 0.0)
            gt = score[p]
            higher = sum(1 for q, v in score.items() if q != p and v > gt)
            equal = sum(1 for q, v in score.items() if q != p and v == gt)
            rank0 = higher + equal / 2
            best = max((v for q, v in score.items() if q != p), default=None)
            confused = -1
            if best is not None and best > gt:
                confused = min(q for q, v in score.items() if q != p and v == best)
            rows.append(dict(image=i, subject=sc, object=oc, predicate=p, score=gt, size=len(score),
                             theta=1 - rank0 / len(score), precision=(higher == 0) / (1 + equal),
                             confused=confused, equal=equal))
    return rows


@pytest.mark.parametrize('name,with_train', [('psg', True), ('vg150', False), ('vg150', True)])
@pytest.mark.parametrize('encoder_cls', [AlignStubEncoder, JointStubEncoder])
def test_equals_loop_reference(samples, name, with_train, encoder_cls):
    dataset = samples[name]['dataset']
    encoder = encoder_cls()
    extra = dataset.metainfo['train_triplets'] if with_train else None
    rows = run_relation_alignment(dataset, encoder, batch_size=5, images_per_chunk=3, device='cpu',
                                  progress=False, extra_triplets=extra)
    ref = reference_rows(dataset, encoder, extra)
    assert len(rows) == len(ref) > 10
    assert sum(r['size'] > 1 for r in ref) >= 3
    if name == 'vg150':
        assert sum(r['equal'] > 0 for r in ref) >= 3  # ties are exercised
    for key in ('image', 'subject', 'object', 'predicate', 'size', 'confused'):
        assert getattr(rows, key).tolist() == [r[key] for r in ref], key
    for key in ('score', 'theta', 'precision'):
        np.testing.assert_allclose(getattr(rows, key), [r[key] for r in ref], rtol=0, atol=1e-6, err_msg=key)
    meta = dataset.metainfo
    summary = alignment_summary(rows, meta['classes'], meta['predicates'], num_confused=5)
    assert summary['dataset']['theta'] == pytest.approx(100 * np.mean([r['theta'] for r in ref]))
    assert summary['dataset']['Precision'] == pytest.approx(100 * np.mean([r['precision'] for r in ref]))
    assert summary['dataset']['Score'] == pytest.approx(100 * np.mean([r['score'] for r in ref]), abs=1e-4)
    for p, pname in enumerate(meta['predicates']):
        mine = [r for r in ref if r['predicate'] == p]
        if mine:
            assert summary['per_predicate'][pname]['theta'] == pytest.approx(100 * np.mean([r['theta'] for r in mine]))
            assert summary['per_predicate'][pname]['num_relations'] == len(mine)
        else:
            assert pname not in summary['per_predicate']
    counts = Counter((r['subject'], r['predicate'], r['object'], r['confused']) for r in ref if r['confused'] >= 0)
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    c, pn = meta['classes'], meta['predicates']
    assert summary['confused'] == [{'groundtruth': f'{c[s]} {pn[p]} {c[o]}', 'confused': f'{c[s]} {pn[q]} {c[o]}',
                                    'count': n} for (s, p, o, q), n in top]


def test_tie_rule_by_hand():
    scores = torch.tensor([[0.5, 0.5, 0.2, -float('inf')],   # GT tied with one other: rank0 = 0.5
                           [0.1, 0.3, 0.3, 0.3],             # GT last of 4
                           [0.7, 0.0, 0.0, 0.0]])            # |L| = 1
    valid = torch.tensor([[True, True, True, False], [True, True, True, True], [True, False, False, False]])
    stats = rank_statistics(scores, torch.tensor([0, 0, 0]), valid)
    assert stats['theta'].tolist() == pytest.approx([1 - 0.5 / 3, 1 - 3 / 4, 1.0])
    assert stats['precision'].tolist() == pytest.approx([0.5, 0.0, 1.0])
    assert stats['best_other'].tolist() == [1, 1, -1]  # the first of tied best others
    # an encoder scoring everything the same is at chance level, not perfect
    flat = rank_statistics(torch.zeros(1, 5), torch.tensor([2]), torch.ones(1, 5, dtype=torch.bool))
    assert float(flat['theta'][0]) == pytest.approx(6 / 10) and float(flat['precision'][0]) == pytest.approx(0.2)


@pytest.mark.parametrize('name', ['psg', 'vg150'])
def test_cli_writes_json_and_markdown(samples, name, tmp_path, capsys):
    config = {'psg': 'configs/relclip/relclip_negclip_psg.py', 'vg150': 'configs/vg150/sgg_sgdet_vg150.py'}[name]
    options = [f'test_dataloader.dataset.data_root={samples[name]["root"]}']
    if name == 'vg150':
        options.append('test_dataloader.dataset.num_val_images=8')
    else:
        options.append('test_dataloader.dataset.with_masks=False')
    out = tmp_path / 'out'
    import sys
    argv = sys.argv
    sys.argv = ['relation_alignment.py', osp.join(ROOT, config), '--encoder', 'type=AlignStubEncoder',
                '--out-dir', str(out), '--batch-size', '7', '--cfg-options', *options]
    try:
        runpy.run_path(osp.join(ROOT, 'tools', 'analysis', 'relation_alignment.py'), run_name='__main__')
    finally:
        sys.argv = argv
    summary = json.loads((out / 'relation_alignment.json').read_text())
    ref = reference_rows(samples[name]['dataset'], AlignStubEncoder())
    assert summary['dataset']['num_relations'] == len(ref)
    assert summary['dataset']['theta'] == pytest.approx(100 * np.mean([r['theta'] for r in ref]))
    markdown = (out / 'relation_alignment.md').read_text()
    assert '| groundtruth triplet | confused triplet | count |' in markdown and 'theta' in markdown
    assert 'relation_alignment.json' in capsys.readouterr().out


def test_encoder_from_config_and_missing_encoder(samples, tmp_path):
    from mmengine.config import Config

    from mmsgg_eval.analysis.relation_alignment import encoder_from_config, run_from_config
    cfg = Config.fromfile(osp.join(ROOT, 'configs/relclip/relclip_negclip_psg.py'))
    encoder, template = encoder_from_config(cfg)
    assert encoder['type'] == 'OpenCLIPEncoder' and template is None
    with pytest.raises(SystemExit, match='no encoder'):
        run_from_config(osp.join(ROOT, 'configs/vg150/sgg_sgdet_vg150.py'), out_dir=str(tmp_path))
