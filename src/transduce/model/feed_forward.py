"""§3.3 Position-wise feed-forward networks (and their mixture of experts, an option), and the
norms that wrap every sub-layer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig


def _gelu_tanh(x: Tensor) -> Tensor:
    return F.gelu(x, approximate="tanh")  # GPT-2's "gelu_new"


_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": _gelu_tanh, "silu": F.silu}
_GATES = {"swiglu": F.silu, "geglu": _gelu_tanh}  # the activation on the gate's branch


class FeedForward(nn.Module):
    """FFN(x) = act(x W1 + b1) W2 + b2 (paper: act = ReLU, d_ff = 4 d_model).

    ``activation="swiglu"`` (Shazeer 2020) is W2(silu(x W1) * x W3): a third matrix, same d_ff;
    ``"geglu"`` the same with tanh-GELU (T5 1.1's "gated-gelu").
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        bias = config.linear_bias
        self.w1 = nn.Linear(config.d_model, config.d_ff, bias=bias)
        self.w2 = nn.Linear(config.d_ff, config.d_model, bias=bias)
        self.gated = config.activation in _GATES
        self.w3 = nn.Linear(config.d_model, config.d_ff, bias=bias) if self.gated else None
        self.act = _GATES.get(config.activation) or _ACTIVATIONS[config.activation]
        self.dropout = nn.Dropout(config.activation_dropout)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, T, D)`` -> ``(B, T, D)``."""
        h = self.act(self.w1(x))  # (B, T, F)
        if self.w3 is not None:
            h = h * self.w3(x)
        return self.w2(self.dropout(h))


class MixtureOfExperts(nn.Module):
    """``ffn="moe"``: a router sends each position to ``moe_top_k`` of ``moe_experts`` feed-forward
    networks and sums their outputs, weighted by the router's probabilities (renormalized over the
    chosen ones for k > 1, as Mixtral; the raw probability for k = 1, as Switch, so that the router
    still gets a gradient). Dropless: each expert computes exactly the positions routed to it.

    ``aux_loss`` holds the last forward pass's load-balancing loss (Switch Transformer's
    E * sum_e f_e * P_e: 1 when routing is uniform, E when one expert takes everything), which
    training adds to the loss with weight ``moe_aux_weight``.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.router = nn.Linear(config.d_model, config.moe_experts, bias=False)
        self.experts = nn.ModuleList(FeedForward(config) for _ in range(config.moe_experts))
        self.top_k = config.moe_top_k
        self.aux_loss: Tensor | None = None

    def route(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``x (N, D)`` -> the router's probabilities ``(N, E)``, and per position its k experts
        ``(N, k)`` with their weights ``(N, k)``."""
        probs = torch.softmax(self.router(x).float(), dim=-1)  # (N, E)
        weights, chosen = probs.topk(self.top_k, dim=-1)  # (N, k), the likeliest first
        if self.top_k > 1:
            weights = weights / weights.sum(-1, keepdim=True)
        return probs, chosen, weights

    def forward(self, x: Tensor) -> Tensor:
        """``(B, T, D)`` -> ``(B, T, D)``."""
        flat = x.reshape(-1, x.size(-1))  # (N, D)
        probs, chosen, weights = self.route(flat)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows, slot = (chosen == e).nonzero(as_tuple=True)  # the positions routed to expert e
            if rows.numel():
                contribution = expert(flat.index_select(0, rows)) * weights[rows, slot, None].to(
                    flat.dtype
                )
                out.index_add_(0, rows, contribution.to(out.dtype))
        share = torch.zeros_like(probs).scatter_(1, chosen, 1.0).mean(0) / self.top_k  # f_e
        self.aux_loss = len(self.experts) * (share * probs.mean(0)).sum()
        return out.view_as(x)


def make_ffn(config: ModelConfig) -> nn.Module:
    return MixtureOfExperts(config) if config.ffn == "moe" else FeedForward(config)


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
