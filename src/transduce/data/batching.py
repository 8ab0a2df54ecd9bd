"""Token-budget batches: of sentence pairs for training (§5.1; deterministic, shardable, resumable)
and of sources for search."""

from __future__ import annotations

from typing import Sequence

import numpy as np


class TokenBatchSampler:
    """Yields batches (arrays of example indices) under a token budget.

    The budget counts padded positions, per side: ``len(batch) * longest <= max_tokens`` for the
    source and for the target (lengths as the model sees them: ``extra`` tokens, eos or bos, are
    added). An example longer than the budget on its own gets a batch of its own.

    An epoch's batches depend only on ``(seed, epoch)``: examples are shuffled, stably sorted by
    (target, source) length so that ties stay shuffled, cut greedily at the budget, and the batches
    shuffled. For ``world_size`` ranks the batch count is made a multiple of it (by halving the
    largest batches), and rank r takes batches r, r + world_size, ...: the shards are disjoint,
    cover the data, and hold equally many batches, so no rank waits forever for another.

    Args:
        src_lengths, tgt_lengths: per-example lengths (without eos/bos). max_tokens: the budget per
        batch and side. seed: with the epoch, fixes the order. shuffle: False keeps length order
        (for inference). world_size, rank: sharding. extra: tokens the collator adds to each side
        (1: eos on the source, bos/eos on the target).
    """

    def __init__(
        self,
        src_lengths,
        tgt_lengths,
        max_tokens: int,
        seed: int = 1,
        shuffle: bool = True,
        world_size: int = 1,
        rank: int = 0,
        extra: int = 1,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside world_size {world_size}")
        self.src_lengths = np.asarray(src_lengths, dtype=np.int64) + extra
        self.tgt_lengths = np.asarray(tgt_lengths, dtype=np.int64) + extra
        if len(self.src_lengths) < world_size:
            raise ValueError(f"{len(self.src_lengths)} examples cannot be shared by {world_size} "
                             "ranks")
        self.max_tokens = max_tokens
        self.seed = seed
        self.shuffle = shuffle
        self.world_size = world_size
        self.rank = rank

    def all_batches(self, epoch: int) -> list[np.ndarray]:
        """Every rank's batches of ``epoch``, in order (rank r takes every world_size-th)."""
        n = len(self.src_lengths)
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        order = order[np.lexsort((self.src_lengths[order], self.tgt_lengths[order]))]  # stable
        batches = _cut(order, self.src_lengths, self.tgt_lengths, self.max_tokens)
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return _make_divisible(batches, self.world_size)

    def batches(self, epoch: int, start: int = 0) -> list[np.ndarray]:
        """This rank's batches of ``epoch``, from position ``start`` (to resume mid-epoch)."""
        return self.all_batches(epoch)[self.rank :: self.world_size][start:]

    def __len__(self) -> int:
        return len(self.batches(0))

    def padding_waste(self, epoch: int = 0) -> float:
        """Padded positions over all positions, both sides together, for ``epoch``'s batches."""
        real = padded = 0
        for batch in self.all_batches(epoch):
            for lengths in (self.src_lengths[batch], self.tgt_lengths[batch]):
                real += int(lengths.sum())
                padded += len(batch) * int(lengths.max())
        return 1.0 - real / padded


def _cut(order: np.ndarray, src: np.ndarray, tgt: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    batches = []
    start = 0
    longest = 0
    src_sorted, tgt_sorted = src[order].tolist(), tgt[order].tolist()
    for i, (s, t) in enumerate(zip(src_sorted, tgt_sorted)):
        candidate = max(longest, s, t)
        if i > start and (i - start + 1) * candidate > max_tokens:
            batches.append(order[start:i])
            start, candidate = i, max(s, t)
        longest = candidate
    if start < len(order):
        batches.append(order[start:])
    return batches


def _make_divisible(batches: list[np.ndarray], world_size: int) -> list[np.ndarray]:
    while len(batches) % world_size:
        splittable = [i for i, b in enumerate(batches) if len(b) > 1]
        if not splittable:
            raise ValueError(f"cannot make {len(batches)} single-example batches a multiple of "
                             f"{world_size} ranks")
        i = max(splittable, key=lambda j: len(batches[j]))
        half = len(batches[i]) // 2
        batches[i : i + 1] = [batches[i][:half], batches[i][half:]]
    return batches


def fits_budget(count: int, longest: int, max_tokens: int, max_sentences: int) -> bool:
    """Whether ``count`` sources whose longest has ``longest`` tokens (eos included) make one search
    batch: at most ``max_sentences`` of them, and ``count x longest <= max_tokens`` padded
    positions. The rule of every search batch: ``budget_batches``' and a running search's
    (serving)."""
    return count <= max_sentences and count * longest <= max_tokens


def budget_batches(lengths: Sequence[int], max_tokens: int, max_sentences: int) -> list[list[int]]:
    """Positions of ``lengths`` (source lengths without eos, in the order given) cut into search
    batches: sentences x (longest + eos) <= ``max_tokens``, at most ``max_sentences``
    a batch; a sentence over the budget on its own gets a batch of its own."""
    batches: list[list[int]] = []
    current: list[int] = []
    width = 0
    for n, length in enumerate(lengths):
        wider = max(width, length + 1)
        if current and not fits_budget(len(current) + 1, wider, max_tokens, max_sentences):
            batches.append(current)
            current, wider = [], length + 1
        current.append(n)
        width = wider
    if current:
        batches.append(current)
    return batches
