"""The decoder's step for search: the same arithmetic as ``Transformer.decode``, laid out for speed.

Decoding one token per hypothesis is a chain of matrix-*vector* products: at batch 1 a step reads
every decoder weight once and does little else. This module leaves the model untouched and
builds, once per set of weights, a ``FastDecoder`` that:

- multiplies each weight in the operand layout measured fastest on this machine for the number
  of rows (``Dense``), with 1/sqrt(d_k) folded into the query weights;
- or, with ``precision="int8"``, holds the weights as int8 with one scale per output row and
  multiplies with PyTorch's dynamic quantization kernels (fbgemm: activations quantized on the
  fly, int32 accumulation); ``quantize_encoder`` gives the encoder the same ``Int8Linear``;
- or, with ``precision="bf16"`` on the CPU, keeps a bf16 copy of each weight, made once, and uses
  it for products large enough to pay for bf16's fixed cost per call (``BF16_MIN_MACS``), fp32
  below; autocast would instead convert every weight again at every step (bf16 pays where the
  CPU multiplies it natively, AVX512-BF16 or AMX; elsewhere it is emulated, as under autocast);
- keeps the self-attention keys and values of every layer in one preallocated tensor
  ``(layers, 2, N, H, capacity, Dh)``: a step writes position ``t`` in place (one strided copy from
  the self-attention product, whose rows are ordered per head as query, key, value), attends over the
  filled positions ``0..t`` only, and a beam reorder is an ``index_select`` of the filled part;
- computes attention explicitly for the single query (two ``bmm`` and a softmax);
- has a static-shape variant (``compile``) for ``torch.compile`` and CUDA graphs.

Every positional scheme, both norm positions and types and every activation of the paper's
encoder-decoder are supported; the outputs equal ``Transformer.decode``'s up to float rounding
(``tests/decoding/test_fast.py``). The descendants' options (decoder-only, shared key/value heads,
windows) decode with ``Transformer.decode`` instead (``unsupported`` says why).
"""

from __future__ import annotations

import time
import warnings
from contextlib import nullcontext
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .feed_forward import RMSNorm


# bf16 weights pay from this many multiply-adds per product on (`python benchmarks/dense_layouts.py`
# on the project's 2-core Xeon with AMX: a bf16 product costs 40-50 us even when small, the fastest
# fp32 layout grows with the size; bf16 loses every product of ~4M multiply-adds and wins most from
# ~8M, e.g. 32 rows of 1024x256)
BF16_MIN_MACS = 8_000_000

# int8 decoding measures fp32 against int8 per product only while the decoder's fp32 weights are
# at most this size: a product's timing reads its weight from cache, which holds for a small
# decoder through a whole step but not for a large one, whose weights stream from memory, where
# int8's are 4x smaller (`python benchmarks/step_profile.py --precision int8 --shape small|base
# [--int8-float-max-mb 0|1000]` on the Xeon with AMX: small, 19 MB with its output projection,
# 0.725 against 0.818 ms a step with fp32 candidates; base, 104 MB, 2.65 against 2.14 ms)
INT8_FLOAT_MAX_BYTES = 32 * 2**20


def _fastest_call(calls: dict, rounds: int = 5) -> str:
    """The name of the fastest of ``calls`` (name -> a function of no arguments): each is called
    once untimed, then ``rounds`` times in turn, and keeps its shortest call. Interleaved rounds
    and the minimum make the choice robust to another program's burst on a busy machine, which
    a block of consecutive calls would charge to one candidate alone."""
    if len(calls) == 1:
        return next(iter(calls))
    for call in calls.values():
        call()
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(rounds):
        for name, call in calls.items():
            began = time.perf_counter()
            call()
            best[name] = min(best[name], time.perf_counter() - began)
    return min(best, key=best.get)


def _bucket(rows: int) -> int:
    """The row-count classes a ``Dense`` chooses a layout for: one row, 2-16, more."""
    return 0 if rows == 1 else 1 if rows <= 16 else 2


