"""The output of ``tools/benchmark.py``: the table of its jobs' best rounds and the ratios of its JSON line.

``best`` maps each job ``(implementation, workload, device)`` to its result dict (:mod:`.runners`); the
in-process ``ours`` job of a workload on the CPU is the reference of the peers' ratios and the offline shares.
The table's ``images/s`` is a job's best run, ``median`` the median of all its runs (every repeat of every
round): on a quiet machine they agree; under ``--load`` the best is whichever run the scheduler favoured
most, so the median is the figure to compare there (``median_ratios`` of the JSON line). Where ``ours`` read the
score floor on its own tensors before each run (``sgdet-full``), its row has a line with that floor and the share
of it reached (``ours_vs_paired-floor`` ratios): the same memory and minute as each run, unlike the floor's own
job (``ours_vs_score-floor``), which a phase of the machine can put far from ``ours``.
"""
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .runners import PEER_WORKLOADS, Job
from .workloads import WORKLOADS

SELF_REFERENCES = ('ours-torch', 'ours-1thread', 'baseline', 'ours+errors', 'ours+detap', 'ours+recipe',
                   'ours+numpy')
"""Variants of ``ours`` that ``ours`` is compared with (ratio keys ``ours_vs_<variant>_<workload>_cpu``)."""
HEADER = (f'{"implementation":<14} {"workload":<14} {"device":<6} {"images/s":>10} {"median":>8} {"peak RSS MB":>11} '
          f'{"GPU peak MB":>11} {"bytes/img sent":>14} {"R@50":>7} {"mR@50":>7}')
INDENT = f'{"":<14} {"":<14} {"":<6}'


def _ours_cpu(best: Mapping[Job, Dict[str, Any]], workload: str, key: str) -> Optional[float]:
    """``key`` of the in-process ``ours`` job of ``workload`` on the CPU (None when absent)."""
    return best.get(('ours', workload, 'cpu'), {}).get(key)


def _paired_share(res: Mapping[str, Any]) -> float:
    """A job's best run as a share of the best score floor read in its process (``paired_floor`` of ``run_ours``)."""
    return res['images_per_s'] / res['paired_floor_images_per_s']


RowFormat = Callable[[Job, Dict[str, Any], Mapping, int], List[str]]
"""A row format: ``(job, its best result, every job's best, offline images) -> table lines``."""


def _note_row(workload: Optional[str], note: str) -> RowFormat:
    """The row format of a job with a line of its own (not :func:`_rate_row`'s columns): implementation, workload
    (``workload``, or the job's own when None) and device, then ``note`` filled with the job's result
    (``note.format_map(res)``; it starts with the spaces that separate it from the device column)."""
    def row(job: Job, res: Dict[str, Any], best: Mapping, offline_images: int) -> List[str]:
        impl, wl, dev = job
        return [f'{impl:<14} {workload or wl:<14} {dev:<6}' + note.format_map(res)]
    return row


