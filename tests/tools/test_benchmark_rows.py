"""The SGDet all-pairs rows of tools/benchmark.py (sgbench and the score-reading floor on sgdet-full) and the
offline CLI's reading bound in the table, without timing anything meaningful."""
from mmsgg_eval.benchmarks import report, runners
from tests.tool_runs import load_tool



def _tool():
    return load_tool('benchmark')


def test_sgdet_full_jobs_have_sgbench_and_the_score_floor():
    tool = _tool()
    args = tool.build_parser().parse_args(['--workload', 'sgdet-full'])
    jobs = tool.job_list(args, ['cpu'])
    assert jobs == [('ours', 'sgdet-full', 'cpu'), ('sgbench', 'sgdet-full', 'cpu'),
                    ('sgbench+lists', 'sgdet-full', 'cpu'), ('score-floor', 'sgdet-full', 'cpu')]
    assert 'score-floor' in runners.RUNNERS


def test_score_floor_reads_every_matrix_and_gives_a_rate():
    res = runners.run_score_floor('sgdet-full', 3, 1, pool=2)
    assert res['images_per_s'] > 0 and res['reader'] in ('torch', 'compiled')
    assert res[f'{res["reader"]}_images_per_s'] == res['images_per_s']


def test_report_ratio_to_the_floor_and_the_reading_bound_row():
    row = dict(images_per_s=300.0, host_peak_rss_mb=100.0)
    jobs = [('ours', 'sgdet-full', 'cpu'), ('score-floor', 'sgdet-full', 'cpu'), ('offline-cli', 'sgdet-full', 'cpu')]
    cli = dict(row, images_per_s=700.0, cpu_images_per_s=800.0, small_images=40, first_sample_s=2.0,
               first_sample_cpu_s=1.5, total_s=3.0, total_s_full=4.0, hash_images_per_s=1000.0, share_of_hash=0.7,
               file_mb=520.0, vg150_test_s=40.0, vg150_test_gb=34.4)
    best = {jobs[0]: row, jobs[1]: dict(row, images_per_s=600.0), jobs[2]: cli}
    ratios = report.summarize(jobs, best)['ratios']
    assert ratios['ours_vs_score-floor_sgdet-full_cpu'] == 0.5
    assert ratios['offline-cli_share_of_read_hash_sgdet-full_cpu'] == 0.7
    text = '\n'.join(report.format_table(jobs, best, 400))
    assert 'read + SHA-256 in one pass: 1000 images/s; the marginal rate is 0.70 of it' in text
    assert '26,446 images / 34 GB: 40 s projected' in text


def test_ours_on_sgdet_full_reads_the_floor_on_its_tensors_before_each_run():
    opts = dict(images=3, batch_size=2, repeat=2)
    res = runners.RUNNERS['ours']('sgdet-full', 'cpu', opts)
    floors = res['paired_floor_runs_images_per_s']
    assert len(floors) == len(res['runs_images_per_s']) == 2 and all(f > 0 for f in floors)
    assert res['paired_floor_images_per_s'] == max(floors)
    shares = runners.paired_floor_shares(res)
    assert shares == [o / f for o, f in zip(res['runs_images_per_s'], floors)]
    other = runners.RUNNERS['ours']('triplets', 'cpu', opts)  # no floor where the floor's job does not run
    assert 'paired_floor_images_per_s' not in other and runners.paired_floor_shares(other) == []


def test_best_rounds_keep_the_median_of_every_run_s_share_of_its_paired_floor(monkeypatch):
    results = iter([dict(images_per_s=10.0, runs_images_per_s=[8.0, 10.0], paired_floor_runs_images_per_s=[40.0, 20.0],
                         paired_floor_images_per_s=40.0),
                    dict(images_per_s=12.0, runs_images_per_s=[12.0, 6.0], paired_floor_runs_images_per_s=[24.0, 30.0],
                         paired_floor_images_per_s=30.0)])
    monkeypatch.setattr(runners, 'run_in_subprocess', lambda job, options: next(results))
    job = ('ours', 'sgdet-full', 'cpu')
    best = runners.best_rounds([job], {}, 2)[job]
    assert best['images_per_s'] == 12.0 and best['paired_floor_images_per_s'] == 30.0  # the kept round's floor
    assert best['median_paired_floor_share'] == 0.35  # median of 0.2, 0.5, 0.5, 0.2
    summary = report.summarize([job], {job: dict(best, host_peak_rss_mb=1.0)})
    assert summary['ratios']['ours_vs_paired-floor_sgdet-full_cpu'] == 0.4
    assert summary['median_ratios']['ours_vs_paired-floor_sgdet-full_cpu'] == 0.35
    text = '\n'.join(report.format_table([job], {job: dict(best, host_peak_rss_mb=1.0)}, 400))
    assert ('score floor read in this process on the same tensors right before each run: best 30 images/s, 0.40 of '
            'it reached; the median of the run-by-run shares 0.35') in text
