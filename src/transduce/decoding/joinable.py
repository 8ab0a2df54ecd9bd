"""Decoding states that sentences join and leave between steps (for ``RunningSearch``).

Each holds the hypotheses of the sentences in flight, sentence-major (a sentence's ``beam`` rows
together, sentences in the order they joined), and offers what a search needs: ``join`` (new
sentences after the others), ``logprobs`` (one step of every row), ``reorder`` (beams continue
other beams of their sentence) and ``select`` (sentences leave).

- ``FastRows``: the ``FastDecoder`` step over one ``RunningCache``: every row in one product per
  weight, each row at its own position.
- ``CohortRows``: the model's own ``decode``, for models the fast step does not compute (and for
  tests): the sentences that joined together form a cohort with its own ``DecoderCache``, each
  cohort one call per step.
- ``EnsembleRows``: a state per member, their probabilities mixed (``Ensemble.combine``).

When sentences leave, ``kept_order`` says where the others go: ``FastRows`` fills each leaver's
place with a sentence from the end (only those rows move), the others keep the sentences in order.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..inference import encode, fast_decoder, unsupported
from ..inference.running import RunningCache
from .ensemble import Ensemble


def joinable_rows(model, beam: int, precision: str = "fp32", fast: bool = True):
    """The state ``RunningSearch`` steps: fast where the model supports it (``fast=False``: the
    model's own decode)."""
    if isinstance(model, Ensemble):
        return EnsembleRows(model, [joinable_rows(m, beam, precision, fast) for m in model.models])
    if fast and unsupported(model.config) is None:
        return FastRows(model, beam, precision)
    return CohortRows(model, beam)


def kept_order(done: list[bool], fill_from_end: bool) -> list[int]:
    """The sentences not ``done``, in their new order: in order, or (``fill_from_end``) each in its
    place except that the places of those done before the end are taken by the last ones kept."""
    keep = [i for i, gone in enumerate(done) if not gone]
    if not fill_from_end:
        return keep
    tail = [i for i in keep if i >= len(keep)]
    return [j if not done[j] else tail.pop() for j in range(len(keep))]


class FastRows:
    fill_from_end = True

    def __init__(self, model, beam: int, precision: str) -> None:
        self.model, self.beam, self.precision = model, beam, precision
        self.fast = fast_decoder(model, precision)
        self.cache: Optional[RunningCache] = None

    def join(self, src: Tensor, capacity: int) -> None:
        """``src (n, S)``: the new sentences (padded, eos included); ``capacity``: slots to start with."""
        memory = encode(self.model, src, self.precision)
        lengths = src.ne(self.model.config.pad_id).sum(1)
        if self.cache is None:
            self.cache = RunningCache.empty_like(self.fast.start(src, memory, self.beam, capacity), lengths)
        else:
            self.cache.join(self.fast.start(src, memory, self.beam, 1), lengths)

    def logprobs(self, last: Tensor) -> Tensor:
        """``last (N,)``: each row's newest token (the start token for a row that just joined)."""
        self.cache.make_room()
        return torch.log_softmax(self.fast.step(last, self.cache).float(), dim=-1)

    def reorder(self, rows: Tensor) -> None:
        self.cache.reorder(rows)

    def select(self, sentences: Tensor) -> None:
        if sentences.numel() == 0:
            self.cache = None
        else:
            self.cache.select_sentences(sentences)


class CohortRows:
    fill_from_end = False  # (a cohort's sentences stay together)

    def __init__(self, model, beam: int) -> None:
        self.model, self.beam = model, beam
        self.cohorts: list[list] = []  # [DecoderCache, sentences] in the order they joined

    def join(self, src: Tensor, capacity: int) -> None:
        cache = self.model.start_decoding(src, self.model.encode(src), beam=self.beam, capacity=capacity)
        self.cohorts.append([cache, src.size(0)])

    def logprobs(self, last: Tensor) -> Tensor:
        out, offset = [], 0
        for cache, sentences in self.cohorts:
            rows = sentences * self.beam
            logits = self.model.decode(last[offset : offset + rows, None], cache)[:, -1]
            out.append(torch.log_softmax(logits.float(), dim=-1))
            offset += rows
        return torch.cat(out)

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


class EnsembleRows:
    def __init__(self, model: Ensemble, members: list) -> None:
        self.model, self.members = model, members
        self.fill_from_end = all(member.fill_from_end for member in members)

    def join(self, src: Tensor, capacity: int) -> None:
        for member in self.members:
            member.join(src, capacity)

    def logprobs(self, last: Tensor) -> Tensor:
        return self.model.combine([member.logprobs(last) for member in self.members])

    def reorder(self, rows: Tensor) -> None:
        for member in self.members:
            member.reorder(rows)

    def select(self, sentences: Tensor) -> None:
        for member in self.members:
            member.select(sentences)
