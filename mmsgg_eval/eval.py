"""Offline evaluation of saved predictions: ``python -m mmsgg_eval.eval CONFIG PREDICTIONS [options]``.

Inputs (``--format``, default from the file name):

* ``dump``: the stream written by ``tools/test.py --out`` (or an mmengine ``DumpResults`` list pickle);
* ``jsonl``: per-image predictions in the JSONL format of :mod:`mmsgg_eval.predictions_io` (GT from the
  dataset of the config);
* ``vlm``: JSONL of raw multimodal-LLM answers (:func:`mmsgg_eval.vlm.iter_vlm_jsonl`), scored by
  ``VLMSceneGraphMetric`` (FailureRate, Recall, mRecall, AP@50, ...), or by the config's ``vlm_evaluator``
  list when it has one (e.g. ``RelCLIPScore`` on the model's own words, configs/relclip/);
* ``legacy``: the legacy Scene-Graph-Benchmark ``eval_results.pytorch`` (:mod:`mmsgg_eval.legacy`);
* ``grounding``: a JSON list of ``{sample_idx or img_id, bbox}`` scored by ``GroundingPr``
  (:mod:`mmsgg_eval.grounding_io`; ``--metric-options coord_scale=1000`` for boxes on a 0-1000 canvas).

The metrics are the config's ``test_evaluator`` unless ``--metrics`` names others. Reports (metrics.json, the
per-predicate long-tail chart, Markdown tables) are written to ``--work-dir``. No GPU is needed; files are
streamed, never loaded whole (except the legacy format, which is one torch object).
"""
import argparse
import os.path as osp
import sys
from typing import Any, Dict, Iterable, Iterator, List, Optional


def _guess_format(path: str) -> str:
    name = path.lower()
    if name.endswith('.jsonl') or name.endswith('.json'):
        return 'jsonl'
    if name.endswith('.pytorch') or name.endswith('.pth') or name.endswith('.pt'):
        return 'legacy'
    return 'dump'


def build_dataset(cfg: Any, split_key: str = 'test_dataloader') -> Any:
    """The config's evaluation dataset, annotations only (no pipeline, no images)."""
    from mmsgg_eval.registry import DATASETS
    loader = cfg.get(split_key) or cfg.get('val_dataloader')
    if loader is None:
        raise SystemExit(f'the config has no {split_key}.dataset')
    return DATASETS.build(dict(loader['dataset'], pipeline=[]))


def _metric_cfgs(cfg: Any, names: Optional[List[str]], mode: Optional[str]) -> List[dict]:
    if names:
        out = []
        for name in names:
            entry: Dict[str, Any] = dict(type=name)
            if mode and name in ('SGRecall', 'SGMeanRecall'):
                entry['mode'] = mode
            out.append(entry)
        return out
    evaluator = cfg.get('test_evaluator') or cfg.get('val_evaluator')
    if evaluator is None:
        raise SystemExit('no metric: give --metrics or a config with test_evaluator')
    metrics = evaluator.get('metrics', evaluator) if isinstance(evaluator, dict) and 'metrics' in evaluator \
        else evaluator
    metrics = [dict(m) for m in (metrics if isinstance(metrics, (list, tuple)) else [metrics])]
    if mode:
        for m in metrics:
            if m.get('type') in ('SGRecall', 'SGMeanRecall'):
                m['mode'] = mode
    return metrics


