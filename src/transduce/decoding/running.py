"""A search that sentences join and leave at every step (continuous batching).

``beam_search`` and ``greedy_search`` take a batch, step it until its last sentence is done and
return. ``RunningSearch`` keeps stepping: between two steps new sentences ``join`` (encoded,
their rows added to the decoding state, each at its own step count) and every sentence that is
done leaves at once, its hypotheses returned by ``step``. Each sentence is searched by exactly the
rules of the batch searches, with its own step number where they use the batch's: the length
limits and ``min_len`` (``constrain`` with a step per sentence), the length penalty of what ends,
the stopping rule; so its output is the one it gets searched alone, up to float rounding
(``tests/decoding/test_running.py``).

One search serves one set of search settings (beam, alpha, nbest, ...): greedy when
``decode.greedy`` (the most likely token, scored by its log-probability, as ``greedy_search``),
beam search otherwise. Sampling and forced prefixes stay with the batch searches.
"""

from __future__ import annotations

from typing import Hashable, Sequence

import torch

from ..config import DecodeConfig
from ..data.dataset import pad_sequences
from .beams import Beams
from .common import Hypothesis, SearchOptions, banned_tokens, constrain, max_lengths
from .state import decoding_state, kept_order


class RunningSearch:
    """The sentences in flight and their search state; see the module docstring.

    ``join(sources, keys)`` adds sentences (token ids without eos) under the caller's keys;
    ``step()`` advances every sentence by one token and returns ``[(key, hypotheses)]`` for the
    ones that finished; ``drop(keys)`` removes sentences whose answer nobody waits for.
    ``precision`` is the fast step's (fp32, bf16, int8); ``fast=False`` decodes with the model's
    own pass.
    """

    def __init__(self, model, decode: DecodeConfig, precision: str = "fp32", fast: bool = True) -> None:
        if decode.sampling:
            raise ValueError("a running search does not sample (a sentence's draws would depend on its company)")
        self.model, self.decode, self.config = model, decode, model.config
        self.greedy = decode.greedy
        self.device = next(model.parameters()).device
        self.beams = Beams(self.config, decode, decode.beam, self.device, walk=self.greedy)
        self.K = self.beams.K
        self.state = decoding_state(model, self.K, SearchOptions(precision=precision, fast=fast), joinable=True)
        self.banned = banned_tokens(self.config, self.device)
        self.keys: list[Hashable] = []

    def __len__(self) -> int:
        return len(self.keys)

    def join(self, sources: Sequence[Sequence[int]], keys: Sequence[Hashable]) -> None:
        if not sources:
            return
        c = self.config
        src = pad_sequences([list(s) for s in sources], c.pad_id, suffix=c.eos_id).to(self.device)
        self.beams.join(max_lengths(self.model, src, self.decode))
        self.state.join(src, capacity=self.beams.width + 1)
        self.keys += list(keys)

    @torch.no_grad()
    def step(self) -> list[tuple[Hashable, list[Hypothesis]]]:
        """One token for every sentence in flight; the sentences that finished, with their n-best lists."""
        if not self.keys:
            return []
        beams = self.beams
        logprobs = constrain(self.state.logprobs(beams.last), beams.steps, self.config, beams.max_len,
                             self.decode.min_len, None, per_row=self.K, banned=self.banned)  # (N, V)
        if self.greedy:  # (as greedy_search: the first maximal index)
            chosen, nxt = logprobs.max(-1)
            done = beams.advance_walk(nxt, chosen)
        else:
            done, pick = beams.advance(logprobs)
            self.state.reorder(pick)
        if not done.any():
            return []
        finished = [(self.keys[i], beams.finished(i)) for i in done.nonzero().squeeze(1).tolist()]
        self._keep(done.tolist())
        return finished

    def drop(self, keys: set) -> None:
        """Remove the sentences of ``keys`` (their rows leave the decoding state)."""
        done = [key in keys for key in self.keys]
        if any(done):
            self._keep(done)

    def _keep(self, done: list[bool]) -> None:
        """The sentences ``done`` leave; the others stay in flight (in the order ``kept_order`` gives)."""
        index = kept_order(done, self.state.fill_from_end)
        sentences = torch.tensor(index, dtype=torch.long, device=self.device)
        self.keys = [self.keys[i] for i in index]
        self.state.select(sentences)
        self.beams.keep(sentences)
