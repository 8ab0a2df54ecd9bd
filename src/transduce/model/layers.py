"""§3.1 Encoder and decoder stacks: the layers and the residual wrapping of each sub-layer."""

from __future__ import annotations

from typing import Callable, Optional

from torch import Tensor, nn

from ..config import ModelConfig
from .attention import CrossAttention, SelfAttention
from .cache import LayerCache
from .feed_forward import make_ffn, make_norm
from .positions import Rotary

Weights = Optional[Tensor]


class Residual(nn.Module):
    """Wraps a sub-layer: ``LayerNorm(x + Dropout(f(x)))`` (post, paper) or ``x +
    Dropout(f(LN(x)))`` (pre)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = make_norm(config)
        self.dropout = nn.Dropout(config.dropout)
        self.pre = config.norm_position == "pre"

    def forward(
        self, x: Tensor, sublayer: Callable[[Tensor], tuple[Tensor, Weights]]
    ) -> tuple[Tensor, Weights]:
        if self.pre:
            out, weights = sublayer(self.norm(x))
            return x + self.dropout(out), weights
        out, weights = sublayer(x)
        return self.norm(x + self.dropout(out)), weights


class EncoderLayer(nn.Module):
    """§3.1 Encoder layer: self-attention, then the feed-forward network."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_attn = SelfAttention(config)
        self.ffn = make_ffn(config)
        self.self_attn_block = Residual(config)  # the residual connection and norm around self_attn
        self.ffn_block = Residual(config)

    def forward(
        self,
        x: Tensor,
        mask: Tensor,
        rotary: Optional[Rotary] = None,
        bias: Optional[Tensor] = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Weights]:
        """``x (B, S, D)``, ``mask (B, 1, 1, S)`` -> ``(B, S, D)`` and weights ``(B, H, S, S)``."""
        x, weights = self.self_attn_block(
            x,
            lambda h: self.self_attn(h, mask, rotary=rotary, bias=bias, need_weights=need_weights),
        )
        x, _ = self.ffn_block(x, lambda h: (self.ffn(h), None))
        return x, weights


class DecoderLayer(nn.Module):
    """§3.1 Decoder layer: masked self-attention, encoder-decoder attention, feed-forward.

    ``cross=False`` is GPT's layer: the decoder-only model has no encoder, so no encoder-decoder
    attention (``cross_attn`` and its ``cross_attn_block`` are None); the rest is the same layer.
    """

    def __init__(self, config: ModelConfig, cross: bool = True) -> None:
        super().__init__()
        self.self_attn = SelfAttention(config)
        self.cross_attn = CrossAttention(config) if cross else None
        self.ffn = make_ffn(config)
        self.self_attn_block = Residual(config)  # the residual connection and norm around self_attn
        self.cross_attn_block = Residual(config) if cross else None
        self.ffn_block = Residual(config)

    def forward(
        self,
        x: Tensor,
        cross_k: Optional[Tensor],
        cross_v: Optional[Tensor],
        memory_mask: Optional[Tensor],
        *,
        self_mask: Optional[Tensor] = None,
        causal: bool = False,
        cache: Optional[LayerCache] = None,
        rotary: Optional[Rotary] = None,
        bias: Optional[Tensor] = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Weights, Weights]:
        """``x (N, T, D)`` -> ``(N, T, D)``, self weights ``(N, H, T, T')``, cross weights ``(N, H,
        T, S)``."""
        x, self_w = self.self_attn_block(
            x,
            lambda h: self.self_attn(
                h,
                self_mask,
                causal=causal,
                cache=cache,
                rotary=rotary,
                bias=bias,
                need_weights=need_weights,
            ),
        )
        cross_w = None
        if self.cross_attn is not None:
            x, cross_w = self.cross_attn_block(
                x, lambda h: self.cross_attn(h, cross_k, cross_v, memory_mask, need_weights)
            )
        x, _ = self.ffn_block(x, lambda h: (self.ffn(h), None))
        return x, self_w, cross_w
