"""The decoding state every search drives: one interface, one class per way of computing a step.

A state holds the hypotheses of the sentences being searched, sentence-major (a sentence's
``beam`` rows together, sentences in the order they joined), and offers what a search needs:

- ``join(src, capacity)``: new sentences ``src (n, S)`` (padded, eos included), after the others;
  a batch search joins once, a running search whenever sentences arrive (``joinable``); returns
  their encoder output where the state computes one (the score modifiers may read it, a joint CTC
  search does), else None (a decoder-only model, no cache, an ensemble of several);
- ``logprobs(tokens)``: one step of every row -> next-token log-probabilities ``(N, V)``, float32;
  ``tokens`` is each row's newest token ``(N,)`` (the start token at a row's first step), or,
  where ``reads_prefix``, each row's whole history ``(N, t)``, start token first;
- ``reorder(rows)``: hypothesis ``n`` continues hypothesis ``rows[n]`` (of its own sentence);
- ``select(sentences)``: only those sentences stay, in that order (``kept_order``).

The classes:
- ``FastState``: the ``FastDecoder`` step (fp32, bf16 or int8 weights; captured with
  ``compile``): every row in one product per weight, over a ``RunningCache`` (each row at its own
  position; when a sentence leaves, only the rows that change place move) or, for one sentence and
  for the captured step, the plain cache (all rows at one position; a leaver's removal copies every
  row): a batch of several sentences is faster with the running cache, one sentence without
  (``benchmarks/continuous_search.py``, docs/benchmarks.md).
- ``ModelState``: the model's own incremental ``decode``, for what the fast step does not compute
  (and as the reference in tests): the sentences that joined together form a cohort with its own
  ``DecoderCache``, one call per cohort and step.
- ``PrefixState``: a decoder-only model (its prompt read at the first step, then the model's
  cache) or no cache at all (the whole prefix recomputed at every step, for tests); batch only.
- ``EnsembleState``: a state per member, their probabilities mixed (``Ensemble.combine``).

``decoding_state`` chooses among them; ``DecodingState`` declares what each offers.
"""

from __future__ import annotations

import warnings
from typing import Optional, Protocol

import torch
from torch import Tensor

from ..inference import encode, fast_decoder, unsupported
from ..inference.running import RunningCache
from .ensemble import Ensemble


class DecodingState(Protocol):
    """The interface of the module docstring, which every state below implements."""

    reads_prefix: bool  # logprobs takes every row's history (N, t), not its newest token (N,)
    fill_from_end: bool  # select moves only the rows that change place (``kept_order``)

    def join(self, src: Tensor, capacity: int) -> Optional[Tensor]: ...

    def logprobs(self, tokens: Tensor) -> Tensor: ...

    def reorder(self, rows: Tensor) -> None: ...

    def select(self, sentences: Tensor) -> None: ...


def decoding_state(model, beam: int, options, joinable: bool = False) -> DecodingState:
    """The state a search over ``model`` with ``beam`` rows a sentence steps, per ``options``
    (``SearchOptions``: fast or the model's own decode, precision, compile, cache); ``joinable``:
    sentences may join after the first step (a running search)."""
    if isinstance(model, Ensemble):
        return EnsembleState(
            model, [decoding_state(m, beam, options, joinable) for m in model.models]
        )
    lm = model.config.architecture == "decoder-only"
    if lm or not options.use_cache:
        if joinable:
            raise ValueError(
                "a running search needs the decoding cache of an encoder-decoder model"
            )
        return PrefixState(model, beam, options.use_cache)
    int8, captured = options.precision == "int8", options.compile
    wanted = options.fast or int8 or captured
    reason = unsupported(model.config) if wanted else None
    if reason and (int8 or captured):
        warnings.warn(
            f"the fast decode step does not support {reason}: decoding without "
            f"{'int8' if int8 else 'compilation'}",
            stacklevel=4,
        )
    if wanted and not reason:
        if joinable and captured:
            raise ValueError(
                "a running search steps eagerly: rows at positions of their own are not captured"
            )
        return FastState(model, beam, options.precision, captured, joinable)
    return ModelState(model, beam)


