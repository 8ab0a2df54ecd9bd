"""The bookkeeping every search keeps, written once: each sentence's rows and their tokens so far,
the live scores, the finished hypotheses and the stopping rule.

Every search (``RunningSearch``: beam search, greedy search and sampling, a batch or a stream of
sentences) keeps its sentences in a ``Beams``; where a step's log-probabilities come from is the
decoding state's (``state.py``), and sentences come and go between any two steps (a batch: all at
the first step). Every sentence has its own step count, so a sentence that joined a
running search late is searched by exactly the rules of a batch.

Rows are sentence-major: sentence b owns rows ``b*K .. b*K+K-1``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..config import DecodeConfig
from .common import Hypothesis

NEG_INF = float("-inf")


def length_penalty(length: Tensor | float, alpha: float, kind: str = "gnmt") -> Tensor:
    """lp(|Y|): ``((5 + |Y|) / 6) ** alpha`` (gnmt) or ``|Y| ** alpha`` (power)."""
    length = torch.as_tensor(length, dtype=torch.float64)
    if kind == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if kind == "power":
        return length**alpha
    raise ValueError(f"length_penalty={kind!r}: choose 'gnmt' or 'power'")


def top_candidates(scores: Tensor, logprobs: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """The best ``k`` continuations of ``scores (B, K)`` by ``logprobs (B, K, V)``.

    Returns cumulative log-probabilities, source beams and tokens, each ``(B, k)``, best first.
    """
    B, K, V = logprobs.shape
    total = (scores[:, :, None] + logprobs).view(B, K * V)  # (B, K*V)
    values, flat = total.topk(k, dim=1)  # (B, k)
    return values, flat // V, flat % V


def merge_finished(
    fin_scores: Tensor,
    fin_tokens: Tensor,
    fin_logprob: Tensor,
    new_scores: Tensor,
    new_tokens: Tensor,
    new_logprob: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """Keep the best K of the finished hypotheses so far and the ones that just ended.

    fin_*: ``(B, K)`` normalized scores, ``(B, K, L)`` tokens, ``(B, K)`` logprobs; new_*: the same
    with ``M`` candidates (NEG_INF scores for those that did not end). Returns the new fin_*.
    """
    K = fin_scores.size(1)
    scores = torch.cat([fin_scores, new_scores], dim=1)  # (B, K+M)
    best, pick = scores.topk(K, dim=1)  # (B, K)
    tokens = torch.cat([fin_tokens, new_tokens], dim=1)  # (B, K+M, L)
    tokens = tokens.gather(1, pick[:, :, None].expand(-1, -1, tokens.size(2)))
    logprob = torch.cat([fin_logprob, new_logprob], dim=1).gather(1, pick)
    return best, tokens, logprob


class Beams:
    """The sentences of a search and their hypotheses; see the module docstring.

    ``walk``: one row per sentence whose next token the search chooses itself (``advance_walk``:
    greedy's most likely token, or a draw), done at eos; otherwise beam search over ``beam`` rows
    (``advance``: the best 2K continuations, those ending in eos finished under the length
    penalty, the best K others live on, and ``decode.stop``'s rule says when a sentence is done).
    """

    def __init__(
        self,
        config,
        decode: DecodeConfig,
        beam: int,
        device: torch.device | str,
        walk: bool = False,
    ) -> None:
        self.config, self.decode, self.walk = config, decode, walk
        self.K = 1 if walk else beam
        self.device = device
        self.width = 0  # columns of the histories: the longest output allowed of any sentence in it
        self._empty()

    def _empty(self) -> None:
        K, dev, pad = self.K, self.device, self.config.pad_id
        self.steps = torch.zeros(
            0, dtype=torch.long, device=dev
        )  # (B,) tokens produced per sentence
        self.max_len = torch.zeros(0, dtype=torch.long, device=dev)  # (B,) eos included
        self.last = torch.zeros(0, dtype=torch.long, device=dev)  # (N,) each row's newest token
        self.history = torch.full(
            (0, self.width), pad, dtype=torch.long, device=dev
        )  # (N, width) without start
        self.scores = torch.zeros(
            0, K, device=dev
        )  # (B, K) cumulative log-probabilities of the live rows
        self.lp_at_max = torch.zeros(
            0, device=dev
        )  # (B,) the length penalty at the longest output allowed
        self.fin_scores = torch.zeros(
            0, K, device=dev
        )  # (B, K) the finished, normalized, best first
        self.fin_logprob = torch.zeros(0, K, device=dev)
        self.fin_tokens = torch.full((0, K, self.width), pad, dtype=torch.long, device=dev)

    def __len__(self) -> int:
        return self.steps.numel()

    def join(self, max_len: Tensor) -> None:
        """Add ``n = len(max_len)`` sentences after the others, at step 0; ``max_len (n,)`` the most
        output tokens each may have, eos included (``common.max_lengths``)."""
        c, K, dev, decode = self.config, self.K, self.device, self.decode
        n = max_len.numel()
        self._widen(int(max_len.max()))
        self.steps = torch.cat([self.steps, torch.zeros(n, dtype=torch.long, device=dev)])
        self.max_len = torch.cat([self.max_len, max_len])
        self.last = torch.cat(
            [self.last, torch.full((n * K,), c.start_id, dtype=torch.long, device=dev)]
        )
        self.history = torch.cat(
            [self.history, self.history.new_full((n * K, self.width), c.pad_id)]
        )
        scores = torch.full((n, K), NEG_INF, device=dev)
        scores[:, 0] = (
            0.0  # all beams start identical: let only the first one expand at the first step
        )
        self.scores = torch.cat([self.scores, scores])
        if not self.walk:
            lp = length_penalty(max_len.cpu(), decode.alpha, decode.length_penalty).float().to(dev)
            self.lp_at_max = torch.cat([self.lp_at_max, lp])
            self.fin_scores = torch.cat([self.fin_scores, torch.full((n, K), NEG_INF, device=dev)])
            self.fin_logprob = torch.cat(
                [self.fin_logprob, torch.full((n, K), NEG_INF, device=dev)]
            )
            self.fin_tokens = torch.cat(
                [self.fin_tokens, self.fin_tokens.new_full((n, K, self.width), c.pad_id)]
            )

    def _widen(self, width: int) -> None:
        if width > self.width:
            extra, pad = width - self.width, self.config.pad_id
            self.history = torch.nn.functional.pad(self.history, (0, extra), value=pad)
            self.fin_tokens = torch.nn.functional.pad(self.fin_tokens, (0, extra), value=pad)
            self.width = width

    def tokens(self, step: int) -> Tensor:
        """``(N, 1 + step)``: the start token and every row's tokens so far, when every sentence is
        at ``step`` (a batch); for decoding states that read the whole prefix."""
        start = self.history.new_full((self.history.size(0), 1), self.config.start_id)
        return torch.cat([start, self.history[:, :step]], dim=1)

    def advance_walk(self, chosen: Tensor, logprob: Tensor) -> Tensor:
        """Each row's next token ``chosen (B,)`` with its log-probability ``logprob (B,)``; returns
        the sentences that just ended (eos)."""
        self.scores[:, 0] += logprob
        self.history.scatter_(1, self.steps[:, None], chosen[:, None])
        self.last = chosen
        self.steps += 1
        return chosen == self.config.eos_id

    def advance(self, logprobs: Tensor) -> tuple[Tensor, Tensor]:
        """One step of beam search over ``logprobs (N, V)`` (the rules already applied:
        ``constrain``).

        Returns ``(done (B,), pick (N,))``: the sentences no live row can improve any more (their
        hypotheses are ``finished(i)``), and the rows each new row continues (the decoding state
        reorders by it).
        """
        decode, K, c = self.decode, self.K, self.config
        B = len(self)
        values, beams, words = top_candidates(
            self.scores, logprobs.view(B, K, -1), 2 * K
        )  # (B, 2K)
        rows = torch.arange(B, device=self.device)[:, None] * K + beams  # (B, 2K)
        # candidates that end with eos join the finished list, scored by the length penalty
        ended = (words == c.eos_id) & (values > NEG_INF)
        if ended.any():  # (most steps end nothing: skip the history gather and the merge)
            history = self.history[rows.view(-1)].view(B, 2 * K, -1)  # (B, 2K, width)
            where = self.steps[:, None, None].expand(B, 2 * K, 1)
            ended_tokens = history.scatter(2, where, words[:, :, None])
            norm = (
                values
                / length_penalty(self.steps + 1, decode.alpha, decode.length_penalty).float()[
                    :, None
                ]
            )
            self.fin_scores, self.fin_tokens, self.fin_logprob = merge_finished(
                self.fin_scores,
                self.fin_tokens,
                self.fin_logprob,
                norm.masked_fill(~ended, NEG_INF),
                ended_tokens,
                values.masked_fill(~ended, NEG_INF),
            )
        # the best K candidates that do not end live on (2K candidates hold at least K of them)
        self.scores, keep = values.masked_fill(ended, NEG_INF).topk(K, dim=1)  # (B, K)
        pick = rows.gather(1, keep).view(-1)  # (N,) rows continued
        self.last = words.gather(1, keep).view(-1)
        self.history = self.history[pick]
        self.history.scatter_(1, self.steps.repeat_interleave(K)[:, None], self.last[:, None])
        self.steps += 1
        # a sentence is done when no live row can beat its nbest-th finished hypothesis: logprobs
        # only fall, and the length penalty is largest at the longest output allowed
        if decode.stop == "bound":
            best_possible = self.scores[:, 0] / self.lp_at_max
        else:
            best_possible = torch.where(
                self.fin_scores[:, K - 1] > NEG_INF, NEG_INF, float("inf")
            ).to(self.scores)
        done = (self.scores[:, 0] == NEG_INF) | (
            self.fin_scores[:, decode.nbest - 1] >= best_possible
        )
        return done, pick

    def finished(self, i: int) -> list[Hypothesis]:
        """Sentence ``i``'s hypotheses, best first: the n-best finished ones (beam search), or its
        row's tokens up to eos (a walk)."""
        config = self.config
        if self.walk:
            row = self.history[i, : int(self.steps[i])].tolist()
            out = row[: row.index(config.eos_id)] if config.eos_id in row else row
            logprob = float(self.scores[i, 0])
            return [Hypothesis(out, logprob, logprob)]
        hypotheses = []
        nbest = self.decode.nbest
        for row, logprob, score in zip(
            self.fin_tokens[i, :nbest].tolist(),
            self.fin_logprob[i, :nbest].tolist(),
            self.fin_scores[i, :nbest].tolist(),
        ):
            if score == NEG_INF:
                continue
            end = row.index(config.eos_id) if config.eos_id in row else len(row)
            hypotheses.append(Hypothesis(row[:end], logprob, score))
        return hypotheses

    def keep(self, sentences: Tensor) -> None:
        """Only ``sentences`` (indices, in their new order) stay."""
        K = self.K
        rows = (sentences[:, None] * K + torch.arange(K, device=self.device)).view(-1)
        for name in ("steps", "max_len", "scores"):
            setattr(self, name, getattr(self, name)[sentences])
        if not self.walk:
            for name in ("lp_at_max", "fin_scores", "fin_logprob", "fin_tokens"):
                setattr(self, name, getattr(self, name)[sentences])
        self.last, self.history = self.last[rows], self.history[rows]
        if not len(self):
            self.width = 0
            self._empty()