def _rate_row(job: Job, res: Dict[str, Any], best: Mapping, offline_images: int) -> List[str]:
    """The images/s row of a throughput job, with the notes of the offline jobs under it."""
    impl, wl, dev = job
    gpu = f'{res["gpu_peak_bytes"] / 2**20:.1f}' if res.get('gpu_peak_bytes') else '-'
    sent = f'{res["bytes_per_image"]:.0f}' if 'bytes_per_image' in res else '-'
    r50 = f'{res["r50"]:.3f}' if res.get('r50') is not None else '-'
    mr50 = f'{res["mr50"]:.3f}' if res.get('mr50') is not None else '-'
    median = f'{res["median_images_per_s"]:.0f}' if res.get('median_images_per_s') else '-'
    lines = [f'{impl:<14} {wl:<14} {dev:<6} {res["images_per_s"]:>10.0f} {median:>8} {res["host_peak_rss_mb"]:>11.0f} '
             f'{gpu:>11} {sent:>14} {r50:>7} {mr50:>7}']
    if 'paired_floor_images_per_s' in res:
        lines.append(f'{INDENT} (score floor read in this process on the same tensors right before each run: best '
                     f'{res["paired_floor_images_per_s"]:.0f} images/s, {_paired_share(res):.2f} of it reached; the '
                     f'median of the run-by-run shares {res.get("median_paired_floor_share", float("nan")):.2f})')
    if impl == 'offline':
        lines.append(f'{INDENT} ({res["file_mb"]:.0f} MB stream: reading alone '
                     f'{res["read_images_per_s"]:.0f} images/s, {100 * res["read_share"]:.0f}% of the offline time; '
                     f'plain file read {res["disk_images_per_s"]:.0f} images/s'
                     + (f', read + SHA-256 {res["hash_images_per_s"]:.0f} images/s' if 'hash_images_per_s' in res
                        else '') + ')')
    if impl == 'offline-cli':
        ours, ours_cpu = _ours_cpu(best, wl, 'images_per_s'), _ours_cpu(best, wl, 'cpu_images_per_s')
        share = f', {100 * res["images_per_s"] / ours:.0f}% of the in-process rate' if ours else ''
        if ours_cpu:
            share += f' ({100 * res["cpu_images_per_s"] / ours_cpu:.0f}% in CPU time)'
        lines.append(f'{INDENT} (python -m mmsgg_eval.eval: marginal rate{share}, '
                     f'{res["cpu_images_per_s"]:.0f} images per CPU second; {res["small_images"]} images: first '
                     f'sample after {res["first_sample_s"]:.2f} s ({res["first_sample_cpu_s"]:.2f} CPU s), total '
                     f'{res["total_s"]:.2f} s; {offline_images} images: total {res["total_s_full"]:.2f} s)')
        if 'hash_images_per_s' in res:
            lines.append(f'{INDENT} (reading bound, the same {res["file_mb"]:.0f} MB file read + SHA-256 in one pass: '
                         f'{res["hash_images_per_s"]:.0f} images/s; the marginal rate is {res["share_of_hash"]:.2f} '
                         f'of it; a VG150-test-sized stream, 26,446 images / {res["vg150_test_gb"]:.0f} GB: '
                         f'{res["vg150_test_s"]:.0f} s projected)')
    return lines


ROW_FORMATS: Dict[str, Tuple[str, RowFormat]] = {
    'relclip': ('relations_per_s', _note_row(
        'ViT-B/32', ' {images_per_s:>10.2f} {host_peak_rss_mb:>11.0f}    ({relations_per_s:.1f} relations/s, study '
                    '{study_relations_per_s:.1f} relations/s, random weights)')),
    'cli-startup': ('first_sample_s', _note_row(
        None, '   first sample after {first_sample_s:.2f} s ({first_sample_cpu_s:.2f} CPU s), total {total_s:.2f} s '
              '({images} images, python -m mmsgg_eval.eval)')),
    'bootstrap': ('bootstrap_seconds', _note_row(
        'vg150-test', '   {samples} replicates x {images} images, {keys} keys (SGMeanRecall): '
                      '{bootstrap_seconds:.2f} s, {threads} threads')),
}
"""Implementation -> (the key its result has when it ran, its row format); the others: ``_rate_row``."""


def load_line(load: int, before: str, after: str) -> str:
    """The line above the table stating the competing load of the run and the machine's load averages (1, 5,
    15 minutes) when the first round started and after the last one."""
    what = f'{load} CPU-bound busy process{"es" if load != 1 else ""} (--load {load})' if load else 'none (quiet)'
    return f'competing load: {what}; load average {before} at the start, {after} at the end'


def format_table(jobs: Sequence[Job], best: Mapping[Job, Dict[str, Any]], offline_images: int) -> List[str]:
    """The table lines: one row per job (its best round) in job order; a skipped or failed job says why."""
    lines = ['', HEADER]
    for job in jobs:
        res = best[job]
        key, row = ROW_FORMATS.get(job[0], ('images_per_s', _rate_row))
        if key in res:
            lines += row(job, res, best, offline_images)
        elif 'images_per_s' in res:
            lines += _rate_row(job, res, best, offline_images)
        else:
            lines.append(f'{job[0]:<14} {job[1]:<14} {job[2]:<6} {res.get("skipped") or res.get("error")}')
    return lines


