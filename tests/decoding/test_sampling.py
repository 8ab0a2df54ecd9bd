"""Sampling: the filters that decide which tokens may be drawn, and the draw itself."""

from __future__ import annotations

import math

import pytest
import torch

from transduce.config import DecodeConfig
from transduce.decoding.sampling import draw, filter_logits

LOGPROBS = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))


def test_top_k_keeps_the_k_most_likely():
    assert filter_logits(LOGPROBS, top_k=2).isfinite().tolist() == [[True, True, False, False]]
    assert filter_logits(LOGPROBS, top_k=10).isfinite().all()  # more than the vocabulary: all


@pytest.mark.parametrize("top_p, kept", [(0.5, 1), (0.75, 2), (0.8, 2), (0.81, 3), (1.0, 4)])
def test_top_p_keeps_the_smallest_set_that_reaches_the_mass(top_p, kept):
    assert int(filter_logits(LOGPROBS, top_p=top_p).isfinite().sum()) == kept


def test_temperature_divides_the_scores():
    torch.testing.assert_close(filter_logits(LOGPROBS, temperature=2.0), LOGPROBS / 2)


def test_a_draw_is_seeded_and_returns_the_model_s_own_log_probability():
    logprobs = LOGPROBS.repeat(64, 1)
    decode = DecodeConfig(sampling=True, beam=1, temperature=0.5)
    first = draw(logprobs, decode, torch.Generator().manual_seed(3))
    again = draw(logprobs, decode, torch.Generator().manual_seed(3))
    assert torch.equal(first[1], again[1])
    # the untempered log-probability of the drawn token, as a score of the output
    torch.testing.assert_close(first[0], LOGPROBS[0][first[1]])
    assert set(first[1].tolist()) <= {0, 1, 2, 3} and len(set(first[1].tolist())) > 1
    cold = draw(logprobs, DecodeConfig(sampling=True, beam=1, temperature=0.01),
                torch.Generator().manual_seed(3))
    assert cold[1].tolist() == [0] * 64 and math.isclose(float(cold[0][0]), math.log(0.5),
                                                         rel_tol=1e-6)
