"""Evaluation states: saved rows summarised again bit for bit, shards merged into exactly
one run (offline CLI shards and a 3-rank gloo run), refusals naming the difference, several prediction files."""
import json
import os
import os.path as osp

import numpy as np
import pytest
import torch

from mmsgg_eval.datasets import RSVGDDataset, VG150Dataset
from mmsgg_eval.testing import make_sample_data
from mmsgg_eval.eval import main
from mmsgg_eval.offline import evaluate_file, evaluate_states
from mmsgg_eval.io.errors import MissingSamplesError
from mmsgg_eval.metrics import SGMeanRecall, SGRecall
from mmsgg_eval.metrics.state import (StateMismatchError, load_state, merge_states, missing_samples,
                                      summarize_state, write_state)
from tests.dist_utils import padded_shard, run_distributed
from tests.offline.test_eval_cli import predictions_for
from tests.metrics.test_relclip import image_path  # noqa: F401  (fixture)
from tests.tool_runs import frequency_baseline_on_sample, run_tool

ROOT = osp.abspath(osp.join(osp.dirname(__file__), '..', '..'))
CONFIG = osp.join(ROOT, 'configs', 'demo', 'freq_predcls_vg150_sample.py')
GROUNDING_CONFIG = osp.join(ROOT, 'configs', 'rsvgd', 'grounding_rsvgd.py')
SG = ['SGRecall', 'SGMeanRecall']


@pytest.fixture(scope='module')
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp('states')
    make_sample_data(str(out), datasets=['vg150', 'rsvgd'])
    root = str(out / 'vg150') + '/'
    dataset = VG150Dataset(data_root=root, split='test', num_val_images=8, pipeline=[])
    grounding_root = str(out / 'rsvgd') + '/'
    return dict(root=root, dataset=dataset, options={'test_dataloader.dataset.data_root': root},
                grounding_root=grounding_root,
                grounding=RSVGDDataset(data_root=grounding_root, split='test', pipeline=[]))


@pytest.fixture(scope='module')
def sgdet_recall(data, tmp_path_factory):
    """One offline SGDet run of SGRecall over every record with ``save_state`` (keys, work dir, states dir), shared by
    the tests that only read its outputs."""
    return sg_run(data, tmp_path_factory.mktemp('sgdet_recall'), 'run', predictions_for(data['dataset']), 'sgdet',
                  None, metrics=['SGRecall'])


def metric_samples(dataset, records):
    """Data-sample dicts of JSONL-style records, GT from the dataset (as the JSONL reader builds them)."""
    from mmsgg_eval.io.samples import DatasetSamples
    index = DatasetSamples(dataset)
    return [dict(index.gt(r['sample_idx']), **r) for r in records]


def write_jsonl(path, records):
    path.write_text('\n'.join(json.dumps(r) for r in records))
    return str(path)


def shards_of(records, count):
    """``count`` disjoint shards, not contiguous (every ``count``-th record), as strided jobs write them."""
    return [records[k::count] for k in range(count)]


def files_of(work_dir):
    """Every file a run wrote into its work dir (bytes), and metrics.json without its provenance."""
    out = {}
    for name in sorted(os.listdir(work_dir)):
        path = osp.join(work_dir, name)
        if name == 'metrics.json':
            content = json.load(open(path))
            content.pop('provenance')
            out[name] = content
        elif osp.isfile(path):
            out[name] = open(path, 'rb').read()
    return out


def sg_run(data, tmp, name, records, mode, protocol, metrics=SG, shard=False, **kwargs):
    work, states = tmp / name, tmp / f'{name}.states'
    res = evaluate_file(CONFIG, write_jsonl(tmp / f'{name}.jsonl', records), metrics=metrics, mode=mode,
                        work_dir=str(work), cfg_options=data['options'], progress=False, protocol=protocol,
                        save_state=str(states), shard=shard, **kwargs)
    return res, str(work), str(states)


@pytest.mark.parametrize('mode,protocol,options', [('predcls', None, None), ('sgcls', None, None),
                                                   ('sgdet', None, None), ('sgdet', 'openpsg', {'match': 'box'}),
                                                   ('predcls', 'r1sgg', None)])
