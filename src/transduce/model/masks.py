"""Masks, built in one place with one convention: boolean, True = may attend (as SDPA).

Shapes broadcast against attention scores ``(B, H, T, S)``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """Keys that are real tokens. ``tokens (B, S)`` -> ``(B, 1, 1, S)``."""
    return (tokens != pad_id)[:, None, None, :]  # (B, 1, 1, S)


def local_mask(
    queries: int,
    keys: int,
    window: int,
    causal: bool,
    offset: int = 0,
    key_offset: int = 0,
    device: torch.device | None = None,
) -> Tensor:
    """Sliding-window (and/or causal) visibility: queries at absolute positions ``offset ..``, keys
    at ``key_offset ..`` (a windowed cache has dropped the keys before ``key_offset``).

    Causal: key position j is visible from query position i when i - window < j <= i (window 0: no
    lower bound; the paper's decoder mask). Not causal (the encoder): when |i - j| < window.
    Example: with 3 cached tokens (offset 3) and 2 new causal queries, query 0 sees keys 0..3 and
    query 1 sees keys 0..4 of the 5 keys. Returns ``(1, 1, T, S)``.
    """
    q = torch.arange(queries, device=device)[:, None] + offset  # (T, 1)
    k = torch.arange(keys, device=device)[None, :] + key_offset  # (1, S)
    if causal:
        visible = k <= q
        if window:
            visible &= k > q - window
    else:
        visible = (
            (q - k).abs() < window
            if window
            else torch.ones(queries, keys, dtype=torch.bool, device=device)
        )
    return visible[None, None]  # (1, 1, T, S)
