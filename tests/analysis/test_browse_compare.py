"""The HTML report given two runs (``tools/analysis/browse_results.py --compare-to OTHER_RUN``): the
images where this run gains or loses GT relations at K against the other, each changed relation with the cause
of the miss on the losing side; the same computation as ``python -m mmsgg_eval.compare --report``
(:mod:`mmsgg_eval.analysis.relation_changes`). Plain HTML parsing here; a real headless Chromium where one is
installed."""
import json
import os.path as osp
import shutil
from dataclasses import replace
from html.parser import HTMLParser

import pytest
import torch

from mmsgg_eval.analysis.browse import write_report
from mmsgg_eval.compare import run_changes
from mmsgg_eval.compare import load_run, restricted
from tests.metrics.test_bootstrap import META
from tests.compare.test_changes import NUM, reference_changes, two_state_runs, write_state
from tests.analysis.test_browse_results import _browser, headless_browser
from tests.sgg_samples import random_dataset


class Tables(HTMLParser):
    """Every ``<table id=...>`` of a page: its body rows as ``{'attrs', 'cells', 'links'}``; and every href."""

    def __init__(self):
        super().__init__()
        self.tables, self.links, self.ids = {}, [], set()
        self._table, self._row, self._cell = None, None, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if 'id' in attrs:
            self.ids.add(attrs['id'])
        if 'href' in attrs:
            self.links.append(attrs['href'])
        if tag == 'table':
            self._table = attrs.get('id')
            self.tables.setdefault(self._table, [])
        elif tag == 'tr' and self._table is not None:
            self._row = {'attrs': attrs, 'cells': [], 'links': [], 'header': False}
        elif tag in ('td', 'th') and self._row is not None:
            self._cell = ''
            self._row['header'] |= tag == 'th'
        elif tag == 'a' and self._row is not None:
            self._row['links'].append(attrs.get('href'))

    def handle_endtag(self, tag):
        if tag in ('td', 'th') and self._cell is not None:
            self._row['cells'].append(self._cell)
            self._cell = None
        elif tag == 'tr' and self._row is not None:
            if not self._row['header']:
                self.tables[self._table].append(self._row)
            self._row = None
        elif tag == 'table':
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def parse(path):
    page = Tables()
    with open(path, encoding='utf-8') as f:
        page.feed(f.read())
    return page


def relation_rows(rows):
    """(sample_idx, change, GT index from 0, relation, cause or None) of ``change_rows`` table rows."""
    return [(int(r['attrs']['data-sample']), r['attrs']['data-change'], int(r['cells'][4]) - 1, r['cells'][5],
             None if r['cells'][8] == '–' else r['cells'][8]) for r in rows]


def expected_rows(expected):
    """The same tuples from :func:`tests.compare.test_changes.reference_changes` (loop reference)."""
    out = []
    for image in expected:
        for what in ('lost', 'gained'):
            for index, sub, pred, obj, cause in image[what]:
                out.append((image['sample_idx'], what, index, f'{sub} {pred} {obj}', cause))
    return out


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    out = two_state_runs(tmp_path_factory.mktemp('browse_compare'))
    return dict(out, states_a=load_run(out['a']), states_b=load_run(out['b']))