def test_from_state_and_merged_shards_equal_the_run(data, tmp_path, mode, protocol, options):
    records = predictions_for(data['dataset'])
    full, work, states = sg_run(data, tmp_path, 'full', records, mode, protocol, metric_options=options)
    again = evaluate_states([states], work_dir=str(tmp_path / 'again'))
    assert again == full  # the same keys, bit for bit
    expected = files_of(work)
    assert 'sgdet.per_predicate.png' in expected or f'{mode}.per_predicate.png' in expected
    assert files_of(str(tmp_path / 'again')) == expected  # metrics.json, reports, charts, tables
    for count in (1, 2, 3) if (mode, protocol) == ('sgdet', None) else (3,):
        dirs = [sg_run(data, tmp_path, f's{count}_{k}', part, mode, protocol, shard=True, metric_options=options)[2]
                for k, part in enumerate(shards_of(records, count))]
        merged_dir = tmp_path / f'merged{count}'
        assert evaluate_states(dirs, work_dir=str(merged_dir)) == full
        assert files_of(str(merged_dir)) == expected


def test_merged_tables_equal_the_tables_of_one_run(data, tmp_path, sgdet_recall):
    records = predictions_for(data['dataset'])
    _, work, states = sgdet_recall
    full = load_state(osp.join(states, 'sgdet.recall.state'))
    parts = [load_state(osp.join(sg_run(data, tmp_path, f'p{k}', part, 'sgdet', None, metrics=['SGRecall'],
                                        shard=True)[2], 'sgdet.recall.state'))
             for k, part in enumerate(shards_of(records, 3))]
    merged = merge_states(parts[::-1])  # any order of the shards
    assert merged.tables.keys() == full.tables.keys()
    for table, columns in full.tables.items():
        for name, column in columns.items():
            assert torch.equal(merged.tables[table][name], column), (table, name)
            assert merged.tables[table][name].dtype == column.dtype
    assert merged.dataset == full.dataset and merged.dataset['gt_hash'] is not None
    assert missing_samples(merged) == [] and missing_samples(parts[0]) == [1, 2, 4, 5, 7, 8, 10, 11]
    keys, summary = summarize_state(merged)
    assert {f'sgdet/{k}': v for k, v in keys.items()} == {k: v for k, v in
                                                           json.load(open(osp.join(work, 'metrics.json'))).items()
                                                           if k in {f'sgdet/{k}' for k in keys}}
    assert summary['num_missing_predictions'] == 0


