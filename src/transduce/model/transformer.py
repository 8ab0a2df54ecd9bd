"""§3 The Transformer, assembled in one place: embeddings, the two stacks, the output projection.

The descendants are assembled here too, from the same layers: ``decoder-only`` (GPT) keeps the
target embedding, the decoder stack with its layers' encoder-decoder attention removed, and the
output projection; ``encoder-only`` (BERT) keeps the source embedding, the encoder stack and an
output projection that predicts the masked tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from ..config.inputs import reads_tokens
from .cache import DecoderCache, LayerCache
from .feed_forward import MixtureOfExperts, make_norm
from .inputs import make_front_end, pool
from .layers import DecoderLayer, EncoderLayer
from .masks import local_mask
from .positions import ALiBi, Embeddings, RelativeBuckets, Rotary


@dataclass
class Attention:
    """Attention weights of every layer and head, from ``forward(..., need_weights=True)``.

    encoder: per layer ``(B, H, S, S)``; decoder: per layer ``(B, H, T, T)``; cross: ``(B, H, T,
    S)``.
    """

    encoder: list[Tensor]
    decoder: list[Tensor]
    cross: list[Tensor]


class Transformer(nn.Module):
    """The encoder-decoder Transformer of "Attention Is All You Need" (§3, Figure 1), and its
    decoder-only and encoder-only descendants (``config.architecture``).

    Encoder-decoder: ``model(src, tgt_in)`` returns logits ``(B, T, V)``. For generation:
    ``memory = model.encode(src)``, ``cache = model.start_decoding(src, memory)``, then
    ``logits = model.decode(tokens, cache)`` one step (or a forced prefix) at a time.
    Decoder-only: ``model(tokens)`` returns next-token logits ``(B, T, V)`` (causal), and
    ``cache = model.start_decoding(tokens)`` + ``decode`` generate. Encoder-only: ``model(tokens)``
    returns the logits of the masked-token prediction at every position (bidirectional).
    Padding is ``config.pad_id``, always on the right.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        # the source's, or the only one (an image or a recording has none)
        tokens = nn.Embedding(c.vocab_size, c.d_model) if reads_tokens(c) else None
        tgt_tokens = (
            None
            if not c.has_decoder
            else tokens
            if tokens is not None and (c.tying in ("all", "embeddings") or not c.has_encoder)
            else nn.Embedding(c.target_vocab_size, c.d_model)
        )
        # what the encoder reads: token ids, or an image's patches (model.inputs)
        self.src_embed = make_front_end(c, tokens) if c.has_encoder else None
        self.tgt_embed = Embeddings(c, tgt_tokens) if c.has_decoder else None
        self.encoder = nn.ModuleList(EncoderLayer(c) for _ in range(c.encoder_layers))
        cross = c.has_encoder
        self.decoder = nn.ModuleList(DecoderLayer(c, cross) for _ in range(c.decoder_layers))
        # Pre-LN leaves the residual stream un-normalized, so each stack ends with a norm.
        pre = c.norm_position == "pre"
        self.encoder_norm = make_norm(c) if pre and c.has_encoder else None
        self.decoder_norm = make_norm(c) if pre and c.has_decoder else None
        self.output = nn.Linear(c.d_model, c.output_size, bias=False)
        self.output_bias = nn.Parameter(torch.zeros(c.output_size)) if c.output_bias else None
        self.output_transform = OutputTransform(c) if c.output_transform else None
        # speech: CTC's per-position predictions from the encoder (blank = pad), trained beside
        # the decoder; ``ctc_output`` holds the last training pass's (logits, positions)
        self.ctc = nn.Linear(c.d_model, c.target_vocab_size) if c.ctc_weight else None
        self.ctc_output: Optional[tuple[Tensor, Tensor]] = None
        self.rotary = Rotary(c.d_k, c.max_positions) if c.positional == "rope" else None
        self.alibi = ALiBi(c.n_heads) if c.positional == "alibi" else None
        # T5's buckets: one table per stack, bidirectional in the encoder, causal in the decoder
        relative = c.positional == "relative"
        self.encoder_relative = RelativeBuckets(c, True) if relative and c.has_encoder else None
        self.decoder_relative = RelativeBuckets(c, False) if relative and c.has_decoder else None
        (t5_init if c.init == "t5" else paper_init)(self)
        if c.tying in ("decoder", "all"):  # the output shares the (target's, or only) embedding
            self.output.weight = tgt_tokens.weight if c.has_decoder else tokens.weight
        # a parser's part-of-speech tags of the source words, predicted from the encoder beside
        # the decoder; ``tag_output`` holds the last training pass's logits (B, S, V). Made after
        # the model's own weights are drawn, so that a model with the head starts from the same
        # weights as one without (a lever measured against the model it adds to).
        self.tagger = nn.Linear(c.d_model, c.target_vocab_size) if c.tag_weight else None
        self.tag_output: Optional[Tensor] = None
        # the mixture-of-experts layers, found once (a tuple: not registered twice), for the train
        # step
        self._experts = tuple(m for m in self.modules() if isinstance(m, MixtureOfExperts))

    def position_bias(self, stack: str, queries: int, keys: int, offset: int = 0,
                      key_offset: int = 0) -> Optional[Tensor]:
        """The self-attention bias of ``stack`` ("encoder" or "decoder") for queries at ``offset
        ..`` against keys at ``key_offset ..``: ALiBi's or the stack's relative buckets ``(1, H, T,
        S)``, computed once and shared by the stack's layers; None for the other positions."""
        source = self.alibi or (self.encoder_relative if stack == "encoder" else
                                self.decoder_relative)
        return None if source is None else source(queries, keys, offset, key_offset)

    # --- encoder -------------------------------------------------------------------------------

    def encode(self, src: Tensor, need_weights: bool = False):
        """``src`` (token ids ``(B, S)``, or images) -> encoder output ``(B, S, D)`` (and per-layer
        weights if asked)."""
        x = self.src_embed(src)  # (B, S, D)
        mask = self.src_embed.mask(src)  # (B, 1, 1, S), or None: every position is real
        S = x.size(1)
        if self.config.attention_window:
            local = local_mask(S, S, self.config.attention_window, False, device=x.device)
            mask = local if mask is None else mask & local
        bias = self.position_bias("encoder", S, S)
        weights = []
        for layer in self.encoder:
            x, w = layer(x, mask, self.rotary, bias, need_weights)
            weights.append(w)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return (x, weights) if need_weights else x

    # --- decoder -------------------------------------------------------------------------------

    def _project(self, x: Tensor, norm: str = "decoder") -> Tensor:
        final_norm = self.decoder_norm if norm == "decoder" else None  # encode() applies its own
        if final_norm is not None:
            x = final_norm(x)
        if self.output_transform is not None:
            x = self.output_transform(x)
        if self.config.scale_output:
            x = x * self.config.d_model**-0.5
        logits = self.output(x)  # (N, T, V)
        return logits if self.output_bias is None else logits + self.output_bias

    def forward(self, src: Tensor, tgt_in: Optional[Tensor] = None, need_weights: bool = False,
                select: Optional[Tensor] = None):
        """Teacher-forced pass: ``src (B, S)``, ``tgt_in (B, T)`` -> logits ``(B, T, V)``; a
        decoder-only or encoder-only model takes its tokens ``(B, T)`` alone.

        With ``need_weights`` the attention is computed explicitly and returned as ``Attention``.
        With ``select``, a boolean ``(B, T)`` mask or the ``(N,)`` indices of positions in the
        flattened ``B * T``, only those positions are projected to the vocabulary and the logits are
        ``(N, V)``: training skips the padded positions (and BERT the unmasked ones) this way.
        Indices computed on the host avoid the device sync a boolean mask costs on a GPU.
        """
        c = self.config
        if c.architecture == "encoder-only":
            x, enc_w = (
                self.encode(src, need_weights=True) if need_weights else (self.encode(src), [])
            )
            if c.classes:  # a classifier: one vector per input -> logits (B, 1, classes)
                x = pool(x, c.pooling, self.src_embed.mask(src))
            logits = self._project(_select(x, select), norm=None)
            return (logits, Attention(enc_w, [], [])) if need_weights else logits
        if c.architecture == "decoder-only":
            if tgt_in is not None:
                raise ValueError("a decoder-only model takes one tensor of tokens: model(tokens)")
            src, tgt_in = None, src
        if src is not None:
            memory, enc_w = (
                self.encode(src, need_weights=True) if need_weights else (self.encode(src), [])
            )
            memory_mask = self.src_embed.mask(src)
            if self.ctc is not None and self.training:
                self.ctc_output = (self.ctc(memory), memory_mask[:, 0, 0].sum(1))
            if self.tagger is not None and self.training:
                self.tag_output = self.tagger(memory)
        else:
            memory, enc_w, memory_mask = None, [], None
        T = tgt_in.size(1)
        bias = self.position_bias("decoder", T, T)
        self_mask = (
            local_mask(T, T, c.attention_window, True, device=tgt_in.device)
            if c.attention_window
            else None
        )
        x = self.tgt_embed(tgt_in)  # (B, T, D)
        dec_w, cross_w = [], []
        for layer in self.decoder:
            # (B, G, S, Dh)
            k, v = layer.cross_attn.project_memory(memory) if memory is not None else (None, None)
            x, sw, cw = layer(x, k, v, memory_mask, self_mask=self_mask, causal=self_mask is None,
                              rotary=self.rotary, bias=bias, need_weights=need_weights)
            dec_w.append(sw)
            cross_w.append(cw)
        logits = self._project(_select(x, select))
        return (logits, Attention(enc_w, dec_w, cross_w)) if need_weights else logits

    def start_decoding(self, src: Tensor, memory: Optional[Tensor] = None, beam: int = 1,
                       capacity: int = 32) -> DecoderCache:
        """A fresh cache for ``B * beam`` hypotheses: cross keys/values computed once per sentence.

        Decoder-only: ``src`` is the batch of prompts (only its size is used) and ``memory`` None.
        """
        B = src.size(0)
        c = self.config
        if not c.has_decoder:
            raise ValueError("an encoder-only model does not decode")
        capacity = min(capacity, c.attention_window) if c.attention_window else capacity
        layers = []
        for layer in self.decoder:
            k, v = (
                layer.cross_attn.project_memory(memory)
                if layer.cross_attn is not None
                else (None, None)
            )
            # (the first append fixes the dtype)
            like = memory if memory is not None else self.output.weight
            empty = like.new_empty(B * beam, c.kv_heads, capacity, c.d_k)  # (B*K, G, C, Dh)
            layers.append(
                LayerCache(empty, torch.empty_like(empty), k, v, window=c.attention_window)
            )
        return DecoderCache(layers, self.src_embed.mask(src) if c.has_encoder else None, beam)

    def decode(self, tokens: Tensor, cache: DecoderCache, need_weights: bool = False):
        """Incremental decoding: ``tokens (N, T)`` continue the hypotheses in ``cache``.

        N = B * cache.beam. Returns logits ``(N, T, V)`` (and cross weights per layer if asked);
        the cache advances by T positions.
        """
        c = self.config
        offset, T = cache.length, tokens.size(1)
        # The keys the new queries meet: positions ``start .. offset + T - 1`` (a window drops the
        # oldest: at most W - 1 of them stay, so a single new token sees them all).
        start = max(cache.start, offset - c.attention_window + 1) if c.attention_window else 0
        keys = offset + T - start
        self_mask = (
            local_mask(T, keys, c.attention_window, True, offset, start, tokens.device)
            if T > 1
            else None
        )
        bias = self.position_bias("decoder", T, keys, offset, start)
        x = self.tgt_embed(tokens, offset)  # (N, T, D)
        cross_w = []
        for layer, lc in zip(self.decoder, cache.layers):
            x, _, cw = layer(
                x,
                lc.cross_k,
                lc.cross_v,
                cache.memory_mask,
                self_mask=self_mask,
                cache=lc,
                rotary=self.rotary,
                bias=bias,
                need_weights=need_weights,
            )
            cross_w.append(cw)
        logits = self._project(x)
        return (logits, cross_w) if need_weights else logits

    def cache_bytes_per_token(self, dtype: torch.dtype = torch.float32) -> int:
        """Bytes the decoding cache holds for each position of one hypothesis: keys and values of
        the n_kv_heads heads in every decoder layer (the cross-attention's are per sentence)."""
        c = self.config
        return (
            c.decoder_layers * 2 * c.kv_heads * c.d_k * torch.empty((), dtype=dtype).element_size()
        )

    # --- bookkeeping ---------------------------------------------------------------------------

    def num_parameters(self) -> dict[str, int]:
        """Parameters per component, each shared tensor counted once (where it first appears)."""
        seen: set[int] = set()
        counts = {"embeddings": 0, "encoder": 0, "decoder": 0, "output": 0}
        groups = [
            ("embeddings", [self.src_embed, self.tgt_embed]),
            ("encoder", [self.encoder, self.encoder_norm, self.encoder_relative]),
            ("decoder", [self.decoder, self.decoder_norm, self.decoder_relative]),
            ("output", [self.output, self.output_transform, self.ctc, self.tagger]),
        ]
        for name, modules in groups:
            for module in filter(None, modules):
                for p in module.parameters():
                    if id(p) not in seen:
                        seen.add(id(p))
                        counts[name] += p.numel()
        if self.output_bias is not None:
            counts["output"] += self.output_bias.numel()
        counts["total"] = sum(counts.values())
        # a mixture of experts computes k of its E experts per position: the parameters a token
        # meets
        idle = sum((len(m.experts) - m.top_k) * sum(p.numel() for p in m.experts[0].parameters())
                   for m in self._experts)
        counts["active"] = counts["total"] - idle
        return counts

    def moe_loss(self) -> Optional[Tensor]:
        """The mean load-balancing loss of the mixture-of-experts layers in the last forward pass
        (None for the dense feed-forward networks)."""
        losses = [m.aux_loss for m in self._experts if m.aux_loss is not None]
        return torch.stack(losses).mean() if losses else None


