"""tools/test.py --per-image / --show-dir and the HTML report (tools/analysis/browse_results.py), including a
real headless Chromium (skipped where no browser is installed: bash tools/install_browser.sh)."""
import html
import json
import os
import os.path as osp
import re
import shutil
import tempfile

import pytest

from tests.tool_runs import frequency_baseline_on_sample, run_tool

pytest.importorskip('mmdet.datasets', reason='the MMDet pipeline path needs mmdet with compiled mmcv')

ROOT = osp.abspath(osp.join(osp.dirname(__file__), '..', '..'))
CONFIG = osp.join(ROOT, 'configs', 'demo', 'freq_predcls_vg150_sample.py')
BROWSE = osp.join(ROOT, 'tools', 'analysis', 'browse_results.py')


def run(args):
    return run_tool(args, check=True, trusted_checkpoints=True)


@pytest.fixture(scope='module')
def run_dir(tmp_path_factory):
    """The sample VG150, the FREQ baseline, and one tools/test.py run with --out, --per-image, --show-dir."""
    tmp = tmp_path_factory.mktemp('browse')
    _, options, ckpt, _ = frequency_baseline_on_sample(tmp, 'vg150', CONFIG)
    work = tmp / 'work'
    run(['tools/test.py', CONFIG, ckpt, '--work-dir', str(work), '--out', str(tmp / 'pred.pkl'),
         '--per-image', str(tmp / 'per_image.jsonl'), '--show-dir', 'vis', '--cfg-options', *options])
    report = tmp / 'report'
    run([BROWSE, CONFIG, str(tmp / 'pred.pkl'), '--out-dir', str(report), '--no-progress', '--cfg-options',
         *options])
    return dict(tmp=tmp, work=work, report=report, options=options)


def metrics_of(path):
    with open(path) as f:
        return json.load(f)


def test_show_dir_and_per_image_file(run_dir):
    pictures = [osp.join(d, f) for d, _, files in os.walk(run_dir['work']) for f in files
                if f.endswith('.jpg') and osp.basename(d) == 'vis']
    lines = [json.loads(line) for line in open(run_dir['tmp'] / 'per_image.jsonl')]
    assert len(pictures) == len(lines) == 13
    assert all(r['img_path'] and osp.isfile(r['img_path']) for r in lines)
    metrics = metrics_of(run_dir['work'] / 'metrics.json')
    evaluated = [r for r in lines if r['evaluated']]
    for k in (20, 50, 100):
        assert sum(r[f'R@{k}'] for r in evaluated) / len(evaluated) == pytest.approx(metrics[f'predcls/R@{k}'])


def _links(page):
    text = open(page, encoding='utf-8').read()
    return re.findall(r'(?:href|src)="([^"#]+)"', text), text


def test_report_links_and_images_resolve(run_dir):
    report = run_dir['report']
    pages = [report / 'index.html'] + sorted((report / 'images').glob('*.html')) + \
        sorted((report / 'predicates').glob('*.html'))
    assert len(list((report / 'images').glob('*.html'))) == 13
    for page in pages:
        links, text = _links(page)
        assert 'http://' not in text and 'https://' not in text  # self-contained: no CDN, no server
        for link in links:
            assert osp.isfile(osp.join(osp.dirname(page), link)), (page, link)
    for picture in (report / 'images').glob('*.jpg'):
        assert picture.stat().st_size > 1000


