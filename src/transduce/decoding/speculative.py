"""Exact speculative greedy search (Leviathan et al. 2023, Chen et al. 2023): a cheap draft model
proposes up to ``k`` tokens, the model checks them all in one decode call over ``k + 1``
positions (one read of its weights for several tokens, where greedy search reads them once a
token), keeps the longest run it agrees with plus its own next token, and both caches roll back
to what was kept. Each kept token is the one the model's own greedy search chooses at that
position (the same length rules applied), so the output is the model's greedy output, up to float
rounding between one decode call of several positions and several of one; only the speed
depends on the draft.

A sentence is searched alone (batch 1, where a step is bound by reading the weights); a batch is
its sentences one after another. The draft shares the model's vocabulary and special ids
(``check_draft``): a smaller model trained on the same prepared data, or the model's own first
decoder layers (``shallow_copy``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Optional

import torch
from torch import Tensor, nn

from ..config import DecodeConfig
from ..inference import encode, fast_decoder, unsupported
from ..inference.positions import read_positions, roll_back
from .common import Hypothesis, banned_tokens, constrain, max_lengths

SPECIALS = ("pad_id", "bos_id", "eos_id", "start_id", "vocab_size", "target_vocab_size")


@dataclass
class Draft:
    """A draft model and the most tokens it proposes at a time; ``proposed`` and ``accepted``
    count its tokens over the searches it served (``rate``: the share the model kept).
    ``precision``: the draft's fast step's (fp32, or int8: the model's own weights as int8 make a
    draft that needs no second model). ``adaptive``: propose one more token after a round the
    model kept whole, one fewer after one it cut (1 to ``tokens``)."""

    model: nn.Module
    tokens: int = 4
    precision: str = "fp32"
    adaptive: bool = False
    proposed: int = 0
    accepted: int = 0

    @property
    def rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0


def check_draft(model, draft) -> None:
    """A ValueError naming what differs when ``draft`` cannot draft for ``model``."""
    for config, whose in ((model.config, "the model"), (draft.config, "the draft")):
        if not (config.has_encoder and config.has_decoder):
            raise ValueError(f"{whose} is {config.architecture}: speculative search is for "
                             "encoder-decoder models")
    for name in SPECIALS:
        mine, theirs = getattr(model.config, name), getattr(draft.config, name)
        if mine != theirs:
            raise ValueError(f"the draft's {name} is {theirs}, the model's {mine}: a draft must "
                             "share the model's vocabulary and special ids (train it on the same "
                             "prepared data)")
    for config in (model.config, draft.config):
        if config.attention_window:
            raise ValueError("a model with an attention window cannot roll its cache back")


def shallow_copy(model, layers: int):
    """The model with only its first ``layers`` decoder layers (shared, not copied): a draft that
    needs no second model."""
    if not 1 <= layers < model.config.decoder_layers:
        raise ValueError(f"a draft of the model's own first layers takes 1 to "
                         f"{model.config.decoder_layers - 1} of its {model.config.decoder_layers}")
    draft = copy.copy(model)
    draft._modules = dict(model._modules)  # (its own table of submodules, the same modules)
    draft.decoder = nn.ModuleList(list(model.decoder)[:layers])
    draft.config = replace(model.config, decoder_layers=layers)
    return draft


def speculative_greedy(model, src: Tensor, decode: DecodeConfig, draft: Draft,
                       precision: str = "fp32") -> list[Hypothesis]:
    """The greedy hypothesis of each sentence of ``src (B, S)`` (padded, eos included), in order,
    each searched alone with ``draft``'s proposals; ``precision``: the model's fast step's."""
    pad = model.config.pad_id
    return [_search(model, row[row != pad][None], decode, draft, precision) for row in src]


def _rules(config, decode: DecodeConfig, max_len: int, device) -> callable:
    """Greedy search's length rules (``common.constrain``) for consecutive positions of one
    sentence at once: ``adjust(logprobs (n, V), first)``, positions ``first .. first + n - 1``."""
    banned = banned_tokens(config, device)

    def adjust(logprobs: Tensor, first: int) -> Tensor:
        steps = torch.arange(first, first + logprobs.size(0), device=device)
        return constrain(logprobs, steps, config, torch.full_like(steps, max_len), decode.min_len,
                         None, banned=banned)
    return adjust