@pytest.mark.parametrize('k', [5, 20])
def test_report_lists_the_gained_and_lost_relations_with_the_losing_cause(runs, k):
    out = str(runs['root'] / f'report{k}')
    changes = run_changes(runs['states_a'], runs['states_b'], k, ('A', 'B'), 'sgdet')
    summary = write_report(runs['rec_b'], out, META['classes'], META['predicates'], k=k, progress=False,
                           max_images=NUM - 3, changes=changes)
    expected = reference_changes(runs['rec_a'], runs['rec_b'], k)
    assert expected, 'the perturbed run should change some relations'
    rows = expected_rows(expected)
    # changes.html: every changed relation, from the largest net loss, each with the losing run's cause
    page = parse(osp.join(out, 'changes.html'))
    assert relation_rows(page.tables['changes']) == rows
    drawn = set(summary['drawn'])
    for row in page.tables['changes']:
        idx = int(row['attrs']['data-sample'])
        assert row['links'] == ([f'images/{idx}.html'] if idx in drawn else [])
    # the losing side: B's outcome at K for a loss, A's for a gain (the per-image pages' causes)
    outcome = {(side, r['sample_idx'], g['index']): g['outcome'][str(k)]
               for side, recs in (('A', runs['rec_a']), ('B', runs['rec_b'])) for r in recs for g in r['gt_relations']}
    for idx, what, index, _, cause in rows:
        assert cause == outcome[('B' if what == 'lost' else 'A', idx, index)] != 'hit'
    # the index: counts, causes, the changed images (largest net loss first), linked where drawn
    index = parse(osp.join(out, 'index.html'))
    assert 'changes' in index.ids and 'changes.html' in index.links
    images = index.tables['changed-images']
    assert [(int(r['cells'][0]), int(r['cells'][2]), int(r['cells'][3]), int(r['cells'][4])) for r in images] == \
        [(e['sample_idx'], e['net'], len(e['gained']), len(e['lost'])) for e in expected]
    by_cause = {}
    for _, what, _, _, cause in rows:
        by_cause.setdefault(cause, [0, 0])[what == 'gained'] += 1
    assert {r['cells'][0]: [int(r['cells'][1]), int(r['cells'][2])] for r in index.tables['change-causes']} == by_cause
    text = open(osp.join(out, 'index.html'), encoding='utf-8').read()
    assert f'<span id="num-gained">{sum(len(e["gained"]) for e in expected)}</span>' in text
    assert f'<span id="num-lost">{sum(len(e["lost"]) for e in expected)}</span>' in text
    # each drawn image page lists its own changes, or says there are none
    changed = {e['sample_idx'] for e in expected}
    for idx in drawn:
        image = parse(osp.join(out, 'images', f'{idx}.html'))
        assert '../changes.html' in image.links
        if idx in changed:
            assert relation_rows(image.tables['changes']) == [r for r in rows if r[0] == idx]
        else:
            assert 'no-changes' in image.ids and 'changes' not in image.tables
    for page_path in [osp.join(out, 'index.html'), osp.join(out, 'changes.html')]:
        for link in parse(page_path).links:
            if not link.startswith('#'):
                assert osp.isfile(osp.join(out, link.split('#')[0])), link
    # the files of compare --report, from the same computation
    saved = json.load(open(osp.join(out, 'changes.json')))['changes'][0]
    assert saved['images'] == json.loads(json.dumps(changes['images']))
    assert '| sample_idx | img_id | net | change |' in open(osp.join(out, 'changes.md')).read()
    assert summary['changes']['num_lost'] == sum(len(e['lost']) for e in expected)


def test_a_run_without_error_analysis_shows_unknown_causes(runs, tmp_path):
    a, _ = write_state(str(tmp_path / 'a'), runs['samples'], per_image=False)
    changes = run_changes(load_run(a), runs['states_b'], 20, ('A', 'B'))
    assert changes['causes_known'] == {'a': False, 'b': True}
    assert changes['settings_differences']  # error_analysis differs: shown, not refused
    write_report(runs['rec_b'], str(tmp_path / 'r'), META['classes'], META['predicates'], k=20, progress=False,
                 changes=changes)
    rows = relation_rows(parse(str(tmp_path / 'r' / 'changes.html')).tables['changes'])
    expected = expected_rows(reference_changes(runs['rec_a'], runs['rec_b'], 20))
    assert rows == [r[:4] + (r[4] if r[1] == 'lost' else None,) for r in expected]
    text = open(tmp_path / 'r' / 'index.html', encoding='utf-8').read()
    assert 'Run A was evaluated without <code>error_analysis=True</code>' in text
    assert 'id="settings-differences"' in text and 'error_analysis' in text


def test_runs_that_cannot_be_paired_are_refused(runs):
    a, b = runs['states_a'], runs['states_b']
    other_gt = [replace(s, dataset={**s.dataset, 'gt_hash': 'another'}) for s in a]
    with pytest.raises(ValueError, match=r'runs A and B were evaluated on different ground truth: different GT '
                                         r'\(hash of the dataset annotations\)'):
        run_changes(other_gt, b, 20, ('A', 'B'))
    fewer = [replace(s, tables=restricted(s.tables, torch.arange(1, NUM))) for s in a]
    with pytest.raises(ValueError, match='hold different images: 0 only in A, 1 only in B'):
        run_changes(fewer, b, 20, ('A', 'B'))
    with pytest.raises(ValueError, match="no scene-graph recall metric in common with the key prefix 'predcls'"):
        run_changes(a, b, 20, ('A', 'B'), 'predcls')
    with pytest.raises(ValueError, match=r'--k 50: not a K of SGRecall \(sgdet\) \(its K: \[5, 20\]\)'):
        run_changes(a, b, 50, ('A', 'B'))


