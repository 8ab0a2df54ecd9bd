"""Where a position enters: sinusoids, learned tables, RoPE, ALiBi, T5's buckets."""

import pytest
import torch

from transduce import ModelConfig, Transformer
from transduce.model.attention import attend
from transduce.model.positions import sinusoidal_table

from ..conftest import random_batch, tiny_config


def test_sinusoid_offset_is_a_rotation_independent_of_position():
    # §3.5: PE(pos + k) = M_k PE(pos). Tested in its well-conditioned form: each (sin, cos) pair of
    # frequency w_i is the pair at pos rotated by the angle k * w_i, the same rotation at every pos.
    d = 16
    pe = sinusoidal_table(200, d, dtype=torch.float64)
    w = 1.0 / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    for k in (1, 3, 17):
        c, s = torch.cos(k * w), torch.sin(k * w)  # (d/2,)
        sin, cos = pe[:-k, 0::2], pe[:-k, 1::2]  # (P-k, d/2) at pos
        rotated = torch.stack([sin * c + cos * s, cos * c - sin * s], dim=-1).flatten(1)  # (P-k, d)
        torch.testing.assert_close(rotated, pe[k:], atol=1e-12, rtol=0)
        # a rotation by a slightly different angle does not fit: the check has power
        wrong = torch.stack(
            [sin * torch.cos(1.01 * k * w) + cos * torch.sin(1.01 * k * w), cos], -1
        ).flatten(1)
        assert (wrong - pe[k:]).abs().max() > 1e-3


def test_sinusoid_layouts():
    inter, concat = sinusoidal_table(10, 8, "interleaved"), sinusoidal_table(10, 8, "concat")
    torch.testing.assert_close(inter[:, 0::2], concat[:, :4])
    torch.testing.assert_close(inter[:, 1::2], concat[:, 4:])
    assert inter[3, 0] == pytest.approx(torch.sin(torch.tensor(3.0)).item(), abs=1e-6)


def test_alibi_slopes_follow_the_papers_formula():
    from transduce.model.positions import ALiBi

    # Press et al. 2022, §3: for 8 heads the slopes are 1/2, 1/4, ..., 1/256 (2^(-8h/H), h = 1..H)
    assert ALiBi(8).slopes.tolist() == pytest.approx([2.0 ** -(h + 1) for h in range(8)])
    assert ALiBi(4).slopes.tolist() == pytest.approx([2.0 ** (-2 * (h + 1)) for h in range(4)])
    # not a power of two (their reference code): the 8-head slopes, then every other 16-head slope
    expected = [2.0 ** -(h + 1) for h in range(8)] + [2.0 ** -(0.5 + h) for h in range(4)]
    assert ALiBi(12).slopes.tolist() == pytest.approx(expected)
    bias = ALiBi(8)(3, 5)  # (1, H, T, S)
    expected_bias = torch.tensor([[-abs(i - j) / 2 for j in range(5)] for i in range(3)])
    torch.testing.assert_close(bias[0, 0], expected_bias)


def test_rope_scores_depend_only_on_the_relative_position(device):
    from transduce.model.positions import Rotary

    rope = Rotary(16, 64).to(device)
    q, k = torch.randn(1, 1, 1, 16, device=device), torch.randn(1, 1, 1, 16, device=device)

    def score(m: int, n: int) -> float:
        return float((rope(q, offset=m) * rope(k, offset=n)).sum())

    for shift in (1, 7, 30):
        assert score(5 + shift, 2 + shift) == pytest.approx(score(5, 2), abs=1e-4)
        assert score(3 + shift, 9 + shift) == pytest.approx(score(3, 9), abs=1e-4)
    assert abs(score(5, 2) - score(5, 3)) > 1e-3  # but it does depend on the distance