class _Reader:
    """A model, its cache for one sentence and the tokens the cache has read (start first). It
    reads through the fast step at ``precision`` where the model has one (several positions in one
    pass, ``inference.positions``), else through the model's own ``decode``."""

    def __init__(self, model, src: Tensor, capacity: int, precision: str = "fp32",
                 memory: Optional[Tensor] = None) -> None:
        self.device = src.device
        if unsupported(model.config) is None:
            fast = fast_decoder(model, precision)
            self.memory = encode(model, src, precision) if memory is None else memory
            cache = fast.start(src, self.memory, 1, capacity)
            self._logits = lambda ids: (fast.step(ids, cache) if ids.numel() == 1
                                        else read_positions(fast, ids, cache))
            self._truncate = lambda length: roll_back(cache, length)
        else:
            self.memory = model.encode(src) if memory is None else memory
            cache = model.start_decoding(src, self.memory, capacity=capacity)
            self._logits = lambda ids: model.decode(ids[None], cache)[0]
            self._truncate = cache.truncate
        self.read: list[int] = []

    def logits(self, tokens: list[int]) -> Tensor:
        """Read ``tokens`` after what was read; the next-token logits after each
        ``(len(tokens), V)``."""
        logits = self._logits(torch.tensor(tokens, device=self.device))
        self.read += tokens
        return logits

    def keep(self, sequence: list[int]) -> list[int]:
        """Roll back to the longest start of ``sequence`` read; return what is left to read."""
        same = 0
        for mine, theirs in zip(self.read, sequence):
            if mine != theirs:
                break
            same += 1
        self._truncate(same)
        self.read = self.read[:same]
        return sequence[same:]


@torch.no_grad()
def _search(model, src: Tensor, decode: DecodeConfig, draft: Draft, precision: str
            ) -> Hypothesis:
    c = model.config
    max_len = int(max_lengths(model, src, decode)[0])
    adjust = _rules(c, decode, max_len, src.device)
    rules = (banned_tokens(c, src.device), c.eos_id, decode.min_len, max_len)
    target = _Reader(model, src, max_len + draft.tokens + 1, precision)
    # a draft of the model's own encoder (self:N, self-int8) reads the model's encoder output
    shared = target.memory if draft.model.encoder is model.encoder else None
    drafter = _Reader(draft.model, src, max_len + draft.tokens + 1, draft.precision, shared)
    sequence, logprob = [c.start_id], 0.0  # start, then the output so far
    k = draft.tokens
    while True:
        t = len(sequence) - 1  # the next output position
        proposals = _propose(drafter, sequence, min(k, max_len - 1 - t), t, rules)
        unread = target.keep(sequence)
        logits = target.logits(unread + proposals)[len(unread) - 1:]
        logprobs = adjust(torch.log_softmax(logits.float(), dim=-1), t)
        best_logprob, best = logprobs.max(-1)
        best = best.tolist()
        agreed = 0
        while agreed < len(proposals) and best[agreed] == proposals[agreed] != c.eos_id:
            agreed += 1
        draft.proposed += len(proposals)
        # (a proposed eos the model agrees with is kept too: it ends the sentence)
        draft.accepted += agreed + int(agreed < len(proposals)
                                       and best[agreed] == proposals[agreed])
        if draft.adaptive:
            k = min(draft.tokens, k + 1) if agreed == len(proposals) else max(1, k - 1)
        for n, token in enumerate(best[:agreed + 1]):
            logprob += float(best_logprob[n])
            if token == c.eos_id:
                return Hypothesis(sequence[1:], logprob, logprob)
            sequence.append(token)


def _propose(drafter: _Reader, sequence: list[int], count: int, t: int, rules: tuple
             ) -> list[int]:
    """Up to ``count`` tokens the draft's greedy search writes after ``sequence`` (from output
    position ``t``; it stops at eos), under the length rules (``rules``: banned ids, eos, min_len,
    max_len) applied cheaply to its logits: a proposal they forbid would only be rejected."""
    banned, eos, min_len, max_len = rules
    proposals: list[int] = []
    if count <= 0:
        return proposals
    logits = drafter.logits(drafter.keep(sequence))[-1]
    while True:
        position = t + len(proposals)
        if position >= max_len - 1:
            token = eos
        else:
            logits = logits.index_fill(0, banned, float("-inf"))
            if position < min_len:
                logits[eos] = float("-inf")
            token = int(logits.argmax())
        proposals.append(token)
        if token == eos or len(proposals) == count:
            return proposals
        logits = drafter.logits([token])[-1]