def test_no_change_says_so(runs, tmp_path):
    changes = run_changes(runs['states_b'], runs['states_b'], 20, ('A', 'B'))
    write_report(runs['rec_b'], str(tmp_path), META['classes'], META['predicates'], k=20, progress=False,
                 changes=changes)
    page = parse(str(tmp_path / 'changes.html'))
    assert 'no-changes' in page.ids and page.tables['changes'] == []
    assert parse(str(tmp_path / 'index.html')).tables['changed-images'] == []


# ---------------------------------------------------------------------------------------------- the command line

ROOT = osp.abspath(osp.join(osp.dirname(__file__), '..', '..'))
CONFIG = osp.join(ROOT, 'configs', 'demo', 'freq_predcls_vg150_sample.py')
BROWSE = osp.join(ROOT, 'tools', 'analysis', 'browse_results.py')


@pytest.fixture(scope='module')
def cli(tmp_path_factory):
    """Two SGDet prediction files of the sample VG150 and the report of the second against the first."""
    pytest.importorskip('mmdet.datasets', reason='the MMDet pipeline path needs mmdet with compiled mmcv')
    from mmsgg_eval.datasets import VG150Dataset
    from mmsgg_eval.testing import make_sample_data
    from mmsgg_eval.testing.predictions import sgdet_records, write_jsonl
    from tests.tool_runs import run_tool
    tmp = tmp_path_factory.mktemp('browse_compare_cli')
    make_sample_data(str(tmp), datasets=['vg150'])
    root = str(tmp / 'vg150') + '/'
    dataset = VG150Dataset(data_root=root, split='test', num_val_images=8, pipeline=[])
    for seed in (0, 1):
        write_jsonl(str(tmp / f'run{seed}.jsonl'), sgdet_records(dataset, seed))
    options = ['--mode', 'sgdet', '--no-progress', '--cfg-options', f'test_dataloader.dataset.data_root={root}',
               'test_evaluator.0.mode=sgdet', 'test_evaluator.1.mode=sgdet']
    report = tmp / 'report'
    proc = run_tool([BROWSE, CONFIG, str(tmp / 'run1.jsonl'), '--out-dir', str(report),
                     '--compare-to', str(tmp / 'run0.jsonl'), *options], check=True)
    return dict(tmp=tmp, report=report, options=options, printed=proc.stdout + proc.stderr, run_tool=run_tool)


def test_cli_lists_what_compare_report_lists(cli):
    """``--compare-to`` (predictions, evaluated with the same metrics: causes on both sides) gives the relations
    of ``python -m mmsgg_eval.compare --report`` on the two runs' states, with the same causes."""
    tmp, report = cli['tmp'], cli['report']
    changes = json.load(open(report / 'changes.json'))['changes'][0]
    assert changes['causes_known'] == {'a': True, 'b': True} and changes['k'] == 50
    assert changes['num_gained'] + changes['num_lost'] > 0
    assert (f'against run0.jsonl at K = 50: {changes["num_gained"]} GT relations gained, {changes["num_lost"]} lost'
            in cli['printed'])
    assert 'SGG eval' not in cli['printed'].split('evaluated with')[-1]  # OTHER_RUN's evaluation is quiet
    cli['run_tool'](['-m', 'mmsgg_eval.compare', str(report / 'compare_to' / 'states'), str(report / 'eval' / 'states'),
                     '--names', 'run0.jsonl', 'run1.jsonl', '--samples', '20', '--report', str(tmp / 'cmp'),
                     '--report-k', '50', '--out-dir', str(tmp / 'cmp_out')], check=True)
    theirs = json.load(open(tmp / 'cmp' / 'changes.json'))['changes']
    assert [c['images'] for c in theirs if c['metric'] == 'sgdet'] == [changes['images']]
    rows = relation_rows(parse(str(report / 'changes.html')).tables['changes'])
    assert len(rows) == changes['num_gained'] + changes['num_lost']
    records = {json.loads(line)['sample_idx']: json.loads(line) for line in open(report / 'per_image.jsonl')}
    for idx, what, index, _, cause in rows:  # a lost relation's cause is the one its image page shows
        if what == 'lost':
            assert records[idx]['gt_relations'][index]['outcome']['50'] == cause


