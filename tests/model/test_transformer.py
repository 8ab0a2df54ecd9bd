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


