"""Helpers shared by tools/test.py, tools/build_freq_baseline.py and offline evaluation."""
import json
import os
import os.path as osp
from typing import Any, Dict, Optional

import torch


def setup_cpu_distributed(cfg: Any, launcher: str) -> None:
    """Prepare a config for multi-process evaluation without the DDP/CUDA assumptions of MMEngine.

    MMEngine's ``pytorch`` launcher calls ``torch.cuda.set_device`` and wraps the model in DDP with
    ``device_ids``; both fail without GPUs, and DDP refuses models without trainable parameters. For
    evaluation we initialise the process group ourselves (backend ``cfg.env_cfg.dist_cfg.backend``; gloo
    when no GPU is present), pin each rank to its local GPU when there is one, and use
    :class:`~mmsgg_eval.models.EvalOnlyModelWrapper`. The Runner then skips its own initialisation.
    """
    import torch.distributed as dist
    if launcher == 'none' or dist.is_initialized():
        return
    env_cfg = cfg.setdefault('env_cfg', {})
    dist_cfg = env_cfg.setdefault('dist_cfg', {})
    backend = dist_cfg.get('backend', 'nccl')
    if not torch.cuda.is_available():
        backend = 'gloo'
        dist_cfg['backend'] = 'gloo'
    if launcher == 'slurm':
        _slurm_env()
    local_rank = int(os.environ.get('LOCAL_RANK', 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    dist.init_process_group(backend=backend)
    from .registry import MODEL_WRAPPERS
    # scope-qualified: the Runner looks the type up from MMEngine's root registry
    cfg['model_wrapper_cfg'] = dict(type=f'{MODEL_WRAPPERS.scope}.EvalOnlyModelWrapper')


def _slurm_env() -> None:
    """Translate SLURM variables into torch.distributed's env:// variables."""
    import subprocess
    proc_id = int(os.environ['SLURM_PROCID'])
    ntasks = int(os.environ['SLURM_NTASKS'])
    node_list = os.environ['SLURM_NODELIST']
    num_gpus = max(torch.cuda.device_count(), 1)
    addr = subprocess.getoutput(f'scontrol show hostname {node_list} | head -n1')
    os.environ.setdefault('MASTER_PORT', '29500')
    os.environ.setdefault('MASTER_ADDR', addr)
    os.environ['WORLD_SIZE'] = str(ntasks)
    os.environ['LOCAL_RANK'] = str(proc_id % num_gpus)
    os.environ['RANK'] = str(proc_id)


def write_metrics_json(metrics: Dict[str, Any], work_dir: str, name: Optional[str] = None) -> str:
    """Write ``metrics.json`` (all keys, per-predicate tables included) into ``work_dir``."""
    from .reports import json_safe
    os.makedirs(work_dir, exist_ok=True)
    path = osp.join(work_dir, name or 'metrics.json')
    with open(path, 'w') as f:
        json.dump(json_safe(metrics, nan_as_null=False), f, indent=2)
    return path
