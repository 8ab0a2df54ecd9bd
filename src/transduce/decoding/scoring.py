"""Forced decoding: the log-probability a model gives a known target, and the attention weights it
used to produce it."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from ..data.dataset import pad_sequences
from ..runtime import autocast


@torch.no_grad()
def score_targets(model, src: Tensor, targets: Sequence[Sequence[int]]) -> Tensor:
    """Sum of log p(y_t | y_<t, x) over each target's tokens and its eos -> ``(B,)``."""
    c = model.config
    tgt_in = pad_sequences(targets, c.pad_id, prefix=c.start_id).to(src.device)  # (B, T)
    tgt_out = pad_sequences(targets, c.pad_id, suffix=c.eos_id).to(src.device)  # (B, T)
    logprobs = torch.log_softmax(model(src, tgt_in).float(), dim=-1)  # (B, T, V)
    picked = logprobs.gather(2, tgt_out[:, :, None]).squeeze(2)  # (B, T)
    return picked.masked_fill(tgt_out == c.pad_id, 0.0).sum(1)


def forced_attention(model, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
                     precision: str = "fp32"):
    """The attention weights of one teacher-forced pass over a batch: ``sources`` (ids without
    eos) and ``targets`` (ids without the start token), padded; returns ``model.Attention``, where
    query i of the decoder is the step that produced target piece i (the last one, eos).
    ``precision``: a translator's (int8 runs the pass with the encoder's own int8 products)."""
    cfg, device = model.config, next(model.parameters()).device
    src = pad_sequences(list(sources), cfg.pad_id, suffix=cfg.eos_id).to(device)
    tgt = pad_sequences(list(targets), cfg.pad_id, prefix=cfg.start_id).to(device)
    with torch.inference_mode(), autocast(device, "fp32" if precision == "int8" else precision):
        _, attention = model(src, tgt, need_weights=True)
    return attention
