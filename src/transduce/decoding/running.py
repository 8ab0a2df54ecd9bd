"""The one search loop: sentences join and leave between steps; a batch is sentences that all
join at the first step.

``RunningSearch`` keeps stepping: between two steps new sentences ``join`` (encoded, their rows
added to the decoding state, each at its own step count) and every sentence that is done leaves
at once, its hypotheses returned by ``step``. Each sentence is searched by the same rules wherever
it joined: the length limits, ``min_len`` and a forced prefix at its own step (the score modifiers
of ``modifiers.py``, each told every sentence's own step), the length penalty of what ends, the
stopping rule (``Beams``); so its output is the one it gets searched alone, up to float rounding
(``tests/decoding/test_running.py``).

``search_batch`` is ``translate``'s search: the batch joins one ``RunningSearch`` at the first step
and is stepped until its last sentence is done. A running search serves one set of search settings:
greedy when ``decode.greedy`` (the most likely token, scored by its log-probability), sampling when
``decode.sampling`` (a batch only: a draw depends on the sentences beside it), beam search
otherwise.
"""

from __future__ import annotations

from typing import Callable, Hashable, Optional, Sequence

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..data.dataset import pad_sequences
from .beams import Beams
from .common import Hypothesis, SearchOptions, max_lengths
from .modifiers import ScoreModifier, Start, Step, score_modifiers
from .sampling import draw
from .state import decoding_state, kept_order


