"""Offline evaluation of saved predictions (same as ``python -m mmsgg_eval.eval``); see mmsgg_eval/eval.py."""
import os.path as osp
import sys

sys.path.insert(0, osp.abspath(osp.join(osp.dirname(__file__), '..')))

from mmsgg_eval.eval import main  # noqa: E402

if __name__ == '__main__':
    main()