def test_sgbench_vlm_and_grounding_states(data, tmp_path):
    records = predictions_for(data['dataset'])
    full, work, states = sg_run(data, tmp_path, 'bench', records, 'sgdet', None, metrics=['SGBenchMetric'])
    dirs = [sg_run(data, tmp_path, f'bench{k}', part, 'sgdet', None, metrics=['SGBenchMetric'], shard=True)[2]
            for k, part in enumerate(shards_of(records, 2))]
    assert evaluate_states(dirs, work_dir=str(tmp_path / 'bench_merged')) == full
    assert files_of(str(tmp_path / 'bench_merged')) == files_of(work)

    answers = vlm_answers(data['dataset'])
    full = evaluate_file(CONFIG, write_jsonl(tmp_path / 'answers.jsonl', answers), fmt='vlm',
                         work_dir=str(tmp_path / 'vlm'), cfg_options=data['options'], progress=False,
                         save_state=str(tmp_path / 'vlm.states'))
    for k, part in enumerate(shards_of(answers, 3)):  # several answer files at once (a glob), no state needed
        write_jsonl(tmp_path / f'answers_{k}.jsonl', part)
    several = evaluate_file(CONFIG, str(tmp_path / 'answers_*.jsonl'), fmt='vlm', work_dir=str(tmp_path / 'vlm3'),
                            cfg_options=data['options'], progress=False)
    assert several == full and full['vlm/Recall'] > 50
    dirs = []
    for k in range(3):
        dirs.append(str(tmp_path / f'vlm{k}.states'))
        evaluate_file(CONFIG, str(tmp_path / f'answers_{k}.jsonl'), fmt='vlm', work_dir=str(tmp_path / f'v{k}'),
                      cfg_options=data['options'], progress=False, save_state=dirs[-1], shard=True)
    assert evaluate_states(dirs, work_dir=str(tmp_path / 'vlm_merged')) == full
    assert files_of(str(tmp_path / 'vlm_merged')) == files_of(str(tmp_path / 'vlm'))

    preds = grounding_predictions(data['grounding'])
    options = {'test_dataloader.dataset.data_root': data['grounding_root']}
    (tmp_path / 'g.json').write_text(json.dumps(preds))
    full = evaluate_file(GROUNDING_CONFIG, str(tmp_path / 'g.json'), fmt='grounding', work_dir=str(tmp_path / 'g'),
                         cfg_options=options, progress=False, save_state=str(tmp_path / 'g.states'))
    dirs = []
    for k, part in enumerate(shards_of(preds, 2)):
        (tmp_path / f'g{k}.json').write_text(json.dumps(part))
        dirs.append(str(tmp_path / f'g{k}.states'))
        evaluate_file(GROUNDING_CONFIG, str(tmp_path / f'g{k}.json'), fmt='grounding', cfg_options=options,
                      work_dir=str(tmp_path / f'gw{k}'), progress=False, save_state=dirs[-1], shard=True)
    assert evaluate_states(dirs, work_dir=str(tmp_path / 'g_merged')) == full
    assert files_of(str(tmp_path / 'g_merged')) == files_of(str(tmp_path / 'g'))


def vlm_answers(dataset):
    """Answers giving back 1-3 GT relations per image on the 0-1000 canvas (image 1: a refusal)."""
    meta, lines = dataset.metainfo, []
    for i in range(len(dataset)):
        info = dataset.get_data_info(i)
        scale = 1000.0 / np.array([info['width'], info['height']] * 2)
        boxes = np.rint(np.array([o['bbox'] for o in info['instances']]) * scale).astype(int).tolist()
        names = [f"{meta['classes'][o['bbox_label']]}.{j}" for j, o in enumerate(info['instances'])]
        graph = {'objects': [dict(id=n, bbox=b) for n, b in zip(names, boxes)],
                 'relationships': [dict(subject=names[s], predicate=meta['predicates'][p], object=names[o])
                                   for s, o, p in np.asarray(info['relations'])[:i % 3 + 1].tolist()]}
        lines.append({'sample_idx': i, 'output': 'I cannot see the image.' if i == 1 else json.dumps(graph)})
    return lines


def grounding_predictions(dataset):
    preds = []
    for i in range(len(dataset)):
        x1, y1, x2, y2 = dataset.get_data_info(i)['instances'][0]['bbox']
        shift = (i % 3) * 0.3 * (x2 - x1)
        preds.append({'sample_idx': i, 'bbox': [x1 + shift, y1, x2 + shift, y2]})
    return preds


