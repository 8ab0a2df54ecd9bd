"""Beam search (§6.1: beam 4, length penalty alpha 0.6), vectorized over sentences x beams.

The loop below is the batch's: every sentence starts at the first step, and one leaves when it is
done. The bookkeeping of a step (the best 2K continuations, the finished list, the stopping rule)
is ``Beams.advance`` (``beams.py``), which ``RunningSearch`` shares; its pieces are small pure
functions tested one by one: ``length_penalty``, ``top_candidates`` and ``merge_finished``.

Conventions (they differ between toolkits; docs/inference.md, "Beam search conventions"):
- The length |Y| of a hypothesis counts its tokens including eos (as fairseq and Hugging Face).
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
from .beams import NEG_INF, Beams, length_penalty, merge_finished, top_candidates
from .common import Hypothesis, SearchOptions, banned_tokens, constrain, max_lengths, prefix_tensor
from .state import decoding_state

__all__ = ["NEG_INF", "beam_search", "length_penalty", "merge_finished", "top_candidates"]


@torch.no_grad()
def beam_search(model, src: Tensor, decode: Optional[DecodeConfig] = None,
                options: Optional[SearchOptions] = None) -> list[list[Hypothesis]]:
    """Decode ``src (B, S)`` with ``decode``'s beam, length penalty, stopping rule and limits;
    returns, per sentence in order, its ``decode.nbest`` best hypotheses."""
    decode = decode or DecodeConfig()
    options = options or SearchOptions()
    config = model.config
    B, K = src.size(0), decode.beam
    device = src.device
    max_len = max_lengths(model, src, decode)  # (B,)
    L = int(max_len.max())
    state = decoding_state(model, K, options)
    state.join(src, capacity=L)
    prefix = prefix_tensor(options.prefix, B, config.pad_id, src.device)
    banned = banned_tokens(config, device)
    last_step = int(max_len.min()) - 1  # before this step no sentence is forced to end
    beams = Beams(config, decode, K, device)
    beams.join(max_len)
    alive = torch.arange(B, device=device)  # original index of each sentence still searched
    results: list[Optional[list[Hypothesis]]] = [None] * B
    forced = prefix  # of the sentences still searched

    for step in range(L):
        logprobs = state.logprobs(beams.tokens(step) if state.reads_prefix else beams.last)
        logprobs = constrain(logprobs, step, config, beams.max_len, decode.min_len, forced, per_row=K,
                             banned=banned, last_step=last_step)  # (n*K, V)
        done, pick = beams.advance(logprobs)
        state.reorder(pick)
        if done.any():
            for i in done.nonzero().squeeze(1).tolist():
                results[int(alive[i])] = beams.finished(i)
            kept = (~done).nonzero().squeeze(1)
            if kept.numel() == 0:
                break
            alive = alive[kept]
            beams.keep(kept)
            state.select(kept)
            forced = None if prefix is None else prefix[alive]
            last_step = int(beams.max_len.min()) - 1
    return results  # type: ignore[return-value]
