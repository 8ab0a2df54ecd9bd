"""The built-in language for the decoder-only demo: counting in English number words.

Each line counts on from a number, "one hundred seven, one hundred eight, one hundred nine". A
model that learned the language continues a count it has never seen: it must copy what stays,
increment the last word and carry ("forty-nine" -> "fifty", "one hundred ninety-nine" -> "two
hundred"). Lines of the held-out splits start at numbers no training line starts at.
"""

from __future__ import annotations

import random

from .numbers import english

LIMIT = 10_000


def counting_line(start: int, count: int) -> str:
    """``count`` consecutive numbers from ``start`` in words, separated by commas."""
    return ", ".join(english(n) for n in range(start, start + count))


def counting_splits(
    train: int, valid: int, test: int, seed: int = 1
) -> dict[str, list[tuple[int, int]]]:
    """(start, count) for each line of each split; the starts of valid/test lines are held out."""
    rng = random.Random(seed)
    starts = list(range(LIMIT - 10))
    rng.shuffle(starts)
    held = starts[: valid + test]
    pool = starts[valid + test :]
    lines = {"valid": held[:valid], "test": held[valid:],
             "train": [pool[i % len(pool)] for i in range(train)]}
    return {split: [(s, rng.randint(4, 8)) for s in values] for split, values in lines.items()}
