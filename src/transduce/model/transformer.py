"""§3 The Transformer, assembled in one place: embeddings, the two stacks, the output projection."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from .cache import DecoderCache, LayerCache
from .feed_forward import make_norm
from .layers import DecoderLayer, EncoderLayer
from .masks import causal_mask, padding_mask
from .positions import ALiBi, Embeddings, Rotary


@dataclass
class Attention:
    """Attention weights of every layer and head, from ``forward(..., need_weights=True)``.

    encoder: per layer ``(B, H, S, S)``; decoder: per layer ``(B, H, T, T)``; cross: ``(B, H, T, S)``.
    """

    encoder: list[Tensor]
    decoder: list[Tensor]
    cross: list[Tensor]


class Transformer(nn.Module):
    """The encoder-decoder Transformer of "Attention Is All You Need" (§3, Figure 1).

    ``model(src, tgt_in)`` returns logits ``(B, T, V)``. For generation: ``memory = model.encode(src)``,
    ``cache = model.start_decoding(src, memory)``, then ``logits = model.decode(tokens, cache)`` one
    step (or a forced prefix) at a time. Padding is ``config.pad_id``, always on the right.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        src_tokens = nn.Embedding(c.vocab_size, c.d_model)
        tgt_tokens = src_tokens if c.tying == "all" else nn.Embedding(c.target_vocab_size, c.d_model)
        self.src_embed = Embeddings(c, src_tokens)
        self.tgt_embed = Embeddings(c, tgt_tokens)
        self.encoder = nn.ModuleList(EncoderLayer(c) for _ in range(c.encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(c) for _ in range(c.decoder_layers))
        # Pre-LN leaves the residual stream un-normalized, so each stack ends with a norm.
        self.encoder_norm = make_norm(c) if c.norm_position == "pre" else None
        self.decoder_norm = make_norm(c) if c.norm_position == "pre" else None
        self.output = nn.Linear(c.d_model, c.target_vocab_size, bias=False)
        self.output_bias = nn.Parameter(torch.zeros(c.target_vocab_size)) if c.output_bias else None
        self.rotary = Rotary(c.d_k, c.max_positions) if c.positional == "rope" else None
        self.alibi = ALiBi(c.n_heads) if c.positional == "alibi" else None
        self._init_weights()
        if c.tying in ("decoder", "all"):
            self.output.weight = tgt_tokens.weight  # one tensor, shared storage

    def _init_weights(self) -> None:
        # The paper does not say; Xavier for projections (as torch.nn.Transformer) and N(0, D^-1/2)
        # for embeddings, so that scaled embeddings have unit variance (as fairseq).
        for name, p in self.named_parameters():
            if p.dim() == 2 and "embed" not in name:
                nn.init.xavier_uniform_(p)
            elif p.dim() == 2:
                nn.init.normal_(p, std=self.config.d_model**-0.5)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    # --- encoder -------------------------------------------------------------------------------

    def encode(self, src: Tensor, need_weights: bool = False):
        """``src (B, S)`` token ids -> encoder output ``(B, S, D)`` (and per-layer weights if asked)."""
        mask = padding_mask(src, self.config.pad_id)  # (B, 1, 1, S)
        S = src.size(1)
        bias = self.alibi(S, S) if self.alibi is not None else None
        x = self.src_embed(src)  # (B, S, D)
        weights = []
        for layer in self.encoder:
            x, w = layer(x, mask, self.rotary, bias, need_weights)
            weights.append(w)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return (x, weights) if need_weights else x

    # --- decoder -------------------------------------------------------------------------------

    def _project(self, x: Tensor) -> Tensor:
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        logits = self.output(x)  # (N, T, V)
        return logits if self.output_bias is None else logits + self.output_bias

    def forward(self, src: Tensor, tgt_in: Tensor, need_weights: bool = False, select: Optional[Tensor] = None):
        """Teacher-forced pass: ``src (B, S)``, ``tgt_in (B, T)`` -> logits ``(B, T, V)``.

        With ``need_weights`` the attention is computed explicitly and returned as ``Attention``.
        With ``select``, a boolean ``(B, T)`` mask or the ``(N,)`` indices of positions in the
        flattened ``B * T``, only those positions are projected to the vocabulary and the logits are
        ``(N, V)``: training skips the padded positions this way. Indices computed on the host
        avoid the device sync a boolean mask costs on a GPU.
        """
        if need_weights:
            memory, enc_w = self.encode(src, need_weights=True)
        else:
            memory, enc_w = self.encode(src), []
        memory_mask = padding_mask(src, self.config.pad_id)
        T = tgt_in.size(1)
        bias = self.alibi(T, T) if self.alibi is not None else None
        x = self.tgt_embed(tgt_in)  # (B, T, D)
        dec_w, cross_w = [], []
        for layer in self.decoder:
            k, v = layer.cross_attn.project_memory(memory)  # (B, H, S, Dh)
            x, sw, cw = layer(x, k, v, memory_mask, causal=True, rotary=self.rotary, bias=bias,
                              need_weights=need_weights)
            dec_w.append(sw)
            cross_w.append(cw)
        if select is not None and select.dtype == torch.bool:
            x = x[select]  # (N, D): the real target positions only
        elif select is not None:
            x = x.flatten(0, 1).index_select(0, select)  # (N, D)
        logits = self._project(x)
        return (logits, Attention(enc_w, dec_w, cross_w)) if need_weights else logits

    def start_decoding(self, src: Tensor, memory: Tensor, beam: int = 1, capacity: int = 32) -> DecoderCache:
        """A fresh cache for ``B * beam`` hypotheses: cross keys/values computed once per sentence."""
        B = src.size(0)
        c = self.config
        layers = []
        for layer in self.decoder:
            k, v = layer.cross_attn.project_memory(memory)  # (B, H, S, Dh)
            empty = memory.new_empty(B * beam, c.n_heads, capacity, c.d_k)  # (B*K, H, C, Dh)
            layers.append(LayerCache(empty, torch.empty_like(empty), k, v))
        return DecoderCache(layers, padding_mask(src, c.pad_id), beam)

    def decode(self, tokens: Tensor, cache: DecoderCache, need_weights: bool = False):
        """Incremental decoding: ``tokens (N, T)`` continue the hypotheses in ``cache``.

        N = B * cache.beam. Returns logits ``(N, T, V)`` (and cross weights per layer if asked);
        the cache advances by T positions.
        """
        offset = cache.length
        T = tokens.size(1)
        total = offset + T
        self_mask = causal_mask(T, total, offset, tokens.device) if T > 1 else None
        bias = self.alibi(T, total, offset) if self.alibi is not None else None
        x = self.tgt_embed(tokens, offset)  # (N, T, D)
        cross_w = []
        for layer, lc in zip(self.decoder, cache.layers):
            x, _, cw = layer(x, lc.cross_k, lc.cross_v, cache.memory_mask, self_mask=self_mask, cache=lc,
                             rotary=self.rotary, bias=bias, need_weights=need_weights)
            cross_w.append(cw)
        logits = self._project(x)
        return (logits, cross_w) if need_weights else logits

    # --- bookkeeping ---------------------------------------------------------------------------

    def num_parameters(self) -> dict[str, int]:
        """Parameters per component, each shared tensor counted once (where it first appears)."""
        seen: set[int] = set()
        counts = {"embeddings": 0, "encoder": 0, "decoder": 0, "output": 0}
        groups = [
            ("embeddings", [self.src_embed, self.tgt_embed]),
            ("encoder", [self.encoder] + ([self.encoder_norm] if self.encoder_norm is not None else [])),
            ("decoder", [self.decoder] + ([self.decoder_norm] if self.decoder_norm is not None else [])),
            ("output", [self.output]),
        ]
        for name, modules in groups:
            for module in modules:
                for p in module.parameters():
                    if id(p) not in seen:
                        seen.add(id(p))
                        counts[name] += p.numel()
        if self.output_bias is not None:
            counts["output"] += self.output_bias.numel()
        counts["total"] = sum(counts.values())
        return counts
