"""Shared fixtures: every test starts from the same seeds, on one thread pool size."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
MULTI30K = SHARED_DATA / "multi30k"


@pytest.fixture(autouse=True)
def _seed_everything():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)  # in-process CLI calls may change it


def tiny_config(**overrides):
    from transduce import ModelConfig

    base = dict(vocab_size=40, dropout=0.0, max_positions=64)
    base.update(overrides)
    return ModelConfig.preset("tiny", **base)


def random_batch(batch: int, length: int, vocab: int, pad_id: int = 0, min_len: int = 1, generator=None):
    """Token ids ``(batch, length)`` in [4, vocab) with right padding of random lengths."""
    g = generator or torch.Generator().manual_seed(1)
    ids = torch.randint(4, vocab, (batch, length), generator=g)
    lengths = torch.randint(min_len, length + 1, (batch,), generator=g)
    lengths[0] = length
    for b, n in enumerate(lengths.tolist()):
        ids[b, n:] = pad_id
    return ids, lengths
