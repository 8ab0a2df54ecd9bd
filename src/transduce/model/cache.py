"""The decoder's explicit, typed cache (§6.1: decode step by step, never recompute the prefix).

Each decoder layer keeps its self-attention keys/values, which grow by one position a step (with
``attention_window`` W, only the last W are kept: the oldest are dropped as new ones come), and the
cross-attention keys/values of the encoder output, computed once per *sentence* (none in a
decoder-only model). With grouped-query attention only the n_kv_heads key/value heads are kept.
During beam search the query batch is sentences x beams, but the cross keys stay per sentence:
attention folds the beams into the query length (see ``attention.attend``), so reordering beams
never touches them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor


@dataclass
class LayerCache:
    """One decoder layer's cache.

    Attributes:
        self_k, self_v: ``(B*K, G, C, Dh)`` buffers of capacity C (G key/value heads); the first
            ``length - start`` positions hold keys/values (rotated for RoPE) of the positions
            ``start .. length - 1``. cross_k, cross_v: ``(B, G, S, Dh)``, the projected encoder
            output, one per sentence; None in a decoder-only model.
        length: positions decoded. It advances by the number of new tokens on each ``append``:
            after a 2-token prefix and 3 single steps it is 5, and the next token sits at position
    5.
        window: 0 keeps every position; W keeps only what a query can still see (its W - 1
            predecessors), so the buffers never hold more than W - 1 + T positions.
        start: the position of the oldest key kept (0 without a window).
    """

    self_k: Tensor
    self_v: Tensor
    cross_k: Optional[Tensor]
    cross_v: Optional[Tensor]
    length: int = 0
    window: int = 0
    start: int = 0

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``k, v (N, G, T, Dh)`` at positions ``length ..``; return the keys/values the new
        queries may see, positions ``start .. length - 1`` after the append, ``(N, G, kept,
        Dh)``."""
        if self.self_k.dtype != k.dtype:  # e.g. bf16 keys under autocast: the buffers follow
            self.self_k, self.self_v = self.self_k.to(k.dtype), self.self_v.to(k.dtype)
        if self.window:
            # what even the first new query cannot see
            self._drop_before(self.length - self.window + 1)
        used = self.length - self.start
        end = used + k.size(2)
        if end > self.self_k.size(2):  # grow geometrically: reorders copy at most 2x what is used
            capacity = max(end, 2 * self.self_k.size(2))
            self.self_k = _grow(self.self_k, capacity, used)
            self.self_v = _grow(self.self_v, capacity, used)
        self.self_k[:, :, used:end] = k
        self.self_v[:, :, used:end] = v
        self.length += k.size(2)
        return self.self_k[:, :, :end], self.self_v[:, :, :end]  # (N, G, kept, Dh)

    def _drop_before(self, position: int) -> None:
        drop = position - self.start
        if drop <= 0:
            return
        used = self.length - self.start
        for buffer in (self.self_k, self.self_v):  # shift the kept positions to the front
            buffer[:, :, : used - drop] = buffer[:, :, drop:used].clone()
        self.start = position

    def truncate(self, length: int) -> None:
        """Forget the positions from ``length`` on (a speculative search's rejected tokens); the
        next append writes at ``length``."""
        if self.window and length < self.length:
            raise ValueError("a cache with an attention window drops old positions: it cannot "
                             "be rolled back")
        self.length = min(self.length, length)

    def reorder(self, indices: Tensor) -> None:
        """Hypothesis ``n`` continues hypothesis ``indices[n]`` (beam search bookkeeping)."""
        self.self_k = self.self_k.index_select(0, indices)
        self.self_v = self.self_v.index_select(0, indices)

    def select_sentences(self, sentences: Tensor, beam: int) -> None:
        """Keep only ``sentences`` (indices into the B sentences); each owns ``beam`` rows."""
        rows = (sentences[:, None] * beam + torch.arange(beam, device=sentences.device)).reshape(-1)
        self.reorder(rows)
        if self.cross_k is not None:
            self.cross_k = self.cross_k.index_select(0, sentences)
            self.cross_v = self.cross_v.index_select(0, sentences)

    def repeat(self, n: int) -> None:
        """Repeat each self-attention row ``n`` times (one sentence -> ``n`` beams)."""
        self.self_k = self.self_k.repeat_interleave(n, dim=0)
        self.self_v = self.self_v.repeat_interleave(n, dim=0)


def _grow(buffer: Tensor, capacity: int, used: int) -> Tensor:
    N, H, _, Dh = buffer.shape
    bigger = buffer.new_empty(N, H, capacity, Dh)  # (N, H, C', Dh)
    bigger[:, :, :used] = buffer[:, :, :used]
    return bigger


@dataclass
class DecoderCache:
    """The whole decoder's state between steps.

    Attributes:
        layers: one ``LayerCache`` per decoder layer.
        memory_mask: ``(B, 1, 1, S)``, True at real source positions (None: decoder-only).
        beam: hypotheses per sentence (the query batch is ``B * beam``).
    """

    layers: list[LayerCache]
    memory_mask: Optional[Tensor]
    beam: int = 1

    @property
    def length(self) -> int:
        """Target positions already decoded; the next token's position."""
        return self.layers[0].length

    @property
    def start(self) -> int:
        """The position of the oldest key the self-attention cache keeps (0 without a window)."""
        return self.layers[0].start

    def nbytes(self) -> int:
        """Bytes of the self-attention keys and values held (the positions kept, not the
        capacity)."""
        return sum(
            2 * layer.self_k[:, :, : layer.length - layer.start].nbytes for layer in self.layers
        )

    def truncate(self, length: int) -> None:
        """Forget the positions from ``length`` on, in every layer."""
        for layer in self.layers:
            layer.truncate(length)

    def reorder(self, indices: Tensor) -> None:
        for layer in self.layers:
            layer.reorder(indices)

    def repeat(self, n: int) -> None:
        """Turn every hypothesis into ``n`` copies (for beams): cross keys stay per sentence."""
        for layer in self.layers:
            layer.repeat(n)
        self.beam *= n

    def select_sentences(self, sentences: Tensor) -> None:
        """Drop finished sentences: keep ``sentences`` (indices into the current B)."""
        for layer in self.layers:
            layer.select_sentences(sentences, self.beam)
        if self.memory_mask is not None:
            self.memory_mask = self.memory_mask.index_select(0, sentences)
