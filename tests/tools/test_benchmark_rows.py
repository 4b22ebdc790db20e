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