class RunningSearch:
    """The sentences in flight and their search state; see the module docstring.

    ``join(sources, keys)`` adds sentences (token ids without eos) under the caller's keys;
    ``step()`` advances every sentence by one token and returns ``[(key, hypotheses)]`` for the
    ones that finished; ``drop(keys)`` removes sentences whose answer nobody waits for.
    ``options``: the decoding state's (fast step or the model's decode, precision, compile, cache).
    ``joinable=False``: the sentences join once, at the first step (a batch; this allows the
    states that read whole prefixes, a captured step and sampling with ``generator``).
    ``on_tokens(keys, tokens)``: greedy and sampling call it with each step's chosen tokens.
    ``walk``: whether each sentence is one row whose token is chosen (greedy) or drawn (sampling);
    by default when ``decode`` asks for greedy or sampling, else beam search (``walk=False``: a
    beam search even of beam 1).
    """

    def __init__(
        self,
        model,
        decode: DecodeConfig,
        options: Optional[SearchOptions] = None,
        joinable: bool = True,
        generator: Optional[torch.Generator] = None,
        on_tokens: Optional[Callable[[list, Tensor], None]] = None,
        walk: Optional[bool] = None,
        device: Optional[torch.device] = None,
    ) -> None:
        # one row per sentence, its token chosen or drawn; walk=False: a beam search even of beam 1
        self.walk = (decode.greedy or decode.sampling) if walk is None else walk
        self.sampling = self.walk and decode.sampling
        if self.sampling and joinable:
            raise ValueError(
                "a running search does not sample (a sentence's draws would depend on its company)"
            )
        self.model, self.decode, self.config = model, decode, model.config
        self.joinable, self.generator, self.on_tokens = joinable, generator, on_tokens
        self.device = device if device is not None else next(model.parameters()).device
        self.beams = Beams(self.config, decode, decode.beam, self.device, walk=self.walk)
        self.K = self.beams.K
        self.options = options or SearchOptions()
        self.state = decoding_state(model, self.K, self.options, joinable)
        # what changes the scores (``modifiers.py``): made when the sentences join
        self.modifiers: list[ScoreModifier] = []
        self.keys: list[Hashable] = []
        self.t = 0  # steps taken (a batch: every sentence's step)
        self.ends_from = 0  # before this step no sentence is at its last allowed position
        # the step every sentence in flight joined at (None: they joined at several)
        self.joined_at: Optional[int] = None

    def __len__(self) -> int:
        return len(self.keys)

    def join(self, sources: Sequence[Sequence[int]], keys: Sequence[Hashable]) -> None:
        if not sources:
            return
        c = self.config
        self.join_batch(
            pad_sequences([list(s) for s in sources], c.pad_id, suffix=c.eos_id).to(self.device),
            keys,
        )

    def join_batch(self, src: Tensor, keys: Sequence[Hashable]) -> None:
        """``src (n, S)``: padded, eos included. The score modifiers are made for the first
        sentences to join (``score_modifiers``: the options' forced prefixes and modifiers are a
        batch's); later sentences join only where every modifier serves a running search."""
        first = not self.keys and not self.modifiers
        modifiers = (score_modifiers(self.config, self.decode, self.options, src.size(0),
                                     self.device) if first else self.modifiers)
        for modifier in modifiers:
            if not modifier.running and (self.joinable or not first):
                raise ValueError(f"{modifier.name} is for a batch's sentences, joined together "
                                 "at the first step, not for a running search")
        max_len = max_lengths(self.model, src, self.decode)
        ends_from = self.t + int(max_len.min()) - 1
        self.ends_from = min(self.ends_from, ends_from) if self.keys else ends_from
        self.beams.join(max_len)
        memory = self.state.join(src, capacity=self.beams.width + 1 if self.joinable
                                 else int(max_len.max()))
        if first:
            self.modifiers = modifiers
            start = Start(self.model, src, memory, self.K, max_len, self.device)
            for modifier in modifiers:
                modifier.start(start)
        self.joined_at = self.t if not self.keys or self.joined_at == self.t else None
        self.keys += list(keys)

    @torch.no_grad()
    def step(self) -> list[tuple[Hashable, list[Hypothesis]]]:
        """One token for every sentence in flight; the sentences that finished, with their n-best
        lists."""
        if not self.keys:
            return []
        beams = self.beams
        tokens = beams.tokens(self.t) if self.state.reads_prefix else beams.last
        # every sentence's own step: one number while they all joined together (a batch)
        steps = self.t - self.joined_at if self.joined_at is not None else beams.steps
        logprobs = self.state.logprobs(tokens)  # (N, V)
        step = Step(steps, beams, self.K, self.t >= self.ends_from)
        for modifier in self.modifiers:
            logprobs = modifier.adjust(logprobs, step)
        self.t += 1
        if self.walk:
            chosen, nxt = self._choose(logprobs)
            done = beams.advance_walk(nxt, chosen)
            for modifier in self.modifiers:
                modifier.advance(nxt)
            if self.on_tokens is not None:
                self.on_tokens(self.keys, nxt)
        else:
            done, pick = beams.advance(logprobs)
            self.state.reorder(pick)
            for modifier in self.modifiers:
                modifier.advance(beams.last, pick)
        if not done.any():
            return []
        finished = [(self.keys[i], beams.finished(i)) for i in done.nonzero().squeeze(1).tolist()]
        self._keep(done.tolist())
        return finished

    def _choose(self, logprobs: Tensor) -> tuple[Tensor, Tensor]:
        """Each row's log-probability and token: the most likely one (max, not argmax: the same
        first maximal index, and faster on the CPU), or a draw."""
        if not self.sampling:
            return logprobs.max(-1)
        return draw(logprobs, self.decode, self.generator)

    def drop(self, keys: set) -> None:
        """Remove the sentences of ``keys`` (their rows leave the decoding state)."""
        done = [key in keys for key in self.keys]
        if any(done):
            self._keep(done)

    def _keep(self, done: list[bool]) -> None:
        """The sentences ``done`` leave; the others stay in flight (in the order ``kept_order``
        gives)."""
        index = kept_order(done, self.state.fill_from_end)
        sentences = torch.tensor(index, dtype=torch.long, device=self.device)
        self.keys = [self.keys[i] for i in index]
        self.state.select(sentences)
        self.beams.keep(sentences)
        K = self.K
        rows = (sentences[:, None] * K + torch.arange(K, device=self.device)).view(-1)
        for modifier in self.modifiers:
            modifier.keep(rows, sentences)


def search_batch(
    model,
    src: Tensor,
    decode: DecodeConfig,
    options: Optional[SearchOptions] = None,
    generator: Optional[torch.Generator] = None,
    walk: Optional[bool] = None,
) -> list[list[Hypothesis]]:
    """Search ``src (B, S)`` (padded, eos included) with ``decode`` (``walk``: ``RunningSearch``'s):
    its n-best lists, in order.
    ``options.on_step`` (greedy and sampling) gets each step's tokens ``(B,)`` in the batch's
    order, pad for the sentences already done."""
    options = options or SearchOptions()
    B, pad = src.size(0), model.config.pad_id

    def in_batch_order(keys: list, tokens: Tensor) -> None:
        full = tokens.new_full((B,), pad)
        full[torch.tensor(keys, device=tokens.device)] = tokens
        options.on_step(full)

    search = RunningSearch(
        model,
        decode,
        options,
        joinable=False,
        generator=generator,
        walk=walk,
        on_tokens=in_batch_order if options.on_step is not None else None,
        device=src.device,
    )
    search.join_batch(src, range(B))
    results: list[Optional[list[Hypothesis]]] = [None] * B
    while len(search):
        for key, hyps in search.step():
            results[key] = hyps
    return results  # type: ignore[return-value]
