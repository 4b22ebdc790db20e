"""Offline evaluation of saved predictions and evaluation states, the API behind ``python -m mmsgg_eval.eval``
(:mod:`mmsgg_eval.eval`, the command line): :mod:`.config` (the run's config, dataset and metric configs with the
command line's options applied), :mod:`.predictions` (prediction files through an mmengine ``Evaluator`` into
``metrics.json``) and :mod:`.states` (saved states merged and summarised again)."""
from .config import build_dataset, load_run_config, metric_cfgs
from .predictions import evaluate_file, evaluate_grounding_predictions
from .states import evaluate_states, state_paths

__all__ = ['build_dataset', 'load_run_config', 'metric_cfgs', 'evaluate_file', 'evaluate_grounding_predictions',
           'evaluate_states', 'state_paths']
