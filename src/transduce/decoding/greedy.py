"""Greedy search: the most probable next token at every step, all sentences at once."""

from __future__ import annotations

from torch import Tensor

from .common import Hypothesis, SearchOptions
from .sampling import sample


def greedy_search(model, src: Tensor, options: SearchOptions | None = None) -> list[Hypothesis]:
    """Decode ``src (B, S)``; one hypothesis per sentence, in order (sampling at temperature 0)."""
    return sample(model, src, options, greedy=True)
