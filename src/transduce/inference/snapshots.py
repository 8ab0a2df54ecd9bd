"""Snapshots of a model's weights for the fast passes, kept on the model until the weights change.

A ``FastDecoder`` or ``FastEncoder`` copies or re-lays out the weights once; a search reuses it.
Whether it is stale is a cheap check made at every search: one walk over the model's modules
collecting each parameter's identity, storage and in-place version counter. An optimizer step
(validation during training), ``load_state_dict`` (in place or by assignment) and a replaced module
all change it. ``forget(model)`` drops the snapshots explicitly, for code that changes weights
behind PyTorch's back (through ``.data`` or a raw pointer).
"""

from __future__ import annotations

from typing import Callable

from torch import nn

ATTRIBUTE = "_fast_snapshots"  # on the model; not a submodule, so never saved with it


class _Snapshots:
    """A model's snapshots by key, and the weights' version they were made at."""

    def __init__(self, version: tuple) -> None:
        self.version = version
        self.built: dict = {}


def snapshot(model: nn.Module, key: tuple, make: Callable[[], object]):
    """What ``make()`` builds from ``model``'s weights (a ``FastDecoder``, a ``FastEncoder``), made
    once per ``key`` and kept on the model until its weights change (see the module docstring)."""
    version = weights_version(model)
    cached = getattr(model, ATTRIBUTE, None)
    if cached is None or cached.version != version:
        cached = _Snapshots(version)
        object.__setattr__(model, ATTRIBUTE, cached)
    if key not in cached.built:
        cached.built[key] = make()
    return cached.built[key]


def forget(model: nn.Module) -> None:
    """Drop ``model``'s snapshots: the next search builds them again from its weights."""
    if hasattr(model, ATTRIBUTE):
        object.__delattr__(model, ATTRIBUTE)


def weights_version(model: nn.Module) -> tuple:
    """Changes when a weight is replaced or updated in place. A model made under ``inference_mode``
    has inference tensors, which keep no version counter: for them only a replacement is seen.
    (A direct walk over ``_parameters`` and ``_modules``: ``model.parameters()`` costs a few times
    more,
    and this runs at every search.)"""
    state: list = []
    stack = [model]
    while stack:
        module = stack.pop()
        for p in module._parameters.values():
            if p is not None:
                state.append((id(p), p.data_ptr(), -1 if p.is_inference() else p._version))
        stack.extend(m for m in module._modules.values() if m is not None)
    return tuple(state)
