"""The examples of docs/formats.md are real: each marked example is read by its reader on the bundled sample."""
import json
import os.path as osp
import re

import pytest
import torch

from mmsgg_eval.datasets import RSVGDDataset, VG150Dataset
from mmsgg_eval.offline import evaluate_grounding_predictions
from mmsgg_eval.io.formats import open_predictions
from mmsgg_eval.io.samples import DatasetSamples
from mmsgg_eval.io.stream import PredictionStream, StreamWriter
from mmsgg_eval.io.vlm import iter_vlm_answers, parse_vlm_output
from mmsgg_eval.metrics import SGRecall
from mmsgg_eval.testing import make_sample_data
from tests.tool_runs import ROOT

DOC = osp.join(ROOT, 'docs', 'formats.md')


def examples():
    """{name: text} of the blocks after ``<!-- example: NAME -->`` in docs/formats.md."""
    text = open(DOC).read()
    return {m.group(1): m.group(2) for m in
            re.finditer(r'<!-- example: ([\w-]+) -->\n```\w+\n(.*?)\n```', text, re.S)}


@pytest.fixture(scope='module')
def sample(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('formats')
    make_sample_data(str(tmp), datasets=['vg150', 'rsvgd'])
    vg = VG150Dataset(data_root=str(tmp / 'vg150') + '/', split='test', num_val_images=8, pipeline=[])
    rsvgd = RSVGDDataset(data_root=str(tmp / 'rsvgd') + '/', split='test', pipeline=[])
    return dict(tmp=tmp, vg=vg, rsvgd=rsvgd)


def test_every_documented_input_has_an_example():
    assert set(examples()) == {'jsonl', 'vlm', 'graph', 'grounding', 'stream', 'python-gt'}


def test_jsonl_example_is_read_and_recalls_the_gt(sample, tmp_path):
    path = tmp_path / 'p.jsonl'
    path.write_text(examples()['jsonl'] + '\n')
    samples = list(open_predictions('jsonl', str(path), sample['vg'], allow_missing=True))
    first = next(s for s in samples if s['sample_idx'] == 0)
    assert first['img_id'] == 1585
    metric = SGRecall(mode='sgdet', topk=(1, 2, 3))
    metric.dataset_meta = sample['vg'].metainfo
    metric.process({}, [first])
    assert metric.evaluate(1)['sgdet/R@3'] == 100.0  # door on banana (twice in the GT), door has airplane


def test_vlm_answer_and_graph_examples_parse(sample, tmp_path):
    meta = sample['vg'].metainfo
    info = sample['vg'].get_data_info(0)
    path = tmp_path / 'a.jsonl'
    path.write_text(examples()['vlm'] + '\n')
    (where, identity, text), = list(iter_vlm_answers(str(path)))
    assert identity == {'sample_idx': 0, 'img_id': 1585}
    result = parse_vlm_output(text, (info['width'], info['height']), meta['classes'], meta['predicates'])
    assert result.ok and result.names == ['door', 'banana'] and result.rel_labels.tolist() == [30]
    graph = parse_vlm_output(examples()['graph'], (info['width'], info['height']), meta['classes'],
                             meta['predicates'])
    assert graph.ok and graph.labels.tolist() == [37, 0] and graph.rel_labels.tolist() == [19]
    assert graph.rel_scores.tolist() == pytest.approx([0.8])


def test_grounding_example_hits(sample, tmp_path):
    path = tmp_path / 'g.json'
    path.write_text(examples()['grounding'])
    res = evaluate_grounding_predictions(str(path), sample['rsvgd'])
    assert res['grounding/Pr@0.9'] == pytest.approx(100.0 / len(sample['rsvgd']))


def test_stream_example_names_the_fields_of_a_real_record(sample, tmp_path):
    index = DatasetSamples(sample['vg'])
    record = index.gt(0)
    record['pred_relations'] = {'pair_idxs': torch.tensor([[0, 2]]), 'scores': torch.rand(1, 51)}
    path = str(tmp_path / 's.pkl')
    with StreamWriter(path, expected_records=1, dataset_length=1) as writer:
        writer.write(record)
    (_, read), = list(PredictionStream(path))
    documented = set(re.findall(r"'(\w+)': ", examples()['stream']))
    top = {'sample_idx', 'img_id', 'ori_shape', 'gt_instances', 'gt_relations', 'pred_relations'}
    assert top <= documented and top <= set(read)
    assert {'bboxes', 'labels', 'pair_idxs', 'scores'} <= documented


def test_python_gt_example_runs(sample):
    code = examples()['python-gt'].replace("'data/sample/vg150/'", repr(str(sample['tmp'] / 'vg150') + '/'))
    namespace = {}
    exec(code, namespace)
    info, ds = namespace['info'], namespace['ds']
    assert (info['img_id'], info['width'], info['height']) == (1585, 384, 651)
    assert (ds.metainfo['classes'][37], ds.metainfo['predicates'][30]) == ('door', 'on')
    assert info['relations'].tolist()[:2] == [[0, 2, 30], [0, 1, 19]]


def test_synonym_map_as_documented(sample):
    meta = sample['vg'].metainfo
    graph = json.dumps({'objects': [{'id': 'Bloke.1', 'bbox': [0, 0, 500, 500]},
                                    {'id': 'door.1', 'bbox': [0, 0, 9, 9]}],
                        'relationships': [{'subject': 'Bloke.1', 'predicate': 'perched-atop', 'object': 'door.1'}]})
    for synonyms in ({'bloke': 'man', 'perched atop': 'on'},
                     {'objects': {'bloke': 'man'}, 'predicates': {'perched atop': 'on'}}):
        r = parse_vlm_output(graph, (100, 100), meta['classes'], meta['predicates'], synonyms=synonyms)
        assert r.labels.tolist() == [meta['classes'].index('man'), meta['classes'].index('door')]
        assert r.rel_labels.tolist() == [meta['predicates'].index('on')]
    with pytest.raises(ValueError, match='neither classes nor predicates'):
        parse_vlm_output(graph, (100, 100), meta['classes'], meta['predicates'], synonyms={'bloke': 'martian'})