def kept_order(done: list[bool], fill_from_end: bool) -> list[int]:
    """The sentences not ``done``, in their new order: in order, or (``fill_from_end``) each in its
    place except that the places of those done before the end are taken by the last ones kept."""
    keep = [i for i, gone in enumerate(done) if not gone]
    if not fill_from_end:
        return keep
    tail = [i for i in keep if i >= len(keep)]
    return [j if not done[j] else tail.pop() for j in range(len(keep))]


class FastState(DecodingState):
    reads_prefix = False

    def __init__(
        self,
        model,
        beam: int,
        precision: str = "fp32",
        compile: bool = False,
        joinable: bool = False,
    ) -> None:
        self.model, self.beam, self.precision = model, beam, precision
        self.captured, self.joinable = compile, joinable
        self.fast = fast_decoder(model, precision, compile)
        self.cache = None

    @property
    def fill_from_end(self) -> bool:
        """A running cache fills each leaver's place from the end (only those rows move)."""
        return isinstance(self.cache, RunningCache)

    def join(self, src: Tensor, capacity: int) -> Optional[Tensor]:
        """The sources join; returns their encoder output (a joint CTC search reads it too)."""
        if self.cache is not None and not self.joinable:
            raise ValueError("a batch search's sentences join once, at the first step")
        # a captured search keeps the model's own encoder pass, which Translator compiles too
        memory = (
            self.model.encode(src) if self.captured else encode(self.model, src, self.precision)
        )  # (n, S, D)
        if self.cache is None and (self.captured or not self.joinable and src.size(0) == 1):
            self.cache = self.fast.start(src, memory, self.beam, capacity)
            return memory
        # each source's extent: up to its last token that is not padding (a pad id inside a
        # sentence is masked like padding, and must not shorten the columns the cache keeps)
        real = self.model.src_embed.real(src)  # (n, S): the encoder positions that hold input
        lengths = (real * torch.arange(1, real.size(1) + 1, device=src.device)).amax(1)
        if self.cache is None:
            self.cache = RunningCache.empty_like(
                self.fast.start(src, memory, self.beam, capacity), lengths
            )
        else:
            self.cache.join(self.fast.start(src, memory, self.beam, 1), lengths)
        return memory

    @torch.no_grad()
    def logprobs(self, last: Tensor) -> Tensor:
        if self.fill_from_end:  # (a running cache)
            self.cache.make_room()
        return torch.log_softmax(self.fast.step(last, self.cache).float(), dim=-1)

    def reorder(self, rows: Tensor) -> None:
        self.cache.reorder(rows)

    def select(self, sentences: Tensor) -> None:
        if sentences.numel() == 0:
            self.cache = None
        else:
            self.cache.select_sentences(sentences)


class ModelState(DecodingState):
    reads_prefix = False
    fill_from_end = False  # (a cohort's sentences stay together)

    def __init__(self, model, beam: int) -> None:
        self.model, self.beam = model, beam
        self.cohorts: list[list] = []  # [DecoderCache, sentences] in the order they joined

    def join(self, src: Tensor, capacity: int) -> Optional[Tensor]:
        memory = self.model.encode(src)
        cache = self.model.start_decoding(src, memory, beam=self.beam, capacity=capacity)
        self.cohorts.append([cache, src.size(0)])
        return memory

    @torch.no_grad()
    def logprobs(self, last: Tensor) -> Tensor:
        out, offset = [], 0
        for cache, sentences in self.cohorts:
            rows = sentences * self.beam
            logits = self.model.decode(last[offset : offset + rows, None], cache)[:, -1]
            out.append(torch.log_softmax(logits.float(), dim=-1))
            offset += rows
        return out[0] if len(out) == 1 else torch.cat(out)

    def reorder(self, rows: Tensor) -> None:
        offset = 0
        for cache, sentences in self.cohorts:
            n = sentences * self.beam
            cache.reorder(rows[offset : offset + n] - offset)  # (beams stay within their sentence)
            offset += n

    def select(self, sentences: Tensor) -> None:
        kept, first = [], 0
        for cache, count in self.cohorts:
            mine = sentences[(sentences >= first) & (sentences < first + count)] - first
            if mine.numel():
                cache.select_sentences(mine)
                kept.append([cache, mine.numel()])
            first += count
        self.cohorts = kept


