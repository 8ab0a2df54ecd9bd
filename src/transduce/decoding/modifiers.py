"""Everything that changes a search's scores is a ``ScoreModifier``: the search loop
(``running.py``) calls every modifier of its list in order and names none of them.

A modifier is told when a batch of sentences ``start``\\ s (the model, the sources, the encoder
output where the decoding state has it, the rows per sentence), ``adjust``\\ s each step's
log-probabilities ``(N, V)`` (N = sentences x rows per sentence) and returns them, hears which
tokens were chosen (``advance``; with ``pick``, the rows each new row continues, under beam search)
and which rows stay when sentences leave (``keep``). ``running`` says whether it can serve a running
search, where sentences join between steps (one that keeps state per sentence from its ``start``
cannot: it is refused there, by name). ``subset`` gives the modifier for some of the sentences it
was made for, in the order given (the driver cuts the input into batches).

The modifiers here: the length rules and banned tokens (``LengthRules``), forced prefixes
(``ForcedPrefix``), the sampling filters (``SamplingFilters``); beside them the bracket constraint
of a parser (``brackets.BracketRules``) and the CTC prefix scorer of a speech model
(``ctc.CTCPrefixScorer``). ``score_modifiers`` builds a search's list. A new one (terminology
constraints, a draft's proposals) is a class with these five methods, passed in
``SearchOptions.modifiers``: the loop does not change.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Optional, Protocol, Sequence, runtime_checkable

import torch
from torch import Tensor

from ..config import DecodeConfig
from .common import banned_tokens, constrain, forced_tokens, prefix_tensor
from .ctc import CTCPrefixScorer
from .sampling import filter_logits


@dataclass
class Start:
    """What a modifier sees when a batch's sentences join: ``src (B, S)`` (padded, eos included;
    a speech model's frames), ``memory`` (the encoder output, None where the decoding state does
    not keep one), ``per_row`` rows per sentence (the beam), ``max_len (B,)`` output tokens each
    sentence may write (eos included)."""

    model: object
    src: Tensor
    memory: Optional[Tensor]
    per_row: int
    max_len: Tensor
    device: torch.device


class Step:
    """What a modifier sees of a step: ``steps``, each sentence's output position (an int when
    they all joined together, else ``(B,)``); ``max_len (B,)``; ``room (N,)``: the tokens each row
    may still write, this one included (computed when asked); ``may_end``: whether some sentence
    may be at its last allowed position."""

    def __init__(self, steps: int | Tensor, beams, per_row: int, may_end: bool) -> None:
        self.steps, self.beams, self.per_row, self.may_end = steps, beams, per_row, may_end
        self.max_len = beams.max_len

    @cached_property
    def room(self) -> Tensor:
        return (self.beams.max_len - self.beams.steps).repeat_interleave(self.per_row)


@runtime_checkable
class ScoreModifier(Protocol):
    name: str
    running: bool

    def start(self, start: Start) -> None: ...

    def adjust(self, logprobs: Tensor, step: Step) -> Tensor: ...

    def advance(self, tokens: Tensor, pick: Optional[Tensor] = None) -> None: ...

    def keep(self, rows: Tensor, sentences: Tensor) -> None: ...

    def subset(self, sentences: Sequence[int]) -> "ScoreModifier": ...


class Stateless:
    """A modifier that keeps nothing per sentence: it starts, advances and keeps rows for free."""

    running = True

    def start(self, start: Start) -> None:
        pass

    def advance(self, tokens: Tensor, pick: Optional[Tensor] = None) -> None:
        pass

    def keep(self, rows: Tensor, sentences: Tensor) -> None:
        pass

    def subset(self, sentences: Sequence[int]) -> "Stateless":
        return self


class LengthRules(Stateless):
    """Never pad or the start/bos tokens, no eos before ``min_len``, only eos at a sentence's last
    allowed position (``common.constrain``)."""

    name = "the length rules"

    def __init__(self, config, min_len: int, device: torch.device) -> None:
        self.config, self.min_len = config, min_len
        self.banned = banned_tokens(config, device)

    def adjust(self, logprobs: Tensor, step: Step) -> Tensor:
        return constrain(logprobs, step.steps, self.config, step.max_len, self.min_len, None,
                         per_row=step.per_row, banned=self.banned, may_end=step.may_end)


class ForcedPrefix(Stateless):
    """Only the prefix's token while a sentence's forced prefix lasts (``prefix (B, P)``, -1 where
    a sentence has none); a batch's, joined at once."""

    name = "forced prefixes"
    running = False

    def __init__(self, prefix: Tensor) -> None:
        self.prefix: Optional[Tensor] = prefix

    def adjust(self, logprobs: Tensor, step: Step) -> Tensor:
        forced = None if self.prefix is None else forced_tokens(self.prefix, step.steps)
        if forced is None:
            self.prefix = None  # (every forced prefix is behind)
            return logprobs
        forced = forced.repeat_interleave(step.per_row)  # (N,)
        rows = (forced >= 0).nonzero().squeeze(1)
        if len(rows):
            kept = logprobs[rows, forced[rows]].clone()
            logprobs[rows] = float("-inf")
            logprobs[rows, forced[rows]] = kept
        return logprobs

    def keep(self, rows: Tensor, sentences: Tensor) -> None:
        if self.prefix is not None:
            self.prefix = self.prefix.index_select(0, sentences)


class SamplingFilters(Stateless):
    """Sampling's top-k and nucleus (top-p) filters, at ``decode``'s temperature: the tokens
    outside them at -inf (the draw then applies the temperature alone)."""

    name = "the sampling filters"

    def __init__(self, decode: DecodeConfig) -> None:
        self.decode = decode

    def adjust(self, logprobs: Tensor, step: Step) -> Tensor:
        d = self.decode
        outside = filter_logits(logprobs, d.temperature, d.top_k, d.top_p).isneginf()
        return logprobs.masked_fill_(outside, float("-inf"))


def score_modifiers(config, decode: DecodeConfig, options, batch: int,
                    device: torch.device) -> list[ScoreModifier]:
    """A search's modifiers, in the order they apply: the length rules, the forced prefixes of
    ``options.prefix``, the caller's ``options.modifiers`` (a parser's brackets, ...), the CTC
    prefix scorer (``decode.ctc_weight``), the sampling filters (``decode``'s top-k/top-p)."""
    modifiers: list[ScoreModifier] = [LengthRules(config, decode.min_len, device)]
    prefix = prefix_tensor(options.prefix, batch, config.pad_id, device)
    if prefix is not None:
        modifiers.append(ForcedPrefix(prefix))
    modifiers += list(options.modifiers)
    if decode.ctc_weight:
        modifiers.append(CTCPrefixScorer(decode.ctc_weight, decode.beam, config.pad_id,
                                         config.eos_id))
    if decode.sampling and (decode.top_k > 0 or decode.top_p < 1.0):
        modifiers.append(SamplingFilters(decode))
    return modifiers
