"""Sampling (temperature, top-k, top-p), with greedy as its zero-temperature case."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..config import DecodeConfig
from .beams import Beams
from .common import Hypothesis, SearchOptions, banned_tokens, constrain, max_lengths, prefix_tensor
from .state import decoding_state


def filter_logits(logprobs: Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """Rescale by temperature and keep only the top-k / nucleus (top-p) tokens of each row ``(N, V)``."""
    scores = logprobs / temperature
    if top_k > 0:
        kth = scores.topk(min(top_k, scores.size(-1)), dim=-1).values[:, -1:]  # (N, 1)
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        sorted_scores, order = scores.sort(dim=-1, descending=True)
        probs = sorted_scores.softmax(-1)
        outside = probs.cumsum(-1) - probs >= top_p  # mass before this token already reaches p
        sorted_scores = sorted_scores.masked_fill(outside, float("-inf"))
        scores = torch.full_like(scores, float("-inf")).scatter(-1, order, sorted_scores)
    return scores


def sample(model, src: Tensor, decode: Optional[DecodeConfig] = None, options: Optional[SearchOptions] = None,
           generator: Optional[torch.Generator] = None) -> list[Hypothesis]:
    """Draw one output per sentence of ``src (B, S)`` with ``decode``'s temperature, top-k and top-p."""
    return walk(model, src, decode or DecodeConfig(sampling=True, beam=1), options, greedy=False, generator=generator)


@torch.no_grad()
def walk(model, src: Tensor, decode: DecodeConfig, options: Optional[SearchOptions] = None, greedy: bool = False,
         generator: Optional[torch.Generator] = None) -> list[Hypothesis]:
    """One hypothesis per sentence of ``src (B, S)``, token by token: drawn, or the most likely one
    when ``greedy`` (sampling at temperature 0)."""
    options = options or SearchOptions()
    config = model.config
    B = src.size(0)
    max_len = max_lengths(model, src, decode)  # (B,)
    steps, last_step = int(max_len.max()), int(max_len.min()) - 1
    state = decoding_state(model, 1, options)
    state.join(src, capacity=steps)
    banned = banned_tokens(config, src.device)
    prefix = prefix_tensor(options.prefix, B, config.pad_id, src.device)
    beams = Beams(config, decode, 1, src.device, walk=True)
    beams.join(max_len)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    # Finished sentences leave the batch (their rows stop costing a step), unless a caller follows
    # every row step by step (on_step), which needs the rows to stay where they are.
    shrink = options.on_step is None
    alive = torch.arange(B, device=src.device)  # original index of each row still searched
    finished: list = [None] * B
    forced = prefix  # of the rows still searched
    for step in range(steps):
        lp = state.logprobs(beams.tokens(step) if state.reads_prefix else beams.last)
        lp = constrain(lp, step, config, beams.max_len, decode.min_len, forced, banned=banned,
                       last_step=last_step)  # (n, V)
        if greedy:  # max, not argmax: the same first maximal index, and faster on the CPU
            chosen, nxt = lp.max(-1)
        else:
            probs = filter_logits(lp, decode.temperature, decode.top_k, decode.top_p).softmax(-1)
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            chosen = lp.gather(1, nxt[:, None]).squeeze(1)
        if not shrink:  # (when shrinking, every row here is still decoding)
            nxt = nxt.masked_fill(done, config.pad_id)  # finished rows only pad
            chosen = chosen.masked_fill(done, 0.0)
        done |= beams.advance_walk(nxt, chosen)
        if options.on_step is not None:
            options.on_step(nxt)
        if shrink and done.any():
            for i in done.nonzero().squeeze(1).tolist():
                finished[int(alive[i])] = beams.finished(i)[0]
            keep = (~done).nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            alive, done = alive[keep], done[keep]
            beams.keep(keep)
            state.select(keep)
            forced = None if prefix is None else prefix[alive]
            last_step = int(beams.max_len.min()) - 1
        elif done.all():
            break
    for n, i in enumerate(alive.tolist()):
        finished[i] = finished[i] or beams.finished(n)[0]
    return finished
