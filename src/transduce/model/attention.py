"""§3.2 Attention: scaled dot-product attention and multi-head attention.

``attend`` has a fast path (``torch.nn.functional.scaled_dot_product_attention``) and an
explainable path that computes the softmax explicitly and returns the weights of every head;
a test ties the two together. Masks are boolean, True = may attend; a query whose keys are all
masked gets a zero output on both paths, never NaN.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig
from .cache import LayerCache
from .positions import Rotary


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Optional[Tensor] = None,
    bias: Optional[Tensor] = None,
    dropout: float = 0.0,
    need_weights: bool = False,
    causal: bool = False,
    scale: Optional[float] = None,
) -> tuple[Tensor, Optional[Tensor]]:
    """softmax(Q K^T / sqrt(d_k) + M) V, per head (``scale`` replaces 1/sqrt(d_k) when given).

    Args:
        q: ``(N, H, T, Dh)``. k, v: ``(B, H, S, Dh)`` where N is B or a multiple of it: with N = B*K
            (K beams per sentence) the K queries of a sentence share its keys, and are folded into
            the query length instead of copying the keys K times.
        mask: boolean, broadcastable to ``(B, H, T, S)``; True = may attend.
        bias: additive float bias broadcastable to ``(B, H, T, S)`` (ALiBi).
        dropout: on the attention weights.
        need_weights: compute explicitly and also return the weights ``(N, H, T, S)``.
        causal: key j is hidden from query i when j > i (T == S, no cache).

    Returns:
        ``(N, H, T, Dh)`` and the weights or None.
    """
    N, H, T, Dh = q.shape
    B = k.size(0)
    folded = N != B
    # (B*K, H, T, Dh) -> (B, H, K*T, Dh); valid when the mask does not depend on the query
    if folded:
        q = q.view(B, N // B, H, T, Dh).transpose(1, 2).reshape(B, H, -1, Dh)
    if not need_weights:
        attn_mask = mask
        if causal and (mask is not None or bias is not None):
            attn_mask = _and(mask, torch.ones(T, T, dtype=torch.bool, device=q.device).tril())
            causal = False
        if bias is not None:
            attn_mask = _as_additive(bias.to(q.dtype), attn_mask)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=dropout, is_causal=causal, scale=scale
        )
        weights = None
    else:
        if causal:
            mask = _and(mask, torch.ones(T, T, dtype=torch.bool, device=q.device).tril())
        scores = q @ k.transpose(-2, -1) * (Dh**-0.5 if scale is None else scale)  # (B, H, T, S)
        if bias is not None:
            scores = scores + bias
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        weights = scores.softmax(dim=-1)  # (B, H, T, S)
        if mask is not None:  # a fully masked row would be uniform; make it zero like SDPA
            weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
        out = F.dropout(weights, dropout, training=dropout > 0) @ v  # (B, H, T, Dh)
    if folded:
        out = out.view(B, H, N // B, T, Dh).transpose(1, 2).reshape(N, H, T, Dh)
        if weights is not None:
            weights = weights.view(B, H, N // B, T, -1).transpose(1, 2).reshape(N, H, T, -1)
    return out, weights


def _and(mask: Optional[Tensor], other: Tensor) -> Tensor:
    return other if mask is None else mask & other


def _as_additive(bias: Tensor, mask: Optional[Tensor]) -> Tensor:
    if mask is None:
        return bias
    return bias.masked_fill(~mask, torch.finfo(bias.dtype).min)


def split_heads(x: Tensor, heads: int) -> Tensor:
    """``(B, T, H*Dh)`` -> ``(B, H, T, Dh)``."""
    B, T, D = x.shape
    return x.view(B, T, heads, D // heads).transpose(1, 2)  # (B, H, T, Dh)


def share_heads(x: Tensor, heads: int) -> Tensor:
    """Grouped-query attention: ``(B, G, S, Dh)`` key/value heads -> ``(B, H, S, Dh)``, query head h
    using key/value head h // (H / G) (as Hugging Face's ``repeat_kv``); a no-op when G == H."""
    groups = x.size(1)
    return x if groups == heads else x.repeat_interleave(heads // groups, dim=1)


def merge_heads(x: Tensor) -> Tensor:
    """``(B, H, T, Dh)`` -> ``(B, T, H*Dh)``, i.e. Concat(head_1, ..., head_h)."""
    B, H, T, Dh = x.shape
    return x.transpose(1, 2).reshape(B, T, H * Dh)  # (B, T, D)


class SelfAttention(nn.Module):
    """§3.2.2 Multi-Head Attention over the sequence itself, with one fused QKV projection.

    With ``n_kv_heads`` < ``n_heads`` (grouped-query attention) the projection makes h query heads
    and only n_kv_heads key and value heads; the cache keeps those, and each is shared by
    h / n_kv_heads query heads at the moment of attending.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        D, inner = config.d_model, config.n_heads * config.d_k
        self.heads, self.kv_heads = config.n_heads, config.kv_heads
        self.sizes = (inner, config.kv_heads * config.d_k, config.kv_heads * config.d_k)
        self.dropout = config.attention_dropout
        self.scale = attention_scale(config)
        self.qkv = nn.Linear(D, sum(self.sizes), bias=config.linear_bias)
        self.out = nn.Linear(inner, D, bias=config.linear_bias)

    def forward(
        self,
        x: Tensor,
        mask: Optional[Tensor] = None,
        *,
        causal: bool = False,
        cache: Optional[LayerCache] = None,
        rotary: Optional[Rotary] = None,
        bias: Optional[Tensor] = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Optional[Tensor]]:
        """``x (B, T, D)`` -> ``(B, T, D)`` and optional weights ``(B, H, T, S)``.

        With a cache, x holds the new tokens only; their keys/values are appended and the
        queries see everything cached so far (``mask`` must then already be offset-aware).
        """
        offset = cache.length if cache is not None else 0
        q, k, v = self.qkv(x).split(self.sizes, dim=-1)
        q = split_heads(q, self.heads)  # (B, H, T, Dh)
        k, v = split_heads(k, self.kv_heads), split_heads(v, self.kv_heads)  # (B, G, T, Dh)
        if rotary is not None:
            q, k = rotary(q, offset), rotary(k, offset)
        if cache is not None:
            k, v = cache.append(k, v)  # (B, G, kept, Dh): every position, or the window's
        k, v = share_heads(k, self.heads), share_heads(v, self.heads)  # (B, H, S, Dh)
        p = self.dropout if self.training else 0.0
        # (B, H, T, Dh)
        out, weights = attend(q, k, v, mask, bias, p, need_weights, causal, self.scale)
        return self.out(merge_heads(out)), weights


class CrossAttention(nn.Module):
    """§3.2.3 Encoder-decoder attention: queries from the decoder, keys/values from the encoder."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        D, inner = config.d_model, config.n_heads * config.d_k
        self.heads, self.kv_heads = config.n_heads, config.kv_heads
        self.dropout = config.attention_dropout
        self.scale = attention_scale(config)
        self.q = nn.Linear(D, inner, bias=config.linear_bias)
        self.kv = nn.Linear(D, 2 * config.kv_heads * config.d_k, bias=config.linear_bias)
        self.out = nn.Linear(inner, D, bias=config.linear_bias)

    def project_memory(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Encoder output ``(B, S, D)`` -> keys and values ``(B, G, S, Dh)`` each (once per
        sentence; G = n_kv_heads)."""
        k, v = self.kv(memory).chunk(2, dim=-1)
        return split_heads(k, self.kv_heads), split_heads(v, self.kv_heads)

    def forward(self, x: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor],
                need_weights: bool = False) -> tuple[Tensor, Optional[Tensor]]:
        """``x (N, T, D)`` against ``k, v (B, G, S, Dh)`` (N = B or B * beams) -> ``(N, T, D)``."""
        q = split_heads(self.q(x), self.heads)  # (N, H, T, Dh)
        k, v = share_heads(k, self.heads), share_heads(v, self.heads)  # (B, H, S, Dh)
        p = self.dropout if self.training else 0.0
        out, weights = attend(q, k, v, mask, None, p, need_weights, scale=self.scale)
        return self.out(merge_heads(out)), weights


def attention_scale(config: ModelConfig) -> Optional[float]:
    """The factor on Q K^T: None for the paper's 1/sqrt(d_k) (SDPA's default), 1.0 for "none"."""
    return None if config.attention_scale == "sqrt_dk" else 1.0
