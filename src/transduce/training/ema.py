"""An exponential moving average of the weights (Polyak averaging), as Marian's
``--exponential-smoothing`` and OpenNMT-py's ``average_decay``.

After every optimizer update ``ema = ema + (1 - d) * (weights - ema)``, with the decay warmed up as
``d = min(decay, (1 + n) / (10 + n))`` after n updates (TensorFlow's ``num_updates`` rule): the
random initial weights are forgotten within the first few dozen updates, and until the decay caps
it the average spans about the last tenth of training (0.999 is reached after ~9,000 updates).
The averages are fp32 copies on the model's device, whatever the training precision. Training
never uses them: they are written beside each checkpoint (``ema.safetensors``, for an exact
resume) and as the checkpoint folder ``RUN/ema/`` that ``translate`` and ``evaluate`` load.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch import nn

EMA_FILE = "ema.safetensors"  # the averages beside a checkpoint's weights, for an exact resume


class ExponentialAverage:
    def __init__(self, model: nn.Module, decay: float):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"ema must be in (0, 1), got {decay}")
        self.decay = decay
        self.updates = 0
        # each shared (tied) tensor once; what training changes (a frozen base has no average)
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self.names = [name for name, _ in named]
        self.shadow = [p.detach().float().clone() for _, p in named]

    def current_decay(self) -> float:
        return min(self.decay, (1 + self.updates) / (10 + self.updates))

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Move the averages toward the model's weights (after an optimizer update)."""
        weight = 1.0 - self.current_decay()
        params = [p.detach().float() for _, p in model.named_parameters() if p.requires_grad]
        torch._foreach_lerp_(self.shadow, params, weight)
        self.updates += 1

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The averages by parameter name, and the update count, as tensors (for safetensors)."""
        state = {name: t.contiguous() for name, t in zip(self.names, self.shadow)}
        state["__updates__"] = torch.tensor([self.updates], dtype=torch.int64)
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        missing = [name for name in self.names if name not in state]
        if missing or "__updates__" not in state:
            raise ValueError(f"the EMA state lacks {(missing or ['__updates__'])[:3]}")
        for name, tensor in zip(self.names, self.shadow):
            tensor.copy_(state[name])
        self.updates = int(state["__updates__"][0])

    @contextmanager
    @torch.no_grad()
    def applied(self, model: nn.Module) -> Iterator[nn.Module]:
        """The model with the averaged weights in place of its own, restored afterwards."""
        params = [p for _, p in model.named_parameters() if p.requires_grad]
        saved = [p.detach().clone() for p in params]
        for p, average in zip(params, self.shadow):
            p.copy_(average)
        try:
            yield model
        finally:
            for p, original in zip(params, saved):
                p.copy_(original)
