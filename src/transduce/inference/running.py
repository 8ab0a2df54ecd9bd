"""The fast step's cache for a running search: sentences join and leave between steps.

A ``StepCache`` holds every row at the same position: slot ``t`` of the keys and values is position
``t`` of every hypothesis. A running search (continuous batching) adds sentences while others are
half-way through, so a ``RunningCache`` separates the two: the step still writes every row's new key
and value at one shared *slot* (``length``), but each row remembers the slot it started at
(``starts``), its position is ``length - starts[n]``, and it attends over its own slots only
(``FastDecoder._forward`` masks the earlier ones). A joining row's slots are zeros, so the masked
products read finite numbers. No row reads the slots before the oldest row's start (``first``): a
step attends, and a beam reorder copies, from there on; when the slots run out, the rows' slots move
to the front (``make_room``), and the capacity doubles if that is not enough. The buffer has room
for more rows than are in flight, so that a join writes into it rather than copying it.

The cross-attention tensors are per sentence, padded to the longest source in flight (the padding
masked, as in any batch). Like the keys and values, they live in buffers with room to spare, so a
join writes its sentences in and a leave moves only the sentences that change place.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .cache import StepCache, cache_views


class RunningCache(StepCache):
    """A ``StepCache`` whose rows start at slots of their own; see the module docstring.

    Attributes (beyond ``StepCache``'s): starts ``(N,)`` each row's first slot; lengths ``(B,)``
    each sentence's source length (eos included). The buffers have room for more rows and sentences
    than are in flight (joins write into it, leaves move the kept ones to the front, in place), and
    the cross-attention buffers for longer sources than the longest in flight (a sentence's columns
    past its source are zeros, masked): ``views`` and ``cross_k``, ``cross_v``, ``cross_bias`` are
    views of the part in use.
    """

    @classmethod
    def empty_like(cls, fresh: StepCache, lengths: Tensor) -> "RunningCache":
        """A running cache holding ``fresh``'s rows (a new ``FastDecoder.start``), all starting at
        slot 0."""
        running = cls(
            fresh.kv, fresh.cross_k, fresh.cross_v, fresh.cross_bias, fresh.heads, fresh.beam
        )
        running.starts = torch.zeros(fresh.kv.size(2), dtype=torch.long, device=fresh.kv.device)
        running.lengths = lengths
        running.uniform = False  # (make_room says whether every row started at the same slot)
        running._cross = [*fresh.cross_k, *fresh.cross_v, fresh.cross_bias]  # the buffers
        running._view()
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
        L, used = len(self.cross_k), self.rows // self.beam * self.heads
        w = int(self.lengths.max()) if self.lengths.numel() else 0  # the longest source in flight
        ks, vs, bias = self._cross[:L], self._cross[L : 2 * L], self._cross[-1]
        self.cross_k = [k.narrow(0, 0, used).narrow(2, 0, w) for k in ks]  # (B*H, Dh, S)
        self.cross_v = [v.narrow(0, 0, used).narrow(1, 0, w) for v in vs]  # (B*H, S, Dh)
        self.cross_bias = bias.narrow(0, 0, used).narrow(2, 0, w)  # (B*H, K, S)

    def _source_dims(self) -> list[int]:
        """Per cross buffer, the dimension of the source positions."""
        L = len(self.cross_k)
        return [2] * L + [1] * L + [2]

    def join(self, new: StepCache, lengths: Tensor) -> None:
        """Add ``new``'s sentences (a ``FastDecoder.start`` over them) after the ones in flight;
        their rows start at the current slot, and the slots before it are zeros (read under a
        mask)."""
        N, n, t = self.rows, new.kv.size(2), self.length
        if N + n > self.kv.size(2):
            self._new_kv(max(N + n, 2 * self.kv.size(2)), self.kv.size(4))
        self.kv[:, :, N : N + n, :, :t] = 0
        self.starts = torch.cat(
            [self.starts, torch.full((n,), t, dtype=torch.long, device=self.starts.device)]
        )
        used, extra, S = (
            N // self.beam * self.heads,
            new.cross_bias.size(0),
            new.cross_bias.size(-1),
        )
        dims = self._source_dims()
        fills = [0.0] * (len(dims) - 1) + [float("-inf")]  # (the bias masks a source's padding)
        have, wide = self._cross[-1].size(0), self._cross[-1].size(-1)
        if used + extra > have or S > wide:  # room for more sentences, or for longer ones
            rows = max(used + extra, 2 * have) if used + extra > have else have
            grown = []
            for x, dim, fill in zip(self._cross, dims, fills):
                shape = list(x.shape)
                shape[0], shape[dim] = rows, max(S, wide)
                bigger = x.new_full(shape, fill)
                bigger.narrow(0, 0, used).narrow(dim, 0, x.size(dim)).copy_(x.narrow(0, 0, used))
                grown.append(bigger)
            self._cross = grown
        for x, part, dim, fill in zip(
            self._cross, [*new.cross_k, *new.cross_v, new.cross_bias], dims, fills
        ):
            mine = x.narrow(0, used, extra)
            mine.narrow(dim, 0, S).copy_(part)
            # (another sentence's columns may be there)
            mine.narrow(dim, S, x.size(dim) - S).fill_(fill)
        self.lengths = torch.cat([self.lengths, lengths])
        self._view()

    def select_sentences(self, sentences: Tensor) -> None:
        """Keep only ``sentences``, in that order (any order: a search that fills each leaver's
        place with a sentence from the end moves only those). Only the rows and sentences that
        change place are copied."""
        H, K, t, first = self.heads, self.beam, self.length, min(self.first, self.length)
        index = sentences.tolist()
        moved = [j for j, i in enumerate(index) if i != j]
        if moved:
            dev = sentences.device
            src = torch.tensor([index[j] for j in moved], device=dev)
            dst = torch.tensor(moved, device=dev)
            beams = torch.arange(K, device=dev)
            src_rows, dst_rows = (
                (src[:, None] * K + beams).view(-1),
                (dst[:, None] * K + beams).view(-1),
            )
            if t > first:  # (the slots before ``first`` are no row's: a joining row zeroes its own)
                # (R, H, C, Dh): keys or values of a layer
                for block in self.kv.flatten(0, 1).unbind(0):
                    filled = block.narrow(2, first, t - first)
                    filled.index_copy_(0, dst_rows, filled.index_select(0, src_rows))
            for x in self._cross:  # (B*H, ...) per sentence
                per = x.view(-1, H, *x.shape[1:])
                per.index_copy_(0, dst, per.index_select(0, src))
        rows = (sentences[:, None] * K + torch.arange(K, device=sentences.device)).view(-1)
        self.starts = self.starts.index_select(0, rows)
        self.lengths = self.lengths.index_select(0, sentences)
        if not self.rows:
            self.length = 0
        self._view()

    def make_room(self) -> None:
        """Before a step: note the first slot any row reads (``first``: a step attends, and a beam
        reorder copies, from there on); when every slot is written, move each row's slots to the
        front by it, doubling the capacity when that frees less than half of it."""
        C = self.kv.size(4)
        low, high = (torch.stack(self.starts.aminmax()).tolist() if self.rows
                     else (self.length, self.length))
        # rows that all started at one slot (a batch; a running search between joins) share one
        # position and hide nothing: the step then runs as over a plain cache
        self.first, self.uniform = low, low == high
        if self.length < C:
            return
        self._new_kv(
            self.kv.size(2), C if self.length - self.first <= C // 2 else 2 * C, self.first
        )
        self.starts = self.starts - self.first
        self.first = 0
