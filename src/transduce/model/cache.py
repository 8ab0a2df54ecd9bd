"""The decoder's explicit, typed cache (§6.1: decode step by step, never recompute the prefix).

Each decoder layer keeps its self-attention keys/values, which grow by one position a step, and
the cross-attention keys/values of the encoder output, computed once per *sentence*. During beam
search the query batch is sentences x beams, but the cross keys stay per sentence: attention
folds the beams into the query length (see ``attention.attend``), so reordering beams never
touches them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class LayerCache:
    """One decoder layer's cache.

    Attributes:
        self_k, self_v: ``(B*K, H, C, Dh)`` buffers of capacity C; the first ``length`` positions
            hold keys/values (rotated for RoPE) of the tokens decoded so far.
        cross_k, cross_v: ``(B, H, S, Dh)``, the projected encoder output, one per sentence.
        length: positions filled. It advances by the number of new tokens on each ``append``:
            after a 2-token prefix and 3 single steps it is 5, and the next token sits at position 5.
    """

    self_k: Tensor
    self_v: Tensor
    cross_k: Tensor
    cross_v: Tensor
    length: int = 0

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``k, v (N, H, T, Dh)``; return all keys/values so far, ``(N, H, length, Dh)``."""
        end = self.length + k.size(2)
        if end > self.self_k.size(2):  # grow geometrically: reorders copy at most 2x what is used
            capacity = max(end, 2 * self.self_k.size(2))
            self.self_k = _grow(self.self_k, capacity, self.length)
            self.self_v = _grow(self.self_v, capacity, self.length)
        self.self_k[:, :, self.length : end] = k
        self.self_v[:, :, self.length : end] = v
        self.length = end
        return self.self_k[:, :, :end], self.self_v[:, :, :end]  # (N, H, length, Dh)

    def reorder(self, indices: Tensor) -> None:
        """Hypothesis ``n`` continues hypothesis ``indices[n]`` (beam search bookkeeping)."""
        self.self_k = self.self_k.index_select(0, indices)
        self.self_v = self.self_v.index_select(0, indices)

    def select_sentences(self, sentences: Tensor, beam: int) -> None:
        """Keep only ``sentences`` (indices into the B sentences); each owns ``beam`` rows."""
        rows = (sentences[:, None] * beam + torch.arange(beam, device=sentences.device)).reshape(-1)
        self.reorder(rows)
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
        memory_mask: ``(B, 1, 1, S)``, True at real source positions.
        beam: hypotheses per sentence (the query batch is ``B * beam``).
    """

    layers: list[LayerCache]
    memory_mask: Tensor
    beam: int = 1

    @property
    def length(self) -> int:
        """Target positions already decoded; the next token's position."""
        return self.layers[0].length

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
        self.memory_mask = self.memory_mask.index_select(0, sentences)
