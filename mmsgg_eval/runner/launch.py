"""Process-group set-up and teardown for evaluation (torchrun, slurm, mpi; NCCL on GPUs, gloo on CPUs).

MMEngine's ``pytorch`` launcher calls ``torch.cuda.set_device`` and wraps the model in DDP with
``device_ids``; both fail without GPUs, and DDP refuses models without trainable parameters. For evaluation
:func:`setup_cpu_distributed` initialises the process group itself and selects
:class:`~mmsgg_eval.runner.EvalOnlyModelWrapper`; the Runner then skips its own initialisation.

Every collective of the run (the Runner's seed and timestamp broadcasts, the metrics' single reduce, the
final barrier) runs on that default process group, created with ``env_cfg.dist_cfg.timeout`` seconds
(:data:`DEFAULT_TIMEOUT_S` when the config sets none; gloo and NCCL both honour it per collective). A rank
that stops or dies therefore ends the others' collectives with an error after at most that long (a dead
peer: at once), which :func:`explain_collective_failures` turns into a :class:`DistributedEvaluationError`
naming the rank, the timeout and the likely cause. :func:`teardown_distributed` synchronises the ranks and
destroys the group before the interpreter exits: gloo's threads still running at exit abort the process
("terminate called without an active exception", SIGABRT) in a fraction of 3-rank runs otherwise.
"""
import contextlib
import datetime
import os
import subprocess
from typing import Any, Iterator, Tuple

import torch

DEFAULT_TIMEOUT_S = 1800.0
"""Collective timeout in seconds when ``env_cfg.dist_cfg.timeout`` is not set (torch's gloo default)."""

_FAILURE_MARKERS = ('gloo', 'Gloo', 'NCCL', 'Timed out', 'timed out', 'Connection reset', 'Connection closed',
                    'Broken pipe', 'Connection refused')


class DistributedEvaluationError(RuntimeError):
    """A collective across ranks failed: another rank stopped, died or stalled longer than the timeout."""


def process_group_timeout(cfg: Any) -> float:
    """The collective timeout in seconds: ``cfg.env_cfg.dist_cfg.timeout`` (as MMEngine reads it), else
    :data:`DEFAULT_TIMEOUT_S`. Raises ``ValueError`` for a value that is not a positive number."""
    dist_cfg = (cfg.get('env_cfg') or {}).get('dist_cfg') or {}
    value = dist_cfg.get('timeout', None)
    if value is None:
        return DEFAULT_TIMEOUT_S
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f'env_cfg.dist_cfg.timeout must be a positive number of seconds, got {value!r}')
    return float(value)


def setup_cpu_distributed(cfg: Any, launcher: str) -> bool:
    """Initialise the default process group for evaluation; return True when this call created it.

    Backend ``cfg.env_cfg.dist_cfg.backend`` (gloo when no GPU is present), timeout
    :func:`process_group_timeout`; each rank is pinned to its local GPU when there is one. For any launcher
    but ``'none'`` the config's ``model_wrapper_cfg`` becomes :class:`~mmsgg_eval.runner.EvalOnlyModelWrapper`
    (also when the caller initialised the group already; then nothing else changes).
    """
    import torch.distributed as dist
    if launcher == 'none':
        return False
    from ..registry import MODEL_WRAPPERS
    # scope-qualified: the Runner looks the type up from MMEngine's root registry
    cfg['model_wrapper_cfg'] = dict(type=f'{MODEL_WRAPPERS.scope}.EvalOnlyModelWrapper')
    if dist.is_initialized():
        return False
    env_cfg = cfg.setdefault('env_cfg', {})
    dist_cfg = env_cfg.setdefault('dist_cfg', {})
    timeout = process_group_timeout(cfg)
    backend = dist_cfg.get('backend', 'nccl')
    if not torch.cuda.is_available():
        backend = 'gloo'
        dist_cfg['backend'] = 'gloo'
    if launcher == 'slurm':
        _slurm_env()
    elif launcher == 'mpi':
        _mpi_env()
    local_rank = int(os.environ.get('LOCAL_RANK', 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout))
    return True


def teardown_distributed(synchronize: bool = True) -> None:
    """Destroy the default process group (no-op when none exists); first wait for every rank when
    ``synchronize`` (the barrier has the group's timeout). Call it after results are written."""
    import torch.distributed as dist
    if not dist.is_initialized():
        return
    if synchronize and dist.get_world_size() > 1:
        dist.barrier()
    dist.destroy_process_group()


def _is_collective_failure(err: BaseException) -> bool:
    dist_error = getattr(torch.distributed, 'DistError', None)
    if dist_error is not None and isinstance(err, dist_error):
        return True
    return isinstance(err, RuntimeError) and any(m in str(err) for m in _FAILURE_MARKERS)


def _rank_and_world() -> Tuple[int, int]:
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get('RANK', 0)), int(os.environ.get('WORLD_SIZE', 1))


@contextlib.contextmanager
def explain_collective_failures(timeout_s: float) -> Iterator[None]:
    """Re-raise a failed collective (gloo/NCCL error, timeout, peer connection lost) as a
    :class:`DistributedEvaluationError` that says which rank saw it, after how long, and what to check."""
    try:
        yield
    except DistributedEvaluationError:
        raise
    except RuntimeError as err:
        rank, world = _rank_and_world()
        if world <= 1 or not _is_collective_failure(err):
            raise
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if 'imed out' in str(err):
            cause = (f'no answer within env_cfg.dist_cfg.timeout={timeout_s:g} s: another rank is stopped, '
                     f'stalled or much slower (raise the timeout with --cfg-options '
                     f'env_cfg.dist_cfg.timeout=SECONDS if it is only slow)')
        else:
            cause = 'another rank closed its connection: it died or failed (its log shows why)'
        raise DistributedEvaluationError(f'rank {rank} of {world}: a collective across ranks failed, {cause}. '
                                         f'Backend error: {detail}') from err


@contextlib.contextmanager
def distributed_evaluation(cfg: Any, launcher: str) -> Iterator[bool]:
    """Set up the process group (:func:`setup_cpu_distributed`), run the body with collective failures
    explained, then tear down: after a barrier on success, at once on an error. Yields whether this call
    owns the group. Write results inside the body, so they exist before teardown."""
    owned = setup_cpu_distributed(cfg, launcher)
    timeout = process_group_timeout(cfg)
    try:
        with explain_collective_failures(timeout):
            yield owned
            if owned:
                teardown_distributed(synchronize=True)
    except BaseException:
        if owned:
            with contextlib.suppress(Exception):  # the original error is the one to report
                teardown_distributed(synchronize=False)
        raise


def _slurm_env() -> None:
    """Translate SLURM variables into torch.distributed's env:// variables."""
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


def _mpi_env() -> None:
    """Translate Open MPI variables into torch.distributed's env:// variables (as MMEngine's mpi launcher)."""
    os.environ['LOCAL_RANK'] = os.environ['OMPI_COMM_WORLD_LOCAL_RANK']
    os.environ['RANK'] = os.environ['OMPI_COMM_WORLD_RANK']
    os.environ['WORLD_SIZE'] = os.environ['OMPI_COMM_WORLD_SIZE']
    os.environ.setdefault('MASTER_PORT', '29500')
    if 'MASTER_ADDR' not in os.environ:
        raise RuntimeError('--launcher mpi needs MASTER_ADDR (the host of rank 0) in the environment')
