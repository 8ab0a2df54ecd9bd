"""The decoder's step for search: the same arithmetic as ``Transformer.decode``, laid out for speed.

Decoding one token per hypothesis is a chain of matrix-*vector* products: at batch 1 a step reads
every decoder weight once and does little else. This module leaves the model untouched and
builds, once per set of weights, a ``FastDecoder`` that:

- multiplies each weight in the operand layout measured fastest on this machine for the number
  of rows (``TunedLinear``), with 1/sqrt(d_k) folded into the query weights;
- or, with ``precision="int8"``, holds the weights as int8 with one scale per output row and
  multiplies with PyTorch's dynamic quantization kernel (fbgemm: each activation row quantized
  on the fly over its own range, int32 accumulation); ``quantize_encoder`` gives the encoder the
  same ``Int8Linear``;
- or, with ``precision="bf16"`` on the CPU, keeps a bf16 copy of each weight, made once, and uses
  it for products large enough to pay for bf16's fixed cost per call (``BF16_MIN_MACS``), fp32
  below; autocast would instead convert every weight again at every step (bf16 pays where the
  CPU multiplies it natively, AVX512-BF16 or AMX; elsewhere it is emulated, as under autocast);
- keeps the self-attention keys and values of every layer in one preallocated tensor
  ``(layers, 2, N, H, capacity, Dh)``: a step writes position ``t`` in place (one strided copy from
  the self-attention product, whose rows are ordered per head as query, key, value), attends over
the
  filled positions ``0..t`` only, and a beam reorder is an ``index_select`` of the filled part;
- computes attention explicitly for the single query (two ``bmm`` and a softmax);
- has a static-shape variant for ``torch.compile`` and CUDA graphs (``CapturedDecoder``,
  ``captured.py``).

What it decodes is an allow-list over every ``ModelConfig`` field (``support.py``); the outputs
equal ``Transformer.decode``'s up to float rounding for every supported choice, and every other
choice is refused by name (``tests/inference/test_support.py``); a refused model decodes with
``Transformer.decode``.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from .cache import StepCache
from .norm import norm_function
from .support import require_supported
from .int8 import wide_attention
from .tuned_linear import TunedLinear



class _Layer:
    """One decoder layer's weights, as the step uses them."""

    def __init__(self, layer, config, int8: bool, bf16: bool = False) -> None:
        inner = config.n_heads * config.d_k
        factor = config.d_k**-0.5 if config.attention_scale == "sqrt_dk" else 1.0
        qkv = layer.self_attn.qkv
        scale = torch.ones(3 * inner, dtype=qkv.weight.dtype, device=qkv.weight.device)
        scale[:inner] = factor  # fold 1/sqrt(d_k) into the queries
        # the product's rows ordered (head, q/k/v, Dh), not (q/k/v, head, Dh): the queries of all
        # heads are then evenly spaced, a view (N * H, 1, Dh) rather than a copy, and the keys and
        # values go into the cache in one strided copy
        heads, head_dim = config.n_heads, config.d_k

        def per_head(x: Tensor) -> Tensor:
            return x.view(3, heads, head_dim, -1).transpose(0, 1).reshape(x.shape)

        bias = None if qkv.bias is None else per_head(qkv.bias.detach()[:, None])[:, 0]
        self.qkv = TunedLinear(
            per_head(qkv.weight.detach()), bias, int8, per_head(scale[:, None])[:, 0], bf16=bf16
        )
        self.self_out = TunedLinear(
            layer.self_attn.out.weight, layer.self_attn.out.bias, int8, bf16=bf16
        )
        self.cross_q = TunedLinear(
            layer.cross_attn.q.weight, layer.cross_attn.q.bias, int8, scale=factor, bf16=bf16
        )
        self.cross_out = TunedLinear(
            layer.cross_attn.out.weight, layer.cross_attn.out.bias, int8, bf16=bf16
        )
        ffn = layer.ffn
        self.w1 = TunedLinear(ffn.w1.weight, ffn.w1.bias, int8, bf16=bf16)
        self.w2 = TunedLinear(ffn.w2.weight, ffn.w2.bias, int8, bf16=bf16)
        self.w3 = (
            TunedLinear(ffn.w3.weight, ffn.w3.bias, int8, bf16=bf16) if ffn.w3 is not None else None
        )
        self.act = ffn.act
        self.norms = [
            norm_function(block.norm)
            for block in (layer.self_attn_block, layer.cross_attn_block, layer.ffn_block)
        ]

    def denses(self) -> list[TunedLinear]:
        return [
            d
            for d in (
                self.qkv,
                self.self_out,
                self.cross_q,
                self.cross_out,
                self.w1,
                self.w2,
                self.w3,
            )
            if d is not None
        ]


