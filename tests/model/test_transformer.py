import itertools

import pytest
import torch

from transduce import ModelConfig, Transformer
from transduce.model.attention import attend
from transduce.model.positions import sinusoidal_table

from ..conftest import random_batch, tiny_config

POSITIONALS = ["sinusoidal", "sinusoidal_concat", "learned", "rope", "alibi", "relative", "none"]


def test_shapes_and_padding_from_config():
    cfg = tiny_config(pad_id=5, bos_id=6, eos_id=7, unk_id=8)
    model = Transformer(cfg).eval()
    src, src_len = random_batch(3, 9, cfg.vocab_size, pad_id=5)
    tgt, _ = random_batch(3, 6, cfg.vocab_size, pad_id=5)
    assert model(src, tgt).shape == (3, 6, cfg.vocab_size)
    assert model.encode(src).shape == (3, 9, cfg.d_model)
    # the configured pad id (5, not 0) is what gets masked: a padded sentence equals it alone
    b = int((src_len < 9).nonzero()[0])
    n = int(src_len[b])
    torch.testing.assert_close(
        model(src, tgt)[b], model(src[b : b + 1, :n], tgt[b : b + 1])[0], atol=1e-5, rtol=0
    )
    # pad id 0: the 5s are words to it, and the outputs differ
    blind = Transformer(tiny_config()).eval()
    assert not torch.allclose(
        blind(src, tgt)[b], blind(src[b : b + 1, :n], tgt[b : b + 1])[0], atol=1e-3
    )


@pytest.mark.parametrize("positional", POSITIONALS)
def test_causality(positional, device):
    model = Transformer(tiny_config(positional=positional)).to(device).eval()
    src, _ = random_batch(2, 7, 40, device=device)
    tgt = torch.randint(4, 40, (2, 8), device=device)
    base = model(src, tgt)
    for t in range(8):
        changed = tgt.clone()
        changed[:, t] = (changed[:, t] + 1 - 4) % 36 + 4
        out = model(src, changed)
        torch.testing.assert_close(out[:, :t], base[:, :t], atol=1e-6, rtol=0)
        assert not torch.allclose(out[:, t:], base[:, t:])


@pytest.mark.parametrize("positional", POSITIONALS)
@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_padding_invariance(positional, norm_position, device):
    model = (
        Transformer(tiny_config(positional=positional, norm_position=norm_position))
        .to(device)
        .eval()
    )
    src = torch.randint(4, 40, (2, 6), device=device)
    tgt = torch.randint(4, 40, (2, 5), device=device)
    base = model(src, tgt)
    pad_src = torch.cat([src, torch.zeros(2, 4, dtype=torch.long, device=device)], 1)
    pad_tgt = torch.cat([tgt, torch.zeros(2, 3, dtype=torch.long, device=device)], 1)
    torch.testing.assert_close(model(pad_src, tgt), base, atol=1e-5, rtol=0)
    torch.testing.assert_close(model(src, pad_tgt)[:, :5], base, atol=1e-5, rtol=0)


def test_permutation_equivariance_only_without_positions():
    x = torch.randint(4, 40, (2, 7))
    perm = torch.randperm(7)
    for positional, equivariant in [("none", True), ("sinusoidal", False)]:
        model = Transformer(tiny_config(positional=positional)).eval()
        out, out_perm = model.encode(x), model.encode(x[:, perm])
        assert torch.allclose(out[:, perm], out_perm, atol=1e-5) == equivariant


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


@pytest.mark.parametrize("positional", POSITIONALS)
@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_incremental_decoding_matches_full_pass(positional, norm_position, device):
    model = (
        Transformer(tiny_config(positional=positional, norm_position=norm_position))
        .to(device)
        .eval()
    )
    src, _ = random_batch(3, 8, 40, device=device)
    tgt = torch.randint(4, 40, (3, 7), device=device)
    full = model(src, tgt)
    memory = model.encode(src)
    cache = model.start_decoding(src, memory, capacity=2)  # forces the buffers to grow
    steps = [model.decode(tgt[:, :3], cache)]  # a forced prefix of 3, then one token at a time
    steps += [model.decode(tgt[:, t : t + 1], cache) for t in range(3, 7)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=0)
    assert cache.length == 7


def test_cache_reorder_equals_recomputing_and_beams_share_cross_keys(device):
    model = Transformer(tiny_config()).to(device).eval()
    src, _ = random_batch(2, 6, 40, device=device)
    tgt = torch.randint(4, 40, (6, 4), device=device)  # 2 sentences x 3 beams
    memory = model.encode(src)
    cache = model.start_decoding(src, memory, beam=3)
    model.decode(tgt[:, :3], cache)
    order = torch.tensor([2, 2, 0, 4, 3, 5], device=device)  # beams move within their own sentence
    cache.reorder(order)
    step = model.decode(tgt[:, 3:4], cache)
    fresh = model(src.repeat_interleave(3, 0), torch.cat([tgt[order, :3], tgt[:, 3:4]], 1))
    torch.testing.assert_close(step[:, 0], fresh[:, 3], atol=1e-5, rtol=0)
    assert cache.layers[0].cross_k.size(0) == 2  # per sentence, never per beam


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