def test_refusals_name_the_difference(data, tmp_path):
    records = predictions_for(data['dataset'])
    halves = shards_of(records, 2)
    a = sg_run(data, tmp_path, 'a', halves[0], 'sgdet', None, metrics=['SGRecall'], shard=True)[2]
    b = sg_run(data, tmp_path, 'b', halves[1], 'sgdet', None, metrics=['SGRecall'], shard=True)[2]
    overlap = sg_run(data, tmp_path, 'o', records[:3], 'sgdet', None, metrics=['SGRecall'], shard=True)[2]
    with pytest.raises(StateMismatchError, match=r'3 samples .* also in an earlier state .*first sample_idx: 0, 1, 2'):
        evaluate_states([a, b, overlap], work_dir=str(tmp_path / 'x'))
    other_iou = sg_run(data, tmp_path, 'i', halves[1], 'sgdet', None, metrics=['SGRecall'], shard=True,
                       metric_options={'iou_thr': 0.6})[2]
    with pytest.raises(StateMismatchError, match=r"different settings \(iou_thr: not given vs 0.6\)"):
        evaluate_states([a, other_iou], work_dir=str(tmp_path / 'x'))
    other_protocol = sg_run(data, tmp_path, 'p', halves[1], 'sgdet', 'r1sgg', metrics=['SGRecall'], shard=True)[2]
    with pytest.raises(StateMismatchError, match=r"different settings \(protocol: 'sgb' vs 'r1sgg'\)"):
        evaluate_states([a, other_protocol], work_dir=str(tmp_path / 'x'))
    state_a, state_b = load_state(osp.join(a, 'sgdet.recall.state')), load_state(osp.join(b, 'sgdet.recall.state'))
    state_b.dataset = dict(state_b.dataset, gt_hash='0' * 64)  # e.g. a shard evaluated on another annotation file
    with pytest.raises(StateMismatchError, match=r'different GT \(hash of the dataset annotations\)'):
        merge_states([state_a, state_b])
    # missing samples: refused as missing predictions are; --covered-only summarises the rest
    with pytest.raises(MissingSamplesError, match=r'6 of the 13 dataset samples have no prediction.*--covered-only'):
        evaluate_states([a], work_dir=str(tmp_path / 'x'))
    alone = evaluate_states([a], work_dir=str(tmp_path / 'x'), covered_only=True)
    assert alone == sg_run(data, tmp_path, 'a2', halves[0], 'sgdet', None, metrics=['SGRecall'], shard=True)[0]


def test_cli_from_state_shards_and_errors(data, tmp_path, capsys):
    records = predictions_for(data['dataset'])
    for k, part in enumerate(shards_of(records, 3)):
        write_jsonl(tmp_path / f'preds_{k}.jsonl', part)
    common = ['--metrics', *SG, '--mode', 'sgdet', '--no-progress', '--cfg-options',
              f'test_dataloader.dataset.data_root={data["root"]}']
    several = main([CONFIG, *(str(tmp_path / f'preds_{k}.jsonl') for k in range(3)), '--work-dir',
                    str(tmp_path / 'w'), '--save-state', str(tmp_path / 'st'), *common])
    assert several == evaluate_file(CONFIG, write_jsonl(tmp_path / 'all.jsonl', records), metrics=SG, mode='sgdet',
                                    work_dir=str(tmp_path / 'w1'), cfg_options=data['options'], progress=False)
    assert sorted(os.listdir(tmp_path / 'st')) == ['sgdet.mean_recall.state', 'sgdet.recall.state']
    again = main(['--from-state', str(tmp_path / 'st' / '*.state'), '--work-dir', str(tmp_path / 'w2')])
    assert again == several and files_of(str(tmp_path / 'w2')) == files_of(str(tmp_path / 'w'))
    provenance = json.load(open(tmp_path / 'w2' / 'metrics.json'))['provenance']
    assert len(provenance['states']) == 2 and provenance['dataset']['num_samples'] == 13
    resaved = main(['--from-state', str(tmp_path / 'st'), '--work-dir', str(tmp_path / 'w4'), '--save-state',
                    str(tmp_path / 'st2')])  # the (merged) states written again: the same rows
    assert resaved == several and sorted(os.listdir(tmp_path / 'st2')) == sorted(os.listdir(tmp_path / 'st'))
    for name in os.listdir(tmp_path / 'st'):
        first, second = load_state(str(tmp_path / 'st' / name)), load_state(str(tmp_path / 'st2' / name))
        assert first.dataset == second.dataset and first.settings == second.settings
        assert all(torch.equal(second.tables[t][c], v) for t, cols in first.tables.items() for c, v in cols.items())
    with pytest.raises(OSError, match='--save-state'):
        (tmp_path / 'file').write_text('x')
        evaluate_file(CONFIG, str(tmp_path / 'preds_0.jsonl'), save_state=str(tmp_path / 'file' / 'sub'),
                      cfg_options=data['options'], metrics=SG, progress=False, work_dir=str(tmp_path / 'w5'))
    # a sample in two prediction files: refused, naming both places
    write_jsonl(tmp_path / 'dup.jsonl', records[:1])
    with pytest.raises(SystemExit):
        main([CONFIG, str(tmp_path / 'preds_0.jsonl'), str(tmp_path / 'dup.jsonl'), '--work-dir',
              str(tmp_path / 'w3'), *common])
    err = capsys.readouterr().err
    assert 'sample_idx=0 was already predicted at' in err and 'preds_0.jsonl' in err and 'dup.jsonl' in err
    with pytest.raises(SystemExit):
        main([CONFIG, str(tmp_path / 'preds_0.jsonl'), '--work-dir', str(tmp_path / 'w3'), *common])
    assert '8 of the 13 dataset samples have no prediction' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(['--from-state', str(tmp_path / 'nothing_here.state')])
    assert 'evaluation state not found' in capsys.readouterr().err
    (tmp_path / 'bad.state').write_bytes(b'not a state')
    with pytest.raises(SystemExit):
        main(['--from-state', str(tmp_path / 'bad.state')])
    assert 'not an mmsgg_eval evaluation state' in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argument error: exit status 2
        main(['--from-state', str(tmp_path / 'st'), CONFIG])
    with pytest.raises(ValueError, match='--shard .* --save-state'):
        evaluate_file(CONFIG, str(tmp_path / 'preds_0.jsonl'), shard=True)


