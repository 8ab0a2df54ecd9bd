"""Beam search (§6.1: beam 4, length penalty alpha 0.6), vectorized over sentences x beams.

A batch is searched as sentences that all join a ``RunningSearch`` at the first step
(``search_batch``); the bookkeeping of a step (the best 2K continuations, the finished list, the
stopping rule) is ``Beams.advance`` (``beams.py``), whose pieces are small pure functions tested
one by one: ``length_penalty``, ``top_candidates`` and ``merge_finished``.

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

from torch import Tensor

from ..config import DecodeConfig
from .beams import NEG_INF, length_penalty, merge_finished, top_candidates
from .common import Hypothesis, SearchOptions
from .running import search_batch

__all__ = ["NEG_INF", "beam_search", "length_penalty", "merge_finished", "top_candidates"]


def beam_search(model, src: Tensor, decode: Optional[DecodeConfig] = None,
                options: Optional[SearchOptions] = None) -> list[list[Hypothesis]]:
    """Decode ``src (B, S)`` with ``decode``'s beam, length penalty, stopping rule and limits;
    returns, per sentence in order, its ``decode.nbest`` best hypotheses."""
    return search_batch(model, src, decode or DecodeConfig(), options, walk=False)
