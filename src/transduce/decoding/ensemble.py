"""Ensembles: several translation models searched as one.

At every step each member gives its next-token log-probabilities for the same hypotheses, and the
ensemble's are the log of their mean *probability*: ``logsumexp_m(log p_m) - log M`` (as fairseq; a
mixture, so it stays a distribution and a token one member is sure of is not vetoed by another that
gives it little). Each member keeps its own decoding state (its encoder output and step cache, the
fast step where it supports it), so members may differ in size and options; they must share the
vocabulary and the special tokens (``Ensemble`` checks; ``Translator`` also requires the same
tokenizer). Every search (greedy, beam, n-best, sampling) takes an ``Ensemble`` where it takes a
model.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import torch
from torch import Tensor, nn

# what members must agree on to share a search: the ids a search reads and writes
SHARED = (
    "input",
    "architecture",
    "vocab_size",
    "target_vocab_size",
    "pad_id",
    "bos_id",
    "eos_id",
    "unk_id",
    "start_id",
)


class Ensemble(nn.Module):
    """``models`` searched together; ``config`` is the first member's with the smallest
    ``max_positions`` of them (the longest output every member can score).

    Raises:
        ValueError: fewer than two members, a language model, or members that disagree on the
            vocabulary or the special tokens (the message names the field).
    """

    def __init__(self, models: Sequence[nn.Module]) -> None:
        super().__init__()
        if len(models) < 2:
            raise ValueError(f"an ensemble needs at least two models, got {len(models)}")
        first = models[0].config
        if first.architecture != "encoder-decoder":
            raise ValueError("an ensemble translates: its members must be encoder-decoder models, "
                             f"not {first.architecture}")
        for number, model in enumerate(models[1:], start=2):
            for name in SHARED:
                if getattr(model.config, name) != getattr(first, name):
                    raise ValueError(f"model {number} has {name}={getattr(model.config, name)!r} "
                                     f"but model 1 has {getattr(first, name)!r}: an ensemble's "
                                     "models share one vocabulary and its special tokens")
        self.models = nn.ModuleList(models)
        self.config = replace(first, max_positions=min(m.config.max_positions for m in models))

    @property
    def src_embed(self) -> nn.Module:
        """The first member's front end (which source positions hold input)."""
        return self.models[0].src_embed

    def combine(self, logprobs: Sequence[Tensor]) -> Tensor:
        """The members' next-token log-probabilities ``(N, V)`` each -> the ensemble's ``(N,
        V)``."""
        return torch.logsumexp(torch.stack(list(logprobs)), dim=0) - math.log(len(logprobs))

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced log-probabilities ``(B, T, V)`` of the mixture (for scoring)."""
        return self.combine(
            [torch.log_softmax(m(src, tgt_in).float(), dim=-1) for m in self.models]
        )