def _with_gt(records: Iterable[Dict[str, Any]], dataset: Any) -> Iterator[Dict[str, Any]]:
    """Attach the dataset's GT (and identity) to prediction records that carry only predictions."""
    from mmsgg_eval.vlm import gt_from_data_info
    by_img_id: Optional[Dict[Any, int]] = None
    for record in records:
        if 'sample_idx' in record:
            idx = int(record['sample_idx'])
        else:
            if by_img_id is None:
                by_img_id = {}
                for i in range(len(dataset)):
                    by_img_id.setdefault(str(dataset.get_data_info(i)['img_id']), i)
            key = str(record['img_id'])
            if key not in by_img_id:
                raise ValueError(f'prediction line {record.get("_line", "?")}: img_id {key!r} is not in the dataset')
            idx = by_img_id[key]
        if not 0 <= idx < len(dataset):
            raise ValueError(f'prediction line {record.get("_line", "?")}: sample_idx {idx} outside the dataset '
                             f'(0..{len(dataset) - 1})')
        info = dict(dataset.get_data_info(idx), sample_idx=idx)
        merged = gt_from_data_info(info)
        merged.update({k: v for k, v in record.items() if k != '_line'})
        merged['sample_idx'] = idx
        yield merged


def _vlm_records(path: str, dataset: Any) -> Iterator[Dict[str, Any]]:
    from mmsgg_eval.vlm import iter_vlm_jsonl
    for id_key, id_value, text in iter_vlm_jsonl(path):
        key = 'sample_idx' if id_key == 'sample_idx' else 'img_id'
        yield {key: id_value, 'pred_text': text}


def _missing_as_empty(records: Iterable[Dict[str, Any]], dataset: Any, mark: str) -> Iterator[Dict[str, Any]]:
    """Yield the records, then one empty prediction per dataset sample never seen (never silently dropped)."""
    seen = set()
    for record in records:
        seen.add(int(record['sample_idx']))
        yield record
    missing = [i for i in range(len(dataset)) if i not in seen]
    if missing:
        from mmengine.logging import print_log
        print_log(f'{len(missing)} dataset samples have no prediction; they count as empty predictions '
                  f'(first: sample_idx={missing[:5]})', logger='current', level=30)
    import numpy as np
    for i in missing:
        info = dict(dataset.get_data_info(i), sample_idx=i)
        from mmsgg_eval.vlm import gt_from_data_info
        sample = gt_from_data_info(info)
        if mark == 'vlm':
            sample['pred_text'] = None
        else:
            sample['pred_instances'] = {'bboxes': np.zeros((0, 4), np.float32), 'labels': np.zeros(0, np.int64),
                                        'scores': np.zeros(0, np.float32)}
            sample['pred_relations'] = {'pair_idxs': np.zeros((0, 2), np.int64), 'scores': np.zeros(0, np.float32),
                                        'labels': np.zeros(0, np.int64)}
        yield sample


