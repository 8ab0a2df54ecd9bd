"""The fast decode step's cache: every layer's self-attention keys and values in one tensor."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor


def power_of_two(n: int, least: int = 1) -> int:
    """``n`` rounded up to a power of two, at least ``least``: the captured step's shape classes."""
    return max(least, 1 << (n - 1).bit_length())


def padded_sentences(sentences: int) -> int:
    """The captured step's batch classes: sentences rounded up to a power of two, so that a search
    whose sentences finish one by one compiles once per class, not once per count."""
    return power_of_two(sentences)


def static_address(*tensors: Tensor) -> None:
    """CUDA graphs: the captured step reads and writes these in place, at the same address for a
    whole search (a new batch's re-records the graph rather than copying them at every step)."""
    for x in tensors:
        if x.device.type == "cuda":
            torch._dynamo.mark_static_address(x, guard=False)


def pad_rows(x: Tensor, rows: int) -> Tensor:
    """``x`` with zero rows appended up to ``rows`` along the first dimension."""
    extra = rows - x.size(0)
    return x if extra == 0 else torch.cat([x, x.new_zeros(extra, *x.shape[1:])])


def cache_views(kv: Tensor) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    """Per layer, the views a step uses of ``kv (layers, 2, N, H, C, Dh)``: where it writes a
    position (``(2, N, H, C, Dh)``), the keys transposed for the score product ``(N * H, Dh, C)``
    and the values ``(N * H, C, Dh)``, each a contiguous block (the heads folded into the batch).
    Made once per cache, not at every step."""
    slots = list(kv.unbind(0))
    keys, values = zip(*(attended(slot) for slot in slots))
    return slots, list(keys), list(values)


def attended(slot: Tensor) -> tuple[Tensor, Tensor]:
    """A layer's cache ``(2, N, H, C, Dh)`` as the score product's keys ``(N * H, Dh, C)`` and the
    values ``(N * H, C, Dh)``."""
    return slot[0].flatten(0, 1).transpose(1, 2), slot[1].flatten(0, 1)


class StepCache:
    """The state of ``N = B * beam`` hypotheses between steps.

    Attributes:
        kv: ``(layers, 2, N, H, capacity, Dh)``, self-attention keys (0) and values (1);
            positions ``0 .. length-1`` are filled. views: ``cache_views(kv)``.
        cross_k: per layer ``(B * H, Dh, S)`` (transposed for the score product); cross_v:
            ``(B * H, S, Dh)``; cross_bias: ``(B * H, beam, S)``, 0 at real source positions and
            -inf at padding.
        beam: hypotheses per sentence. length: positions filled (the next token's position).
        static: for the captured step, every tensor holds ``padded_sentences(B)`` sentences (the
            ones past B zeros that nobody reads) and the unfilled positions hold zeros (it reads
            them under a mask).
    """

    # every row starts at slot 0 and no slot is skipped; a running search's cache
    # (``running.RunningCache``) gives each row its own first slot and reads from the oldest one
    starts: Optional[Tensor] = None
    first = 0

    def __init__(self, kv: Tensor, cross_k: list[Tensor], cross_v: list[Tensor], cross_bias: Tensor,
                 heads: int, beam: int, static: bool = False) -> None:
        self.kv, self.cross_k, self.cross_v, self.cross_bias = kv, cross_k, cross_v, cross_bias
        self.views = cache_views(kv)
        self.heads, self.beam, self.length = heads, beam, 0
        self.static = static

    def reorder(self, rows: Tensor) -> None:
        """Hypothesis ``n`` continues hypothesis ``rows[n]``: only the filled positions move (from
        ``first`` on: no row reads the earlier ones)."""
        t, first = self.length, self.first
        if t <= first:
            return
        # per layer's keys or values, (N, H, C, Dh) each: one index_select over the whole 6-d cache
        # is slower (`python benchmarks/step_profile.py --rows 128`)
        for block in self.kv.flatten(0, 1).unbind(0):
            filled = block.narrow(2, first, t - first)
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
            # (as reorder)
            for old, new in zip(self.kv.flatten(0, 1).unbind(0), kv.flatten(0, 1).unbind(0)):
                new.narrow(0, 0, rows.numel()).narrow(2, 0, t).copy_(
                    old.narrow(2, 0, t).index_select(0, rows)
                )
        self.kv, self.views = kv, cache_views(kv)

        def per_sentence(x: Tensor) -> Tensor:  # (B*H, ...) -> (total*H, ...)
            return pad_rows(
                x.view(-1, H, *x.shape[1:]).index_select(0, sentences).flatten(0, 1), total * H
            )

        self.cross_k = [per_sentence(k) for k in self.cross_k]
        self.cross_v = [per_sentence(v) for v in self.cross_v]
        self.cross_bias = per_sentence(self.cross_bias)
        if self.static:
            static_address(self.kv, self.cross_bias, *self.cross_k, *self.cross_v)
