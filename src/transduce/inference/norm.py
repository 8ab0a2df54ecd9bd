"""A model's norm as a plain function for the fast passes."""

from __future__ import annotations

import torch
from torch import nn

from ..model.feed_forward import RMSNorm


def norm_function(module: nn.Module):
    """The norm as a function: ``F.layer_norm`` directly (skips the module call), else the
    module."""
    if isinstance(module, nn.LayerNorm):
        shape, weight, bias, eps = (
            module.normalized_shape,
            module.weight.detach(),
            module.bias,
            module.eps,
        )
        bias = None if bias is None else bias.detach()
        # (F.layer_norm's checks skipped)
        return lambda x: torch.layer_norm(x, shape, weight, bias, eps)
    if isinstance(module, RMSNorm):
        return module
    raise TypeError(f"no fast path for the norm {type(module).__name__}")
