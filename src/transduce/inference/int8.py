"""int8 weights for decoding on the CPU: one scale per output row for the weights, one range per
input row for the activations, PyTorch's dynamic quantization kernel (fbgemm)."""

from __future__ import annotations

import warnings
from typing import Optional

import torch
from torch import Tensor, nn


class Int8Linear(nn.Module):
    """A linear layer with symmetric per-output-row int8 weights, multiplied by fbgemm's dynamic
    quantization kernel (int32 accumulation); inference on the CPU. Takes ``(..., in)`` like
    ``nn.Linear``.

    Each input row is quantized over its own range: fbgemm's kernel would quantize all the rows of
    a call over one range, so a sentence's numbers would depend on its batch-mates (and on padding)
    and a batched search could choose otherwise than the sentence searched alone. So every row is
    first mapped onto ``[0, 1]`` by its own range ``[lo, hi]``, which makes ``[0, 1]`` the range of
    every call, and the product is mapped back: ``x W^T = r (x' W^T) + lo W 1`` with
    ``x' = (x - lo) / r``, ``r = hi - lo``. Each row's integers, and so its output, are then the
    same whatever the other rows: 128 levels over the row's own range (fbgemm's 7-bit activations,
    safe from overflow on every CPU), what one row quantized alone gets.

    ``scale`` (a number, or one per output row) multiplies the layer after its weights are
    quantized: the integers are those of the model's own weights, whatever a fast path folds in.
    """

    def __init__(self, weight: Tensor, bias: Optional[Tensor],
                 scale: float | Tensor = 1.0) -> None:
        super().__init__()
        if weight.device.type != "cpu":
            raise ValueError("int8 decoding runs on the CPU only; use --precision fp16 or bf16 on "
                             "a GPU")
        engines = torch.backends.quantized.supported_engines
        if "fbgemm" not in engines:
            raise ValueError("int8 needs PyTorch's fbgemm quantized engine, which this build lacks "
                             f"(engines: {', '.join(engines)}); use --precision fp32")
        weight = weight.detach().float()
        scale = scale.detach().double() if isinstance(scale, Tensor) else scale
        self.bias = None if bias is None else (bias.detach().double() * scale).float()
        steps = (weight.abs().amax(dim=1) / 127.0).clamp(min=1e-8).double()  # (out,)
        integers = torch.round(weight / steps.float()[:, None]).clamp_(-127, 127)
        scales = steps * scale  # (the folded scale, exactly the same integers)
        # quantized tensors are deprecated in favour of torchao, not a dependency
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            qweight = torch.quantize_per_channel(  # (i s) / s rounds back to i
                integers * scales.float()[:, None], scales,
                torch.zeros_like(scales, dtype=torch.long), 0, torch.qint8
            )
            previous = torch.backends.quantized.engine
            torch.backends.quantized.engine = "fbgemm"  # a packed weight keeps its kernel
            self.packed = torch.ops.quantized.linear_prepack(qweight, None)
            torch.backends.quantized.engine = previous
        # W 1 of the weights as quantized: what a row's offset ``lo`` adds to each output
        self.sums = (qweight.int_repr().float() * scales.float()[:, None]).sum(dim=1)  # (out,)

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        x = x.float().reshape(-1, shape[-1])
        lo = x.amin(dim=1, keepdim=True)  # (two reductions: faster here than one aminmax)
        span = (x.amax(dim=1, keepdim=True) - lo).clamp_(min=1e-30)  # (a constant row: all in lo)
        y = torch.ops.quantized.linear_dynamic((x - lo) / span, self.packed, True)
        offset = lo * self.sums if self.bias is None else torch.addcmul(self.bias, lo, self.sums)
        return torch.addcmul(offset, y, span).reshape(*shape[:-1], -1)


def quantize_encoder(model) -> None:
    """Replace every ``nn.Linear`` of the encoder by an ``Int8Linear``, in place (the decoder's int8
    weights live in its ``FastDecoder``)."""
    quantize_linears(model.encoder)


def quantize_linears(root: nn.Module) -> None:
    """Replace every ``nn.Linear`` under ``root`` by an ``Int8Linear`` of its weights, in place."""
    for parent in list(root.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, Int8Linear(child.weight, child.bias))


def wide_attention(bias: Optional[Tensor], q: Tensor, keys: Tensor, values: Tensor,
                   alpha: float = 1.0) -> Tensor:
    """``softmax(bias + alpha q keys) values`` for ``q (M, n, Dh)``, ``keys (M, Dh, S)``, ``values
    (M, S, Dh)``, computed in float64 and rounded back to float32.

    int8's passes attend so: in float32 the sums over the keys are grouped by the kernels according
    to how many keys (padding included) and rows share the call, which moves a row's last digits,
    and quantizing the next product's input turns such a digit now and then into another integer,
    so a sentence's output would again depend on its batch-mates. In float64 those differences lie
    far below float32's last digit and vanish in the rounding."""
    q, keys, values = q.double(), keys.double(), values.double()  # (no copy where they are)
    scores = (
        torch.bmm(q, keys) * alpha if bias is None
        else torch.baddbmm(bias.double(), q, keys, alpha=alpha)
    )
    return torch.bmm(scores.softmax(-1), values).float()
