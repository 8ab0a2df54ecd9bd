"""Beam search (§6.1: beam 4, length penalty alpha 0.6), vectorized over sentences x beams.

The loop below is the whole algorithm; its pieces are small pure functions tested one by one:
``length_penalty``, ``top_candidates`` (top 2K over K x V) and ``merge_finished``.

Conventions (they differ between toolkits; docs/inference.md, "Beam search conventions"):
- The length |Y| of a hypothesis counts its tokens including eos (as fairseq; HF counts the
  generated tokens without eos).
- ``length_penalty="gnmt"``: lp = ((5 + |Y|) / 6)^alpha (Wu et al. 2016, the paper's);
  ``"power"``: lp = |Y|^alpha (HF, CTranslate2). A hypothesis is ranked by logprob / lp.
- ``stop="bound"`` (default) ends a sentence only when no live hypothesis can still beat the
  best finished ones: logprobs only fall, so a live beam's best possible score is its logprob
  divided by lp at the maximum length (for alpha >= 0); this is exact (tensor2tensor's rule).
  ``stop="k_finished"`` ends a sentence once it has K finished hypotheses (fairseq's rule; faster).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..config import DecodeConfig
from .common import Hypothesis, SearchOptions, Stepper, banned_tokens, constrain, max_lengths, prefix_tensor

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


def merge_finished(fin_scores: Tensor, fin_tokens: Tensor, fin_logprob: Tensor, new_scores: Tensor,
                   new_tokens: Tensor, new_logprob: Tensor) -> tuple[Tensor, Tensor, Tensor]:
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


@torch.no_grad()
def beam_search(model, src: Tensor, decode: Optional[DecodeConfig] = None,
                options: Optional[SearchOptions] = None) -> list[list[Hypothesis]]:
    """Decode ``src (B, S)`` with ``decode``'s beam, length penalty, stopping rule and limits;
    returns, per sentence in order, its ``decode.nbest`` best hypotheses."""
    decode = decode or DecodeConfig()
    options = options or SearchOptions()
    alpha, length_penalty_kind, stop, nbest = decode.alpha, decode.length_penalty, decode.stop, decode.nbest
    config = model.config
    B, K = src.size(0), decode.beam
    device = src.device
    max_len = max_lengths(model, src, decode)  # (B,)
    L = int(max_len.max())
    stepper = Stepper(model, src, K, options, L)
    prefix = prefix_tensor(options.prefix, B, config.pad_id, src.device)
    lp_at_max = length_penalty(max_len.cpu(), alpha, length_penalty_kind).float().to(device)  # (B,)
    banned = banned_tokens(config, device)
    last_step = int(max_len.min()) - 1  # before this step no sentence is forced to end

    tokens = torch.full((B * K, 1), config.start_id, dtype=torch.long, device=device)  # (B*K, t)
    scores = torch.full((B, K), NEG_INF, device=device)  # cumulative logprobs of live beams
    scores[:, 0] = 0.0  # all beams start identical: let only the first one expand at step 0
    fin_scores = torch.full((B, K), NEG_INF, device=device)  # (B, K) normalized
    fin_logprob = torch.full((B, K), NEG_INF, device=device)
    fin_tokens = torch.full((B, K, L), config.pad_id, dtype=torch.long, device=device)
    alive = torch.arange(B, device=device)  # original index of each sentence still searched
    results: list[Optional[list[Hypothesis]]] = [None] * B
    limits, forced, lp_limits = max_len, prefix, lp_at_max  # of the sentences still searched

    for step in range(L):
        n = alive.numel()
        logprobs = stepper.logprobs(tokens)  # (n*K, V)
        logprobs = constrain(logprobs, step, config, limits, decode.min_len, forced, per_row=K, banned=banned,
                             last_step=last_step)
        values, beams, words = top_candidates(scores, logprobs.view(n, K, -1), 2 * K)  # (n, 2K)
        rows = (torch.arange(n, device=device)[:, None] * K + beams)  # (n, 2K) rows of tokens

        # Candidates that end with eos join the finished list, scored by the length penalty.
        ended = (words == config.eos_id) & (values > NEG_INF)  # (n, 2K)
        if ended.any():  # (most steps end nothing: skip the history gather and the merge)
            history = tokens[rows.view(-1)].view(n, 2 * K, -1)  # (n, 2K, t)
            norm = values / length_penalty(step + 1, alpha, length_penalty_kind).float()
            ended_tokens = torch.cat([history[:, :, 1:], words[:, :, None]], dim=2)  # drop the start token
            ended_tokens = torch.nn.functional.pad(ended_tokens, (0, L - ended_tokens.size(2)), value=config.pad_id)
            fin_scores, fin_tokens, fin_logprob = merge_finished(
                fin_scores, fin_tokens, fin_logprob, norm.masked_fill(~ended, NEG_INF), ended_tokens,
                values.masked_fill(~ended, NEG_INF))

        # The best K candidates that do not end stay alive (2K candidates hold at least K of them).
        live_values = values.masked_fill(ended, NEG_INF)
        scores, keep = live_values.topk(K, dim=1)  # (n, K)
        pick = rows.gather(1, keep).view(-1)  # (n*K,) rows continued
        tokens = torch.cat([tokens[pick], words.gather(1, keep).view(-1, 1)], dim=1)  # (n*K, t+1)
        stepper.reorder(pick)

        # A sentence is done when no live beam can beat its nbest-th finished hypothesis.
        if stop == "bound":
            best_possible = scores[:, 0] / lp_limits  # logprobs only fall; lp is largest at max length
        else:
            best_possible = torch.where(fin_scores[:, K - 1] > NEG_INF, NEG_INF, float("inf")).to(scores)
        done = (scores[:, 0] == NEG_INF) | (fin_scores[:, nbest - 1] >= best_possible)  # (n,)
        if done.any():
            for i in done.nonzero().squeeze(1).tolist():
                results[int(alive[i])] = _hypotheses(fin_tokens[i], fin_logprob[i], fin_scores[i], nbest, config)
            keep_sentences = (~done).nonzero().squeeze(1)
            if keep_sentences.numel() == 0:
                break
            rows_kept = (keep_sentences[:, None] * K + torch.arange(K, device=device)).view(-1)
            alive, scores, tokens = alive[keep_sentences], scores[keep_sentences], tokens[rows_kept]
            fin_scores, fin_logprob = fin_scores[keep_sentences], fin_logprob[keep_sentences]
            fin_tokens = fin_tokens[keep_sentences]
            stepper.select(keep_sentences)
            limits, lp_limits = max_len[alive], lp_at_max[alive]
            forced = None if prefix is None else prefix[alive]
            last_step = int(limits.min()) - 1
    return results  # type: ignore[return-value]


def _hypotheses(tokens: Tensor, logprob: Tensor, scores: Tensor, nbest: int, config) -> list[Hypothesis]:
    out = []
    for row, lp, score in zip(tokens[:nbest].tolist(), logprob[:nbest].tolist(), scores[:nbest].tolist()):
        if score == NEG_INF:
            continue
        end = row.index(config.eos_id) if config.eos_id in row else len(row)
        out.append(Hypothesis(row[:end], lp, score))
    return out
