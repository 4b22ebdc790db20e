"""Evaluate a model with MMEngine's Runner, as mmdet's tools/test.py, with the mmsgg_eval metrics.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out preds.pkl] [--save-state DIR]
                         [--cfg-options k=v ...] [--debug]
    bash tools/dist_test.sh CONFIG CHECKPOINT GPUS   # torchrun; gloo on CPU-only machines

Metrics are logged, and written to WORK_DIR/metrics.json (all keys, per-predicate recalls included, and the
run's provenance: config, checkpoint SHA-256, dataset, protocols, versions; the same writer and keys as the
offline CLI). Output locations are checked before evaluating; ``env_cfg.dist_cfg.timeout`` (seconds) bounds
how long a rank waits for a stalled one. ``--save-state DIR`` writes every metric's evaluation state
(``python -m mmsgg_eval.eval --from-state DIR`` summarises or merges them again). User errors are one line
(``--debug``: the traceback). The implementation is :mod:`mmsgg_eval.runner.cli`.
"""
from mmsgg_eval.runner.cli import main

if __name__ == '__main__':
    main()
