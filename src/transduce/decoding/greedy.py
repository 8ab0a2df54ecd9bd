"""Searches of one hypothesis per sentence: greedy (the most probable next token at every step)
and sampling (a token drawn); each is ``search_batch`` with one row per sentence."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import torch
from torch import Tensor

from ..config import DecodeConfig
from .common import Hypothesis, SearchOptions
from .running import search_batch


def greedy_search(
    model,
    src: Tensor,
    decode: Optional[DecodeConfig] = None,
    options: Optional[SearchOptions] = None,
) -> list[Hypothesis]:
    """Decode ``src (B, S)`` within ``decode``'s length limits; one hypothesis per sentence, in
    order (sampling at temperature 0)."""
    decode = replace(decode or DecodeConfig(beam=1), sampling=False)
    return [hyps[0] for hyps in search_batch(model, src, decode, options, walk=True)]


def sample(
    model,
    src: Tensor,
    decode: Optional[DecodeConfig] = None,
    options: Optional[SearchOptions] = None,
    generator: Optional[torch.Generator] = None,
) -> list[Hypothesis]:
    """Draw one output per sentence of ``src (B, S)`` with ``decode``'s temperature, top-k and
    top-p."""
    decode = replace(decode or DecodeConfig(beam=1), sampling=True)
    return [hyps[0] for hyps in search_batch(model, src, decode, options, generator, walk=True)]
