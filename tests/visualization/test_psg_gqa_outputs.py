"""Pictures, per-image results and the HTML report on the PSG (masks) and GQA200 samples, for a model run and for
its saved predictions, and mmdet's own tools/test.py --show-dir (through the configs' DetVisualizationHook)."""
import json
import os
import os.path as osp

import numpy as np
import pytest

from tests.tool_runs import frequency_baseline_on_sample, run_tool

pytest.importorskip('mmdet.datasets', reason='the MMDet pipeline path needs mmdet with compiled mmcv')

ROOT = osp.abspath(osp.join(osp.dirname(__file__), '..', '..'))
BROWSE = osp.join(ROOT, 'tools', 'analysis', 'browse_results.py')


def run(args):
    return run_tool(args, check=True, trusted_checkpoints=True)


def pictures_in(folder):
    return sorted(osp.join(d, f) for d, _, files in os.walk(folder) for f in files
                  if f.endswith('.jpg') and osp.basename(d) == 'vis')


def sample_run(tmp, dataset, config, extra=()):
    """The sample of ``dataset``, the FREQ baseline on its training split and one tools/test.py run."""
    return frequency_baseline_on_sample(tmp, dataset, config)[1]


@pytest.mark.parametrize('dataset', ['psg', 'gqa200'])
def test_pictures_per_image_and_report_on_the_sample(dataset, tmp_path):
    config = osp.join(ROOT, 'configs', dataset, f'freq_predcls_{dataset}.py')
    options = sample_run(tmp_path, dataset, config)
    work = tmp_path / 'work'
    run(['tools/test.py', config, str(tmp_path / 'freq.pth'), '--work-dir', str(work), '--out',
         str(tmp_path / 'pred.pkl'), '--per-image', str(tmp_path / 'per_image.jsonl'), '--show-dir', 'vis',
         '--cfg-options', *options])
    lines = [json.loads(line) for line in open(tmp_path / 'per_image.jsonl')]
    pictures = pictures_in(work)
    assert len(pictures) == len(lines) > 0
    with open(work / 'metrics.json') as f:
        metrics = json.load(f)
    evaluated = [r for r in lines if r['evaluated']]
    for k in (20, 50, 100):
        assert sum(r[f'R@{k}'] for r in evaluated) / len(evaluated) == pytest.approx(metrics[f'predcls/R@{k}'])

    import cv2
    for path in pictures:  # GT panel | prediction panel, each as wide as the image
        record = next(r for r in lines if osp.basename(r['img_path']).rsplit('.', 1)[0] in osp.basename(path))
        picture, image = cv2.imread(path), cv2.imread(record['img_path'])
        assert picture.shape[1] == 2 * image.shape[1] and picture.shape[0] > image.shape[0]

    # the same report from the saved predictions and from the per-image file
    for source, out in ((tmp_path / 'pred.pkl', 'report'), (tmp_path / 'per_image.jsonl', 'report_lines')):
        report = tmp_path / out
        run([BROWSE, config, str(source), '--out-dir', str(report), '--no-progress', '--cfg-options', *options])
        index = (report / 'index.html').read_text(encoding='utf-8')
        assert len(list((report / 'images').glob('*.html'))) == len(lines)
        for record in lines:
            assert f'images/{record["sample_idx"]}.html' in index or str(record['img_id']) in index


def test_psg_gt_masks_are_blended_into_the_picture(tmp_path):
    """PSG: the GT panel blends each related object's panoptic mask (the dataset reads the masks)."""
    from mmsgg_eval.visualization.drawing import HIT, MISS, draw_panel
    image = np.full((100, 100, 3), 200, dtype=np.uint8)
    mask = np.zeros((100, 100), dtype=bool)
    mask[20:45, 20:45] = True
    item = dict(number=1, subject=0, object=1, subject_box=[2, 2, 48, 48], object_box=[52, 52, 98, 98],
                subject_label='person', object_label='car', predicate='on', hit=True, note='rank 1')
    panel = draw_panel(image, [item], 'GT', masks={0: mask})
    inside = panel[40, 28].astype(float)  # in the mask, off the arrow and the labels
    expected = 200 * 0.6 + np.asarray(HIT, dtype=float) * 0.4
    assert np.abs(inside - expected).max() <= 1
    assert tuple(panel[85, 65]) == (200, 200, 200)  # the object without a mask is not filled
    assert MISS != HIT


def test_mmdet_own_tools_test_show_dir(tmp_path):
    """mmdet's own tools/test.py --show-dir writes one picture per image with our visualizer."""
    import mmdet
    tool = osp.join(osp.dirname(mmdet.__file__), '.mim', 'tools', 'test.py')
    if not osp.isfile(tool):
        pytest.skip("this mmdet install does not ship tools/test.py under .mim")
    config = osp.join(ROOT, 'configs', 'demo', 'freq_predcls_vg150_sample.py')
    options = sample_run(tmp_path, 'vg150', config)
    work = tmp_path / 'work'
    run([tool, config, str(tmp_path / 'freq.pth'), '--work-dir', str(work), '--show-dir', 'vis',
         '--cfg-options', *options])
    pictures = pictures_in(work)
    assert len(pictures) == 13
    import cv2
    picture = cv2.imread(pictures[0])
    assert picture is not None and picture.shape[1] >= 2 * 64
