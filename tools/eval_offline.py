"""Offline evaluation of saved predictions: the same as ``python -m mmsgg_eval.eval`` (see mmsgg_eval/eval.py),
e.g. ``CONFIG preds_*.jsonl [--save-state DIR]`` or ``--from-state DIR/*.state``."""
from mmsgg_eval.eval import main

if __name__ == '__main__':
    main()
