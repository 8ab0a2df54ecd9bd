"""Several consecutive positions of one hypothesis in one pass of the fast step: what a speculative
search's check of ``k`` proposed tokens costs (each product reads its weight once for ``k`` rows,
where ``k`` steps read it ``k`` times).

``read_positions(fast, tokens, cache)`` is ``FastDecoder.step`` called on each of ``tokens`` in
turn, up to float rounding: the same weights and layouts (``TunedLinear`` for ``k`` rows), the keys
and values written at slots ``t .. t + k - 1`` of the same cache, each query attending over the
slots up to its own. Rolling the cache back is setting ``cache.length``: a step reads slots below
its position only, so what lies past the length is never seen.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .cache import StepCache
from .decoder import FastDecoder
from .int8 import wide_attention


def read_positions(fast: FastDecoder, tokens: Tensor, cache: StepCache) -> Tensor:
    """``tokens (k,)`` at positions ``cache.length ..`` of a one-hypothesis cache -> the next-token
    logits after each ``(k, V)``; the cache advances by ``k``."""
    if cache.kv.size(2) != 1 or cache.starts is not None:
        raise ValueError("several positions are read for one hypothesis, not a batch or a running "
                         "search")
    t, k = cache.length, tokens.numel()
    if t + k > cache.kv.size(4) or t + k > fast.config.max_positions:
        raise ValueError(f"positions {t}-{t + k - 1} do not fit: the decoding cache holds "
                         f"{cache.kv.size(4)} positions, the model {fast.config.max_positions}")
    with fast._precision():
        logits = _forward(fast, tokens, t, cache)
    cache.length = t + k
    return logits


def _forward(fast: FastDecoder, tokens: Tensor, t: int, cache: StepCache) -> Tensor:
    k, device = tokens.numel(), tokens.device
    positions = torch.arange(t, t + k, device=device)
    x = fast._embed(tokens, t, positions)  # (k, D)
    mask = _mask(fast, t, k, device, x.dtype)  # (1 or H, k, t + k)
    slots, all_keys, all_values = cache.views
    for i, layer in enumerate(fast.layers):
        keys, values = all_keys[i].narrow(2, 0, t + k), all_values[i].narrow(1, 0, t + k)
        x = fast._block(layer, 0, x, lambda h: _self_attention(
            fast, layer, h, positions, slots[i], keys, values, mask))
        x = fast._block(layer, 1, x, lambda h: _cross_attention(
            fast, layer, h, cache.cross_k[i], cache.cross_v[i], cache.cross_bias))
        x = fast._block(layer, 2, x, lambda h: fast._feed_forward(layer, h))
    return fast._logits(x)


def _mask(fast: FastDecoder, t: int, k: int, device, dtype) -> Tensor:
    """The additive mask of the scores of queries ``t .. t + k - 1`` over slots ``0 .. t + k - 1``:
    -inf past each query's own slot, plus ALiBi's or the relative buckets' bias by distance."""
    distance = torch.arange(t, t + k, device=device)[:, None] - torch.arange(t + k, device=device)
    mask = torch.zeros(k, t + k, dtype=dtype, device=device).masked_fill(distance < 0,
                                                                         float("-inf"))[None]
    if fast.distance_bias is not None:  # (H, P): by distance, clamped as the step clamps it
        seen = distance.clamp(0, fast.distance_bias.size(1) - 1)
        mask = mask + fast.distance_bias[:, seen].to(dtype)
    return mask


def _self_attention(fast: FastDecoder, layer, h: Tensor, positions: Tensor, slot: Tensor,
                    keys: Tensor, values: Tensor, mask: Tensor) -> Tensor:
    """The ``k`` queries' keys and values written at their slots, then each attends over the slots
    up to its own: keys ``(H, Dh, t + k)``, values ``(H, t + k, Dh)``."""
    k, H, Dh = h.size(0), fast.heads, fast.head_dim
    qkv = fast._dense(layer.qkv, h).view(k, H, 3, Dh)  # q is pre-scaled by 1/sqrt(d_k)
    q, key, value = qkv.unbind(2)  # (k, H, Dh) each
    if fast.rotary is not None:  # (rows ordered position-major: one angle per row's heads)
        q = fast._rotate(q.reshape(k * H, 1, Dh), positions).view(k, H, Dh)
        key = fast._rotate(key.reshape(k * H, 1, Dh), positions).view(k, H, Dh)
    first = int(positions[0])
    slot.narrow(3, first, k).copy_(torch.stack([key, value]).permute(0, 2, 1, 3)[:, None])
    attended = _attend(fast, mask, q.transpose(0, 1), keys, values)  # (H, k, Dh)
    return fast._dense(layer.self_out, attended.transpose(0, 1).reshape(k, H * Dh))


def _cross_attention(fast: FastDecoder, layer, h: Tensor, cross_k: Tensor, cross_v: Tensor,
                     cross_bias: Tensor) -> Tensor:
    """Encoder-decoder attention of the ``k`` queries: keys ``(H, Dh, S)``, values ``(H, S, Dh)``,
    the source's padding mask ``(H, 1, S)``."""
    k, H, Dh = h.size(0), fast.heads, fast.head_dim
    q = fast._dense(layer.cross_q, h).view(k, H, Dh).transpose(0, 1)  # (H, k, Dh)
    attended = _attend(fast, cross_bias, q, cross_k, cross_v)  # (H, k, Dh)
    return fast._dense(layer.cross_out, attended.transpose(0, 1).reshape(k, H * Dh))


def _attend(fast: FastDecoder, bias: Tensor, q: Tensor, keys: Tensor, values: Tensor) -> Tensor:
    """As the step attends: in float64 where its precision does (int8)."""
    if fast.wide:
        return wide_attention(bias, q, keys, values)
    return torch.bmm(torch.baddbmm(bias, q, keys).softmax(-1), values)


def roll_back(cache: StepCache, length: int) -> None:
    """Forget the positions from ``length`` on (the next read writes at ``length``)."""
    cache.length = min(cache.length, length)