def test_need_weights_returns_every_layer_and_head_and_same_logits(device):
    model = Transformer(tiny_config(encoder_layers=2, decoder_layers=3)).to(device).eval()
    src, _ = random_batch(2, 6, 40, device=device)
    tgt = torch.randint(4, 40, (2, 5), device=device)
    logits, att = model(src, tgt, need_weights=True)
    torch.testing.assert_close(logits, model(src, tgt), atol=1e-5, rtol=0)
    assert [w.shape for w in att.encoder] == [(2, 4, 6, 6)] * 2
    assert [w.shape for w in att.decoder] == [(2, 4, 5, 5)] * 3
    assert [w.shape for w in att.cross] == [(2, 4, 5, 6)] * 3
    assert torch.all(att.decoder[0][0].triu(1) == 0)  # causal


PAPER_COUNTS = {"base": 63_082_496, "big": 214_245_376}


@pytest.mark.parametrize("preset", ["base", "big"])
def test_parameter_counts_match_the_paper(preset):
    with torch.device("meta"):
        model = Transformer(ModelConfig.preset(preset, vocab_size=37000))
    assert model.num_parameters()["total"] == PAPER_COUNTS[preset]
    assert sum(p.numel() for p in model.parameters()) == PAPER_COUNTS[preset]  # parameters() dedups


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


def test_head_dim_and_unscaled_attention_train_and_decode(device):
    config = tiny_config(head_dim=24, attention_scale="none")
    model = Transformer(config).to(device).eval()
    src, _ = random_batch(2, 6, 40, device=device)
    tgt = torch.randint(4, 40, (2, 5), device=device)
    logits, att = model(src, tgt, need_weights=True)
    torch.testing.assert_close(logits, model(src, tgt), atol=1e-5, rtol=0)
    assert (
        att.cross[0].shape == (2, 4, 5, 6)
        and model.decoder[0].self_attn.qkv.out_features == 3 * 4 * 24
    )
    with pytest.raises(ValueError, match="attention_scale"):
        tiny_config(attention_scale="sqrt_d_model")
    with pytest.raises(ValueError, match="head_dim must be at least 1"):
        tiny_config(head_dim=0)
    # d_model need not divide by h then
    assert tiny_config(d_model=60, n_heads=8, head_dim=8).d_k == 8


def test_tying_shares_one_tensor():
    model = Transformer(tiny_config(tying="all"))
    w = model.output.weight
    assert model.src_embed.tokens.weight is w and model.tgt_embed.tokens.weight is w
    dec = Transformer(tiny_config(tying="decoder", tgt_vocab_size=30))
    assert dec.tgt_embed.tokens.weight is dec.output.weight
    assert dec.src_embed.tokens.weight is not dec.output.weight
    assert dec.output.weight.shape == (30, 64)
    none = Transformer(tiny_config(tying="none"))
    assert none.output.weight is not none.tgt_embed.tokens.weight


@pytest.mark.parametrize("activation, "
                         "norm_type", list(itertools.product(["relu", "gelu", "silu", "swiglu"],
                                                                         ["layernorm", "rmsnorm"])))
def test_every_activation_and_norm_runs(activation, norm_type, device):
    model = Transformer(
        tiny_config(activation=activation, norm_type=norm_type, output_bias=True)
    ).to(device)
    src, _ = random_batch(2, 5, 40, device=device)
    out = model(src, torch.randint(4, 40, (2, 3), device=device))
    out.sum().backward()
    assert torch.isfinite(out).all()


def test_tiny_model_overfits_one_batch(device):
    torch.manual_seed(0)
    model = Transformer(tiny_config()).to(device)
    src, _ = random_batch(8, 10, 40, device=device)
    tgt, _ = random_batch(8, 9, 40, generator=torch.Generator().manual_seed(5), device=device)
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(300):
        loss = torch.nn.functional.cross_entropy(
            model(src, tgt_in).transpose(1, 2), tgt_out, ignore_index=0
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 0.1:
            break
    assert loss.item() < 0.1


def test_select_projects_only_the_chosen_positions(device):
    model = Transformer(tiny_config()).to(device).eval()
    src, _ = random_batch(3, 6, 40, device=device)
    tgt, _ = random_batch(3, 5, 40, generator=torch.Generator().manual_seed(7), device=device)
    real = tgt != 0
    torch.testing.assert_close(
        model(src, tgt, select=real), model(src, tgt)[real], atol=1e-6, rtol=0
    )


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
