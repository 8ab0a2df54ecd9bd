"""Joint CTC/attention search (Watanabe et al. 2017, "Hybrid CTC/Attention Architecture for End-to-
End Speech Recognition"): a speech model with a CTC head scores each hypothesis h by

    (1 - w) * log p_attention(h | x) + w * log p_ctc(h... | x)

where p_ctc(h... | x) is CTC's *prefix* probability: the probability of every alignment of the
encoder's positions whose collapse (repeats merged, blanks removed) starts with h; a hypothesis
that ends (eos) gets CTC's probability of exactly h. Both factors only fall as h grows, so the
beam search's exact stopping rule still holds. The prefix probability is computed for the decoder's
``prebeam`` most likely next tokens of each hypothesis (ESPnet's partial scoring, 1.5 x the beam);
the others are not extended.

The scorer is a score modifier (``modifiers.py``) of a batch's search: it keeps forward variables
per row from the batch's start, so it does not serve a running search.

For each hypothesis the forward variables over the positions t of its recording are kept, ending
in a label (r_n) or in a blank (r_b), in log space; extending h by c:

    phi_t = r_n(h)_{t-1} + r_b(h)_{t-1}  (only r_b(h)_{t-1} when c repeats h's last token)
    r_n(h+c)_t = (r_n(h+c)_{t-1} + phi_t) p_t(c)
    r_b(h+c)_t = (r_n(h+c)_{t-1} + r_b(h+c)_{t-1}) p_t(blank)
    p_ctc(h+c... | x) = sum_t phi_t p_t(c)

(sums in probability, computed as log-sum-exp). Past a recording's end, blanks have probability 1
and labels 0, which leaves every sum as it was at the end. ``tests/decoding/test_ctc.py`` checks
the scores against the enumeration of every alignment.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

NEG = -1e30  # (log 0: finite, so that -inf - -inf never makes a NaN)


class CTCPrefixScorer:
    """The CTC part of a joint search over a batch: ``start`` with the model and the batch's
    sources, then each step ``score`` the decoder's log-probabilities ``(N, V)`` (N = sentences x
    K rows), ``advance`` with the chosen tokens and the rows they extend, and ``keep`` the rows of
    the sentences still in flight."""

    name = "a joint CTC search"
    running = False

    def __init__(self, weight: float, beam: int, blank: int, eos: int) -> None:
        self.weight, self.blank, self.eos = weight, blank, eos
        self.prebeam = max(2, int(math.ceil(1.5 * beam)))

    @staticmethod
    def check(model) -> None:
        """A ValueError unless ``model`` has a CTC head."""
        if getattr(model, "ctc", None) is None:
            raise ValueError("joint CTC search (ctc_weight > 0) needs a model with a CTC head "
                             "(trained with ctc_weight > 0)")

    def start(self, start) -> None:
        """A batch joins (``modifiers.Start``): over the encoder output the decoder reads, encoded
        once (the fast pass may hand it over in its precision's dtype)."""
        memory = start.memory
        if memory is not None and getattr(start.model, "ctc", None) is not None:
            memory = memory.to(start.model.ctc.weight.dtype)
        self.begin(start.model, start.src, start.per_row, memory)

    def adjust(self, logprobs: Tensor, step) -> Tensor:
        return self.score(logprobs)

    def subset(self, sentences) -> "CTCPrefixScorer":
        return self  # (made for each batch: nothing to cut)

    @torch.no_grad()
    def begin(self, model, src: Tensor, K: int, memory: Optional[Tensor] = None) -> None:
        """The CTC log-probabilities of the batch ``src`` ``(T, N, V)`` (each sentence's K rows)
        and the forward variables of the empty hypothesis; ``memory``: the encoder's output of
        ``src`` when the search has it already (else encoded here)."""
        self.check(model)
        memory = model.encode(src) if memory is None else memory
        logprobs = torch.log_softmax(model.ctc(memory).float(), dim=-1)  # (B, T, V)
        real = model.src_embed.real(src)  # (B, T)
        label = torch.where(real[..., None], logprobs, torch.full_like(logprobs, NEG))
        label[..., self.blank] = torch.where(real, logprobs[..., self.blank],
                                             torch.zeros_like(real, dtype=logprobs.dtype))
        self.x = label.repeat_interleave(K, dim=0).transpose(0, 1).contiguous()  # (T, N, V)
        T, N, _ = self.x.shape
        self.r_n = torch.full((T, N), NEG, device=src.device)
        self.r_b = torch.cumsum(self.x[:, :, self.blank], dim=0)
        self.psi = torch.zeros(N, device=src.device)  # log p_ctc(h... | x) of each row
        self.last = torch.full((N,), -1, dtype=torch.long, device=src.device)
        self.pending: Optional[tuple] = None

    def extend(self, candidates: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """For each row and candidate ``(N, P)``: the prefix score of h + c and its forward
        variables ``(T, N, P)`` each; eos gets the probability of h itself."""
        T, N, P = self.x.size(0), *candidates.shape
        x = self.x.gather(2, candidates[None].expand(T, N, P))  # (T, N, P): p_t(c)
        blank = self.x[:, :, self.blank][..., None]  # (T, N, 1)
        repeat = (candidates == self.last[:, None])[None]  # (1, N, P)
        before = torch.logaddexp(self.r_n, self.r_b)[..., None].expand(T, N, P)
        phi = torch.where(repeat, self.r_b[..., None].expand(T, N, P), before)
        r_n = torch.full((T, N, P), NEG, device=x.device)
        r_b = torch.full((T, N, P), NEG, device=x.device)
        empty = (self.last < 0)[:, None]  # the first label may start at position 0
        r_n[0] = torch.where(empty, x[0], torch.full_like(x[0], NEG))
        for t in range(1, T):
            r_n[t] = torch.logaddexp(r_n[t - 1], phi[t - 1]) + x[t]
            r_b[t] = torch.logaddexp(r_n[t - 1], r_b[t - 1]) + blank[t]
        psi = torch.logsumexp(torch.cat([r_n[:1], phi[:-1] + x[1:]]), dim=0)  # (N, P)
        final = torch.logaddexp(self.r_n[-1], self.r_b[-1])[:, None].expand(N, P)
        psi = torch.where(candidates == self.eos, final, psi)
        return psi, r_n, r_b

    def score(self, logprobs: Tensor) -> Tensor:
        """The joint step scores ``(N, V)``: (1 - w) x the decoder's + w x the change of the CTC
        prefix score, for each row's ``prebeam`` best tokens (the others -inf)."""
        P = min(self.prebeam, logprobs.size(-1))
        top, candidates = logprobs.topk(P, dim=-1)  # (N, P)
        psi, r_n, r_b = self.extend(candidates)
        joint = (1 - self.weight) * top + self.weight * (psi - self.psi[:, None])
        joint = torch.where(torch.isfinite(top), joint, torch.full_like(joint, -math.inf))
        self.pending = (candidates, psi, r_n, r_b)
        out = torch.full_like(logprobs, -math.inf)
        return out.scatter_(1, candidates, joint)

    def advance(self, tokens: Tensor, rows: Optional[Tensor] = None) -> None:
        """Row j now holds row ``rows[j]``'s hypothesis (the same row: None) extended by
        ``tokens[j]``."""
        candidates, psi, r_n, r_b = self.pending
        if rows is None:
            rows = torch.arange(tokens.size(0), device=tokens.device)
        which = (candidates[rows] == tokens[:, None]).float().argmax(1)  # (N,) its candidate
        self.psi = psi[rows, which]
        self.r_n, self.r_b = r_n[:, rows, which], r_b[:, rows, which]
        self.last, self.x = tokens.clone(), self.x[:, rows]
        self.pending = None

    def keep(self, rows: Tensor, sentences: Optional[Tensor] = None) -> None:
        """Only ``rows`` stay, in that order (the sentences still in flight)."""
        self.psi, self.last = self.psi[rows], self.last[rows]
        self.r_n, self.r_b, self.x = self.r_n[:, rows], self.r_b[:, rows], self.x[:, rows]