def test_safe_formats_and_metric_argument(data, tmp_path, monkeypatch):
    """``save_state=PATH`` on the metric; the safetensors file and the torch fallback read the same (no pickle:
    the fallback loads with ``weights_only=True``)."""
    samples = metric_samples(data['dataset'], predictions_for(data['dataset']))
    metric = SGMeanRecall(mode='sgcls', save_state=str(tmp_path / 'm.state'), topk=(5, 20))
    metric.dataset_meta = data['dataset'].metainfo
    metric.process({}, samples)
    keys = metric.evaluate(len(samples))
    state = load_state(str(tmp_path / 'm.state'))
    assert open(tmp_path / 'm.state', 'rb').read(2) != b'PK'  # safetensors
    assert state.settings['topk'] == [5, 20] and state.protocol == 'sgb' and state.dataset['gt_hash'] is None
    assert state.conventions == metric.conventions and state.dataset['name'] == 'VG150'
    import builtins
    real_import = builtins.__import__

    def no_safetensors(name, *args, **kwargs):
        if name.startswith('safetensors'):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, '__import__', no_safetensors)
    write_state(state, str(tmp_path / 't.state'))
    assert open(tmp_path / 't.state', 'rb').read(2) == b'PK'  # torch.save zip of plain tensors
    other = load_state(str(tmp_path / 't.state'))
    monkeypatch.undo()
    for table, columns in state.tables.items():
        for name, column in columns.items():
            assert torch.equal(other.tables[table][name], column)
    assert np.array_equal(other.dataset_meta['train_triplets'], data['dataset'].metainfo['train_triplets'])
    assert other.dataset_meta['classes'] == data['dataset'].metainfo['classes']
    assert {f'sgcls/{k}': v for k, v in summarize_state(other)[0].items()} == keys


def test_rows_without_sample_idx_are_refused(data, tmp_path):
    samples = metric_samples(data['dataset'], predictions_for(data['dataset'])[:2])
    for s in samples:
        del s['sample_idx']
    metric = SGRecall(mode='sgdet', save_state=str(tmp_path / 'x.state'))
    metric.dataset_meta = data['dataset'].metainfo
    metric.process({}, samples)
    with pytest.warns(UserWarning):
        with pytest.raises(ValueError, match='carry no `sample_idx`'):
            metric.evaluate(2)
    assert not osp.exists(tmp_path / 'x.state')


def _rank_worker(rank, world_size, root, records, state_dir):
    dataset = VG150Dataset(data_root=root, split='test', num_val_images=8, pipeline=[])
    samples = metric_samples(dataset, records)
    mine = [samples[i] for i in padded_shard(len(samples), world_size, rank)]
    out = {}
    for cls, name in ((SGRecall, 'recall'), (SGMeanRecall, 'mean_recall')):
        metric = cls(mode='sgdet', save_state=osp.join(state_dir, f'sgdet.{name}.state'))
        metric.dataset_meta = dataset.metainfo
        for start in range(0, len(mine), 4):
            metric.process({}, mine[start:start + 4])
        out.update(metric.evaluate(len(dataset)))
    return out


