"""Greedy search: the most probable next token at every step, all sentences at once."""

from __future__ import annotations

from typing import Optional

from torch import Tensor

from ..config import DecodeConfig
from .common import Hypothesis, SearchOptions
from .sampling import walk


def greedy_search(model, src: Tensor, decode: Optional[DecodeConfig] = None,
                  options: Optional[SearchOptions] = None) -> list[Hypothesis]:
    """Decode ``src (B, S)`` within ``decode``'s length limits; one hypothesis per sentence, in order
    (sampling at temperature 0)."""
    return walk(model, src, decode or DecodeConfig(beam=1), options, greedy=True)