def summarize(jobs: Sequence[Job], best: Mapping[Job, Dict[str, Any]]) -> Dict[str, Any]:
    """``images_per_s`` ('impl/workload/device' -> rate, RelCLIP's relations/s and the bootstrap job's
    seconds), ``ratios`` (ours against each peer, and the offline rates as a share of the in-process rate, in
    wall and CPU seconds), ``median_ratios`` (ours and ours-1thread against their references and the peers,
    from the medians of all runs) and ``startup`` (the CLI's start-up times) of the JSON line."""
    rows = [(job, best[job]) for job in jobs]
    summary = {f'{impl}/{wl}/{dev}': res.get('images_per_s') for (impl, wl, dev), res in rows}
    medians = {f'{impl}/{wl}/{dev}': res.get('median_images_per_s') for (impl, wl, dev), res in rows}
    summary.update({f'{impl}/relations_per_s/{dev}': res['relations_per_s'] for (impl, wl, dev), res in rows
                    if 'relations_per_s' in res})
    summary.update({f'{impl}/seconds/{dev}': res['bootstrap_seconds'] for (impl, wl, dev), res in rows
                    if 'bootstrap_seconds' in res})
    startup = {f'{impl}/{wl}': {k: res[k] for k in ('first_sample_s', 'first_sample_cpu_s', 'total_s') if k in res}
               for (impl, wl, dev), res in rows if impl in ('offline-cli', 'cli-startup')}
    ratios, median_ratios = {}, {}
    references = dict(PEER_WORKLOADS, **{impl: tuple(WORKLOADS) for impl in SELF_REFERENCES})
    for mine in ('ours', 'ours-1thread'):  # ours-1thread against the peers: the per-core efficiency
        for peer, workloads in (references if mine == 'ours' else PEER_WORKLOADS).items():
            for wl in workloads:
                for rates, out in ((summary, ratios), (medians, median_ratios)):
                    ours, theirs = rates.get(f'{mine}/{wl}/cpu'), rates.get(f'{peer}/{wl}/cpu')
                    if ours and theirs:
                        out[f'{mine}_vs_{peer}_{wl}_cpu'] = ours / theirs
    for (impl, wl, dev), res in rows:  # against the score floor read in the same process on the same tensors
        if impl == 'ours' and dev == 'cpu' and res.get('paired_floor_images_per_s'):
            ratios[f'ours_vs_paired-floor_{wl}_cpu'] = _paired_share(res)
            if 'median_paired_floor_share' in res:
                median_ratios[f'ours_vs_paired-floor_{wl}_cpu'] = res['median_paired_floor_share']
    for impl in ('offline', 'offline-cli'):  # offline rates as a share of the in-process rate
        for wl in WORKLOADS:
            ours, offline = summary.get(f'ours/{wl}/cpu'), summary.get(f'{impl}/{wl}/cpu')
            if ours and offline:
                ratios[f'{impl}_share_of_ours_{wl}_cpu'] = offline / ours
    for (impl, wl, dev), res in rows:  # the offline CLI against its reading bound (read + SHA-256 of its file)
        if impl == 'offline-cli' and res.get('share_of_hash'):
            ratios[f'offline-cli_share_of_read_hash_{wl}_cpu'] = res['share_of_hash']
    for (impl, wl, dev), res in rows:  # the same share in CPU seconds (steadier on a shared machine)
        ours_cpu = _ours_cpu(best, wl, 'cpu_images_per_s')
        if impl == 'offline-cli' and ours_cpu and res.get('cpu_images_per_s'):
            ratios[f'offline-cli_cpu_share_of_ours_{wl}_cpu'] = res['cpu_images_per_s'] / ours_cpu
    return dict(images_per_s=summary, median_images_per_s={k: v for k, v in medians.items() if v},
                ratios=ratios, median_ratios=median_ratios, startup=startup)


__all__: Sequence[str] = ('format_table', 'load_line', 'summarize', 'ROW_FORMATS')