def test_three_gloo_ranks_equal_merged_shards(data, tmp_path):
    records = predictions_for(data['dataset'])
    ranks = run_distributed(_rank_worker, 3, data['root'], records, str(tmp_path / 'dist'))
    assert ranks[0] == ranks[1] == ranks[2]
    assert sorted(os.listdir(tmp_path / 'dist')) == ['sgdet.mean_recall.state', 'sgdet.recall.state']
    dist = {n: load_state(str(tmp_path / 'dist' / f'sgdet.{n}.state')) for n in ('recall', 'mean_recall')}
    shard_dirs = [str(tmp_path / f'one{k}') for k in range(3)]
    for k, part in enumerate(shards_of(records, 3)):  # one process per shard, merged afterwards
        _rank_worker(0, 1, data['root'], part, shard_dirs[k])
    for name, state in dist.items():
        merged = merge_states([load_state(osp.join(d, f'sgdet.{name}.state')) for d in shard_dirs])
        for table, columns in state.tables.items():
            for column, values in columns.items():
                assert torch.equal(merged.tables[table][column], values), (name, table, column)
        assert {f'sgdet/{k}': v for k, v in summarize_state(merged)[0].items()}.items() <= ranks[0].items()


def test_relclip_states_merge_without_the_encoder(image_path, tmp_path):
    """RelCLIPScore: the encoder is recorded by name and not needed to summarise (a rebuilt metric refuses to
    encode); two halves merge into the full run."""
    from mmsgg_eval.metrics import RelCLIPScore
    from tests.metrics.test_relclip import META, StubEncoder, dataset as relclip_dataset
    samples = relclip_dataset(image_path)

    def run(part, name):
        metric = RelCLIPScore(encoder=StubEncoder(), topk=3, save_state=str(tmp_path / f'{name}.state'))
        metric.dataset_meta = META
        metric.process({}, part)
        return metric.evaluate(len(samples))
    full = run(samples, 'full')
    run(samples[:4], 'a'), run(samples[4:], 'b')
    merged = merge_states([load_state(str(tmp_path / f'{n}.state')) for n in 'ab'])
    assert merged.settings['encoder'] == 'tests.metrics.test_relclip.StubEncoder' and merged.settings['topk'] == 3
    keys, _ = summarize_state(merged)
    assert {f'{merged.prefix}/{k}': v for k, v in keys.items()} == full
    with pytest.raises(RuntimeError, match='rebuilt from an evaluation state'):
        merged.build_metric().encoder.encode_text(['a'])


def test_tools_test_save_state_then_from_state(tmp_path):
    """``tools/test.py --save-state DIR`` (the model run) and ``--from-state DIR``: the same metrics.json."""
    pytest.importorskip('mmdet.datasets', reason='tools/test.py needs mmdet with compiled mmcv')
    _, options, ckpt, _ = frequency_baseline_on_sample(tmp_path, 'vg150', CONFIG)
    work, states = tmp_path / 'work', tmp_path / 'states'
    out = run_tool(['tools/test.py', CONFIG, ckpt, '--work-dir', str(work), '--save-state', str(states),
               '--cfg-options', *options])
    assert out.returncode == 0, out.stderr
    assert sorted(os.listdir(states)) == ['predcls.mean_recall.state', 'predcls.recall.state']
    out = run_tool(['tools/eval_offline.py', '--from-state', str(states), '--work-dir', str(tmp_path / 'again')])
    assert out.returncode == 0, out.stderr
    original, again = files_of(str(work)), files_of(str(tmp_path / 'again'))
    assert again['metrics.json'] == original['metrics.json']
    assert {k: v for k, v in original.items() if k in again} == again
    assert load_state(str(states / 'predcls.recall.state')).dataset['gt_hash'] == \
        load_state(str(states / 'predcls.mean_recall.state')).dataset['gt_hash'] is not None