class PrefixState(DecodingState):
    """A decoder-only model's search (``src``: its prompts, equal lengths, no padding, read in one
    pass at the first step, which the search's tokens continue), or any model without a cache."""

    reads_prefix = True
    fill_from_end = False

    def __init__(self, model, beam: int, use_cache: bool = True) -> None:
        self.model, self.beam, self.use_cache = model, beam, use_cache
        self.lm = model.config.architecture == "decoder-only"
        self.src: Optional[Tensor] = None
        self.cache = None

    def join(self, src: Tensor, capacity: int) -> Optional[Tensor]:
        if self.src is not None:
            raise ValueError("a batch search's sentences join once, at the first step")
        self.src = src  # (B, S)
        if self.lm:
            self.prompt = src.repeat_interleave(
                self.beam, dim=0
            )  # (N, P): each beam continues its prompt
            if self.use_cache:
                self.cache = self.model.start_decoding(
                    src, beam=self.beam, capacity=src.size(1) + capacity + 1
                )
        return None  # (no encoder pass: a prompt, or the whole model at every step)

    @torch.no_grad()
    def logprobs(self, tokens: Tensor) -> Tensor:
        """``tokens (N, t)``: every row's history, start token first."""
        if (
            self.cache is not None and self.cache.length
        ):  # the prompt is in the cache: the newest token
            logits = self.model.decode(tokens[:, -1:], self.cache)[:, -1]
        elif self.lm:  # the start, the prompt, what search chose
            tokens = torch.cat([tokens[:, :1], self.prompt, tokens[:, 1:]], dim=1)
            logits = (
                self.model.decode(tokens, self.cache)
                if self.cache is not None
                else self.model(tokens)
            )[:, -1]
        else:
            logits = self.model(self.src.repeat_interleave(self.beam, dim=0), tokens)[
                :, -1
            ]  # (N, V)
        return torch.log_softmax(logits.float(), dim=-1)

    def reorder(self, rows: Tensor) -> None:
        if self.cache is not None:
            self.cache.reorder(rows)
        if self.lm:  # (rows stay within their sentence, whose beams share one prompt)
            self.prompt = self.prompt.index_select(0, rows)

    def select(self, sentences: Tensor) -> None:
        self.src = self.src.index_select(0, sentences)
        if self.lm:
            rows = (
                sentences[:, None] * self.beam + torch.arange(self.beam, device=sentences.device)
            ).view(-1)
            self.prompt = self.prompt.index_select(0, rows)
        if self.cache is not None:
            self.cache.select_sentences(sentences)


class EnsembleState(DecodingState):
    def __init__(self, model: Ensemble, members: list) -> None:
        self.model, self.members = model, members
        self.reads_prefix = any(member.reads_prefix for member in members)

    @property
    def fill_from_end(self) -> bool:  # (a member's cache is chosen when sentences first join)
        return all(member.fill_from_end for member in self.members)

    def join(self, src: Tensor, capacity: int) -> Optional[Tensor]:
        for member in self.members:
            member.join(src, capacity)
        return None  # (each member reads its own encoder output)

    def logprobs(self, tokens: Tensor) -> Tensor:
        # (members that read only the newest token get its column of a history)
        return self.model.combine(
            [
                member.logprobs(
                    tokens if member.reads_prefix or tokens.dim() == 1 else tokens[:, -1]
                )
                for member in self.members
            ]
        )

    def reorder(self, rows: Tensor) -> None:
        for member in self.members:
            member.reorder(rows)

    def select(self, sentences: Tensor) -> None:
        for member in self.members:
            member.select(sentences)
