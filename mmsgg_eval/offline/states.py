"""Summarising saved evaluation states again (:func:`evaluate_states`, ``python -m mmsgg_eval.eval --from-state``):
state files found from files, directories and globs (:func:`state_paths`), the states of one metric merged as
shards, samples in no state refused (or summarised alone with ``covered_only``), and every metric rebuilt from its
state runs its own ``evaluate()``, writing the same reports and ``metrics.json`` as the original run.
"""
import glob
import logging
import os.path as osp
from typing import Any, Dict, List, Optional, Sequence

def state_paths(items: Sequence[str]) -> List[str]:
    """State files of ``items``: files, directories (their ``*.state`` files) or glob patterns matching either
    (``'job_*/states'`` as ``'job_*/states/*.state'``), in order; ``FileNotFoundError`` naming an item that
    gives no state."""
    from mmsgg_eval.metrics.state import STATE_SUFFIX
    paths: List[str] = []
    for item in items:
        matches = sorted(glob.glob(item)) if glob.has_magic(item) else [item]
        found: List[str] = []
        for match in matches:
            found += sorted(glob.glob(osp.join(glob.escape(match), '*' + STATE_SUFFIX))) if osp.isdir(match) \
                else [match]
        if not found:
            where = f'no evaluation state at {osp.abspath(item)}'
            raise FileNotFoundError(where + (' (a directory without *.state files)' if osp.isdir(item) else ''))
        paths.extend(found)
    return paths


#: ``--allow-missing`` with ``--from-state``: the option means "score missing samples as empty predictions",
#: which a state cannot do (it holds no rows of the samples it lacks).
ALLOW_MISSING_WITH_STATES = ('--allow-missing scores samples without a prediction as empty predictions, which '
                             'evaluation states cannot do (they hold no rows of the samples they lack); '
                             '--covered-only summarises the samples the states cover, alone')


def evaluate_states(states: Sequence[str], work_dir: Optional[str] = None, covered_only: bool = False,
                    save_state: Optional[str] = None, bootstrap: Optional[int] = None,
                    allow_missing: bool = False) -> Dict[str, Any]:
    """Summarise saved evaluation states again, without the predictions (``--from-state``).

    States of one metric (same type and prefix) are shards: they are merged
    (:func:`~mmsgg_eval.metrics.state.merge_states`: overlapping samples, different settings, protocols or GT
    are refused, naming the difference); each merged metric then runs its ``evaluate()`` on the rows, in the
    order of the original evaluator, writing the same reports into ``work_dir`` (default
    ``work_dirs/offline``) and the same ``metrics.json`` (with ``provenance`` naming the states). Dataset
    samples in no state are a :class:`~mmsgg_eval.io.errors.MissingSamplesError`; with ``covered_only``
    (``--covered-only``) the covered samples are summarised alone (a warning names how many are absent).
    ``allow_missing`` (scoring missing samples as empty predictions, as for prediction files) is refused
    with a ValueError pointing to ``covered_only``. ``save_state``: a directory where the merged states are
    written. Every output location (``work_dir``, ``save_state``, the metrics' files) is checked before any
    metric is summarised. Output arguments recorded in a state are never used
    (:meth:`~mmsgg_eval.metrics.state.EvaluationState.build_metric`)."""
    if allow_missing:
        raise ValueError(ALLOW_MISSING_WITH_STATES)
    from mmengine.logging import print_log

    from mmsgg_eval.io.errors import MissingSamplesError
    from mmsgg_eval.metrics.state import evaluation_order, evaluate_state, load_state, merge_states, \
        missing_samples, shared_objects
    from mmsgg_eval.runner.results import file_fingerprint, run_provenance, write_run_metrics
    from mmsgg_eval.runner.results import check_writable
    paths = state_paths(states)
    work_dir = work_dir or osp.join('work_dirs', 'offline')
    check_writable(work_dir, 'work dir (--work-dir)')  # every output location before any work
    if save_state:
        check_writable(save_state, 'directory of --save-state')
    groups: Dict[Any, list] = {}
    for path in paths:
        state = load_state(path)
        groups.setdefault(state.identity(), []).append(state)
    merged = shared_objects(evaluation_order([merge_states(g) for g in groups.values()]))
    for state in merged:
        missing = missing_samples(state)
        if missing and not covered_only:
            raise MissingSamplesError(state.where, missing, state.dataset['num_samples'],
                                      remedy='pass --covered-only (covered_only=True) to summarise the samples '
                                             'the states cover, alone')
        if missing:
            print_log(f'{state.name}: {len(missing)} of the {state.dataset["num_samples"]} dataset samples are in '
                      f'no state (first sample_idx: {missing[:10]}); --covered-only: the other samples are '
                      f'summarised alone', logger='current', level=logging.WARNING)
    results: Dict[str, Any] = {}
    metrics = []
    for state in merged:
        target = None if not save_state else osp.join(save_state, osp.basename(state.sources[0]))
        metrics.append(state.build_metric(report_dir=work_dir, save_state=target, bootstrap=bootstrap))
    for metric in metrics:  # the metrics' own files (names claimed, locations checked) before any summary
        metric.check_outputs()
    for state, metric in zip(merged, metrics):
        _, keys = evaluate_state(state, metric=metric)
        results.update(keys)
    provenance = run_provenance('mmsgg_eval.eval --from-state', '', metrics, work_dir=work_dir,
                                options=dict(covered_only=covered_only, save_state=save_state))
    provenance.update(config=None, dataset=dict(merged[0].dataset) if merged else None,
                      states=[file_fingerprint(p) for p in paths])
    path, _ = write_run_metrics(results, metrics, work_dir, provenance)
    print(f'{len(paths)} evaluation states summarised; metrics written to {path}')
    return results

