"""Forced decoding: the log-probability a model gives a known target."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from ..data.dataset import pad_sequences


@torch.no_grad()
def score_targets(model, src: Tensor, targets: Sequence[Sequence[int]]) -> Tensor:
    """Sum of log p(y_t | y_<t, x) over each target's tokens and its eos -> ``(B,)``."""
    c = model.config
    tgt_in = pad_sequences(targets, c.pad_id, prefix=c.start_id).to(src.device)  # (B, T)
    tgt_out = pad_sequences(targets, c.pad_id, suffix=c.eos_id).to(src.device)  # (B, T)
    logprobs = torch.log_softmax(model(src, tgt_in).float(), dim=-1)  # (B, T, V)
    picked = logprobs.gather(2, tgt_out[:, :, None]).squeeze(2)  # (B, T)
    return picked.masked_fill(tgt_out == c.pad_id, 0.0).sum(1)