def test_state_globs_shard_counts_and_the_two_missing_options(data, tmp_path, capsys):
    """A quoted glob matching state DIRECTORIES ('job_*/states') reads their states; a shard run says how many
    samples it evaluated (not the dataset's length); --allow-missing (score missing samples as empty
    predictions) is refused with --from-state, which names --covered-only (summarise the covered samples)."""
    records = predictions_for(data['dataset'])
    common = ['--metrics', 'SGRecall', '--mode', 'sgdet', '--no-progress', '--cfg-options',
              f'test_dataloader.dataset.data_root={data["root"]}']
    for k, part in enumerate(shards_of(records, 3)):
        capsys.readouterr()
        main([CONFIG, write_jsonl(tmp_path / f'p{k}.jsonl', part), '--shard', '--save-state',
              str(tmp_path / f'job_{k}' / 'states'), '--work-dir', str(tmp_path / f'w{k}'), *common])
        printed = capsys.readouterr().out
        assert f'{len(part)} samples of the 13 of the dataset evaluated (shard)' in printed, printed
    full = evaluate_file(CONFIG, write_jsonl(tmp_path / 'all.jsonl', records), metrics=['SGRecall'], mode='sgdet',
                         work_dir=str(tmp_path / 'wf'), cfg_options=data['options'], progress=False)
    pattern = str(tmp_path / 'job_*' / 'states')
    assert main(['--from-state', pattern, '--work-dir', str(tmp_path / 'merged')]) == full
    with pytest.raises(SystemExit) as info:
        main(['--from-state', str(tmp_path / 'job_0' / 'states'), '--allow-missing', '--work-dir',
              str(tmp_path / 'x')])
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert '--allow-missing scores samples without a prediction as empty predictions' in err and \
        '--covered-only' in err
    partial = main(['--from-state', str(tmp_path / 'job_0' / 'states'), '--covered-only', '--work-dir',
                    str(tmp_path / 'y')])
    assert partial == evaluate_states([str(tmp_path / 'job_0' / 'states')], work_dir=str(tmp_path / 'z'),
                                      covered_only=True)
    with pytest.raises(SystemExit) as info:  # --covered-only is an option of --from-state
        main([CONFIG, str(tmp_path / 'p0.jsonl'), '--covered-only', *common])
    assert info.value.code == 2


def test_state_files_follow_the_umask(data, tmp_path):
    """States are written with the mode every other output gets (0666 less the umask), not 0600."""
    samples = metric_samples(data['dataset'], predictions_for(data['dataset'])[:3])
    saved = os.umask(0o022)
    try:
        for name in ('a', 'b'):
            metric = SGRecall(mode='sgdet', save_state=str(tmp_path / f'{name}.state'), prefix=name)
            metric.dataset_meta = data['dataset'].metainfo
            metric.process({}, samples)
            metric.evaluate(13)
        os.umask(0o002)
        write_state(load_state(str(tmp_path / 'a.state')), str(tmp_path / 'c.state'))
    finally:
        os.umask(saved)
    assert os.stat(tmp_path / 'a.state').st_mode & 0o777 == 0o644
    assert os.stat(tmp_path / 'c.state').st_mode & 0o777 == 0o664


def test_output_locations_are_checked_before_any_work(data, tmp_path, capsys, monkeypatch, sgdet_recall):
    """--from-state with --save-state FILE (a file, not a directory) or an unwritable --work-dir: exit 1 with one
    line before any metric is summarised; a metric's save_state= whose folder cannot be written (or that names a
    directory) fails at the first process(), as its other outputs do."""
    records = predictions_for(data['dataset'])
    _, _, states = sgdet_recall
    (tmp_path / 'a_file').write_text('x')
    import mmsgg_eval.metrics.state as state_module
    summarised = []
    original = state_module.evaluate_state
    monkeypatch.setattr(state_module, 'evaluate_state', lambda *a, **k: summarised.append(1) or original(*a, **k))
    for extra in (['--save-state', str(tmp_path / 'a_file')], ['--work-dir', str(tmp_path / 'a_file' / 'w')]):
        capsys.readouterr()
        with pytest.raises(SystemExit) as info:
            main(['--from-state', states, '--work-dir', str(tmp_path / 'w'), *extra])
        assert info.value.code == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 2 and 'a_file is a file, not a directory' in err[0], err
        assert 'Traceback' not in '\n'.join(err)
    assert not summarised and not (tmp_path / 'w' / 'metrics.json').exists()
    samples = metric_samples(data['dataset'], records[:2])
    for target, expected in ((tmp_path / 'a_file' / 'x.state', 'save_state directory'),
                             (tmp_path, 'is a directory')):
        metric = SGRecall(mode='sgdet', save_state=str(target))
        metric.dataset_meta = data['dataset'].metainfo
        with pytest.raises(OSError, match=expected):
            metric.process({}, samples)


