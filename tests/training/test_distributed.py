"""Joining torchrun's process group: the checks made before any process joins."""

import pytest
import torch

from transduce.errors import TrainingError
from transduce.training import distributed


@pytest.fixture
def two_processes(monkeypatch):
    """torchrun's environment for 2 processes on this machine, with the group's entry recorded
    (never joined); returns (set the GPU count, the joins)."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    joined = []
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda **kw: joined.append(kw))
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    return (lambda n: monkeypatch.setattr(torch.cuda, "device_count", lambda: n)), joined


def test_more_processes_than_gpus_is_a_message_before_joining(two_processes, monkeypatch):
    """torchrun --nproc_per_node=2 on a 1-GPU machine: every process stops with the same message
    (not the second alone with 'invalid device ordinal' while the first waits for it)."""
    gpus, joined = two_processes
    gpus(1)
    for rank in ("0", "1"):
        monkeypatch.setenv("LOCAL_RANK", rank)
        with pytest.raises(TrainingError, match=r"2 processes on this machine, which has 1 "
                                                r"GPU.*--nproc_per_node=1"):
            distributed.setup(torch.device("cuda"))
    assert not joined


def test_one_process_per_gpu_joins(two_processes, monkeypatch):
    gpus, joined = two_processes
    gpus(2)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(distributed.dist, "get_rank", lambda: 1)
    monkeypatch.setattr(distributed.dist, "get_world_size", lambda: 2)
    info = distributed.setup(torch.device("cuda"))
    assert (
        joined == [{"backend": "nccl"}]
        and info.device == torch.device("cuda", 1)
        and info.rank == 1
    )
