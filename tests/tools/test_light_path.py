"""The light path (``bash tools/setup_env.sh --offline``): offline evaluation needs neither mmcv's compiled ops nor
mmdet's models or datasets.

One subprocess runs every offline entry point on the sample data with an import hook on ``sys.meta_path`` that
makes importing ``mmcv._ext``, ``mmdet.models`` and ``mmdet.datasets`` (and their submodules) fail: the
offline CLI on every input format for every dataset wrapper, ``--save-state`` / ``--from-state``, ``compare``,
the HTML report with and without pictures, and the metrics from plain Python. A future import that breaks the
rule fails here. The numbers are compared with the same evaluations run in this (full) process.
"""
import json
import os
import os.path as osp
import subprocess
import sys

import numpy as np
import pytest
import torch

from mmsgg_eval.offline import evaluate_file
from mmsgg_eval.io.samples import DatasetSamples
from mmsgg_eval.testing import make_sample_data
from mmsgg_eval.testing.predictions import grounding_predictions, sgdet_records, vlm_answer_lines
from tests.tool_runs import ROOT

BLOCKED = ('mmcv._ext', 'mmdet.models', 'mmdet.datasets')

#: Run under the import hook: ``python -c DRIVER PLAN.json OUT.json``; each step of the plan is one entry point.
DRIVER = r'''
import importlib.abc, json, runpy, sys, traceback
BLOCKED = %r
class BlockHeavyImports(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + '.') for b in BLOCKED):
            raise ImportError(f'light path: importing {name} is not allowed (offline evaluation must not need it)')
        return None
sys.meta_path.insert(0, BlockHeavyImports())
plan, out_path = json.load(open(sys.argv[1])), sys.argv[2]
results = {}
for name, kind, args in plan:
    try:
        if kind == 'eval':
            from mmsgg_eval.eval import main
            value = main(args)
        elif kind == 'compare':
            from mmsgg_eval.compare import main
            main(args)
            value = {}
        elif kind == 'script':
            sys.argv = list(args)
            runpy.run_path(args[0], run_name='__main__')
            value = {}
        else:  # plain Python
            namespace = {}
            exec(args, namespace)
            value = namespace['result']
        results[name] = {k: v for k, v in (value or {}).items() if isinstance(v, (int, float))}
    except BaseException as err:  # noqa: BLE001 - every failure is reported with its step
        results[name] = {'error': f'{type(err).__name__}: {err}', 'traceback': traceback.format_exc()[-3000:]}
loaded = sorted(m for m in sys.modules if any(m == b or m.startswith(b + '.') for b in BLOCKED))
results['__loaded_blocked__'] = {'modules': loaded}
json.dump(results, open(out_path, 'w'))
''' % (BLOCKED,)

CONFIGS = dict(vg150='configs/demo/freq_predcls_vg150_sample.py', gqa200='configs/gqa200/sgg_predcls_gqa200.py',
               psg='configs/psg/sgg_predcls_psg.py', rsvgd='configs/rsvgd/grounding_rsvgd.py')


def write_inputs(name, dataset, folder):
    """The offline inputs of one scene-graph dataset: stream, JSONL, legacy dump, VLM answers (PSG: OpenPSG)."""
    from mmsgg_eval.io.stream import StreamWriter
    from tests.io.test_legacy import fake_maskrcnn_benchmark
    records = sgdet_records(dataset)
    paths = {}
    paths['jsonl'] = osp.join(folder, f'{name}.jsonl')
    with open(paths['jsonl'], 'w') as f:
        f.write('\n'.join(json.dumps(r) for r in records))
    index = DatasetSamples(dataset)
    paths['dump'] = osp.join(folder, f'{name}.pkl')
    writer = StreamWriter(paths['dump'], expected_records=len(dataset), dataset_length=len(dataset), config='c.py')
    for r in records:
        s = index.gt(r['sample_idx'])
        s.update({g: {k: torch.as_tensor(np.asarray(v)) for k, v in r[g].items()}
                  for g in ('pred_instances', 'pred_relations')})
        writer.write(s)
    writer.close()
    paths['vlm'] = osp.join(folder, f'{name}_vlm.jsonl')
    with open(paths['vlm'], 'w') as f:
        f.write('\n'.join(json.dumps(x) for x in vlm_answer_lines(dataset)))
    with fake_maskrcnn_benchmark() as BoxList:  # the legacy dump of the same predictions (1-based labels)
        gts, preds = [], []
        for r in records:
            info = dataset.get_data_info(r['sample_idx'])
            g = BoxList([inst['bbox'] for inst in info['instances']], (info['width'], info['height']))
            g.add_field('labels', torch.tensor([inst['bbox_label'] + 1 for inst in info['instances']]))
            rels = torch.as_tensor(np.asarray(info['relations'], np.int64).reshape(-1, 3))
            g.add_field('relation_tuple', torch.cat([rels[:, :2], rels[:, 2:] + 1], 1))
            p = BoxList(r['pred_instances']['bboxes'], (info['width'], info['height']))
            p.add_field('pred_labels', torch.tensor(r['pred_instances']['labels']) + 1)
            p.add_field('pred_scores', torch.tensor(r['pred_instances']['scores']))
            p.add_field('rel_pair_idxs', torch.tensor(r['pred_relations']['pair_idxs']).reshape(-1, 2))
            p.add_field('pred_rel_scores', torch.tensor(r['pred_relations']['scores'], dtype=torch.float32))
            gts.append(g)
            preds.append(p)
        paths['legacy'] = osp.join(folder, f'{name}_eval_results.pytorch')
        torch.save({'groundtruths': gts, 'predictions': preds}, paths['legacy'])
    if name == 'psg':
        from tests.io.test_openpsg_results import write_openpsg_results
        paths['openpsg'] = osp.join(folder, 'psg_result.pkl')
        write_openpsg_results(dataset, paths['openpsg'], mode='sgdet', with_masks=True)
    return paths


