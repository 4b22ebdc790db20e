"""Evaluate a model with MMEngine's Runner, as mmdet's tools/test.py, with the mmsgg_eval metrics.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out preds.pkl] [--cfg-options k=v ...]
    bash tools/dist_test.sh CONFIG CHECKPOINT GPUS   # torchrun; gloo on CPU-only machines

Metrics are logged, and written to WORK_DIR/metrics.json (all keys, per-predicate recalls included).
Output locations are checked before evaluating; ``env_cfg.dist_cfg.timeout`` (seconds) bounds how long a
rank waits for a stalled one. The implementation is :mod:`mmsgg_eval.runner.cli`.
"""
from mmsgg_eval.runner.cli import main

if __name__ == '__main__':
    main()