class OutputTransform(nn.Module):
    """BERT's masked-LM head before the output projection: norm(act(x W + b))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        from .feed_forward import _ACTIVATIONS

        self.dense = nn.Linear(config.d_model, config.d_model)
        self.act = _ACTIVATIONS[config.activation if config.activation in _ACTIVATIONS else "gelu"]
        self.norm = make_norm(config)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.act(self.dense(x)))


def _select(x: Tensor, select: Optional[Tensor]) -> Tensor:
    """``x (B, T, D)`` at the positions ``select`` picks (a boolean ``(B, T)`` mask or flat
    indices)."""
    if select is None:
        return x
    if select.dtype == torch.bool:
        return x[select]  # (N, D)
    return x.flatten(0, 1).index_select(0, select)  # (N, D)


# --- initial weights: the paper does not give its initialization --------------------------------


def paper_init(model: nn.Module) -> None:
    """Xavier-uniform projections (as torch.nn.Transformer), N(0, d_model^-1/2) embeddings so that
    embeddings scaled by sqrt(d_model) have unit variance (as fairseq), zero biases."""
    for name, p in model.named_parameters():
        if p.dim() == 2 and "embed" not in name:
            nn.init.xavier_uniform_(p)
        elif p.dim() == 2:
            nn.init.normal_(p, std=model.config.d_model**-0.5)
        elif name.endswith("bias"):
            nn.init.zeros_(p)


def t5_init(model: nn.Module) -> None:
    """Normal weights whose standard deviation is the inverse square root of the width they read
    (d_model, d_ff, or h * d_k), unit-variance embeddings and output, zero biases, unit norms.

    The query projection reads d_model but gets (d_model * d_k)^-1/2: T5 computes its attention
    without the 1/sqrt(d_k) of §3.2.1 and puts that factor into the initial queries instead.
    """
    c = model.config
    D, inner = c.d_model, c.n_heads * c.d_k

    def normal(weight, std: float) -> None:
        nn.init.normal_(weight, std=std)

    for name, p in model.named_parameters():  # vectors first: norms 1, biases 0
        if p.dim() == 1:
            (nn.init.zeros_ if name.endswith("bias") else nn.init.ones_)(p)
    for layer in [*model.encoder, *model.decoder]:
        normal(layer.self_attn.qkv.weight, D**-0.5)
        normal(layer.self_attn.qkv.weight[:inner], (D * c.d_k) ** -0.5)
        normal(layer.self_attn.out.weight, inner**-0.5)
        cross = getattr(layer, "cross_attn", None)
        if cross is not None:
            normal(cross.q.weight, (D * c.d_k) ** -0.5)
            normal(cross.kv.weight, D**-0.5)
            normal(cross.out.weight, inner**-0.5)
        for expert in getattr(layer.ffn, "experts", [layer.ffn]):
            normal(expert.w1.weight, D**-0.5)
            if expert.w3 is not None:
                normal(expert.w3.weight, D**-0.5)
            normal(expert.w2.weight, c.d_ff**-0.5)
        if hasattr(layer.ffn, "router"):
            normal(layer.ffn.router.weight, D**-0.5)
    for table in (model.encoder_relative, model.decoder_relative):
        if table is not None:
            normal(table.buckets.weight, D**-0.5)
    for embed in (model.src_embed, model.tgt_embed):
        if isinstance(embed, Embeddings):
            normal(embed.tokens.weight, 1.0)
            if embed.kind == "learned":
                normal(embed.learned.weight, D**-0.5)
    normal(model.output.weight, 1.0)  # (the embedding itself when tied: tying comes after)
    if model.output_transform is not None:
        normal(model.output_transform.dense.weight, D**-0.5)