@pytest.fixture(scope='module')
def light(tmp_path_factory):
    """Every entry point run once under the import hook; the plan, the inputs and the results."""
    from mmengine.config import Config
    from mmsgg_eval.offline import build_dataset
    tmp = tmp_path_factory.mktemp('light')
    make_sample_data(str(tmp))
    plan, inputs = [], {}
    for name, config in CONFIGS.items():
        root = str(tmp / name) + '/'
        config = osp.join(ROOT, config)
        opts = ['--cfg-options', f'test_dataloader.dataset.data_root={root}']
        if name == 'rsvgd':
            from mmsgg_eval.datasets import RSVGDDataset
            dataset = RSVGDDataset(data_root=root, split='test', pipeline=[])
            preds = grounding_predictions(dataset)
            path = str(tmp / 'grounding.json')
            with open(path, 'w') as f:
                json.dump(preds, f)
            plan.append(('rsvgd/grounding', 'eval', [config, path, '--format', 'grounding', '--no-progress',
                                                      '--work-dir', str(tmp / 'out' / 'rsvgd'), *opts]))
            inputs[name] = dict(config=config, opts=opts, paths={'grounding': path}, n=len(preds))
            continue
        cfg = Config.fromfile(config)
        cfg.merge_from_dict({'test_dataloader.dataset.data_root': root})
        dataset = build_dataset(cfg)
        paths = write_inputs(name, dataset, str(tmp))
        inputs[name] = dict(config=config, opts=opts, paths=paths)
        for fmt, path in paths.items():
            args = [config, path, '--format', fmt, '--no-progress', '--work-dir', str(tmp / 'out' / name / fmt)]
            if fmt in ('dump', 'jsonl', 'legacy', 'openpsg'):
                args += ['--mode', 'sgdet']
            if fmt == 'openpsg':  # its masks, decoded GT masks: OpenPSG's panoptic matching
                args += ['--metric-options', 'match=mask']
            if fmt == 'dump' and name == 'vg150':
                args += ['--save-state', str(tmp / 'state_a')]
            plan.append((f'{name}/{fmt}', 'eval', args + opts))
    vg = inputs['vg150']
    plan.append(('vg150/state_b', 'eval', [vg['config'], vg['paths']['jsonl'], '--mode', 'sgdet', '--no-progress',
                                           '--metric-options', 'rank=given', '--save-state', str(tmp / 'state_b'),
                                           '--work-dir', str(tmp / 'out' / 'b'), *vg['opts']]))
    plan.append(('vg150/from-state', 'eval', ['--from-state', str(tmp / 'state_a'),
                                              '--work-dir', str(tmp / 'out' / 'from_state')]))
    plan.append(('compare', 'compare', [str(tmp / 'state_a'), str(tmp / 'state_b'), '--samples', '200',
                                        '--allow-different-settings', '--out-dir', str(tmp / 'compare')]))
    browse = osp.join(ROOT, 'tools', 'analysis', 'browse_results.py')
    for label, extra in (('browse/pictures', []), ('browse/no-pictures', ['--max-images', '0'])):
        plan.append((label, 'script', [browse, vg['config'], vg['paths']['dump'], '--mode', 'sgdet', '--no-progress',
                                       '--out-dir', str(tmp / label.replace('/', '_')), *extra, *vg['opts']]))
    plan.append(('python/metrics', 'python', (
        'import torch\nfrom mmsgg_eval.metrics import SGRecall\n'
        'm = SGRecall(mode="predcls", topk=(1, 2))\n'
        'm.dataset_meta = dict(classes=["a", "b"], predicates=["p", "q"])\n'
        's = dict(sample_idx=0, gt_instances=dict(bboxes=torch.tensor([[0., 0, 10, 10], [5, 5, 20, 20]]),'
        ' labels=torch.tensor([0, 1])), gt_relations=dict(pair_idxs=torch.tensor([[0, 1], [1, 0]]),'
        ' labels=torch.tensor([1, 0])), pred_relations=dict(pair_idxs=torch.tensor([[0, 1], [1, 0]]),'
        ' scores=torch.tensor([[0.1, 0.2, 0.7], [0.1, 0.8, 0.1]])))\n'
        'm.process({}, [s])\nresult = m.evaluate(1)\n')))
    plan_path, out_path = tmp / 'plan.json', tmp / 'results.json'
    plan_path.write_text(json.dumps(plan))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''), OMP_NUM_THREADS='1')
    proc = subprocess.run([sys.executable, '-c', DRIVER, str(plan_path), str(out_path)], cwd=str(tmp), env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(tmp=tmp, inputs=inputs, plan=plan, results=json.loads(out_path.read_text()), stderr=proc.stderr)


def test_the_hook_blocks_what_it_names(tmp_path):
    """The hook works: importing mmcv.ops (which loads mmcv._ext) and mmdet.models fails under it."""
    code = DRIVER.split('plan, out_path')[0] + (
        'import importlib\nfor m in ("mmcv.ops", "mmdet.models", "mmdet.datasets"):\n'
        '    try:\n        importlib.import_module(m)\n        print("imported", m)\n'
        '    except ImportError as err:\n        print("blocked", m)\n')
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ['blocked', 'mmcv.ops', 'blocked', 'mmdet.models', 'blocked', 'mmdet.datasets']


def test_every_entry_point_runs_without_compiled_mmcv_or_mmdet_models(light):
    results = light['results']
    failed = {name: r['error'] + '\n' + r['traceback'] for name, r in results.items() if 'error' in r}
    assert not failed, '\n\n'.join(f'{k}: {v}' for k, v in failed.items()) + light['stderr'][-3000:]
    assert results['__loaded_blocked__']['modules'] == []
    names = {name for name, _, _ in light['plan']}
    for dataset in ('vg150', 'gqa200', 'psg'):
        assert {f'{dataset}/{fmt}' for fmt in ('dump', 'jsonl', 'legacy', 'vlm')} <= names
    assert {'psg/openpsg', 'rsvgd/grounding', 'vg150/from-state', 'compare', 'browse/pictures',
            'browse/no-pictures', 'python/metrics'} <= names


@pytest.mark.parametrize('name', ['vg150', 'gqa200', 'psg'])
def test_light_numbers_equal_the_full_process(light, name):
    """Each format's keys under the hook equal the same evaluation in this process; the stream, JSONL and
    legacy dump of the same predictions give the same R@K."""
    spec = light['inputs'][name]
    for fmt, path in spec['paths'].items():
        got = light['results'][f'{name}/{fmt}']
        mode = 'sgdet' if fmt in ('dump', 'jsonl', 'legacy', 'openpsg') else None
        expected = evaluate_file(spec['config'], path, fmt=fmt, mode=mode,
                                 metric_options=dict(match='mask') if fmt == 'openpsg' else None,
                                 work_dir=str(light['tmp'] / 'full' / name / fmt), progress=False,
                                 cfg_options={'test_dataloader.dataset.data_root': spec['opts'][1].split('=', 1)[1]})
        expected = {k: v for k, v in expected.items() if isinstance(v, (int, float))}
        assert got == expected, (name, fmt)
    r = light['results']
    assert r[f'{name}/dump']['sgdet/R@50'] == r[f'{name}/jsonl']['sgdet/R@50'] == r[f'{name}/legacy']['sgdet/R@50']
    assert r[f'{name}/dump']['sgdet/R@50'] > 10


def test_light_states_compare_report_and_plain_metrics(light):
    r, tmp = light['results'], light['tmp']
    from_state = {k: v for k, v in r['vg150/from-state'].items()}
    assert from_state and all(r['vg150/dump'][k] == v for k, v in from_state.items())
    assert (tmp / 'compare' / 'compare.md').exists()
    assert (tmp / 'browse_pictures' / 'index.html').exists()
    assert list((tmp / 'browse_pictures').rglob('*.jpg')) or list((tmp / 'browse_pictures').rglob('*.png'))
    assert (tmp / 'browse_no-pictures' / 'index.html').exists()
    assert r['python/metrics']['predcls/R@1'] == 50.0 and r['python/metrics']['predcls/R@2'] == 100.0
    n = light['inputs']['rsvgd']['n']  # every other box is shifted by its width: a miss
    assert r['rsvgd/grounding']['grounding/Pr@0.5'] == pytest.approx(100.0 * ((n + 1) // 2) / n)
