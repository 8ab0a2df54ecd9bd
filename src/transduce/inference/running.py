"""The fast step's cache for a running search: sentences join and leave between steps.

A ``StepCache`` holds every row at the same position: slot ``t`` of the keys and values is
position ``t`` of every hypothesis. A running search (continuous batching) adds sentences while
others are half-way through, so a ``RunningCache`` separates the two: the step still writes every
row's new key and value at one shared *slot* (``length``), but each row remembers the slot it
started at (``starts``), its position is ``length - starts[n]``, and it attends over its own slots
only (``FastDecoder._forward`` masks the earlier ones). A joining row's slots are zeros, so the
masked products read finite numbers. When the slots run out, every row's kept slots move to the
front (``make_room``), and the capacity doubles if that is not enough. The buffer has room for more
rows than are in flight, so that a join writes into it rather than copying it.

The cross-attention tensors are per sentence, padded to the longest source in flight (the padding
masked, as in any batch); they are rebuilt when sentences join or leave.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .cache import StepCache, cache_views

MIN_COMPACTION = 8  # unread slots worth a compaction before the slots run out


class RunningCache(StepCache):
    """A ``StepCache`` whose rows start at slots of their own; see the module docstring.

    Attributes (beyond ``StepCache``'s): starts ``(N,)`` each row's first slot; lengths ``(B,)`` each
    sentence's source length (eos included), to trim the cross tensors' padding when the longest
    sentence leaves. ``kv`` has room for more rows than the ``N`` in flight (joins fill it, leaves
    move the kept rows to the front, in place); ``views`` cover the first ``N``.
    """

    @classmethod
    def empty_like(cls, first: StepCache, lengths: Tensor) -> "RunningCache":
        """A running cache holding ``first``'s rows (a fresh ``FastDecoder.start``), all starting at slot 0."""
        running = cls(first.kv, first.cross_k, first.cross_v, first.cross_bias, first.heads, first.beam)
        running.starts = torch.zeros(first.kv.size(2), dtype=torch.long, device=first.kv.device)
        running.lengths = lengths
        return running

    @property
    def rows(self) -> int:
        return self.starts.numel()

    def _new_kv(self, rows: int, capacity: int, first: int = 0) -> None:
        """Move the rows in flight to a buffer of ``rows`` rows and ``capacity`` slots, their slots
        from ``first`` on to the front (``starts`` are the caller's to shift)."""
        L, _, _, H, _, Dh = self.kv.shape
        kv = self.kv.new_empty(L, 2, rows, H, capacity, Dh)
        used = self.length - first
        if used and self.rows:
            kv[:, :, : self.rows, :, :used] = self.kv[:, :, : self.rows, :, first : self.length]
        self.kv, self.length = kv, used
        self._view()

    def _view(self) -> None:
        self.views = cache_views(self.kv.narrow(2, 0, self.rows))

    def join(self, new: StepCache, lengths: Tensor) -> None:
        """Add ``new``'s sentences (a ``FastDecoder.start`` over them) after the ones in flight; their
        rows start at the current slot, and the slots before it are zeros (read under a mask)."""
        N, n, t = self.rows, new.kv.size(2), self.length
        if N + n > self.kv.size(2):
            self._new_kv(max(N + n, 2 * self.kv.size(2)), self.kv.size(4))
        self.kv[:, :, N : N + n, :, :t] = 0
        self.starts = torch.cat([self.starts, torch.full((n,), t, dtype=torch.long, device=self.starts.device)])
        self._view()
        wide = max(self.cross_bias.size(-1), new.cross_bias.size(-1))
        self.cross_k = [torch.cat([_pad_last(a, wide), _pad_last(b, wide)]) for a, b in zip(self.cross_k, new.cross_k)]
        self.cross_v = [torch.cat([_pad_rows_of(a, wide), _pad_rows_of(b, wide)])
                        for a, b in zip(self.cross_v, new.cross_v)]
        self.cross_bias = torch.cat([_pad_last(self.cross_bias, wide, float("-inf")),
                                     _pad_last(new.cross_bias, wide, float("-inf"))])
        self.lengths = torch.cat([self.lengths, lengths])

    def select_sentences(self, sentences: Tensor) -> None:
        """Keep only ``sentences`` (their rows move to the front, in place); the cross tensors lose
        the padding no sentence left needs."""
        H, K, t = self.heads, self.beam, self.length
        rows = (sentences[:, None] * K + torch.arange(K, device=sentences.device)).reshape(-1)
        if t:
            for block in self.kv.flatten(0, 1).unbind(0):  # (R, H, C, Dh): keys or values of a layer
                filled = block.narrow(2, 0, t)
                filled.narrow(0, 0, rows.numel()).copy_(filled.index_select(0, rows))
        self.starts = self.starts.index_select(0, rows)
        self.lengths = self.lengths.index_select(0, sentences)
        self._view()
        wide = int(self.lengths.max()) if self.lengths.numel() else 0

        def per_sentence(x: Tensor) -> Tensor:  # (B*H, ...) -> (kept*H, ...)
            return x.view(-1, H, *x.shape[1:]).index_select(0, sentences).flatten(0, 1)

        self.cross_k = [per_sentence(k)[..., :wide].contiguous() for k in self.cross_k]
        self.cross_v = [per_sentence(v)[:, :wide].contiguous() for v in self.cross_v]
        self.cross_bias = per_sentence(self.cross_bias)[..., :wide].contiguous()
        if not self.rows:
            self.length = 0

    def make_room(self) -> None:
        """Before a step: move each row's slots to the front (by the oldest row's start) when every
        slot is written, or when the slots no row reads any more are as many as those in use (a
        step's attention and a beam reorder read every slot up to the current one: the copy pays
        for itself); double the capacity when that frees less than half of it."""
        C = self.kv.size(4)
        first = int(self.starts.min()) if self.rows else self.length
        if self.length < C and (first < MIN_COMPACTION or first < self.length - first):
            return
        self._new_kv(self.kv.size(2), C if self.length - first <= C // 2 else 2 * C, first)
        self.starts = self.starts - first


def _pad_last(x: Tensor, wide: int, value: float = 0.0) -> Tensor:
    """``x (..., S)`` padded to ``(..., wide)`` with ``value``."""
    return x if x.size(-1) == wide else F.pad(x, (0, wide - x.size(-1)), value=value)


def _pad_rows_of(x: Tensor, wide: int) -> Tensor:
    """``x (M, S, Dh)`` padded with zero rows to ``(M, wide, Dh)``."""
    return x if x.size(1) == wide else F.pad(x, (0, 0, 0, wide - x.size(1)))
