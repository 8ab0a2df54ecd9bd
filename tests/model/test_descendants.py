"""The descendants on the same blocks: decoder-only (GPT), encoder-only (BERT), grouped-query
attention and sliding windows; each against an independent statement of what it must compute."""

import pytest
import torch

from transduce import ModelConfig, Transformer

from ..conftest import random_batch

POSITIONALS = ["sinusoidal", "sinusoidal_concat", "learned", "rope", "alibi", "relative", "none"]


def gpt(**overrides):
    base = dict(vocab_size=40, dropout=0.0, max_positions=64)
    base.update(overrides)
    return ModelConfig.preset("gpt-tiny", **base)


def bert(**overrides):
    base = dict(vocab_size=40, dropout=0.0, max_positions=64)
    base.update(overrides)
    return ModelConfig.preset("bert-tiny", **base)


def layer_params(D, H, G, dk, F, cross=False):
    attn = D * (H + 2 * G) * dk + (H + 2 * G) * dk + H * dk * D + D
    cross_attn = D * H * dk + H * dk + D * 2 * G * dk + 2 * G * dk + H * dk * D + D
    return attn + (cross_attn if cross else 0) + 2 * D * F + F + D + (3 if cross else 2) * 2 * D


@pytest.mark.parametrize(
    "name", ["gpt-tiny", "gpt-small", "gpt2", "bert-tiny", "bert-small", "bert-base"]
)
def test_preset_parameter_counts(name):
    c = ModelConfig.preset(name, **({} if name in ("gpt2", "bert-base") else {"vocab_size": 8000}))
    D, H, dk, F, V, P = c.d_model, c.n_heads, c.d_k, c.d_ff, c.vocab_size, c.max_positions
    if c.architecture == "decoder-only":
        # + final LN
        expected = V * D + P * D + c.decoder_layers * layer_params(D, H, H, dk, F) + 2 * D
    else:  # + the embedding LayerNorm, the MLM head's dense layer and norm, and the output bias
        expected = (
            V * D
            + P * D
            + 2 * D
            + c.encoder_layers * layer_params(D, H, H, dk, F)
            + D * D
            + D
            + 2 * D
            + V
        )
    with torch.device("meta"):  # (shapes alone: nothing allocated or initialized)
        model = Transformer(c)
    counts = model.num_parameters()
    assert counts["total"] == expected
    assert counts["total"] == sum(p.numel() for p in model.parameters())
    if name == "gpt2":
        assert counts["total"] == 124_439_808  # GPT-2 small as published (weights tied)
    # BertForMaskedLM's 109,514,298 less its token-type embeddings (2 x 768)
    if name == "bert-base":
        assert counts["total"] == 109_514_298 - 2 * 768


def test_gqa_parameter_count():
    for G in (4, 2, 1):
        c = gpt(n_kv_heads=G, positional="rope")
        D, H, dk, F, V = c.d_model, c.n_heads, c.d_k, c.d_ff, c.vocab_size
        expected = V * D + c.decoder_layers * layer_params(D, H, G, dk, F) + 2 * D
        assert Transformer(c).num_parameters()["total"] == expected
    with pytest.raises(ValueError, match="must divide n_heads"):
        gpt(n_kv_heads=3)
    with pytest.raises(ValueError, match="set encoder_layers=0"):
        ModelConfig(architecture="decoder-only")


@pytest.mark.parametrize("positional", POSITIONALS)
@pytest.mark.parametrize("window", [0, 3])
def test_decoder_only_is_causal(positional, window, device):
    model = Transformer(gpt(positional=positional, attention_window=window)).to(device).eval()
    tokens = torch.randint(4, 40, (2, 9), device=device)
    base = model(tokens)
    assert base.shape == (2, 9, 40)
    for t in range(9):
        changed = tokens.clone()
        changed[:, t] = (changed[:, t] + 1 - 4) % 36 + 4
        out = model(changed)
        torch.testing.assert_close(out[:, :t], base[:, :t], atol=1e-6, rtol=0)
        assert not torch.allclose(out[:, t:], base[:, t:], atol=1e-4)


def _cached_logits(model, tokens, chunks):
    """Logits of ``tokens`` fed through the cache in pieces of the given sizes."""
    cache = model.start_decoding(tokens, capacity=2)
    out, at = [], 0
    for size in chunks:
        out.append(model.decode(tokens[:, at : at + size], cache))
        at += size
    return torch.cat(out, dim=1), cache


@pytest.mark.parametrize("positional", POSITIONALS)
@pytest.mark.parametrize("kv_heads,window", [(4, 0), (2, 0), (1, 0), (2, 3), (1, 5)])
def test_cached_generation_equals_full_pass(positional, kv_heads, window, device):
    model = (
        Transformer(gpt(positional=positional, n_kv_heads=kv_heads, attention_window=window))
        .to(device)
        .eval()
    )
    tokens = torch.randint(4, 40, (3, 14), device=device)  # 14 positions: far beyond the windows
    full = model(tokens)
    # a prompt, steps, a chunk
    cached, cache = _cached_logits(model, tokens, [4] + [1] * 6 + [3, 1])
    torch.testing.assert_close(cached, full, atol=2e-5, rtol=1e-4)
    per_token = model.cache_bytes_per_token() // model.config.decoder_layers
    kept = window if window else 14
    # bounded by the window
    assert cache.nbytes() == model.config.decoder_layers * 3 * kept * per_token


