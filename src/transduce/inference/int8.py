"""int8 weights for decoding on the CPU: one scale per output row, PyTorch's dynamic quantization
kernels."""

from __future__ import annotations

import warnings
from typing import Optional

import torch
from torch import Tensor, nn

from .timing import fastest_call, row_class


class Int8Linear(nn.Module):
    """A linear layer with symmetric per-output-row int8 weights, multiplied by PyTorch's dynamic
    quantization kernels (activations quantized per call, int32 accumulation); inference on the CPU.
    Takes ``(..., in)`` like ``nn.Linear``.

    The weights are packed for fbgemm and, where this build has it, for oneDNN: the same quantized
    weights and the same arithmetic, different kernels. Which is faster depends on the rows and the
    CPU (``benchmarks/dense_layouts.py`` times both), so each layer times both the first
    time it sees a class of row counts (1, 2-16, more) and keeps the faster.
    """

    def __init__(self, weight: Tensor, bias: Optional[Tensor]) -> None:
        super().__init__()
        if weight.device.type != "cpu":
            raise ValueError("int8 decoding runs on the CPU only; use --precision fp16 or bf16 on "
                             "a GPU")
        engines = torch.backends.quantized.supported_engines
        if "fbgemm" not in engines:
            raise ValueError("int8 needs PyTorch's fbgemm quantized engine, which this build lacks "
                             f"(engines: {', '.join(engines)}); use --precision fp32")
        weight = weight.detach().float()
        bias = None if bias is None else bias.detach().float()
        scales = (weight.abs().amax(dim=1) / 127.0).clamp(min=1e-8).double()  # (out,)
        self.packs = {}  # kernel -> packed weights
        # quantized tensors are deprecated in favour of torchao, not a dependency
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            qweight = torch.quantize_per_channel(
                weight, scales, torch.zeros_like(scales, dtype=torch.long), 0, torch.qint8
            )
            for engine in ("fbgemm", "onednn"):
                if engine in engines:  # a packed weight keeps its kernel, whatever the engine later
                    torch.backends.quantized.engine = engine
                    self.packs[engine] = torch.ops.quantized.linear_prepack(qweight, bias)
            torch.backends.quantized.engine = "fbgemm"
        self.kernels: dict[int, str] = {}  # row-count class -> the kernel measured faster

    def forward(self, x: Tensor) -> Tensor:
        x = x.float().contiguous()
        rows = x.numel() // x.size(-1)
        bucket = row_class(rows)
        if bucket not in self.kernels:
            self.kernels[bucket] = self._faster(x)
        return torch.ops.quantized.linear_dynamic(x, self.packs[self.kernels[bucket]], True)

    def _faster(self, x: Tensor) -> str:
        return fastest_call(
            {
                kernel: (lambda packed=packed: torch.ops.quantized.linear_dynamic(x, packed, True))
                for kernel, packed in self.packs.items()
            }
        )


def quantize_encoder(model) -> None:
    """Replace every ``nn.Linear`` of the encoder by an ``Int8Linear``, in place (the decoder's int8
    weights live in its ``FastDecoder``)."""
    _quantize(model.encoder)


def _quantize(root: nn.Module) -> None:
    for parent in list(root.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, Int8Linear(child.weight, child.bias))