def test_report_counts_equal_metrics_json(run_dir):
    report = run_dir['report']
    metrics = metrics_of(report / 'eval' / 'metrics.json')
    text = open(report / 'index.html', encoding='utf-8').read()
    for family in ('R', 'ngR', 'mR'):
        for k in (20, 50, 100):
            shown = re.search(rf'data-key="{family}@{k}">([0-9.]+)<', text).group(1)
            assert float(shown) == pytest.approx(metrics[f'predcls/{family}@{k}'], abs=0.006), (family, k)
    per_pred = metrics['predcls/per_predicate_recall']
    assert sum(row['num_gt'] for row in per_pred.values()) == \
        int(re.search(r'id="num-gt">(\d+)<', text).group(1))
    assert int(re.search(r'id="num-records">(\d+)<', text).group(1)) == 13
    summary = metrics_of(report / 'summary.json')
    for name, row in per_pred.items():  # a predicate without GT has no recall ('–'), as in the report tables
        assert summary['per_predicate'][name]['R@50'] == (pytest.approx(row['R@50']) if row['num_gt'] else None)


def test_report_causes_equal_metrics_json(run_dir):
    """Where recall is lost in the report (summary.json and the index's bars; the tool turns error_analysis on)
    is the evaluation's own: metrics.json's miss@K_{cause} and per-predicate cause table, bit for bit."""
    from mmsgg_eval.functional.error_causes import CAUSES
    report = run_dir['report']
    metrics = metrics_of(report / 'eval' / 'metrics.json')
    causes = metrics_of(report / 'summary.json')['causes']
    text = open(report / 'index.html', encoding='utf-8').read()
    compared = 0
    for k in (20, 50, 100):
        for cause in CAUSES:
            key = f'predcls/miss@{k}_{cause}'
            if key in metrics:
                assert causes['overall'][str(k)][cause] == metrics[key], key
                compared += 1
                if metrics[key] > 0 and k == 50:
                    assert f'{cause} {metrics[key]:.1f}%' in text, key
    assert compared >= 3 * 4
    table = metrics['predcls/per_predicate_causes']
    assert table and set(table) == set(causes['per_predicate'])
    for p, row in table.items():
        for name, value in row.items():
            if name.startswith('miss@'):
                k, cause = name[len('miss@'):].split('_', 1)
                assert causes['per_predicate'][p][k][cause] == value, (p, name)


def test_metric_options_are_read_as_the_offline_cli_reads_them(run_dir, tmp_path):
    """``--metric-options error_analysis=False`` (the offline CLI's spelling, mmengine's DictAction) turns the
    error analysis off: no cause in the report, no miss@K key in its metrics.json."""
    out = tmp_path / 'options'
    run([BROWSE, CONFIG, str(run_dir['tmp'] / 'pred.pkl'), '--out-dir', str(out), '--max-images', '1',
         '--no-progress', '--metric-options', 'error_analysis=False', '--cfg-options', *run_dir['options']])
    assert metrics_of(out / 'summary.json')['causes'] is None
    assert not [key for key in metrics_of(out / 'eval' / 'metrics.json') if '/miss@' in key]


def test_report_from_per_image_file_caps_the_gallery(run_dir, tmp_path):
    out = tmp_path / 'capped'
    run([BROWSE, CONFIG, str(run_dir['tmp'] / 'per_image.jsonl'), '--out-dir', str(out), '--max-images', '3',
         '--no-progress', '--cfg-options', *run_dir['options']])
    assert len(list((out / 'images').glob('*.jpg'))) == 3
    text = open(out / 'index.html', encoding='utf-8').read()
    assert text.count('<tr data-missed') == 13  # the index still lists every image
    assert not (out / 'eval').exists()  # nothing was evaluated again


def _browser():
    chromium = shutil.which('chromium') or shutil.which('chromium-browser') or shutil.which('google-chrome')
    driver = shutil.which('chromedriver')
    try:
        import selenium  # noqa: F401
    except ImportError:
        return None
    if not chromium or not driver:
        return None
    return chromium, driver