class FastDecoder:
    """A snapshot of a ``Transformer``'s decoder for search; see the module docstring.

    ``cache = fast.start(src, memory, beam, capacity)``, then ``logits = fast.step(tokens, cache)``
    with ``tokens (N,)`` one new token per hypothesis. This is the eager step: it attends over the
    filled slots only, and serves running searches (rows at positions of their own). The snapshot
    does not follow later changes of the model's weights: ``fast_decoder(model)`` rebuilds it when
    they change.
    """

    def __init__(self, model, precision: str = "fp32") -> None:
        require_supported(model, "the fast decode step", "Transformer.decode")
        c = model.config
        self.config, self.real = c, model.src_embed.real  # (which encoder positions hold input)
        self.precision = precision
        int8 = precision == "int8"
        self.wide = int8  # attention in float64 (``wide_attention``)
        device = model.output.weight.device
        # bf16 on the CPU: the step holds bf16 weights and runs outside autocast (``TunedLinear``)
        self.bf16 = precision == "bf16" and device.type == "cpu"
        self.heads, self.head_dim = c.n_heads, c.d_k
        self.pre = c.norm_position == "pre"
        # ALiBi's or the relative buckets' bias of every distance a step can meet, once: (H, P)
        source = model.alibi or model.decoder_relative
        with torch.no_grad():
            self.layers = [_Layer(layer, c, int8, self.bf16) for layer in model.decoder]
            self.final_norm = (
                norm_function(model.decoder_norm) if model.decoder_norm is not None else None
            )
            bias = model.output_bias.detach() if model.output_bias is not None else None
            self.output = TunedLinear(model.output.weight, bias, int8, bf16=self.bf16)
            self.distance_bias = None if source is None else source.by_distance(
                torch.arange(c.max_positions, device=device))
        embed = model.tgt_embed
        self.embed_weight = embed.tokens.weight.detach()
        self.embed_scale = embed.scale
        self.positions = (embed.table if embed.kind in ("sinusoidal", "sinusoidal_concat") else
                          embed.learned.weight.detach() if embed.kind == "learned" else None)
        self.rotary = model.rotary
        self.output_scale = c.d_model**-0.5 if c.scale_output else None
        # every layer's encoder-decoder keys and values in one product, once per sentence (int8 as
        # every product at int8: an fp32 product's last digits depend on how many rows it takes)
        projections = [layer.cross_attn.kv for layer in model.decoder]
        with torch.no_grad():
            weight = torch.cat([m.weight.detach() for m in projections])  # (layers * 2 * H * Dh, D)
            bias = None if projections[0].bias is None else torch.cat(
                [m.bias.detach() for m in projections])
        self.cross_kv = TunedLinear(weight, bias, int8)

    def denses(self) -> list[TunedLinear]:
        """Every product of a step, in the order the step calls them."""
        return [*(d for layer in self.layers for d in layer.denses()), self.output]

    def start(self, src: Tensor, memory: Tensor, beam: int, capacity: int) -> StepCache:
        """A cache for ``B * beam`` hypotheses over ``src (B, S)`` and its encoder output
        ``memory``."""
        cross_k, cross_v, bias = self._cross(src, memory, beam)
        B, H = src.size(0), self.heads
        kv = memory.new_empty((len(self.layers), 2, B * beam, H, capacity, self.head_dim),
                              dtype=torch.float64 if self.wide else memory.dtype)
        return StepCache(kv, cross_k, cross_v, bias.reshape(B * H, beam, -1), H, beam)

    def _cross(self, src: Tensor, memory: Tensor, beam: int
               ) -> tuple[list[Tensor], list[Tensor], Tensor]:
        """Every layer's encoder-decoder keys ``(B*H, Dh, S)`` and values ``(B*H, S, Dh)``, and the
        additive mask of the source's padding ``(B, H, beam, S)``."""
        B, S = memory.shape[:2]
        H, Dh = self.heads, self.head_dim
        with torch.no_grad(), self._precision():
            memory = memory.float() if self.bf16 else memory
            L = len(self.layers)
            kv = self.cross_kv(memory.reshape(B * S, -1)).view(B, S, L, 2, H, Dh)
            cross_k = list(
                kv.select(3, 0).permute(2, 0, 3, 4, 1).reshape(L, B * H, Dh, S).unbind(0)
            )
            cross_v = list(
                kv.select(3, 1).permute(2, 0, 3, 1, 4).reshape(L, B * H, S, Dh).unbind(0)
            )
            if self.wide:  # (attended in float64: held so, converted once)
                cross_k, cross_v = [k.double() for k in cross_k], [v.double() for v in cross_v]
        bias = torch.zeros(B, H, beam, S, dtype=memory.dtype, device=memory.device)
        bias.masked_fill_(~self.real(src)[:, None, None, :], float("-inf"))
        return cross_k, cross_v, bias

    def step(self, tokens: Tensor, cache: StepCache) -> Tensor:
        """``tokens (N,)`` at position ``cache.length`` -> next-token logits ``(N, V)``; the cache
        advances."""
        t = cache.length
        # (each row at its own position: a running search's cache)
        running = cache.starts is not None
        if t >= cache.kv.size(4) or (not running and t >= self.config.max_positions):
            raise ValueError(f"position {t} does not fit: the decoding cache holds "
                             f"{cache.kv.size(4)} positions, the model {self.config.max_positions}")
        # rows that all started at one slot share one position: ``starts`` is then that slot
        starts = cache.first if running and cache.uniform else cache.starts
        with self._precision():
            logits = self._forward(tokens, t, cache.kv, cache.cross_k, cache.cross_v,
                                   cache.cross_bias, cache.views, starts, cache.first)
        cache.length = t + 1
        return logits

    def _precision(self):
        """bf16 on the CPU: autocast off (the step chooses bf16 or fp32 per product); else as the
        caller set it."""
        return torch.autocast("cpu", enabled=False) if self.bf16 else nullcontext()

    def _forward(self, tokens: Tensor, t: int, kv: Tensor, cross_k: list[Tensor],
                 cross_v: list[Tensor], cross_bias: Tensor, views: tuple,
                 starts: Optional[Tensor | int] = None, first: int = 0) -> Tensor:
        """One step at position ``t``, attending over the filled slots only. ``views``:
        ``cache_views(kv)``, made once per cache.

        ``starts (N,)``: each row's first slot (a running search, whose rows joined at different
        steps): ``t`` is then the slot written, row n's position is ``t - starts[n]`` and it attends
        over its own slots ``starts[n] .. t`` only (ALiBi's distances are differences of slots);
        an int when every row started at that slot (all positions ``t - starts``, nothing hidden).
        ``first`` (the smallest start) is the first slot any row reads."""
        slots, all_keys, all_values = views
        seen = t + 1 - first  # the slots a step reads: first .. t
        position = t if starts is None else t - starts  # (N,) per row in a running search
        x = self._embed(tokens, t, position)
        key_bias = self._key_bias(x, t, first, t + 1, starts)
        for i, layer in enumerate(self.layers):
            keys, values = all_keys[i].narrow(2, first, seen), all_values[i].narrow(1, first, seen)
            x = self._block(layer, 0, x, lambda h: self._self_attention(
                layer, h, t, position, slots[i], lambda: (keys, values), key_bias))
            x = self._block(layer, 1, x, lambda h: self._cross_attention(
                layer, h, cross_k[i], cross_v[i], cross_bias))
            x = self._block(layer, 2, x, lambda h: self._feed_forward(layer, h))
        return self._logits(x)

    def _logits(self, x: Tensor) -> Tensor:
        """The decoder's output ``(N, D)`` -> logits ``(N, V)``: the final norm (pre-LN), T5's
        rescaling, the output projection."""
        if self.final_norm is not None:
            x = self.final_norm(x)
        if self.output_scale is not None:
            x = x * self.output_scale
        return self._dense(self.output, x)  # (N, V)

    def _dense(self, linear: TunedLinear, x: Tensor) -> Tensor:
        """A product in the operand layout measured fastest for this many rows."""
        return linear(x)

    def _block(self, layer: _Layer, n: int, x: Tensor, sublayer) -> Tensor:
        """A residual block around ``sublayer``, its norm before (pre-LN) or after (the paper's)."""
        if self.pre:
            return x + sublayer(layer.norms[n](x))
        return layer.norms[n](x + sublayer(x))

    def _embed(self, tokens: Tensor, t, position) -> Tensor:
        """The tokens' embeddings, scaled, plus their positions' (``position``: ``t``, or one per
        row)."""
        x = F.embedding(tokens, self.embed_weight)  # (N, D)
        if self.positions is not None:
            shared = not isinstance(position, Tensor) or position.dim() == 0  # one for all rows
            table = _row(self.positions, position) if shared else \
                self.positions.index_select(0, position)
            return torch.add(table.to(x.dtype), x, alpha=self.embed_scale)
        return x * self.embed_scale if self.embed_scale != 1.0 else x

    def _key_bias(self, x: Tensor, t, first: int, length, starts: Optional[Tensor]
                  ) -> Optional[Tensor]:
        """Every additive mask of the self-attention scores over slots ``first .. length - 1`` in
        one ``(N*H, 1, keys)``, or None: ALiBi's distances and ``_hidden``'s slots."""
        keys = torch.arange(first, length, device=x.device)  # the slots of the attended keys
        bias = self._hidden(x, t, keys, starts)
        if self.distance_bias is not None:  # (H, 1, keys); keys past t are hidden anyway
            seen = (t - keys).clamp(0, self.distance_bias.size(1) - 1)
            distances = self.distance_bias[:, seen].to(x.dtype)[:, None]
            bias = distances if bias is None else bias + distances
        if bias is None:
            return None
        # (N*H, 1, keys): added to the scores as they come out of bmm; the per-head form (scores
        # viewed (N, H, 1, keys) + bias) makes inductor's attention pattern fail on this mask
        # ("Attempting to broadcast a dimension"), and baddbmm made the captured step slower
        # (benchmarks/step_profile.py --compile --rows 128)
        N, H = x.size(0), self.heads
        return bias.expand(N, H, 1, keys.numel()).reshape(N * H, 1, keys.numel())

    def _hidden(self, x: Tensor, t, keys: Tensor, starts: Optional[Tensor]) -> Optional[Tensor]:
        """The slots a row must not see, as ``-inf``: in a running search, those before the row's
        start (another sentence's past) ``(N, 1, 1, keys)``; None when every slot read is the
        row's."""
        if not isinstance(starts, Tensor):
            return None
        hidden = torch.zeros(x.size(0), 1, 1, keys.numel(), dtype=x.dtype, device=x.device)
        return hidden.masked_fill(keys < starts[:, None, None, None], float("-inf"))

    def _self_attention(self, layer: _Layer, h: Tensor, t, position, slot: Tensor, read,
                        key_bias: Optional[Tensor]) -> Tensor:
        """Masked self-attention of the new query: its key and value are written at slot ``t`` of
        ``slot``, then ``read()`` gives the keys ``(N*H, Dh, keys)`` and values ``(N*H, keys, Dh)``
        attended."""
        N, H, Dh = h.size(0), self.heads, self.head_dim
        qkv = self._dense(layer.qkv, h).view(N, H, 3, Dh)  # q is pre-scaled by 1/sqrt(d_k)
        if self.rotary is not None:
            q = self._rotate(qkv.select(2, 0).reshape(N * H, 1, Dh), position)
            k = self._rotate(qkv.select(2, 1).reshape(N * H, 1, Dh), position)
            _write(slot, t, torch.stack([k.view(N, H, Dh), qkv.select(2, 2)]))
        else:
            q = qkv.select(2, 0).view(N * H, 1, Dh)
            # (2, N, H, Dh): its key and value
            _write(slot, t, qkv.narrow(2, 1, 2).permute(2, 0, 1, 3))
        keys, values = read()
        if self.wide:
            a = wide_attention(key_bias, q, keys, values)
        else:
            scores = torch.bmm(q, keys)  # (N*H, 1, keys)
            if key_bias is not None:
                scores = scores + key_bias
            a = torch.bmm(scores.softmax(-1), values)
        return self._dense(layer.self_out, a.view(N, H * Dh))

    def _cross_attention(self, layer: _Layer, h: Tensor, cross_k: Tensor, cross_v: Tensor,
                         cross_bias: Tensor) -> Tensor:
        """Encoder-decoder attention: the K beams of a sentence share its keys."""
        N, H, Dh, K = h.size(0), self.heads, self.head_dim, cross_bias.size(1)
        B = N // K
        q = self._dense(layer.cross_q, h)
        q = q.view(N * H, 1, Dh) if K == 1 else \
            q.view(B, K, H, Dh).transpose(1, 2).reshape(B * H, K, Dh)
        if self.wide:
            a = wide_attention(cross_bias, q, cross_k, cross_v)
        else:
            scores = torch.baddbmm(cross_bias, q, cross_k)  # (B*H, K, S)
            a = torch.bmm(scores.softmax(-1), cross_v)  # (B*H, K, Dh)
        a = a.view(N, H * Dh) if K == 1 else a.view(B, H, K, Dh).transpose(1, 2).reshape(N, H * Dh)
        return self._dense(layer.cross_out, a)

    def _feed_forward(self, layer: _Layer, h: Tensor) -> Tensor:
        """The position-wise feed-forward network (gated when ``w3``), in rows, or feature-major
        where that layout measured faster for this many rows (the wide hidden layer never
        transposed)."""
        w1 = layer.w1
        if w1.int8 is not None or w1.uses_bf16(h.size(0)) or w1.layout(h) != "columns":
            return self._rows_feed_forward(layer, h)
        h_t = h.t()
        f = layer.act(layer.w1.columns(h_t))  # (F, N)
        if layer.w3 is not None:
            f = f * layer.w3.columns(h_t)
        return layer.w2.columns(f).t()  # (N, D), a transposed view

    def _rows_feed_forward(self, layer: _Layer, h: Tensor) -> Tensor:
        f = layer.act(self._dense(layer.w1, h))
        if layer.w3 is not None:
            f = f * self._dense(layer.w3, h)
        return self._dense(layer.w2, f)

    def _rotate(self, x: Tensor, t) -> Tensor:
        """``x (N*H, 1, Dh)`` rotated to position ``t``: an int, a 0-d tensor or ``(N,)`` per
        row."""
        # (N*H, 1, Dh/2): each row's angles for its heads
        if isinstance(t, Tensor) and t.dim() == 1:
            heads = x.size(0) // t.numel()
            cos, sin = (table.index_select(0, t).repeat_interleave(heads, 0)[:, None].to(x.dtype)
                        for table in (self.rotary.cos, self.rotary.sin))
        else:
            cos = _row(self.rotary.cos, t).to(x.dtype)  # (Dh/2,)
            sin = _row(self.rotary.sin, t).to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def _row(table: Tensor, t) -> Tensor:
    """``table[t]`` for an int or a 0-d tensor position (indexing with a tensor would read it on the
    host)."""
    return table[t] if not isinstance(t, Tensor) else table.index_select(0, t.view(1))[0]


def _write(buffer: Tensor, t, value: Tensor) -> None:
    """``buffer[..., t, :] = value``: position ``t`` (an int or a 0-d tensor) of a ``(..., C, Dh)``
    cache."""
    # (the leading dimensions flattened: inductor fails on index_copy_ over 5)
    if isinstance(t, Tensor):
        C, Dh = buffer.shape[-2:]
        buffer.view(-1, C, Dh).index_copy_(1, t.view(1),
                                           value.reshape(-1, 1, Dh).to(buffer.dtype))
    else:
        buffer.select(buffer.dim() - 2, t).copy_(value)
