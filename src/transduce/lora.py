"""Low-rank adapters (LoRA, Hu et al. 2021): train a few megabytes beside a frozen model.

An adapted linear layer computes ``x W^T + b + s * drop(x) A^T B^T`` with ``A (r, in)`` and
``B (out, r)`` trained, ``W`` and ``b`` frozen, and ``s = alpha / r``. ``B`` starts at zero, so an
adapted model starts as its base. The adapters live on the ``nn.Linear`` modules themselves
(``lora_A``, ``lora_B``, added by a forward hook), so the base's weights keep their names and load
as they are, and the adapters alone are ``adapter_state``. ``merge`` folds them into the weights
(``W + s B A``): a merged model is a plain one, which every pass, search and export takes.
"""

from __future__ import annotations

import math
import re
from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

# which linear layers each target names (module names end so)
TARGETS = {
    "attention": re.compile(r"(^|\.)(self_attn|cross_attn)\.(qkv|q|kv|out)$"),
    "ffn": re.compile(r"(^|\.)ffn\.(w1|w2|w3)$"),
}
PREFIX = "lora_"  # the adapters' parameter names: lora_A, lora_B


def adapted_layers(model: nn.Module, targets) -> list[tuple[str, nn.Linear]]:
    """The linear layers of ``model`` that ``targets`` (names of ``TARGETS``) adapt, by name."""
    patterns = [TARGETS[t] for t in targets]
    return [(name, m) for name, m in model.named_modules()
            if isinstance(m, nn.Linear) and any(p.search(name) for p in patterns)]


def check_settings(rank: int, alpha: float, dropout: float, targets, model=None) -> None:
    """Refuse settings that cannot adapt (``ValueError`` with the reason); with ``model``, also a
    rank above a layer's smaller side, where the product would not be low-rank."""
    unknown = [t for t in targets if t not in TARGETS]
    if unknown or not targets:
        raise ValueError(f"--lora-targets: {', '.join(unknown) or 'none given'}; choose from "
                         f"{', '.join(TARGETS)}")
    if rank < 1:
        raise ValueError(f"--lora {rank}: the rank must be at least 1")
    if alpha <= 0 or not 0.0 <= dropout < 1.0:
        raise ValueError("--lora-alpha must be positive and --lora-dropout in [0, 1)")
    if model is not None:
        layers = adapted_layers(model, targets)
        if not layers:
            raise ValueError(f"the model has no {' or '.join(targets)} layers to adapt")
        smallest = min(min(m.weight.shape) for _, m in layers)
        if rank > smallest:
            raise ValueError(f"--lora {rank} is larger than the smallest adapted layer's side "
                             f"({smallest}): the adapter would not be low-rank; use at most "
                             f"{smallest}")


def attach(model: nn.Module, settings: dict) -> None:
    """Freeze ``model`` and give it adapters: ``settings`` holds ``rank``, ``alpha``, ``dropout``
    and ``targets`` (and whatever else describes them, e.g. the base: kept as ``model.adapter``).
    ``A`` is initialised as ``nn.Linear`` initialises a weight, ``B`` at zero."""
    rank, targets = int(settings["rank"]), tuple(settings["targets"])
    check_settings(rank, settings["alpha"], settings["dropout"], targets, model)
    for p in model.parameters():
        p.requires_grad_(False)
    for _, layer in adapted_layers(model, targets):
        out, inp = layer.weight.shape
        a = torch.empty(rank, inp, device=layer.weight.device)
        nn.init.kaiming_uniform_(a, a=math.sqrt(5))
        layer.register_parameter(PREFIX + "A", nn.Parameter(a))
        layer.register_parameter(
            PREFIX + "B", nn.Parameter(torch.zeros(out, rank, device=layer.weight.device)))
        layer.lora_scale = settings["alpha"] / rank
        layer.lora_dropout = settings["dropout"]
        layer.lora_hook = layer.register_forward_hook(_low_rank)
    model.adapter = dict(settings, targets=list(targets))


def _low_rank(layer: nn.Linear, inputs, output):
    if getattr(layer, "lora_merged", False):
        return output
    x = F.dropout(inputs[0], layer.lora_dropout, layer.training)
    low = F.linear(F.linear(x.to(layer.lora_A.dtype), layer.lora_A), layer.lora_B)
    return output + (layer.lora_scale * low).to(output.dtype)


def adapter_of(model: nn.Module):
    """The settings of ``model``'s adapters (``attach``'s), or None for a model without."""
    return getattr(model, "adapter", None)


def is_adapter(name: str) -> bool:
    """Whether a state-dict name is an adapter's tensor (``....lora_A``, ``....lora_B``)."""
    return name.rsplit(".", 1)[-1].startswith(PREFIX)


def adapter_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapters' tensors by their names in the model's state dict."""
    return {name: p for name, p in model.named_parameters() if is_adapter(name)}


def _layers(model: nn.Module) -> list[nn.Linear]:
    return [m for m in model.modules() if isinstance(m, nn.Linear) and hasattr(m, "lora_hook")]


def _delta(layer: nn.Linear) -> torch.Tensor:
    return (layer.lora_scale * (layer.lora_B.float() @ layer.lora_A.float())).to(
        layer.weight.dtype)


@torch.no_grad()
def merge(model: nn.Module) -> nn.Module:
    """Fold every adapter into its layer's weight and remove it: ``model`` becomes a plain model
    (in place; returned). A model without adapters is returned as it is."""
    for layer in _layers(model):
        layer.weight.add_(_delta(layer))
        layer.lora_hook.remove()
        for name in ("lora_A", "lora_B"):
            delattr(layer, name)
        for name in ("lora_hook", "lora_scale", "lora_dropout", "lora_merged"):
            layer.__dict__.pop(name, None)
    if hasattr(model, "adapter"):
        del model.adapter
    return model


@contextmanager
@torch.no_grad()
def merged(model: nn.Module) -> Iterator[nn.Module]:
    """``model`` with its adapters folded into the weights while the block runs (for the fast
    search, which reads the weights directly), then the weights restored bit for bit (a merge
    undone by subtraction would not be: an exact resume needs them as they were)."""
    layers = _layers(model)
    saved = [layer.weight.detach().clone() for layer in layers]
    for layer in layers:
        layer.weight.add_(_delta(layer))
        layer.lora_merged = True
    try:
        yield model
    finally:
        for layer, weight in zip(layers, saved):
            layer.weight.copy_(weight)
            layer.lora_merged = False
