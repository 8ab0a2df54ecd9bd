"""The fast step's cache: shape classes, views into one tensor, rows moved by beam and sentence."""

from __future__ import annotations

import torch

from transduce.inference.cache import (StepCache, cache_views, pad_rows, padded_sentences,
                                       power_of_two)


def test_shape_classes_are_powers_of_two():
    assert [power_of_two(n) for n in (1, 2, 3, 5, 8, 9)] == [1, 2, 4, 8, 8, 16]
    assert power_of_two(3, least=16) == 16
    assert [padded_sentences(n) for n in (1, 6, 17)] == [1, 8, 32]


def test_pad_rows_appends_zero_rows_and_leaves_a_full_tensor_alone():
    x = torch.ones(2, 3)
    assert pad_rows(x, 2) is x
    padded = pad_rows(x, 4)
    assert padded.shape == (4, 3) and padded[2:].abs().sum() == 0


def test_the_views_write_into_the_one_cache_tensor():
    kv = torch.zeros(2, 2, 3, 4, 5, 6)  # (layers, k/v, N, H, C, Dh)
    slots, keys, values = cache_views(kv)
    slots[1][0, 2, 3, 4] = 7.0  # layer 1, key, row 2, head 3, position 4
    assert kv[1, 0, 2, 3, 4].sum() == 7.0 * 6
    assert keys[1].shape == (3 * 4, 6, 5) and values[1].shape == (3 * 4, 5, 6)
    assert keys[1][2 * 4 + 3, :, 4].sum() == 7.0 * 6  # (row, head) folded, keys transposed


def _cache(sentences: int, beam: int, length: int, static: bool = False) -> StepCache:
    heads, capacity = 2, 4
    rows = sentences * beam
    # every key holds its row number, so that moves can be read back
    kv = torch.arange(rows, dtype=torch.float).view(1, 1, rows, 1, 1, 1).expand(
        1, 2, rows, heads, capacity, 3).clone()
    cross = [torch.arange(sentences, dtype=torch.float).repeat_interleave(heads).view(-1, 1, 1)]
    bias = torch.zeros(sentences * heads, beam, 5)
    cache = StepCache(kv, cross, [c.clone() for c in cross], bias, heads, beam, static)
    cache.length = length
    return cache


def test_reorder_moves_only_the_filled_positions():
    cache = _cache(sentences=1, beam=3, length=2)
    cache.reorder(torch.tensor([2, 2, 0]))
    assert cache.kv[0, 0, :, 0, :2, 0].tolist() == [[2, 2], [2, 2], [0, 0]]
    assert cache.kv[0, 0, :, 0, 2:, 0].tolist() == [[0, 0], [1, 1], [2, 2]]  # unfilled: as was


def test_select_sentences_keeps_their_rows_and_cross_keys_and_a_static_cache_pads():
    cache = _cache(sentences=3, beam=2, length=1)
    cache.select_sentences(torch.tensor([2, 0]))
    assert cache.kv[0, 0, :, 0, 0, 0].tolist() == [4, 5, 0, 1]
    assert cache.cross_k[0].view(-1).tolist() == [2, 2, 0, 0]  # per sentence and head
    static = _cache(sentences=5, beam=1, length=1, static=True)
    static.select_sentences(torch.tensor([4, 1, 0]))
    assert static.kv.size(2) == 4  # three sentences padded to the class of four
    assert static.kv[0, 0, :, 0, 0, 0].tolist() == [4, 1, 0, 0] and static.kv[0, 0, 3].sum() == 0
    assert static.cross_bias.size(0) == 4 * 2