def test_output_arguments_are_never_taken_from_a_state(data, tmp_path, capsys, sgdet_recall):
    """A state is untrusted input: output arguments in its settings (outfile_prefix, report_dir, per_image_out,
    ...) are dropped with a warning, so --from-state writes only under --work-dir; a prefix that is not a plain
    name (it names files) is refused."""
    _, _, states = sgdet_recall
    path = osp.join(states, 'sgdet.recall.state')
    state = load_state(path)
    outside = tmp_path / 'outside'
    state.settings = dict(state.settings, outfile_prefix=str(outside / 'x'), per_image_out=str(outside / 'p.jsonl'),
                          report_dir=str(outside))
    write_state(state, str(tmp_path / 'crafted' / 'sgdet.recall.state'))
    with pytest.warns(UserWarning, match='outfile_prefix, per_image_out, report_dir .* ignored'):
        again = evaluate_states([str(tmp_path / 'crafted')], work_dir=str(tmp_path / 'w'))
    assert again == evaluate_states([states], work_dir=str(tmp_path / 'w0'))
    assert not outside.exists() and (tmp_path / 'w' / 'metrics.json').exists()
    for prefix in ('../escape', '..'):
        bad = load_state(path)
        bad.settings = dict(bad.settings, prefix=prefix)
        write_state(bad, str(tmp_path / 'bad' / 'sgdet.recall.state'))
        with pytest.raises(SystemExit) as info:
            main(['--from-state', str(tmp_path / 'bad'), '--work-dir', str(tmp_path / 'w2')])
        assert info.value.code == 1
        assert 'is not a plain name' in capsys.readouterr().err
    assert not (tmp_path / 'escape.metrics.json').exists()


def test_a_state_without_a_column_the_metric_reads_is_refused_naming_it(data, tmp_path, capsys, sgdet_recall):
    """A state written before a row column existed (here: the first-hit rank column removed, as an older version
    would have written it) is refused with the file, the version that wrote it and the column; a column the
    metric does not read is no obstacle."""
    _, _, states = sgdet_recall
    path = osp.join(states, 'sgdet.recall.state')
    state = load_state(path)
    table, column = next((t, c) for t, cols in state.tables.items() for c in cols if c != 'sample_idx')
    old = load_state(path)
    del old.tables[table][column], old.schema[table][column]
    old.version = '0.0.1'
    write_state(old, str(tmp_path / 'old' / 'sgdet.recall.state'))
    with pytest.raises(SystemExit) as info:
        main(['--from-state', str(tmp_path / 'old'), '--work-dir', str(tmp_path / 'w')])
    assert info.value.code == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if 'written by mmsgg_eval' in line]
    assert len(lines) == 1 and ': error: ' in lines[0], lines
    assert 'written by mmsgg_eval 0.0.1' in lines[0] and f'no column {table}.{column}' in lines[0]
    assert 'sgdet.recall.state' in lines[0]
    extra = load_state(path)
    extra.tables[table]['unused_column'] = torch.zeros_like(extra.tables[table]['sample_idx'])
    extra.schema[table]['unused_column'] = ['int64', []]
    write_state(extra, str(tmp_path / 'extra' / 'sgdet.recall.state'))
    assert evaluate_states([str(tmp_path / 'extra')], work_dir=str(tmp_path / 'w1')) == \
        evaluate_states([states], work_dir=str(tmp_path / 'w0'))
