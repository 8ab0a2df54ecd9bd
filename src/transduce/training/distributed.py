"""PyTorch's own distributed engine, as started by ``torchrun``: nothing home-made."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..errors import TrainingError


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")  # where collectives run: NCCL needs CUDA tensors

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def setup(device: torch.device) -> DistInfo:
    """Join the process group when launched by torchrun (gloo on CPU, nccl on CUDA)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistInfo()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", local_rank + 1))
    if device.type == "cuda" and local_size > torch.cuda.device_count():
        # every process says so, before any joins the group (one failing alone leaves the others
        # waiting)
        gpus = torch.cuda.device_count()
        raise TrainingError(f"torchrun started {local_size} processes on this machine, which has "
                            f"{gpus} GPU(s): one process per GPU, so use --nproc_per_node={gpus} "
                            "(or train on the CPU with --device cpu)")
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend)
    collective_device = (
        torch.device("cuda", local_rank) if device.type == "cuda" else torch.device("cpu")
    )
    return DistInfo(dist.get_rank(), dist.get_world_size(), local_rank, collective_device)


def all_reduce_sum(value: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """The sum of ``value`` over ranks (a new tensor on the collectives' device when
    distributed)."""
    if info.enabled:
        value = value.to(info.device)
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def teardown(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()