def headless_browser():
    """A headless Chromium driven by selenium (a fresh profile, local files readable, console logged); the caller
    quits it and removes the profile directory: ``(driver, profile)``. Only where :func:`_browser` found one."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    chromium, driver_path = _browser()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    profile = tempfile.mkdtemp(prefix='chromium-profile-')
    for flag in ('--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
                 '--disable-component-update', '--disable-sync', '--no-first-run', f'--user-data-dir={profile}',
                 '--allow-file-access-from-files'):
        options.add_argument(flag)
    options.set_capability('goog:loggingPrefs', {'browser': 'ALL'})
    return webdriver.Chrome(service=Service(driver_path), options=options), profile


@pytest.mark.skipif(_browser() is None, reason='no headless browser (bash tools/install_browser.sh installs '
                                               'chromium, chromium-driver and selenium)')
def test_real_browser_sorts_filters_and_logs_no_error(run_dir):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select
    browser, profile = headless_browser()
    try:
        browser.get('file://' + str(run_dir['report'] / 'index.html'))
        rows = browser.find_elements(By.CSS_SELECTOR, '#images tbody tr')
        assert len(rows) == 13
        header = browser.find_element(By.XPATH, '//table[@id="images"]//th[text()="R@50"]')
        column = [h.text for h in browser.find_elements(By.CSS_SELECTOR, '#images thead th')].index('R@50')

        def values():
            return [float(r.find_elements(By.TAG_NAME, 'td')[column].get_attribute('data-v'))
                    for r in browser.find_elements(By.CSS_SELECTOR, '#images tbody tr')]
        header.click()
        assert values() == sorted(values())
        header.click()
        assert values() == sorted(values(), reverse=True)
        # "images where <predicate> was missed at 50": exactly the rows whose GT relation of it was missed
        lines = [json.loads(line) for line in open(run_dir['report'] / 'per_image.jsonl')]
        counts = {}
        for r in lines:
            for p in {g['predicate'] for g in r['gt_relations'] if g['rank_gc'] is None or g['rank_gc'] >= 50}:
                counts[p] = counts.get(p, 0) + 1
        predicate = max(counts, key=counts.get)
        Select(browser.find_element(By.ID, 'pred')).select_by_value(predicate)
        shown = [r for r in browser.find_elements(By.CSS_SELECTOR, '#images tbody tr') if r.is_displayed()]
        assert len(shown) == counts[predicate] == int(browser.find_element(By.ID, 'shown').text)
        Select(browser.find_element(By.ID, 'pred')).select_by_value('')
        assert len([r for r in browser.find_elements(By.CSS_SELECTOR, '#images tbody tr') if r.is_displayed()]) == 13
        link = browser.find_element(By.CSS_SELECTOR, '#images tbody tr a')
        link.click()
        assert browser.find_element(By.CSS_SELECTOR, 'img.pic').get_attribute('naturalWidth') not in (None, '0')
        assert browser.find_elements(By.CSS_SELECTOR, '#gt tbody tr')
        errors = [e for e in browser.get_log('browser') if e['level'] in ('SEVERE', 'ERROR')]
        assert not errors, errors
    finally:
        browser.quit()
        shutil.rmtree(profile, ignore_errors=True)


def test_vlm_image_pages_show_the_raw_answer_its_failure_code_and_unknown_names(tmp_path):
    """A VLM image page shows the raw answer, its failure code (and reason) and the names unknown to the
    dataset, all HTML-escaped."""
    from mmsgg_eval.analysis.browse import write_report
    from mmsgg_eval.metrics import VLMSceneGraphMetric
    from mmsgg_eval.metrics.per_image import read_per_image
    from tests.metrics.test_vlm import GT, HAT, HORSE, META as VLM_META, PERSON, RIDING, graph
    unknown = graph([PERSON, HORSE, HAT, {'id': 'uni<corn>.9', 'bbox': [0, 0, 1000, 1000]}],
                    [{'subject': 'person.1', 'predicate': 'riding', 'object': 'uni<corn>.9'},
                     {'subject': 'person.1', 'predicate': 'gallops & <b>jumps</b>', 'object': 'horse.2'}, RIDING])
    broken = 'no graph here: <script>alert("x")</script> & more'
    path = tmp_path / 'vlm.jsonl'
    metric = VLMSceneGraphMetric(iou_plus_one=False, per_image_out=str(path))
    metric.dataset_meta = VLM_META
    metric.process(None, [dict(GT, sample_idx=0, pred_text=unknown), dict(GT, sample_idx=1, pred_text=broken)])
    metric.evaluate(2)
    records = read_per_image(str(path))
    assert [r['answer'] for r in records] == [unknown, broken]
    assert records[1]['failure_code'] == 'no_json' and records[1]['failure_reason']
    assert records[0]['unknown_words'] and records[0]['num_unknown_relations'] == 2
    write_report(records, str(tmp_path / 'report'), VLM_META['classes'], VLM_META['predicates'], progress=False)
    ok = open(tmp_path / 'report' / 'images' / '0.html', encoding='utf-8').read()
    failed = open(tmp_path / 'report' / 'images' / '1.html', encoding='utf-8').read()
    assert '<h2>VLM answer</h2>' in ok and '<h2>VLM answer</h2>' in failed
    assert '<script>alert' not in failed and '&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; more' in failed
    assert f'no_json ({html.escape(records[1]["failure_reason"])})' in failed
    assert 'uni<corn>' not in ok and '<b>jumps' not in ok
    assert html.escape(json.dumps('gallops & <b>jumps</b>')[1:-1]) in ok  # the raw answer, escaped
    for word in records[0]['unknown_words']:
        assert html.escape(word) in ok
    assert '>2</td>' in ok  # relations with an unknown name


def test_scene_graph_image_pages_have_no_vlm_block():
    from mmsgg_eval.analysis.browse import vlm_answer_section
    assert vlm_answer_section({'sample_idx': 0, 'gt_relations': []}) == ''


def _recall_lost_line(metrics, prefix, k):
    """The logged line "R@K x | lost: cause y, ..." expected from a run's metrics.json (its miss@K keys)."""
    from mmsgg_eval.functional.error_causes import CAUSES
    lost = ', '.join(f'{c} {metrics[f"{prefix}/miss@{k}_{c}"]:.1f}' for c in CAUSES
                     if f'{prefix}/miss@{k}_{c}' in metrics)
    return f'R@{k} {metrics[f"{prefix}/R@{k}"]:.1f} | lost: {lost} (predicate_ng ' \
           f'{metrics[f"{prefix}/miss@{k}_predicate_ng"]:.1f}: right predicate, not the top one)'