class Dense:
    """``y = x W^T + b`` for a 2-D ``x (N, in)``, from an ``nn.Linear``'s weights.

    float: which operand layout BLAS multiplies fastest depends on the number of rows and on the
    machine (on the project's 2-core AMD EPYC, ``(W x^T)^T`` won for 2-16 rows and per-thread
    blocks for one; on its Xeon with AMX the same ``(W x^T)^T`` is 2-4x *slower* than ``x W^T``).
    So each layer measures, on the CPU, the first time it sees each class of row counts (1, 2-16,
    more; ``_bucket``), the layouts that can serve it and keeps the fastest for the rest of the
    process (``layouts``; a few calls each, well under a millisecond a layer):
    ``rows`` (``x W^T`` with ``W^T`` stored contiguous), ``columns`` (``(W x^T)^T``, copied back to
    rows), ``blocks`` (``W^T`` cut into one column block per thread, one ``bmm``: lets every core
    stream its share of the weights where BLAS would run a small product on one core). Every
    layout gives the same product up to float rounding. Layouts are made on first use; the
    model's own weight is shared, not copied. On a GPU: ``F.linear``.
    int8: an ``Int8Linear`` too, one more candidate: int8's fixed cost per call (~15 us for
    fbgemm's activation quantization) loses to fp32 on small products at one to a few rows (on the
    Xeon with AMX, 6.6 against 16.9 us for 256x256 at one row; ``benchmarks/dense_layouts.py``),
    so those stay fp32 and the large ones (the output projection: 29.5 against 155 us) go int8;
    the outputs can only move closer to fp32's.
    bf16: a bf16 copy of the weights too, used (output cast back to fp32)
    where ``rows * out * in >= BF16_MIN_MACS``. ``scale`` (a number, or one per output row)
    multiplies the layer: it folds 1/sqrt(d_k) into the queries.
    """

    def __init__(self, weight: Tensor, bias: Optional[Tensor], int8: bool = False,
                 scale: float | Tensor = 1.0, bf16: bool = False) -> None:
        weight = weight.detach()
        bias = None if bias is None else bias.detach()
        if isinstance(scale, Tensor) or scale != 1.0:
            weight = weight * (scale[:, None] if isinstance(scale, Tensor) else scale)
            bias = None if bias is None else bias * scale
        self.int8 = Int8Linear(weight, bias) if int8 else None
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
        self.low_rows = -(-BF16_MIN_MACS // weight.numel())  # the fewest rows worth the bf16 product
        self.float_candidates = True  # int8: whether fp32 layouts compete too (see INT8_FLOAT_MAX_BYTES)

    def uses_bf16(self, rows: int) -> bool:
        return self.low is not None and rows >= self.low_rows

    def layout(self, x: Tensor) -> str:
        """The layout for ``x``'s row count: measured the first time (see the class docstring)."""
        if not self.on_cpu:
            return "int8" if self.int8 is not None else "linear"
        bucket = _bucket(x.size(0))
        if bucket not in self.layouts:
            self.layouts[bucket] = self._fastest(x)
        return self.layouts[bucket]

    def __call__(self, x: Tensor) -> Tensor:
        rows = x.size(0)
        if self.low is None:
            layout = self.layouts.get(_bucket(rows))
            if layout is not None:
                direct = self.direct.get(layout)
                if direct is None:
                    direct = self.direct[layout] = self._direct(layout)
                return direct(x)
        elif rows >= self.low_rows:
            return F.linear(x.to(torch.bfloat16), self.low, self.low_bias).float()
        return self._multiply(x, self.layout(x))

    def _direct(self, layout: str):
        """The product in ``layout`` as one call: a decode step makes ~20 products, and choosing the
        layout again in Python at each costs a few microseconds of a ~1 ms step every time."""
        bias = self.bias
        if layout == "rows":
            weight_t = self._transposed()
            return (lambda x: torch.mm(x, weight_t)) if bias is None else (lambda x: torch.addmm(bias, x, weight_t))
        if layout == "int8":
            return self.int8.forward  # (not the module call: it has no hooks to run)
        return lambda x: self._multiply(x, layout)

    def plain(self, x: Tensor) -> Tensor:
        """One fixed layout, no per-call choices, for ``torch.compile``: ``rows`` where ``weight_t`` was
        made for it (on the CPU, by ``FastDecoder.compile``: BLAS multiplies it faster at a few rows
        than ``F.linear``'s transposed view, ``benchmarks/dense_layouts.py``), else ``F.linear``."""
        if self.int8 is not None:
            return self.int8(x)
        return self._multiply(x, "rows" if self.weight_t is not None else "linear")

    def columns(self, x_t: Tensor) -> Tensor:
        """The product in feature-major layout: ``x_t (in, N)`` -> ``(out, N)``, never a copy (float only)."""
        return self.weight @ x_t if self.bias is None else torch.addmm(self.bias_column, self.weight, x_t)

    def _multiply(self, x: Tensor, layout: str) -> Tensor:
        if layout == "int8":
            return self.int8(x)
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
            return torch.mm(x, weight_t) if self.bias is None else torch.addmm(self.bias, x, weight_t)
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
            self.blocks = self.weight.t().reshape(inp, parts, out // parts).transpose(0, 1).contiguous()
        return self.blocks

    def candidates(self, rows: int) -> list[str]:
        """The layouts that can serve ``rows`` rows here."""
        floats = ["rows", "columns", "blocks"] if rows <= 16 else ["rows", "columns"]
        if self.int8 is None:
            return floats
        return ["int8", *floats] if self.float_candidates else ["int8"]

    def _fastest(self, x: Tensor) -> str:
        """Time each candidate layout on ``x`` (``_fastest_call``; the first call also makes its layout);
        the layouts not chosen are dropped again."""
        best = _fastest_call({layout: (lambda layout=layout: self._multiply(x, layout))
                              for layout in self.candidates(x.size(0))})
        kept = set(self.layouts.values()) | {best}
        if "blocks" not in kept:
            self.blocks = None
        if "rows" not in kept:
            self.weight_t = None
        return best


class Int8Linear(nn.Module):
    """A linear layer with symmetric per-output-row int8 weights, multiplied by PyTorch's dynamic
    quantization kernels (activations quantized per call, int32 accumulation); inference on the CPU.
    Takes ``(..., in)`` like ``nn.Linear``.

    The weights are packed for fbgemm and, where this build has it, for oneDNN: the same quantized
    weights and the same arithmetic, different kernels. Which is faster depends on the rows and the
    CPU (on the Xeon with AMX fbgemm wins at one to a few rows, oneDNN at 32 on the output
    projections, 1.15-1.6x; ``benchmarks/dense_layouts.py``), so each layer times both the first
    time it sees a class of row counts (1, 2-16, more) and keeps the faster.
    """

    def __init__(self, weight: Tensor, bias: Optional[Tensor]) -> None:
        super().__init__()
        if weight.device.type != "cpu":
            raise ValueError("int8 decoding runs on the CPU only; use --precision fp16 or bf16 on a GPU")
        engines = torch.backends.quantized.supported_engines
        if "fbgemm" not in engines:
            raise ValueError("int8 needs PyTorch's fbgemm quantized engine, which this build lacks "
                             f"(engines: {', '.join(engines)}); use --precision fp32")
        weight = weight.detach().float()
        bias = None if bias is None else bias.detach().float()
        scales = (weight.abs().amax(dim=1) / 127.0).clamp(min=1e-8).double()  # (out,)
        self.packs = {}  # kernel -> packed weights
        with warnings.catch_warnings():  # quantized tensors are deprecated in favour of torchao, not a dependency
            warnings.simplefilter("ignore")
            qweight = torch.quantize_per_channel(weight, scales, torch.zeros_like(scales, dtype=torch.long), 0,
                                                 torch.qint8)
            for engine in ("fbgemm", "onednn"):
                if engine in engines:  # a packed weight keeps its kernel, whatever the engine later
                    torch.backends.quantized.engine = engine
                    self.packs[engine] = torch.ops.quantized.linear_prepack(qweight, bias)
            torch.backends.quantized.engine = "fbgemm"
        self.kernels: dict[int, str] = {}  # row-count class -> the kernel measured faster

    def forward(self, x: Tensor) -> Tensor:
        x = x.float().contiguous()
        rows = x.numel() // x.size(-1)
        bucket = _bucket(rows)
        if bucket not in self.kernels:
            self.kernels[bucket] = self._faster(x)
        return torch.ops.quantized.linear_dynamic(x, self.packs[self.kernels[bucket]], True)

    def _faster(self, x: Tensor) -> str:
        return _fastest_call({kernel: (lambda packed=packed: torch.ops.quantized.linear_dynamic(x, packed, True))
                         for kernel, packed in self.packs.items()})


def quantize_encoder(model) -> None:
    """Replace every ``nn.Linear`` of the encoder by an ``Int8Linear``, in place (the decoder's int8
    weights live in its ``FastDecoder``)."""
    for parent in list(model.encoder.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, Int8Linear(child.weight, child.bias))


def _norm(module: nn.Module):
    """The norm as a function: ``F.layer_norm`` directly (skips the module call), else the module."""
    if isinstance(module, nn.LayerNorm):
        shape, weight, bias, eps = module.normalized_shape, module.weight.detach(), module.bias, module.eps
        bias = None if bias is None else bias.detach()
        return lambda x: torch.layer_norm(x, shape, weight, bias, eps)  # (F.layer_norm's checks skipped)
    if isinstance(module, RMSNorm):
        return module
    raise TypeError(f"no fast path for the norm {type(module).__name__}")


def _power_of_two(n: int, least: int = 1) -> int:
    """``n`` rounded up to a power of two, at least ``least``: the captured step's shape classes."""
    return max(least, 1 << (n - 1).bit_length())


def padded_sentences(sentences: int) -> int:
    """The captured step's batch classes: sentences rounded up to a power of two, so that a search
    whose sentences finish one by one compiles once per class, not once per count."""
    return _power_of_two(sentences)


def _static_address(*tensors: Tensor) -> None:
    """CUDA graphs: the captured step reads and writes these in place, at the same address for a
    whole search (a new batch's re-records the graph rather than copying them at every step)."""
    for x in tensors:
        if x.device.type == "cuda":
            torch._dynamo.mark_static_address(x, guard=False)


def _pad_rows(x: Tensor, rows: int) -> Tensor:
    """``x`` with zero rows appended up to ``rows`` along the first dimension."""
    extra = rows - x.size(0)
    return x if extra == 0 else torch.cat([x, x.new_zeros(extra, *x.shape[1:])])


def _cache_views(kv: Tensor) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    """Per layer, the views a step uses of ``kv (layers, 2, N, H, C, Dh)``: where it writes a
    position (``(2, N, H, C, Dh)``), the keys transposed for the score product ``(N * H, Dh, C)``
    and the values ``(N * H, C, Dh)``, each a contiguous block (the heads folded into the batch).
    Made once per cache, not at every step."""
    slots = list(kv.unbind(0))
    keys, values = zip(*(_attended(slot) for slot in slots))
    return slots, list(keys), list(values)


def _attended(slot: Tensor) -> tuple[Tensor, Tensor]:
    """A layer's cache ``(2, N, H, C, Dh)`` as the score product's keys ``(N * H, Dh, C)`` and the
    values ``(N * H, C, Dh)``."""
    return slot[0].flatten(0, 1).transpose(1, 2), slot[1].flatten(0, 1)


class StepCache:
    """The state of ``N = B * beam`` hypotheses between steps.

    Attributes:
        kv: ``(layers, 2, N, H, capacity, Dh)``, self-attention keys (0) and values (1);
            positions ``0 .. length-1`` are filled. views: ``_cache_views(kv)``.
        cross_k: per layer ``(B * H, Dh, S)`` (transposed for the score product); cross_v:
            ``(B * H, S, Dh)``; cross_bias: ``(B * H, beam, S)``, 0 at real source positions and
            -inf at padding.
        beam: hypotheses per sentence. length: positions filled (the next token's position).
        static: for the captured step, every tensor holds ``padded_sentences(B)`` sentences (the
            ones past B zeros that nobody reads) and the unfilled positions hold zeros (it reads
            them under a mask).
    """

    def __init__(self, kv: Tensor, cross_k: list[Tensor], cross_v: list[Tensor], cross_bias: Tensor,
                 heads: int, beam: int, static: bool = False) -> None:
        self.kv, self.cross_k, self.cross_v, self.cross_bias = kv, cross_k, cross_v, cross_bias
        self.views = _cache_views(kv)
        self.heads, self.beam, self.length = heads, beam, 0
        self.static = static

    def reorder(self, rows: Tensor) -> None:
        """Hypothesis ``n`` continues hypothesis ``rows[n]``: only the filled positions move."""
        t = self.length
        if t == 0:
            return
        for block in self.kv.flatten(0, 1).unbind(0):  # (N, H, C, Dh) each: keys or values of a layer
            filled = block.narrow(2, 0, t)  # (one index_select over the 6-d cache measured ~1.7x slower)
            filled.narrow(0, 0, rows.numel()).copy_(filled.index_select(0, rows))

    def select_sentences(self, sentences: Tensor) -> None:
        """Keep only ``sentences`` (indices into the current B); each owns ``beam`` rows."""
        H, K = self.heads, self.beam
        rows = (sentences[:, None] * K + torch.arange(K, device=sentences.device)).reshape(-1)
        L, _, _, _, C, Dh = self.kv.shape
        t = self.length
        total = padded_sentences(sentences.numel()) if self.static else sentences.numel()
        kept = self.kv.new_zeros if self.static else self.kv.new_empty
        kv = kept(L, 2, total * K, H, C, Dh)
        if t:  # copy the filled positions only: the capacity can be several times the length so far
            for old, new in zip(self.kv.flatten(0, 1).unbind(0), kv.flatten(0, 1).unbind(0)):  # (as reorder)
                new.narrow(0, 0, rows.numel()).narrow(2, 0, t).copy_(old.narrow(2, 0, t).index_select(0, rows))
        self.kv, self.views = kv, _cache_views(kv)

        def per_sentence(x: Tensor) -> Tensor:  # (B*H, ...) -> (total*H, ...)
            return _pad_rows(x.view(-1, H, *x.shape[1:]).index_select(0, sentences).flatten(0, 1), total * H)

        self.cross_k = [per_sentence(k) for k in self.cross_k]
        self.cross_v = [per_sentence(v) for v in self.cross_v]
        self.cross_bias = per_sentence(self.cross_bias)
        if self.static:
            _static_address(self.kv, self.cross_bias, *self.cross_k, *self.cross_v)


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
        self.qkv = Dense(per_head(qkv.weight.detach()), bias, int8, per_head(scale[:, None])[:, 0], bf16=bf16)
        self.self_out = Dense(layer.self_attn.out.weight, layer.self_attn.out.bias, int8, bf16=bf16)
        self.cross_q = Dense(layer.cross_attn.q.weight, layer.cross_attn.q.bias, int8, scale=factor, bf16=bf16)
        self.cross_out = Dense(layer.cross_attn.out.weight, layer.cross_attn.out.bias, int8, bf16=bf16)
        ffn = layer.ffn
        self.w1 = Dense(ffn.w1.weight, ffn.w1.bias, int8, bf16=bf16)
        self.w2 = Dense(ffn.w2.weight, ffn.w2.bias, int8, bf16=bf16)
        self.w3 = Dense(ffn.w3.weight, ffn.w3.bias, int8, bf16=bf16) if ffn.w3 is not None else None
        self.act = ffn.act
        self.norms = [_norm(block.norm) for block in (layer.self_attn_block, layer.cross_attn_block, layer.ffn_block)]

    def denses(self) -> list[Dense]:
        return [d for d in (self.qkv, self.self_out, self.cross_q, self.cross_out, self.w1, self.w2, self.w3)
                if d is not None]


def unsupported(config) -> Optional[str]:
    """Why the fast step cannot decode a model of ``config`` (None: it can)."""
    if config.architecture != "encoder-decoder":
        return f"architecture={config.architecture}"
    if config.kv_heads != config.n_heads:
        return f"n_kv_heads={config.n_kv_heads}"
    if config.attention_window:
        return f"attention_window={config.attention_window}"
    return None


class FastDecoder:
    """A snapshot of a ``Transformer``'s decoder for search; see the module docstring.

    ``cache = fast.start(src, memory, beam, capacity)``, then ``logits = fast.step(tokens, cache)``
    with ``tokens (N,)`` one new token per hypothesis. The snapshot does not follow later changes of
    the model's weights: ``fast_decoder(model)`` rebuilds it when they change.
    """

    def __init__(self, model, precision: str = "fp32") -> None:
        if model.training:
            raise ValueError("FastDecoder is for inference: call model.eval() first")
        c = model.config
        self.config = c
        self.precision = precision
        int8 = precision == "int8"
        device = model.output.weight.device
        # bf16 on the CPU: the step holds bf16 weights and runs outside autocast (see Dense)
        self.bf16 = precision == "bf16" and device.type == "cpu"
        self.heads, self.head_dim = c.n_heads, c.d_k
        self.pre = c.norm_position == "pre"
        with torch.no_grad():
            self.layers = [_Layer(layer, c, int8, self.bf16) for layer in model.decoder]
            self.final_norm = _norm(model.decoder_norm) if model.decoder_norm is not None else None
            bias = model.output_bias.detach() if model.output_bias is not None else None
            self.output = Dense(model.output.weight, bias, int8, bf16=self.bf16)
            if int8:  # fp32 products compete with int8 only while the decoder stays in cache
                denses = self.denses()
                small = sum(d.weight.numel() * d.weight.element_size() for d in denses) <= INT8_FLOAT_MAX_BYTES
                for d in denses:
                    d.float_candidates = small
        embed = model.tgt_embed
        self.embed_weight = embed.tokens.weight.detach()
        self.embed_scale = embed.scale
        self.positions = (embed.table if embed.kind in ("sinusoidal", "sinusoidal_concat") else
                          embed.learned.weight.detach() if embed.kind == "learned" else None)
        self.rotary = model.rotary
        self.alibi = model.alibi
        # every layer's encoder-decoder keys and values in one product, once per sentence (fp32 at
        # every precision, as the model's own projections)
        projections = [layer.cross_attn.kv for layer in model.decoder]
        with torch.no_grad():
            weight = torch.cat([m.weight.detach() for m in projections])  # (layers * 2 * H * Dh, D)
            bias = None if projections[0].bias is None else torch.cat([m.bias.detach() for m in projections])
        self.cross_kv = Dense(weight, bias)
        self.compiled = None  # the captured step, after compile()

    def denses(self) -> list[Dense]:
        """Every product of a step, in the order the step calls them."""
        return [*(d for layer in self.layers for d in layer.denses()), self.output]

    def start(self, src: Tensor, memory: Tensor, beam: int, capacity: int) -> StepCache:
        """A cache for ``B * beam`` hypotheses over ``src (B, S)`` and its encoder output ``memory``."""
        B, S = src.shape
        H, Dh = self.heads, self.head_dim
        with torch.no_grad(), self._precision():
            memory = memory.float() if self.bf16 else memory
            L = len(self.layers)
            kv = self.cross_kv(memory.reshape(B * S, -1)).view(B, S, L, 2, H, Dh)
            cross_k = list(kv.select(3, 0).permute(2, 0, 3, 4, 1).reshape(L, B * H, Dh, S).unbind(0))
            cross_v = list(kv.select(3, 1).permute(2, 0, 3, 1, 4).reshape(L, B * H, S, Dh).unbind(0))
        static = self.compiled is not None
        bias = torch.zeros(B, H, beam, S, dtype=memory.dtype, device=memory.device)
        bias.masked_fill_(src[:, None, None, :] == self.config.pad_id, float("-inf"))
        if static:  # shape classes, so that a stream of batches compiles a few times, not once per batch:
            # sentences, source length and capacity rounded up to powers of two; the added source
            # positions are masked like padding
            total, capacity, wide = padded_sentences(B), _power_of_two(capacity, 16), _power_of_two(S, 8)
            cross_k = [F.pad(k, (0, wide - S)) for k in cross_k]
            cross_v = [F.pad(v, (0, 0, 0, wide - S)) for v in cross_v]
            bias = F.pad(bias, (0, wide - S), value=float("-inf"))
        else:
            total = B
        shape = (len(self.layers), 2, total * beam, H, capacity, Dh)
        # the captured step reads every position (masked): unfilled ones must not hold NaN garbage
        kv = memory.new_zeros(shape) if static else memory.new_empty(shape)
        cross_k, cross_v = [_pad_rows(k, total * H) for k in cross_k], [_pad_rows(v, total * H) for v in cross_v]
        bias = _pad_rows(bias.reshape(B * H, beam, -1), total * H)
        if static:
            _static_address(kv, bias, *cross_k, *cross_v)
        return StepCache(kv, cross_k, cross_v, bias, H, beam, static=static)

    def step(self, tokens: Tensor, cache: StepCache) -> Tensor:
        """``tokens (N,)`` at position ``cache.length`` -> next-token logits ``(N, V)``; the cache advances."""
        t = cache.length
        if t >= cache.kv.size(4) or t >= self.config.max_positions:
            raise ValueError(f"position {t} does not fit: the decoding cache holds {cache.kv.size(4)} positions, "
                             f"the model {self.config.max_positions}")
        if self.compiled is not None:
            position = torch.tensor(t, device=tokens.device)
            # a fresh tensor: search passes a column of its growing token matrix, whose stride
            # changes every step, and a new stride would recompile the step (until dynamo gives up);
            # .contiguous() is not enough, a column of one row counts as contiguous at any stride.
            # Padded to the cache's batch class with token 0 (rows nobody reads).
            N = tokens.size(0)
            padded = tokens.new_zeros(cache.kv.size(2))
            padded[:N] = tokens
            logits = self.compiled(padded, position, cache.kv, cache.cross_k, cache.cross_v, cache.cross_bias)[:N]
        else:
            with self._precision():
                logits = self._forward(tokens, t, cache.kv, cache.cross_k, cache.cross_v, cache.cross_bias,
                                       cache.views)
        cache.length = t + 1
        return logits

    def _precision(self):
        """bf16 on the CPU: autocast off (the step chooses bf16 or fp32 per product); else as the caller set it."""
        return torch.autocast("cpu", enabled=False) if self.bf16 else nullcontext()

    def compile(self) -> None:
        """Capture the step with ``torch.compile`` (CUDA graphs on a GPU): the position becomes a tensor,
        attention covers the cache's whole capacity under a mask, so every step has the same shapes
        and one compilation serves the whole search (a new batch size compiles once more)."""
        if self.bf16:
            raise ValueError("the CPU's bf16 step is not compiled (its choice of bf16 or fp32 per product is eager)")
        if self.precision == "int8":
            raise ValueError("the int8 step cannot be compiled (its quantized kernels are opaque to torch.compile)")
        if self.embed_weight.device.type == "cuda":
            compiled = torch.compile(self._forward, mode="reduce-overhead", dynamic=False)
        else:
            # the CPU: inductor's C++ wrapper calls the kernels without a Python statement per kernel,
            # and the products get W^T contiguous (F.linear's view: 1.4-1.65x slower on the output
            # projections at four rows, benchmarks/dense_layouts.py)
            for d in self.denses():
                d._transposed()  # (plain then multiplies in rows; this snapshot's eager choices never run)
            compiled = torch.compile(self._forward, dynamic=False, options={"cpp_wrapper": True})
        self.compiled = self._compile_limit()(compiled)

    @staticmethod
    def _compile_limit():
        """One compilation per shape class (sentences x source length x capacity, see ``start``):
        more classes than dynamo's default limit of 8 would fall back to eager steps, silently. The
        limit is raised around the step's calls only, not for the rest of the caller's process."""
        config = torch._dynamo.config
        name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
        return config.patch(**{name: max(getattr(config, name), 64)})

    def _forward(self, tokens: Tensor, t, kv: Tensor, cross_k: list[Tensor], cross_v: list[Tensor],
                 cross_bias: Tensor, views: Optional[tuple] = None) -> Tensor:
        """One step at position ``t``: an int (eager: attend over the filled positions only) or a 0-d
        tensor (static shapes for capture: attend over the whole capacity, later positions masked).
        ``views``: ``_cache_views(kv)`` (eager, made once per cache); the captured step takes its
        views of ``kv`` inside the graph, each layer's after writing it."""
        static = isinstance(t, Tensor)
        N, H, Dh = tokens.size(0), self.heads, self.head_dim
        K = cross_bias.size(1)
        B = N // K
        slots, all_keys, all_values = views if views is not None else (list(kv.unbind(0)), None, None)
        length = kv.size(4) if static else t + 1  # the attended positions

        dense = Dense.plain if static else Dense.__call__

        x = F.embedding(tokens, self.embed_weight)  # (N, D)
        if self.positions is not None:
            x = torch.add(_row(self.positions, t).to(x.dtype), x, alpha=self.embed_scale)
        elif self.embed_scale != 1.0:
            x = x * self.embed_scale
        key_bias = None  # ALiBi and, for static shapes, the mask of unfilled positions
        if self.alibi is not None or static:
            keys = torch.arange(length, device=x.device)  # positions of the attended keys
            if self.alibi is not None:
                key_bias = -(self.alibi.slopes[:, None] * (t - keys)).to(x.dtype)[:, None]
            if static:
                hidden = torch.zeros(length, dtype=x.dtype, device=x.device).masked_fill(keys > t, float("-inf"))
                key_bias = hidden if key_bias is None else key_bias + hidden
            # (N*H, 1, keys): added to the scores as they come out of bmm; the per-head form (scores
            # viewed (N, H, 1, keys) + bias) makes inductor's attention pattern fail on this mask
            # ("Attempting to broadcast a dimension"), and baddbmm made the captured step ~2x slower
            key_bias = key_bias.expand(N, H, 1, length).reshape(N * H, 1, length)
        for i, layer in enumerate(self.layers):
            # masked self-attention: the new query against positions 0..t
            h = layer.norms[0](x) if self.pre else x
            qkv = dense(layer.qkv, h).view(N, H, 3, Dh)  # q is pre-scaled by 1/sqrt(d_k)
            if self.rotary is not None:
                q = self._rotate(qkv.select(2, 0).reshape(N * H, 1, Dh), t)
                k = self._rotate(qkv.select(2, 1).reshape(N * H, 1, Dh), t)
                _write(slots[i], t, torch.stack([k.view(N, H, Dh), qkv.select(2, 2)]))
            else:
                q = qkv.select(2, 0).view(N * H, 1, Dh)
                _write(slots[i], t, qkv.narrow(2, 1, 2).permute(2, 0, 1, 3))  # (2, N, H, Dh): its key and value
            if static:
                keys, values = _attended(kv[i])
            else:
                keys, values = all_keys[i].narrow(2, 0, length), all_values[i].narrow(1, 0, length)
            scores = torch.bmm(q, keys)  # (N*H, 1, keys)
            if key_bias is not None:
                scores = scores + key_bias
            a = torch.bmm(scores.softmax(-1), values).view(N, H * Dh)  # (N, H*Dh)
            out = dense(layer.self_out, a)
            x = x + out if self.pre else layer.norms[0](x + out)
            # encoder-decoder attention: the K beams of a sentence share its keys
            h = layer.norms[1](x) if self.pre else x
            q = dense(layer.cross_q, h)
            q = q.view(N * H, 1, Dh) if K == 1 else q.view(B, K, H, Dh).transpose(1, 2).reshape(B * H, K, Dh)
            scores = torch.baddbmm(cross_bias, q, cross_k[i])  # (B*H, K, S)
            a = torch.bmm(scores.softmax(-1), cross_v[i])  # (B*H, K, Dh)
            a = a.view(N, H * Dh) if K == 1 else a.view(B, H, K, Dh).transpose(1, 2).reshape(N, H * Dh)
            out = dense(layer.cross_out, a)
            x = x + out if self.pre else layer.norms[1](x + out)
            # feed-forward
            h = layer.norms[2](x) if self.pre else x
            if static or layer.w1.int8 is not None or layer.w1.uses_bf16(h.size(0)) or \
                    layer.w1.layout(h) != "columns":
                f = layer.act(dense(layer.w1, h))
                if layer.w3 is not None:
                    f = f * dense(layer.w3, h)
                out = dense(layer.w2, f)
            else:  # feature-major: the wide hidden layer is never transposed
                h_t = h.t()
                f = layer.act(layer.w1.columns(h_t))  # (F, N)
                if layer.w3 is not None:
                    f = f * layer.w3.columns(h_t)
                out = layer.w2.columns(f).t()  # (N, D), a transposed view
            x = x + out if self.pre else layer.norms[2](x + out)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return dense(self.output, x)  # (N, V)

    def _rotate(self, x: Tensor, t: int) -> Tensor:
        cos = _row(self.rotary.cos, t).to(x.dtype)  # (Dh/2,)
        sin = _row(self.rotary.sin, t).to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def _row(table: Tensor, t) -> Tensor:
    """``table[t]`` for an int or a 0-d tensor position (indexing with a tensor would read it on the host)."""
    return table[t] if not isinstance(t, Tensor) else table.index_select(0, t.view(1))[0]


def _write(buffer: Tensor, t, value: Tensor) -> None:
    """``buffer[..., t, :] = value``: position ``t`` (an int or a 0-d tensor) of a ``(..., C, Dh)`` cache."""
    if isinstance(t, Tensor):  # (the leading dimensions flattened: inductor fails on index_copy_ over 5)
        C, Dh = buffer.shape[-2:]
        buffer.view(-1, C, Dh).index_copy_(1, t.view(1), value.reshape(-1, 1, Dh))
    else:
        buffer.select(buffer.dim() - 2, t).copy_(value)


def fast_decoder(model, precision: str = "fp32", compiled: bool = False) -> FastDecoder:
    """The model's ``FastDecoder`` for ``precision`` (compiled or not), rebuilt only when the weights
    changed since it was built (``snapshot``)."""
    def make() -> FastDecoder:
        decoder = FastDecoder(model, precision)
        if compiled:
            decoder.compile()
        return decoder

    return snapshot(model, (precision, compiled), make)


def snapshot(model, key: tuple, make: Callable[[], object]):
    """What ``make()`` builds from ``model``'s weights (a ``FastDecoder``, a ``FastEncoder``), made once
    per ``key`` and kept on the model until its weights change.

    The weights' in-place version counters (bumped by every optimizer step) tell whether the
    snapshots are stale, so validation during training always decodes with the current weights;
    a replaced parameter or module is seen too.
    """
    cached = getattr(model, "_fast_snapshots", None)
    if cached is not None and cached.registrations == _registrations[0]:
        parameters = cached.parameters  # the same objects: only their contents can have changed
    else:  # a module, parameter or buffer was registered somewhere since: walk the model again
        parameters = list(model.parameters())
    version = _weights_version(parameters)
    if cached is None or cached.version != version:
        cached = _Snapshots(version)
        object.__setattr__(model, "_fast_snapshots", cached)  # not a submodule, never saved
    cached.parameters, cached.registrations = parameters, _registrations[0]
    if key not in cached.built:
        cached.built[key] = make()
    return cached.built[key]


class _Snapshots:
    """A model's snapshots (``snapshot``), the weights' version they were made at, and the model's
    parameters as last walked."""

    def __init__(self, version: tuple) -> None:
        self.version = version
        self.built: dict = {}
        self.parameters: list = []
        self.registrations = -1


# How many modules, parameters and buffers have been registered in this process (a replacement
# included; PyTorch's global registration hooks count them): while it stays, a model's parameters
# are the same objects, and ``fast_decoder`` checks their contents without walking the model's
# modules again (0.1-0.15 ms a search for the benchmarks' `small` model: a sixth of its batch-1 step).
_registrations = [0]


def _count_registration(*args) -> None:
    _registrations[0] += 1


for _hook in ("register_module_parameter_registration_hook", "register_module_buffer_registration_hook",
              "register_module_module_registration_hook"):
    getattr(torch.nn.modules.module, _hook)(_count_registration)


def _weights_version(parameters) -> tuple:
    """Changes when a weight is replaced or updated in place. A model made under ``inference_mode``
    has inference tensors, which keep no version counter: for them only a replacement is seen."""
    return tuple((id(p), p.data_ptr(), -1 if p.is_inference() else p._version) for p in parameters)