def test_cli_compares_with_states_and_refuses_other_ground_truth(cli, tmp_path):
    tmp, report = cli['tmp'], cli['report']
    out = tmp_path / 'from_states'
    cli['run_tool']([BROWSE, CONFIG, str(tmp / 'run1.jsonl'), '--out-dir', str(out), '--compare-to',
                     str(report / 'compare_to' / 'states'), '--k', '20', *cli['options']], check=True)
    changes = json.load(open(out / 'changes.json'))['changes'][0]
    assert changes['k'] == 20 and changes['a'] == 'states'
    # states of the same metric on other ground truth (an SGRecall run on a random toy dataset)
    samples, _ = random_dataset(3, 13, 'sgdet', num_classes=len(META['classes']),
                                num_predicates=len(META['predicates']))
    write_state(str(tmp_path / 'toy'), samples, per_image=False)
    proc = cli['run_tool']([BROWSE, CONFIG, str(tmp / 'run1.jsonl'), '--out-dir', str(tmp_path / 'bad'),
                            '--compare-to', str(tmp_path / 'toy' / 'states'), *cli['options']])
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and 'Traceback' not in proc.stderr
    assert 'SGRecall (sgdet): runs states and run1.jsonl were evaluated on different ground truth: different' \
        in err[-2], err


def test_cli_refuses_a_per_image_file_with_compare_to(cli, tmp_path):
    proc = cli['run_tool']([BROWSE, CONFIG, str(cli['report'] / 'per_image.jsonl'), '--out-dir', str(tmp_path),
                            '--compare-to', str(cli['tmp'] / 'run0.jsonl'), *cli['options']])
    assert proc.returncode == 1 and 'Traceback' not in proc.stderr
    assert 'is a per-image file, which holds no evaluation state' in proc.stderr


@pytest.mark.skipif(_browser() is None, reason='no headless browser (bash tools/install_browser.sh installs '
                                               'chromium, chromium-driver and selenium)')
def test_real_browser_follows_the_changes_and_logs_no_error(cli):
    pytest.importorskip('selenium')
    from selenium.webdriver.common.by import By
    browser, profile = headless_browser()
    changes = json.load(open(cli['report'] / 'changes.json'))['changes'][0]
    try:
        browser.get('file://' + str(cli['report'] / 'index.html'))
        assert browser.find_element(By.ID, 'num-lost').text == str(changes['num_lost'])
        shown = browser.find_elements(By.CSS_SELECTOR, '#changed-images tbody tr')
        assert len(shown) == len(changes['images'])
        browser.find_element(By.CSS_SELECTOR, '#changes + p a[href="changes.html"]').click()
        rows = browser.find_elements(By.CSS_SELECTOR, '#changes tbody tr')
        assert len(rows) == changes['num_gained'] + changes['num_lost']
        header = browser.find_element(By.XPATH, '//table[@id="changes"]//th[text()="net"]')

        def nets():
            return [int(r.find_elements(By.TAG_NAME, 'td')[2].get_attribute('data-v'))
                    for r in browser.find_elements(By.CSS_SELECTOR, '#changes tbody tr')]
        header.click()
        assert nets() == sorted(nets())
        header.click()
        assert nets() == sorted(nets(), reverse=True)
        lost = browser.find_element(By.CSS_SELECTOR, '#changes tbody tr[data-change="lost"]')
        idx, cause = lost.get_attribute('data-sample'), lost.get_attribute('data-cause')
        lost.find_element(By.TAG_NAME, 'a').click()
        assert browser.current_url.endswith(f'images/{idx}.html')
        page_rows = browser.find_elements(By.CSS_SELECTOR, '#changes tbody tr[data-change="lost"]')
        assert cause in [r.get_attribute('data-cause') for r in page_rows]
        errors = [e for e in browser.get_log('browser') if e['level'] in ('SEVERE', 'ERROR')]
        assert not errors, errors
    finally:
        browser.quit()
        shutil.rmtree(profile, ignore_errors=True)