def evaluate_file(config: str, predictions: str, fmt: str = 'auto', metrics: Optional[List[str]] = None,
                  mode: Optional[str] = None, work_dir: Optional[str] = None, batch_size: int = 64,
                  cfg_options: Optional[dict] = None, unsafe_load: bool = False,
                  progress: bool = True, metric_options: Optional[dict] = None) -> Dict[str, Any]:
    """Evaluate a predictions file against the dataset of ``config``; returns the metrics dict."""
    from mmengine.config import Config
    from mmengine.evaluator import Evaluator
    from mmengine.registry import init_default_scope

    import mmsgg_eval  # noqa: F401
    from mmsgg_eval.predictions_io import iter_jsonl, iter_records
    from mmsgg_eval.runner_utils import write_metrics_json

    if not osp.isfile(config):
        raise FileNotFoundError(f'config file not found: {config}')
    if not osp.isfile(predictions):
        raise FileNotFoundError(f'predictions file not found: {osp.abspath(predictions)}')
    cfg = Config.fromfile(config)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    init_default_scope(cfg.get('default_scope', 'mmdet'))
    fmt = _guess_format(predictions) if fmt == 'auto' else fmt
    dataset = build_dataset(cfg)
    work_dir = work_dir or cfg.get('work_dir') or osp.join('work_dirs', 'offline')
    if fmt == 'grounding':
        from mmsgg_eval.grounding_io import evaluate_grounding_predictions
        results = evaluate_grounding_predictions(predictions, dataset, **(metric_options or {}))
        path = write_metrics_json(results, work_dir)
        print(f'{len(dataset)} samples evaluated; metrics written to {path}')
        return results
    if fmt == 'vlm':  # the config's `vlm_evaluator` (e.g. configs/relclip/) when it has one
        metric_cfgs = [dict(type=m) if isinstance(m, str) else dict(m)
                       for m in (metrics or cfg.get('vlm_evaluator') or ['VLMSceneGraphMetric'])]
    else:
        metric_cfgs = _metric_cfgs(cfg, metrics, mode)
    for m in metric_cfgs:
        m.update(metric_options or {})
        if m.get('type') in ('SGRecall', 'SGMeanRecall') and m.get('report_dir') is None:
            m['report_dir'] = work_dir
    evaluator = Evaluator(metric_cfgs)
    evaluator.dataset_meta = dataset.metainfo

    if fmt == 'dump':
        records: Iterable[Dict[str, Any]] = iter_records(predictions, unsafe=unsafe_load)
    elif fmt == 'jsonl':
        records = _missing_as_empty(_with_gt(iter_jsonl(predictions), dataset), dataset, 'jsonl')
    elif fmt == 'vlm':
        records = _missing_as_empty(_with_gt(_vlm_records(predictions, dataset), dataset), dataset, 'vlm')
    elif fmt == 'legacy':
        from mmsgg_eval.legacy import iter_legacy_samples, load_legacy_results
        sg_mode = mode or next((m.get('mode') for m in metric_cfgs if m.get('mode')), 'sgdet')
        records = iter_legacy_samples(load_legacy_results(predictions, unsafe=unsafe_load), mode=sg_mode)
    else:
        raise ValueError(f'unknown format {fmt!r}')

    bar = None
    if progress:
        from mmengine.utils import ProgressBar
        bar = ProgressBar(len(dataset))
    batch: List[Dict[str, Any]] = []
    count = 0
    for record in records:
        batch.append(record)
        if len(batch) == batch_size:
            evaluator.process(batch)
            count += len(batch)
            if bar is not None:
                for _ in batch:
                    bar.update()
            batch = []
    if batch:
        evaluator.process(batch)
        count += len(batch)
        if bar is not None:
            for _ in batch:
                bar.update()
    if progress:
        print(file=sys.stderr)
    results = evaluator.evaluate(len(dataset))
    path = write_metrics_json(results, work_dir)
    print(f'{count} samples evaluated; metrics written to {path}')
    return results


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser(prog='python -m mmsgg_eval.eval',
                                     description='Evaluate saved scene-graph / grounding predictions offline')
    parser.add_argument('config', help='config with the dataset (test_dataloader) and test_evaluator')
    parser.add_argument('predictions', help='tools/test.py --out stream, JSONL predictions, VLM JSONL or '
                                            'legacy eval_results.pytorch')
    parser.add_argument('--format', default='auto', choices=['auto', 'dump', 'jsonl', 'vlm', 'legacy', 'grounding'])
    parser.add_argument('--metrics', nargs='+', help='metric types instead of the config test_evaluator')
    parser.add_argument('--mode', choices=['predcls', 'sgcls', 'sgdet', 'phrdet'],
                        help='scene-graph mode for SGRecall/SGMeanRecall')
    parser.add_argument('--work-dir', help='where metrics.json and the reports go (default work_dirs/offline)')
    parser.add_argument('--batch-size', type=int, default=64, help='samples per process() call')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    parser.add_argument('--metric-options', nargs='+', action=DictAction,
                        help='extra metric arguments, e.g. iou_plus_one=False skip_empty_predictions=False')
    parser.add_argument('--unsafe-load', action='store_true',
                        help='load pickles with the unrestricted unpickler (only for files you trust)')
    parser.add_argument('--no-progress', action='store_true')
    args = parser.parse_args(argv)
    return evaluate_file(args.config, args.predictions, args.format, args.metrics, args.mode, args.work_dir,
                         args.batch_size, args.cfg_options, args.unsafe_load, not args.no_progress,
                         args.metric_options)


if __name__ == '__main__':
    main()