@pytest.mark.parametrize("kv_heads,window", [(2, 0), (1, 4)])
def test_encoder_decoder_with_gqa_and_window_decodes_like_its_forward(kv_heads, window, device):
    config = ModelConfig.preset(
        "tiny",
        vocab_size=40,
        dropout=0.0,
        max_positions=64,
        n_kv_heads=kv_heads,
        attention_window=window,
        positional="alibi",
    )
    model = Transformer(config).to(device).eval()
    src, _ = random_batch(2, 9, 40, device=device)
    tgt = torch.randint(4, 40, (2, 11), device=device)
    full = model(src, tgt)
    cache = model.start_decoding(src, model.encode(src), capacity=2)
    steps = torch.cat([model.decode(tgt[:, :3], cache)] + [model.decode(tgt[:, t : t + 1], cache)
                                                             for t in range(3, 11)], dim=1)
    torch.testing.assert_close(steps, full, atol=2e-5, rtol=1e-4)


def test_gqa_equals_multi_head_attention_with_shared_key_value_weights(device):
    """n_kv_heads == n_heads is plain multi-head attention; G < H groups equal a multi-head model
    whose key/value projections repeat each shared head for its H / G query heads."""
    tokens = torch.randint(4, 40, (2, 10), device=device)
    plain = Transformer(gpt(positional="rope")).to(device).eval()
    same = Transformer(gpt(positional="rope", n_kv_heads=4)).to(device).eval()
    same.load_state_dict(plain.state_dict())
    torch.testing.assert_close(same(tokens), plain(tokens), atol=0, rtol=0)

    grouped = Transformer(gpt(positional="rope", n_kv_heads=2)).to(device).eval()
    c = grouped.config
    dk, H, G = c.d_k, c.n_heads, c.kv_heads
    state = {}
    for name, value in grouped.state_dict().items():
        if name.endswith("self_attn.qkv.weight") or name.endswith("self_attn.qkv.bias"):
            q, k, v = value.split([H * dk, G * dk, G * dk])
            k, v = (
                x.view(G, dk, *x.shape[1:])
                .repeat_interleave(H // G, 0)
                .reshape(H * dk, *x.shape[1:])
                for x in (k, v)
            )
            value = torch.cat([q, k, v])
        state[name] = value
    plain.load_state_dict(state)
    torch.testing.assert_close(plain(tokens), grouped(tokens), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(
        Transformer(gpt(positional="rope")).to(device).eval()(tokens), grouped(tokens)
    )


def test_window_sees_exactly_the_last_w_positions(device):
    """One layer of RoPE attention (relative positions): the windowed output at position t equals
    the unwindowed model's last output on the W tokens ending at t."""
    W = 4
    windowed = (
        Transformer(gpt(positional="rope", decoder_layers=1, attention_window=W)).to(device).eval()
    )
    plain = Transformer(gpt(positional="rope", decoder_layers=1)).to(device).eval()
    plain.load_state_dict(windowed.state_dict())
    tokens = torch.randint(4, 40, (2, 12), device=device)
    out = windowed(tokens)
    for t in range(12):
        alone = plain(tokens[:, max(0, t - W + 1) : t + 1])[:, -1]
        torch.testing.assert_close(out[:, t], alone, atol=2e-5, rtol=1e-4)
    assert not torch.allclose(out[:, -1], plain(tokens)[:, -1], atol=1e-4)  # the window matters


def test_encoder_window_is_symmetric(device):
    W = 3
    model = (
        Transformer(bert(positional="rope", encoder_layers=1, attention_window=W)).to(device).eval()
    )
    tokens = torch.randint(5, 40, (1, 10), device=device)
    base = model(tokens)
    changed = tokens.clone()
    changed[0, 5] = 4 if tokens[0, 5] != 4 else 6
    out = model(changed)
    moved = (out - base).abs().amax(-1)[0] > 1e-6  # positions whose output changed
    assert moved.nonzero().squeeze(1).tolist() == [3, 4, 5, 6, 7]  # |i - 5| < 3


def test_mqa_cache_is_h_times_smaller():
    base = ModelConfig.preset("base")
    sizes = {
        G: Transformer(ModelConfig.preset("base", n_kv_heads=G)).cache_bytes_per_token()
        for G in (8, 2, 1)
    }
    assert sizes[8] == base.decoder_layers * 2 * 8 * 64 * 4 == 24_576
    assert sizes[2] * 4 == sizes[8] and sizes[1] * 8 == sizes[8]


@pytest.mark.parametrize("kv_heads", [None, 1])
def test_encoder_only_is_bidirectional_and_ignores_padding(kv_heads, device):
    model = Transformer(bert(n_kv_heads=kv_heads)).to(device).eval()
    tokens = torch.randint(5, 40, (2, 8), device=device)
    base = model(tokens)
    assert base.shape == (2, 8, 40)
    changed = tokens.clone()
    changed[:, -1] = (changed[:, -1] - 5 + 1) % 35 + 5
    # the first sees the last
    assert not torch.allclose(model(changed)[:, 0], base[:, 0], atol=1e-5)
    padded = torch.cat([tokens[:1, :5], torch.zeros(1, 3, dtype=torch.long, device=device)], dim=1)
    torch.testing.assert_close(model(padded)[:, :5], model(tokens[:1, :5]), atol=1e-5, rtol=1e-5)
    select = torch.tensor([1, 9], device=device)
    torch.testing.assert_close(
        model(tokens, select=select), base.flatten(0, 1)[[1, 9]], atol=1e-5, rtol=1e-5
    )
    with pytest.raises(ValueError, match="does not decode"):
        model.start_decoding(tokens)
