"""The captured decode step (``--compile on``): ``FastDecoder``'s arithmetic with static shapes,
compiled by ``torch.compile`` (CUDA graphs on a GPU).

What differs from the eager step, and only that, lives here: the position is a 0-d tensor, so
that every step has the same inputs; attention covers the cache's whole capacity, the slots after
the position masked (the eager step reads the filled slots only); every product is the plain one
(the eager step's choice of layout per number of rows is Python, which capture cannot follow);
and the cache's shapes come in classes (sentences, source length and capacity rounded up to powers
of two), so that a stream of batches compiles a few times, not once per batch.

``fast_decoder`` gives a model's step, eager or captured, built once per set of weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .cache import StepCache, attended, pad_rows, padded_sentences, power_of_two, static_address
from .decoder import FastDecoder
from .snapshots import snapshot
from .tuned_linear import TunedLinear


class CapturedDecoder(FastDecoder):
    """A ``FastDecoder`` whose step is captured; the same ``start`` and ``step``. Not for the CPU's
    bf16 weights nor int8 (their choices and kernels are eager), nor for a running search's rows."""

    def __init__(self, model, precision: str = "fp32") -> None:
        super().__init__(model, precision)
        if self.bf16:
            raise ValueError(
                "the CPU's bf16 step is not compiled (its choice of bf16 or fp32 per product is "
                "eager)"
            )
        if precision == "int8":
            raise ValueError(
                "the int8 step cannot be compiled (its quantized kernels are opaque to "
                "torch.compile)"
            )
        if self.embed_weight.device.type == "cuda":
            compiled = torch.compile(self._forward, mode="reduce-overhead", dynamic=False)
        else:
            # the CPU: inductor's C++ wrapper calls the kernels without a Python statement per
            # kernel, and the products get W^T contiguous (faster than F.linear's transposed view at
            # a few rows: benchmarks/dense_layouts.py)
            for d in self.denses():
                d._transposed()
            compiled = torch.compile(self._forward, dynamic=False, options={"cpp_wrapper": True})
        self.compiled = _compile_limit()(compiled)

    def start(self, src: Tensor, memory: Tensor, beam: int, capacity: int) -> StepCache:
        B, S = memory.shape[:2]
        H = self.heads
        cross_k, cross_v, bias = self._cross(src, memory, beam)
        total, capacity, wide = padded_sentences(B), power_of_two(capacity, 16), power_of_two(S, 8)
        # the added source positions are masked like padding, the added sentences are zeros
        cross_k = [pad_rows(F.pad(k, (0, wide - S)), total * H) for k in cross_k]
        cross_v = [pad_rows(F.pad(v, (0, 0, 0, wide - S)), total * H) for v in cross_v]
        bias = pad_rows(
            F.pad(bias, (0, wide - S), value=float("-inf")).reshape(B * H, beam, -1), total * H
        )
        # the step reads every slot (masked): unfilled ones must not hold NaN garbage
        kv = memory.new_zeros((len(self.layers), 2, total * beam, H, capacity, self.head_dim))
        static_address(kv, bias, *cross_k, *cross_v)
        return StepCache(kv, cross_k, cross_v, bias, H, beam, static=True)

    def step(self, tokens: Tensor, cache: StepCache) -> Tensor:
        t = cache.length
        if cache.starts is not None:
            raise ValueError(
                "a running cache (rows at positions of their own) is stepped eagerly, not captured"
            )
        if t >= cache.kv.size(4) or t >= self.config.max_positions:
            raise ValueError(
                f"position {t} does not fit: the decoding cache holds {cache.kv.size(4)} "
                f"positions, the model {self.config.max_positions}"
            )
        # a fresh tensor, padded to the cache's batch class with token 0 (rows nobody reads): the
        # caller's tensor may have another stride at every step, and a new stride recompiles
        N = tokens.size(0)
        padded = tokens.new_zeros(cache.kv.size(2))
        padded[:N] = tokens
        position = torch.tensor(t, device=tokens.device)
        logits = self.compiled(
            padded, position, cache.kv, cache.cross_k, cache.cross_v, cache.cross_bias
        )[:N]
        cache.length = t + 1
        return logits

    def _forward(
        self,
        tokens: Tensor,
        t: Tensor,
        kv: Tensor,
        cross_k: list[Tensor],
        cross_v: list[Tensor],
        cross_bias: Tensor,
    ) -> Tensor:
        """One step at position ``t`` (a 0-d tensor) over the whole capacity; each layer's keys and
        values are viewed inside the graph, after this step's write."""
        x = self._embed(tokens, t, t)
        key_bias = self._key_bias(x, t, 0, kv.size(4), None)
        for i, layer in enumerate(self.layers):
            x = self._block(
                layer,
                0,
                x,
                lambda h: self._self_attention(
                    layer, h, t, t, kv[i], lambda: attended(kv[i]), key_bias
                ),
            )
            x = self._block(
                layer,
                1,
                x,
                lambda h: self._cross_attention(layer, h, cross_k[i], cross_v[i], cross_bias),
            )
            x = self._block(layer, 2, x, lambda h: self._rows_feed_forward(layer, h))
        return self._logits(x)  # (N, V)

    def _dense(self, linear: TunedLinear, x: Tensor) -> Tensor:
        return linear.plain(x)

    def _hidden(self, x: Tensor, t, keys: Tensor, starts) -> Tensor:
        """The slots after the position ``t`` (not written yet in this search)."""
        return torch.zeros(keys.numel(), dtype=x.dtype, device=x.device).masked_fill(
            keys > t, float("-inf")
        )


def _compile_limit():
    """One compilation per shape class (sentences x source length x capacity, see ``start``): more
    classes than dynamo's default limit of 8 would fall back to eager steps, silently. The limit is
    raised around the step's calls only, not for the rest of the caller's process."""
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    return config.patch(**{name: max(getattr(config, name), 64)})


def fast_decoder(model, precision: str = "fp32", compiled: bool = False) -> FastDecoder:
    """The model's ``FastDecoder`` for ``precision`` (or its ``CapturedDecoder``), rebuilt only when
    the weights changed since it was built (``snapshot``)."""
    def make() -> FastDecoder:
        if compiled:
            return CapturedDecoder(model, precision)
        return FastDecoder(model, precision)

    return snapshot(model, (precision, compiled), make)
