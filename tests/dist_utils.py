"""Helpers for multi-process (gloo, CPU) tests of metrics.

``run_distributed(worker, world_size, *args)`` starts ``world_size`` processes with an initialised gloo
process group and returns the value each ``worker(rank, world_size, *args)`` returned, in rank order.
``padded_shard(n, world_size, rank)`` reproduces MMEngine's ``DefaultSampler(shuffle=False)``: the index
list is padded with its own first entries up to a multiple of the world size, then strided.
"""
import os
import socket
import tempfile
import traceback
from typing import Any, Callable, List

import torch.distributed as torch_dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def padded_shard(n: int, world_size: int, rank: int) -> List[int]:
    total = -(-n // world_size) * world_size
    indices = list(range(n))
    indices += indices[:total - n]
    return indices[rank:total:world_size]


def _entry(rank: int, world_size: int, port: int, outdir: str, worker: Callable, args: tuple) -> None:
    import pickle
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    torch_dist.init_process_group('gloo', rank=rank, world_size=world_size)
    try:
        result = ('ok', worker(rank, world_size, *args))
    except BaseException:  # noqa: BLE001 - reported to the parent
        result = ('error', traceback.format_exc())
    with open(os.path.join(outdir, f'{rank}.pkl'), 'wb') as f:
        pickle.dump(result, f)
    torch_dist.barrier()
    torch_dist.destroy_process_group()


def run_distributed(worker: Callable, world_size: int, *args: Any) -> List[Any]:
    """Run ``worker(rank, world_size, *args)`` on ``world_size`` gloo ranks; return results by rank."""
    import pickle
    with tempfile.TemporaryDirectory() as outdir:
        mp.start_processes(_entry, args=(world_size, free_port(), outdir, worker, args), nprocs=world_size,
                           join=True, start_method='spawn')
        results = []
        for rank in range(world_size):
            with open(os.path.join(outdir, f'{rank}.pkl'), 'rb') as f:
                status, value = pickle.load(f)
            if status != 'ok':
                raise RuntimeError(f'rank {rank} failed:\n{value}')
            results.append(value)
    return results
