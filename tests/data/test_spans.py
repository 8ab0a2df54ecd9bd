"""T5's span corruption: the counts, the spans, the input and target, worked by hand and checked
over many draws."""

from __future__ import annotations

import numpy as np
import pytest

from transduce.data.spans import corrupt, noise_mask, span_counts


def test_a_block_worked_by_hand():
    row = np.arange(10, 20)
    mask = np.array([0, 0, 1, 1, 0, 0, 0, 1, 0, 1], dtype=bool)
    source, target = corrupt(row, mask, sentinels=[7, 8, 9], eos_id=2)
    assert source.tolist() == [10, 11, 7, 14, 15, 16, 8, 18, 9, 2]
    assert target.tolist() == [7, 12, 13, 8, 17, 9, 19, 2]


def test_the_counts_follow_t5():
    assert span_counts(128, 0.15, 3.0) == (19, 6)  # round(19.2), round(6.33)
    assert span_counts(10, 0.15, 3.0) == (2, 1)
    assert span_counts(4, 0.01, 3.0) == (1, 1)  # at least one token, one span


@pytest.mark.parametrize("length", [5, 20, 64, 128, 257])
def test_every_draw_has_the_counts_and_rebuilds_the_block(length):
    g = np.random.default_rng(length)
    noise, spans = span_counts(length, 0.15, 3.0)
    row = np.arange(100, 100 + length)
    lengths = []
    for _ in range(50):
        mask = noise_mask(length, 0.15, 3.0, g)
        assert mask.sum() == noise and not mask[0]  # the first token is kept
        starts = mask & ~np.concatenate([[False], mask[:-1]])
        assert starts.sum() == min(spans, noise, length - noise)
        source, target = corrupt(row, mask, sentinels=list(range(10, 60)), eos_id=2)
        assert len(source) == length - noise + starts.sum() + 1
        assert len(target) == noise + starts.sum() + 1
        # putting each sentinel's tokens back in the input gives the block
        spans_of = {}
        for token in target[:-1]:
            if token < 60:
                current = spans_of.setdefault(int(token), [])
            else:
                current.append(int(token))
        rebuilt = [t for s in source[:-1] for t in (spans_of[int(s)] if s < 60 else [int(s)])]
        assert rebuilt == row.tolist()
        lengths += [len(v) for v in spans_of.values()]
    if length >= 64:
        assert np.mean(lengths) == pytest.approx(noise / spans, rel=0.01)


def test_the_draw_depends_only_on_the_generator():
    a = noise_mask(64, 0.15, 3.0, np.random.default_rng([1, 2, 3]))
    b = noise_mask(64, 0.15, 3.0, np.random.default_rng([1, 2, 3]))
    c = noise_mask(64, 0.15, 3.0, np.random.default_rng([1, 2, 4]))
    assert (a == b).all() and not (a == c).all()
