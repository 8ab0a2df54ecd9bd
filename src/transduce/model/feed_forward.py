"""§3.3 Position-wise feed-forward networks, and the norms that wrap every sub-layer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig

def _gelu_tanh(x: Tensor) -> Tensor:
    return F.gelu(x, approximate="tanh")  # GPT-2's "gelu_new"


_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": _gelu_tanh, "silu": F.silu}


class FeedForward(nn.Module):
    """FFN(x) = act(x W1 + b1) W2 + b2 (paper: act = ReLU, d_ff = 4 d_model).

    ``activation="swiglu"`` (Shazeer 2020) is W2(silu(x W1) * x W3): a third matrix, same d_ff.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(config.d_model, config.d_ff)
        self.w2 = nn.Linear(config.d_ff, config.d_model)
        self.gated = config.activation == "swiglu"
        self.w3 = nn.Linear(config.d_model, config.d_ff) if self.gated else None
        self.act = F.silu if self.gated else _ACTIVATIONS[config.activation]
        self.dropout = nn.Dropout(config.activation_dropout)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, T, D)`` -> ``(B, T, D)``."""
        h = self.act(self.w1(x))  # (B, T, F)
        if self.w3 is not None:
            h = h * self.w3(x)
        return self.w2(self.dropout(h))


class RMSNorm(nn.Module):
    """Root-mean-square norm (Zhang & Sennrich 2019): x / rms(x) * g, no centring, no bias.

    Written here rather than taken from ``torch.nn.RMSNorm`` so that torch 2.3 still works.
    """

    def __init__(self, d_model: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        rms = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (x.float() * rms).to(x.dtype) * self.weight


def make_norm(config: ModelConfig) -> nn.Module:
    if config.norm_type == "rmsnorm":
        return RMSNorm(config.d_model, config.norm_eps)
    return nn.LayerNorm(config.d_model, eps=config.norm_eps)
