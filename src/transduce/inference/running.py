"""The fast step's cache for a running search: sentences join and leave between steps.

A ``StepCache`` holds every row at the same position: slot ``t`` of the keys and values is
position ``t`` of every hypothesis. A running search (continuous batching) adds sentences while
others are half-way through, so a ``RunningCache`` separates the two: the step still writes every
row's new key and value at one shared *slot* (``length``), but each row remembers the slot it
started at (``starts``), its position is ``length - starts[n]``, and it attends over its own slots
only (``FastDecoder._forward`` masks the earlier ones). A joining row's slots are zeros, so the
masked products read finite numbers. No row reads the slots before the oldest row's start
(``first``): a step attends, and a beam reorder copies, from there on; when the slots run out, the
rows' slots move to the front (``make_room``), and the capacity doubles if that is not enough. The buffer has room for more
rows than are in flight, so that a join writes into it rather than copying it.

The cross-attention tensors are per sentence, padded to the longest source in flight (the padding
masked, as in any batch); they are rebuilt when sentences join or leave.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .cache import StepCache, cache_views



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
        running.lengths, running.first = lengths, 0
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
        """Keep only ``sentences``, in that order (any order: a search that fills each leaver's place
        with a sentence from the end moves only those). Only the rows that change place are copied;
        the cross tensors keep their padding until the longest source in flight is a quarter shorter."""
        H, K, t, first = self.heads, self.beam, self.length, min(self.first, self.length)
        index = sentences.tolist()
        moved = [j for j, i in enumerate(index) if i != j]
        if moved:
            dev = sentences.device
            src = torch.tensor([index[j] for j in moved], device=dev)
            dst = torch.tensor(moved, device=dev)
            beams = torch.arange(K, device=dev)
            src_rows, dst_rows = (src[:, None] * K + beams).view(-1), (dst[:, None] * K + beams).view(-1)
            if t > first:  # (the slots before ``first`` are no row's: a joining row zeroes its own)
                for block in self.kv.flatten(0, 1).unbind(0):  # (R, H, C, Dh): keys or values of a layer
                    filled = block.narrow(2, first, t - first)
                    filled.index_copy_(0, dst_rows, filled.index_select(0, src_rows))
            for x in (*self.cross_k, *self.cross_v, self.cross_bias):  # (B*H, ...) per sentence
                per = x.view(-1, H, *x.shape[1:])
                per.index_copy_(0, dst, per.index_select(0, src))
        n = len(index)
        rows = (sentences[:, None] * K + torch.arange(K, device=sentences.device)).view(-1)
        self.starts = self.starts.index_select(0, rows)
        self.lengths = self.lengths.index_select(0, sentences)
        self._view()
        wide = int(self.lengths.max()) if n else 0
        trim = wide <= 3 * self.cross_bias.size(-1) // 4

        def kept(x: Tensor, dim: int) -> Tensor:  # the first n sentences' rows, narrowed to ``wide``
            x = x.narrow(0, 0, n * H)
            return x.narrow(dim, 0, wide).contiguous() if trim else x

        self.cross_k = [kept(k, 2) for k in self.cross_k]
        self.cross_v = [kept(v, 1) for v in self.cross_v]
        self.cross_bias = kept(self.cross_bias, 2)
        if not self.rows:
            self.length = 0

    def make_room(self) -> None:
        """Before a step: note the first slot any row reads (``first``: a step attends, and a beam
        reorder copies, from there on); when every slot is written, move each row's slots to the
        front by it, doubling the capacity when that frees less than half of it."""
        C = self.kv.size(4)
        self.first = int(self.starts.min()) if self.rows else self.length
        if self.length < C:
            return
        self._new_kv(self.kv.size(2), C if self.length - self.first <= C // 2 else 2 * C, self.first)
        self.starts = self.starts - self.first
        self.first = 0

    def reorder(self, rows: Tensor) -> None:
        """As ``StepCache.reorder``, over the slots from ``first`` on (no row reads the earlier ones)."""
        t, first = self.length, self.first
        if t <= first:
            return
        for block in self.kv.flatten(0, 1).unbind(0):
            filled = block.narrow(2, first, t - first)
            filled.narrow(0, 0, rows.numel()).copy_(filled.index_select(0, rows))


def _pad_last(x: Tensor, wide: int, value: float = 0.0) -> Tensor:
    """``x (..., S)`` padded to ``(..., wide)`` with ``value``."""
    return x if x.size(-1) == wide else F.pad(x, (0, wide - x.size(-1)), value=value)


def _pad_rows_of(x: Tensor, wide: int) -> Tensor:
    """``x (M, S, Dh)`` padded with zero rows to ``(M, wide, Dh)``."""
    return x if x.size(1) == wide else F.pad(x, (0, 0, 0, wide - x.size(1)))
