"""A linear layer for decoding that multiplies in the operand layout measured fastest here.

``TunedLinear`` holds an ``nn.Linear``'s weights (shared, not copied) and computes the same
product; what differs is how: BLAS's speed at one to a few rows depends on the operands' layout and
on the CPU, so the layer times its candidate layouts once per class of row counts and keeps the
fastest. Where asked for, an int8 copy of the weights serves every product, a bf16 copy the large
ones.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from .int8 import Int8Linear
from .timing import fastest_call, row_class

# bf16 weights pay from this many multiply-adds per product on: a bf16 product has a fixed cost per
# call that fp32 does not, so only large products gain (``python benchmarks/dense_layouts.py``
# shows where the two cross on a given CPU)
BF16_MIN_MACS = 8_000_000


class TunedLinear:
    """``y = x W^T + b`` for a 2-D ``x (N, in)``, from an ``nn.Linear``'s weights.

    float: which operand layout BLAS multiplies fastest depends on the number of rows and on the
    machine (one layout that wins on one CPU can lose several times on another:
    ``benchmarks/dense_layouts.py`` shows it).
    So each layer measures, on the CPU, the first time it sees each class of row counts (1, 2-16,
    more; ``row_class``), the layouts that can serve it and keeps the fastest for the rest of the
    process (``layouts``; a few calls each, well under a millisecond a layer):
    ``rows`` (``x W^T`` with ``W^T`` stored contiguous), ``columns`` (``(W x^T)^T``, copied back to
    rows), ``blocks`` (``W^T`` cut into one column block per thread, one ``bmm``: lets every core
    stream its share of the weights where BLAS would run a small product on one core). Every
    layout gives the same product up to float rounding. Layouts are made on first use; the
    model's own weight is shared, not copied. On a GPU: ``F.linear``.
    int8: every product through an ``Int8Linear`` (weights and activations int8), whatever its
    rows: a row's integers then never depend on its batch-mates.
    bf16: a bf16 copy of the weights too, used (output cast back to fp32)
    where ``rows * out * in >= BF16_MIN_MACS``. ``scale`` (a number, or one per output row)
    multiplies the layer: it folds 1/sqrt(d_k) into the queries.
    """

    def __init__(self, weight: Tensor, bias: Optional[Tensor], int8: bool = False,
                 scale: float | Tensor = 1.0, bf16: bool = False) -> None:
        weight = weight.detach()
        bias = None if bias is None else bias.detach()
        # int8's integers are the model's own weights' (the scale applied after quantizing)
        self.int8 = Int8Linear(weight, bias, scale) if int8 else None
        if isinstance(scale, Tensor) or scale != 1.0:
            weight = weight * (scale[:, None] if isinstance(scale, Tensor) else scale)
            bias = None if bias is None else bias * scale
        self.weight = weight  # (out, in)
        self.bias = bias
        self.bias_column = None if bias is None else bias[:, None]  # (out, 1)
        self.blocks: Optional[Tensor] = None  # (P, in, out/P)
        self.weight_t: Optional[Tensor] = None  # (in, out)
        self.layouts: dict[int, str] = {}  # row-count class -> the layout measured fastest
        self.direct: dict = {}  # layout -> the product in it as one call (see _direct)
        self.on_cpu = weight.device.type == "cpu"  # layouts are measured on the CPU only
        self.low = weight.to(torch.bfloat16) if bf16 and not int8 else None
        self.low_bias = None if self.low is None or bias is None else bias.to(torch.bfloat16)
        # the fewest rows worth the bf16 product
        self.low_rows = -(-BF16_MIN_MACS // weight.numel())

    def uses_bf16(self, rows: int) -> bool:
        return self.low is not None and rows >= self.low_rows

    def layout(self, x: Tensor) -> str:
        """The layout for ``x``'s row count: measured the first time (see the class docstring)."""
        if self.int8 is not None:
            return "int8"
        if not self.on_cpu:
            return "linear"
        bucket = row_class(x.size(0))
        if bucket not in self.layouts:
            self.layouts[bucket] = self._fastest(x)
        return self.layouts[bucket]

    def __call__(self, x: Tensor) -> Tensor:
        if self.int8 is not None:
            return self.int8.forward(x)  # (not the module call: it has no hooks to run)
        rows = x.size(0)
        if self.low is None:
            layout = self.layouts.get(row_class(rows))
            if layout is not None:
                direct = self.direct.get(layout)
                if direct is None:
                    direct = self.direct[layout] = self._direct(layout)
                return direct(x)
        elif rows >= self.low_rows:
            return F.linear(x.to(torch.bfloat16), self.low, self.low_bias).float()
        return self._multiply(x, self.layout(x))

    def _direct(self, layout: str):
        """The product in ``layout`` as one call: a decode step makes many products, and choosing
        the layout again in Python at each would add to every step."""
        bias = self.bias
        if layout == "rows":
            weight_t = self._transposed()
            return (
                (lambda x: torch.mm(x, weight_t))
                if bias is None
                else (lambda x: torch.addmm(bias, x, weight_t))
            )
        return lambda x: self._multiply(x, layout)

    def plain(self, x: Tensor) -> Tensor:
        """One fixed layout, no per-call choices, for ``torch.compile``: ``rows`` where ``weight_t``
        was made for it (on the CPU, by ``CapturedDecoder``: BLAS multiplies it faster at a few rows
        than ``F.linear``'s transposed view, ``benchmarks/dense_layouts.py``), else ``F.linear``."""
        if self.int8 is not None:
            return self.int8(x)
        return self._multiply(x, "rows" if self.weight_t is not None else "linear")

    def columns(self, x_t: Tensor) -> Tensor:
        """The product in feature-major layout: ``x_t (in, N)`` -> ``(out, N)``, never a copy (float
        only)."""
        return (
            self.weight @ x_t
            if self.bias is None
            else torch.addmm(self.bias_column, self.weight, x_t)
        )

    def _multiply(self, x: Tensor, layout: str) -> Tensor:
        if layout == "columns":
            return self.columns(x.t()).t().contiguous()
        if layout == "blocks":
            blocks = self._blocks()
            rows, parts = x.size(0), blocks.size(0)
            y = torch.bmm(x.expand(parts, rows, -1), blocks)  # (P, N, out/P)
            y = y.view(1, -1) if rows == 1 else y.transpose(0, 1).reshape(rows, -1)
            return y if self.bias is None else y + self.bias
        if layout == "rows":
            weight_t = self._transposed()
            return (
                torch.mm(x, weight_t) if self.bias is None else torch.addmm(self.bias, x, weight_t)
            )
        return F.linear(x, self.weight, self.bias)

    def _transposed(self) -> Tensor:
        """``W^T`` stored contiguous ``(in, out)``, made once: the ``rows`` layout's operand."""
        if self.weight_t is None:
            self.weight_t = self.weight.t().contiguous()
        return self.weight_t

    def _blocks(self) -> Tensor:
        if self.blocks is None:
            out, inp = self.weight.shape
            parts = torch.get_num_threads()
            parts = parts if parts > 1 and out % parts == 0 else 1
            self.blocks = (
                self.weight.t().reshape(inp, parts, out // parts).transpose(0, 1).contiguous()
            )
        return self.blocks

    def candidates(self, rows: int) -> list[str]:
        """The float layouts that can serve ``rows`` rows here."""
        return ["rows", "columns", "blocks"] if rows <= 16 else ["rows", "columns"]

    def _fastest(self, x: Tensor) -> str:
        """Time each candidate layout on ``x`` (``timing.fastest_call``; the first call also makes
        its layout); the layouts not chosen are dropped again."""
        best = fastest_call({layout: (lambda layout=layout: self._multiply(x, layout))
                              for layout in self.candidates(x.size(0))})
        kept = set(self.layouts.values()) | {best}
        if "blocks" not in kept:
            self.blocks = None
        if "rows" not in kept:
            self.weight_t = None
        return best
