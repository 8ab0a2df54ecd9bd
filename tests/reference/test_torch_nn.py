"""Reference equivalence: the paper's configuration equals torch.nn's Transformer layers."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transduce import Transformer

from ..conftest import random_batch, tiny_config


def _copy_attention(ours, theirs: nn.MultiheadAttention, fused: bool) -> None:
    D = theirs.embed_dim
    if fused:
        ours.qkv.weight.copy_(theirs.in_proj_weight)
        ours.qkv.bias.copy_(theirs.in_proj_bias)
    else:
        ours.q.weight.copy_(theirs.in_proj_weight[:D])
        ours.q.bias.copy_(theirs.in_proj_bias[:D])
        ours.kv.weight.copy_(theirs.in_proj_weight[D:])
        ours.kv.bias.copy_(theirs.in_proj_bias[D:])
    ours.out.weight.copy_(theirs.out_proj.weight)
    ours.out.bias.copy_(theirs.out_proj.bias)


def _copy_ffn_and_norms(ours, theirs, n_norms: int) -> None:
    ours.ffn.w1.load_state_dict(theirs.linear1.state_dict())
    ours.ffn.w2.load_state_dict(theirs.linear2.state_dict())
    blocks = (
        ["self_attn_block", "ffn_block"]
        if n_norms == 2
        else ["self_attn_block", "cross_attn_block", "ffn_block"]
    )
    for i, block in enumerate(blocks, start=1):  # torch's norm1, norm2 (, norm3) in the same order
        getattr(ours, block).norm.load_state_dict(getattr(theirs, f"norm{i}").state_dict())


@torch.no_grad()
@pytest.mark.parametrize("activation, "
                         "norm_position", [("relu", "post"), ("gelu", "post"), ("relu", "pre"),
                                                       ("gelu", "pre")])
def test_logits_equal_torch_nn_transformer_layers(activation, norm_position):
    cfg = tiny_config(encoder_layers=2, decoder_layers=3, vocab_size=50, activation=activation,
                      norm_position=norm_position)
    D, H, F = cfg.d_model, cfg.n_heads, cfg.d_ff
    pre = norm_position == "pre"
    layer = dict(dropout=0.0, batch_first=True, activation=activation, norm_first=pre)
    # pre-LN stacks end with a norm of their own (ours: encoder_norm / decoder_norm)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, F, **layer), cfg.encoder_layers,
                                norm=nn.LayerNorm(D) if pre else None, enable_nested_tensor=False)
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(D, H, F, **layer), cfg.decoder_layers,
                                norm=nn.LayerNorm(D) if pre else None)
    for p in list(enc.parameters()) + list(dec.parameters()):  # make biases and norms non-trivial
        p.add_(torch.randn_like(p) * 0.1)
    model = Transformer(cfg).eval()
    if pre:
        model.encoder_norm.load_state_dict(enc.norm.state_dict())
        model.decoder_norm.load_state_dict(dec.norm.state_dict())
    for ours, theirs in zip(model.encoder, enc.layers):
        _copy_attention(ours.self_attn, theirs.self_attn, fused=True)
        _copy_ffn_and_norms(ours, theirs, 2)
    for ours, theirs in zip(model.decoder, dec.layers):
        _copy_attention(ours.self_attn, theirs.self_attn, fused=True)
        _copy_attention(ours.cross_attn, theirs.multihead_attn, fused=False)
        _copy_ffn_and_norms(ours, theirs, 3)

    src, src_len = random_batch(4, 9, 50)
    tgt, tgt_len = random_batch(4, 7, 50, generator=torch.Generator().manual_seed(3))
    src_pad, tgt_pad = src == 0, tgt == 0
    memory = enc(model.src_embed(src), src_key_padding_mask=src_pad)
    hidden = dec(
        model.tgt_embed(tgt),
        memory,
        tgt_mask=nn.Transformer.generate_square_subsequent_mask(7),
        tgt_is_causal=True,
        memory_key_padding_mask=src_pad,
        tgt_key_padding_mask=tgt_pad,
    )
    reference = model.output(hidden)
    ours = model(src, tgt)
    real = ~tgt_pad
    torch.testing.assert_close(ours[real], reference[real], atol=1e-5, rtol=0)


def test_rmsnorm_equals_torch_rmsnorm():
    from transduce.model.feed_forward import RMSNorm

    x = torch.randn(3, 5, 16) * 3 + 1
    ours, theirs = RMSNorm(16, 1e-6), nn.RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(16))
        theirs.weight.copy_(ours.weight)
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("activation", ["relu", "gelu", "silu", "swiglu"])
def test_feed_forward_equals_its_formula(activation):
    from transduce.model.feed_forward import FeedForward

    ffn = FeedForward(tiny_config(activation=activation)).eval()
    x = torch.randn(2, 4, 64)
    h = ffn.w1(x)
    reference = {
        "relu": F.relu(h),
        "gelu": F.gelu(h),
        "silu": h * torch.sigmoid(h),
        "swiglu": h * torch.sigmoid(h) * (ffn.w3(x) if ffn.w3 is not None else 0),
    }[activation]
    torch.testing.assert_close(ffn(x), ffn.w2(reference), atol=1e-6, rtol=1e-6)