def test_tools_test_and_the_offline_cli_log_where_recall_is_lost(run_dir, tmp_path):
    """With error_analysis=True, tools/test.py (MMEngine Runner) and the offline CLI both log one line per K
    "R@K x | lost: subject_loc y, ..., rank z", with the numbers of their metrics.json."""
    tmp = run_dir['tmp']
    work = tmp_path / 'test_py'
    proc = run(['tools/test.py', CONFIG, str(tmp / 'freq.pth'), '--work-dir', str(work), '--cfg-options',
                *run_dir['options'], 'test_evaluator.0.error_analysis=True'])
    offline = tmp_path / 'offline'
    proc_off = run(['-m', 'mmsgg_eval.eval', CONFIG, str(tmp / 'pred.pkl'), '--work-dir', str(offline),
                    '--no-progress', '--metric-options', 'error_analysis=True', '--cfg-options', *run_dir['options']])
    for printed, metrics_path in ((proc.stdout + proc.stderr, work / 'metrics.json'),
                                  (proc_off.stdout + proc_off.stderr, offline / 'metrics.json')):
        metrics = metrics_of(metrics_path)
        lines = [line for line in printed.splitlines() if ' | lost: ' in line]
        assert lines == [_recall_lost_line(metrics, 'predcls', k) for k in (20, 50, 100)], lines
        assert 'pair' in lines[1] and 'rank' in lines[1]
