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
from torch import Tensor

from ..config import DecodeConfig
from ..data.dataset import pad_sequences
from .beam import NEG_INF, _hypotheses, length_penalty, merge_finished, top_candidates
from .common import Hypothesis, banned_tokens, constrain, max_lengths
from .joinable import joinable_rows, kept_order
from .sampling import _finish


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
        self.K = 1 if self.greedy else decode.beam
        self.device = next(model.parameters()).device
        self.rows = joinable_rows(model, self.K, precision, fast)
        self.banned = banned_tokens(self.config, self.device)
        self.keys: list[Hashable] = []
        self.width = 0  # columns of the histories: the longest output allowed in flight
        self._empty()

    def _empty(self) -> None:
        K, dev = self.K, self.device
        self.steps = torch.zeros(0, dtype=torch.long, device=dev)  # (B,) tokens produced per sentence
        self.max_len = torch.zeros(0, dtype=torch.long, device=dev)  # (B,)
        self.last = torch.zeros(0, dtype=torch.long, device=dev)  # (N,) each row's newest token
        self.history = torch.zeros(0, self.width, dtype=torch.long, device=dev)  # (N, width), padded
        self.scores = torch.zeros(0, K, device=dev)  # (B, K) cumulative log-probabilities of live beams
        self.lp_at_max = torch.zeros(0, device=dev)
        self.fin_scores = torch.zeros(0, K, device=dev)
        self.fin_logprob = torch.zeros(0, K, device=dev)
        self.fin_tokens = torch.zeros(0, K, self.width, dtype=torch.long, device=dev)

    def __len__(self) -> int:
        return len(self.keys)

    def join(self, sources: Sequence[Sequence[int]], keys: Sequence[Hashable]) -> None:
        if not sources:
            return
        c, K, dev, decode = self.config, self.K, self.device, self.decode
        src = pad_sequences([list(s) for s in sources], c.pad_id, suffix=c.eos_id).to(dev)
        n = src.size(0)
        max_len = max_lengths(self.model, src, decode)  # (n,)
        self._widen(int(max_len.max()))
        self.rows.join(src, capacity=self.width + 1)
        self.keys += list(keys)
        self.steps = torch.cat([self.steps, torch.zeros(n, dtype=torch.long, device=dev)])
        self.max_len = torch.cat([self.max_len, max_len])
        self.last = torch.cat([self.last, torch.full((n * K,), c.start_id, dtype=torch.long, device=dev)])
        self.history = torch.cat([self.history, self.history.new_full((n * K, self.width), c.pad_id)])
        scores = torch.full((n, K), NEG_INF, device=dev)
        scores[:, 0] = 0.0  # all beams start identical: let only the first one expand at the first step
        self.scores = torch.cat([self.scores, scores])
        lp = length_penalty(max_len.cpu(), decode.alpha, decode.length_penalty).float().to(dev)
        self.lp_at_max = torch.cat([self.lp_at_max, lp])
        self.fin_scores = torch.cat([self.fin_scores, torch.full((n, K), NEG_INF, device=dev)])
        self.fin_logprob = torch.cat([self.fin_logprob, torch.full((n, K), NEG_INF, device=dev)])
        self.fin_tokens = torch.cat([self.fin_tokens, self.fin_tokens.new_full((n, K, self.width), c.pad_id)])

    def _widen(self, width: int) -> None:
        if width > self.width:
            extra = width - self.width
            self.history = torch.nn.functional.pad(self.history, (0, extra), value=self.config.pad_id)
            self.fin_tokens = torch.nn.functional.pad(self.fin_tokens, (0, extra), value=self.config.pad_id)
            self.width = width

    @torch.no_grad()
    def step(self) -> list[tuple[Hashable, list[Hypothesis]]]:
        """One token for every sentence in flight; the sentences that finished, with their n-best lists."""
        if not self.keys:
            return []
        logprobs = constrain(self.rows.logprobs(self.last), self.steps, self.config, self.max_len,
                             self.decode.min_len, None, per_row=self.K, banned=self.banned)  # (N, V)
        done = self._greedy_step(logprobs) if self.greedy else self._beam_step(logprobs)
        self.steps += 1
        if not done.any():
            return []
        finished = []
        for i in done.nonzero().squeeze(1).tolist():
            if self.greedy:
                row = self.history[i, : int(self.steps[i])].tolist()
                finished.append((self.keys[i], [_finish(row, float(self.scores[i, 0]), self.config)]))
            else:
                finished.append((self.keys[i], _hypotheses(self.fin_tokens[i], self.fin_logprob[i],
                                                           self.fin_scores[i], self.decode.nbest, self.config)))
        self._keep(done.tolist())
        return finished

    def drop(self, keys: set) -> None:
        """Remove the sentences of ``keys`` (their rows leave the decoding state)."""
        done = [key in keys for key in self.keys]
        if any(done):
            self._keep(done)

    def _greedy_step(self, logprobs: Tensor) -> Tensor:
        chosen, nxt = logprobs.max(-1)  # (as greedy_search: the first maximal index)
        self.scores[:, 0] += chosen
        self.history.scatter_(1, self.steps[:, None], nxt[:, None])
        self.last = nxt
        return nxt == self.config.eos_id

    def _beam_step(self, logprobs: Tensor) -> Tensor:
        decode, K, c = self.decode, self.K, self.config
        B = len(self.keys)
        values, beams, words = top_candidates(self.scores, logprobs.view(B, K, -1), 2 * K)  # (B, 2K)
        rows = torch.arange(B, device=self.device)[:, None] * K + beams  # (B, 2K)
        ended = (words == c.eos_id) & (values > NEG_INF)
        if ended.any():
            history = self.history[rows.view(-1)].view(B, 2 * K, -1)  # (B, 2K, width)
            where = self.steps[:, None, None].expand(B, 2 * K, 1)
            ended_tokens = history.scatter(2, where, words[:, :, None])
            norm = values / length_penalty(self.steps + 1, decode.alpha, decode.length_penalty).float()[:, None]
            self.fin_scores, self.fin_tokens, self.fin_logprob = merge_finished(
                self.fin_scores, self.fin_tokens, self.fin_logprob, norm.masked_fill(~ended, NEG_INF),
                ended_tokens, values.masked_fill(~ended, NEG_INF))
        self.scores, keep = values.masked_fill(ended, NEG_INF).topk(K, dim=1)  # (B, K)
        pick = rows.gather(1, keep).view(-1)  # (N,) rows continued
        self.last = words.gather(1, keep).view(-1)
        self.history = self.history[pick]
        self.history.scatter_(1, self.steps.repeat_interleave(K)[:, None], self.last[:, None])
        self.rows.reorder(pick)
        if decode.stop == "bound":
            best_possible = self.scores[:, 0] / self.lp_at_max
        else:
            best_possible = torch.where(self.fin_scores[:, K - 1] > NEG_INF, NEG_INF, float("inf")).to(self.scores)
        return (self.scores[:, 0] == NEG_INF) | (self.fin_scores[:, decode.nbest - 1] >= best_possible)

    def _keep(self, done: list[bool]) -> None:
        """The sentences ``done`` leave; the others stay in flight (in the order ``kept_order`` gives)."""
        K = self.K
        index = kept_order(done, self.rows.fill_from_end)
        sentences = torch.tensor(index, dtype=torch.long, device=self.device)
        rows = (sentences[:, None] * K + torch.arange(K, device=self.device)).view(-1)
        self.keys = [self.keys[i] for i in index]
        self.rows.select(sentences)
        for name in ("steps", "max_len", "scores", "lp_at_max", "fin_scores", "fin_logprob", "fin_tokens"):
            setattr(self, name, getattr(self, name)[sentences])
        self.last, self.history = self.last[rows], self.history[rows]
        if not self.keys:
            self.width = 0
            self._empty()
