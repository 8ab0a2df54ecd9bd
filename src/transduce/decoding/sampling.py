"""Sampling: the next token drawn (at a temperature, among the tokens that top-k and top-p keep)
rather than chosen."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..config import DecodeConfig


def filter_logits(
    logprobs: Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> Tensor:
    """Rescale by temperature and keep only the top-k / nucleus (top-p) tokens of each row ``(N,
    V)``."""
    scores = logprobs / temperature
    if top_k > 0:
        kth = scores.topk(min(top_k, scores.size(-1)), dim=-1).values[:, -1:]  # (N, 1)
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        sorted_scores, order = scores.sort(dim=-1, descending=True)
        probs = sorted_scores.softmax(-1)
        outside = probs.cumsum(-1) - probs >= top_p  # mass before this token already reaches p
        sorted_scores = sorted_scores.masked_fill(outside, float("-inf"))
        scores = torch.full_like(scores, float("-inf")).scatter(-1, order, sorted_scores)
    return scores


def draw(
    logprobs: Tensor, decode: DecodeConfig, generator: Optional[torch.Generator] = None
) -> tuple[Tensor, Tensor]:
    """One token per row of ``logprobs (N, V)`` drawn at ``decode``'s temperature (its top-k and
    top-p filters are a score modifier, ``modifiers.SamplingFilters``, applied before):
    ``(its log-probability, the token)``, each ``(N,)``."""
    probs = (logprobs / decode.temperature).softmax(-1)
    token = torch.multinomial(probs, 1, generator=generator).squeeze(1)
    return logprobs.gather(1, token[:, None]).squeeze(1), token
