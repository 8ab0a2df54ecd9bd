"""Scaled dot-product attention (§3.2): one function, fast and explicit, beams folded."""

import pytest
import torch

from transduce import ModelConfig, Transformer
from transduce.model.attention import attend, merge_heads, share_heads, split_heads
from transduce.model.positions import sinusoidal_table

from ..conftest import random_batch, tiny_config
from .test_transformer import PAPER_COUNTS


def test_fast_and_explicit_attention_agree_and_masked_rows_are_zero(device):
    q, k, v = (
        torch.randn(*shape).to(device) for shape in ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 8))
    )
    mask = (torch.rand(2, 1, 4, 5) > 0.3).to(device)
    mask[0, :, 1] = False  # one query sees no key at all
    fast, _ = attend(q, k, v, mask)
    slow, weights = attend(q, k, v, mask, need_weights=True)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=0)
    assert not torch.isnan(fast).any() and not torch.isnan(slow).any()
    assert (slow[0, :, 1] == 0).all() and (fast[0, :, 1] == 0).all()
    torch.testing.assert_close(weights.sum(-1)[1], torch.ones(3, 4, device=device))
    for scale in (1.0, 0.1):  # attention_scale "none", and any factor
        torch.testing.assert_close(
            attend(q, k, v, mask, scale=scale)[0],
            attend(q, k, v, mask, need_weights=True, scale=scale)[0],
            atol=1e-5,
            rtol=0,
        )
    unscaled = attend(q, k, v, mask, need_weights=True, scale=1.0)[1]
    torch.testing.assert_close(
        unscaled[1],
        (q[1] @ k[1].transpose(-2, -1)).masked_fill(~mask[1], float("-inf")).softmax(-1),
    )
    bias = -torch.rand(1, 3, 4, 5, device=device)
    torch.testing.assert_close(
        attend(q, k, v, mask[1:], bias)[0][1:],
        attend(q, k, v, mask[1:], bias, need_weights=True)[0][1:],
        atol=1e-5,
        rtol=0,
    )


@pytest.mark.parametrize(
    "n_heads, head_dim", [(1, 512), (4, 128), (16, 32), (32, 16), (8, 16), (8, 32)]
)
def test_head_dim_changes_exactly_the_attention_projections(n_heads, head_dim):
    """Table 3 (A): h x d_k = d_model keeps the base model's count; (B): a smaller d_k shrinks the
    18 attention blocks (6 encoder self, 6 decoder self, 6 cross), each 4 d_model x h d_k weights
    and 3 h d_k biases (+ d_model for the output bias, unchanged)."""
    with torch.device("meta"):
        model = Transformer(
            ModelConfig.preset("base", vocab_size=37000, n_heads=n_heads, head_dim=head_dim)
        )
    inner, D = n_heads * head_dim, 512
    expected = PAPER_COUNTS["base"] - 18 * (4 * D * D + 3 * D) + 18 * (4 * D * inner + 3 * inner)
    assert model.num_parameters()["total"] == expected
    assert model.config.d_k == head_dim


@pytest.mark.parametrize("need_weights", [False, True])
def test_beams_folded_into_the_queries_equal_keys_copied_per_beam(need_weights, device):
    """K beams of a sentence share its keys: folding them into the query length gives what
    repeating the keys K times gives."""
    torch.manual_seed(0)
    B, K, H, T, S, Dh = 2, 3, 4, 1, 5, 8
    q = torch.randn(B * K, H, T, Dh, device=device)
    k, v = torch.randn(B, H, S, Dh, device=device), torch.randn(B, H, S, Dh, device=device)
    mask = torch.ones(B, 1, 1, S, dtype=torch.bool, device=device)
    mask[1, ..., 3:] = False  # the second sentence is shorter
    out, weights = attend(q, k, v, mask, need_weights=need_weights)
    copied, copied_weights = attend(q, k.repeat_interleave(K, 0), v.repeat_interleave(K, 0),
                                    mask.repeat_interleave(K, 0), need_weights=need_weights)
    torch.testing.assert_close(out, copied, atol=1e-5, rtol=0)
    if need_weights:
        torch.testing.assert_close(weights, copied_weights, atol=1e-6, rtol=0)
        assert weights[K:, ..., 3:].abs().max() == 0  # the padding gets no weight


def test_the_explicit_path_is_the_formula(device):
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, 3, 4, device=device) for _ in range(3))
    out, weights = attend(q, k, v, need_weights=True, causal=True, scale=0.5)
    scores = (q @ k.transpose(-2, -1) * 0.5).masked_fill(
        ~torch.ones(3, 3, dtype=torch.bool, device=device).tril(), float("-inf"))
    torch.testing.assert_close(weights, scores.softmax(-1))
    torch.testing.assert_close(out, scores.softmax(-1) @ v)


def test_heads_split_merge_and_share_as_documented():
    x = torch.arange(2 * 3 * 8, dtype=torch.float).view(2, 3, 8)
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 2) and torch.equal(heads[0, 1, 2], x[0, 2, 2:4])
    assert torch.equal(merge_heads(heads), x)
    kv = torch.randn(2, 2, 5, 3)  # two key/value heads for four query heads
    shared = share_heads(kv, 4)
    assert shared.shape == (2, 4, 5, 3)
    assert torch.equal(shared[:, 0], kv[:, 0]) and torch.equal(shared[:, 1], kv[:, 0])
    assert torch.equal(shared[:, 3], kv[:, 1]) and share_heads(kv, 2) is kv
