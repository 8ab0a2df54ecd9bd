"""The encoder's pass for search: ``Transformer.encode``'s arithmetic with the decode step's
products.

A search encodes its sentences once, then steps the decoder; at one sentence the model's own
``encode`` costs about as much as one or two decode steps, most of it in module calls around small
products (``docs/inference.md``). ``FastEncoder`` is a snapshot of the encoder, like ``FastDecoder``
of the decoder: the products are ``TunedLinear`` (each in the operand layout measured fastest for
its number of rows), the norms called directly, attention computed explicitly for the whole batch of
heads (one score product with the padding as an additive bias, a softmax, one product with the
values), and no dropout.

It serves eager fp32 and int8 (an encoder whose ``nn.Linear`` layers ``quantize_encoder`` replaced
keeps its ``Int8Linear`` layers; with ``precision="int8"`` the snapshot quantizes the others the
same way). Under autocast the model's own ``encode`` runs instead, so that bf16 and fp16 keep their
autocast semantics. The outputs equal ``Transformer.encode``'s up to float rounding
(``tests/inference/test_encoder.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .int8 import Int8Linear, wide_attention
from .norm import norm_function
from .snapshots import snapshot
from .support import require_supported, unsupported
from .tuned_linear import TunedLinear


class _EncoderLayer:
    """One encoder layer's weights, as the pass uses them."""

    def __init__(self, layer, int8: bool) -> None:
        def product(linear):  # an Int8Linear stays as it is (quantize_encoder made it)
            if not isinstance(linear, nn.Linear):
                return linear
            return (
                Int8Linear(linear.weight, linear.bias)
                if int8
                else TunedLinear(linear.weight, linear.bias)
            )

        attention, ffn = layer.self_attn, layer.ffn
        self.qkv, self.out = product(attention.qkv), product(attention.out)
        self.w1, self.w2 = product(ffn.w1), product(ffn.w2)
        self.w3 = product(ffn.w3) if ffn.w3 is not None else None
        self.act = ffn.act
        self.norms = [
            norm_function(layer.self_attn_block.norm),
            norm_function(layer.ffn_block.norm),
        ]


class FastEncoder:
    """``FastEncoder(model)(src)`` gives ``model.encode(src)`` for ``src (B, S)``: ``(B, S, D)``.
    Search calls ``encode(model, src)``, which keeps one per model and rebuilds it when the weights
    change (``snapshot``)."""

    def __init__(self, model, precision: str = "fp32") -> None:
        require_supported(model, "the fast encoder pass", "Transformer.encode")
        c = model.config
        self.heads, self.head_dim = c.n_heads, c.d_k
        self.factor = c.d_k**-0.5 if c.attention_scale == "sqrt_dk" else 1.0
        self.pre = c.norm_position == "pre"
        self.wide = precision == "int8"  # attention in float64 (``int8.wide_attention``)
        self.embed, self.rotary = model.src_embed, model.rotary
        self.position_bias = model.position_bias  # ALiBi's or the relative buckets', or None
        with torch.no_grad():
            self.layers = [_EncoderLayer(layer, precision == "int8") for layer in model.encoder]
        self.final_norm = (
            norm_function(model.encoder_norm) if model.encoder_norm is not None else None
        )

    @torch.no_grad()
    def __call__(self, src: Tensor) -> Tensor:
        H, Dh = self.heads, self.head_dim
        x = self.embed(src)  # (B, S, D): the front end's (token ids, or a recording's frames)
        B, S, D = x.shape
        x = x.reshape(B * S, D)
        # the additive mask: -inf at padded keys (every source has its eos, no row is all padding)
        bias = torch.zeros(B, 1, 1, S, dtype=x.dtype, device=x.device).masked_fill_(
            ~self.embed.real(src)[:, None, None, :], float("-inf"))
        positions = self.position_bias("encoder", S, S)
        if positions is not None:
            bias = bias + positions.to(x.dtype)  # (B, H, S, S)
        bias = bias.expand(B, H, -1, S).reshape(B * H, -1, S)  # (B*H, 1 or S, S)
        for layer in self.layers:
            h = layer.norms[0](x) if self.pre else x
            # (B, H, S, Dh) each
            q, k, v = layer.qkv(h).view(B, S, 3, H, Dh).permute(2, 0, 3, 1, 4).unbind(0)
            if self.rotary is not None:
                q, k = self.rotary(q), self.rotary(k)
            q, k, v = q.reshape(B * H, S, Dh), k.reshape(B * H, S, Dh), v.reshape(B * H, S, Dh)
            if self.wide:
                a = wide_attention(bias, q, k.transpose(1, 2), v, self.factor)
            else:
                scores = torch.baddbmm(bias, q, k.transpose(1, 2), alpha=self.factor)  # (B*H, S, S)
                a = torch.bmm(scores.softmax(-1), v)  # (B*H, S, Dh)
            out = layer.out(a.view(B, H, S, Dh).transpose(1, 2).reshape(B * S, H * Dh))
            x = x + out if self.pre else layer.norms[0](x + out)
            h = layer.norms[1](x) if self.pre else x
            f = layer.act(layer.w1(h))
            if layer.w3 is not None:
                f = f * layer.w3(h)
            out = layer.w2(f)
            x = x + out if self.pre else layer.norms[1](x + out)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x.view(B, S, D)


def encode(model, src: Tensor, precision: str = "fp32") -> Tensor:
    """``model.encode(src)`` through the model's ``FastEncoder`` where one serves: a model the fast
    decode step supports (``unsupported``), outside autocast (where the model's own pass keeps
    autocast's choice of precision per operation)."""
    if unsupported(model.config) is None and not _autocast(src.device.type):
        return snapshot(model, ("encoder", precision), lambda: FastEncoder(model, precision))(src)
    return model.encode(src)


def _autocast(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` (assumed on where this PyTorch cannot say)."""
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # PyTorch before 2.4: no device argument
        return True  # (not known for this device: the model's own pass, as under autocast)
