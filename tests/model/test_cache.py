"""The decoder's cache: keys and values kept, grown, windowed, reordered by beam."""

import torch

from transduce import Transformer
from transduce.model.cache import DecoderCache, LayerCache

from ..conftest import random_batch, tiny_config


def test_cache_reorder_equals_recomputing_and_beams_share_cross_keys(device):
    model = Transformer(tiny_config()).to(device).eval()
    src, _ = random_batch(2, 6, 40, device=device)
    tgt = torch.randint(4, 40, (6, 4), device=device)  # 2 sentences x 3 beams
    memory = model.encode(src)
    cache = model.start_decoding(src, memory, beam=3)
    model.decode(tgt[:, :3], cache)
    order = torch.tensor([2, 2, 0, 4, 3, 5], device=device)  # beams move within their own sentence
    cache.reorder(order)
    step = model.decode(tgt[:, 3:4], cache)
    fresh = model(src.repeat_interleave(3, 0), torch.cat([tgt[order, :3], tgt[:, 3:4]], 1))
    torch.testing.assert_close(step[:, 0], fresh[:, 3], atol=1e-5, rtol=0)
    assert cache.layers[0].cross_k.size(0) == 2  # per sentence, never per beam


def _layer(rows: int = 2, capacity: int = 2, window: int = 0) -> LayerCache:
    empty = torch.zeros(rows, 1, capacity, 1)
    return LayerCache(empty, empty.clone(), torch.zeros(1, 1, 3, 1), torch.zeros(1, 1, 3, 1),
                      window=window)


def _keys(*positions: int, rows: int = 2) -> torch.Tensor:
    """Keys whose value is their position (and row x 100), ``(rows, 1, T, 1)``."""
    keys = [[[[p + 100 * r] for p in positions]] for r in range(rows)]
    return torch.tensor(keys, dtype=torch.float)


def test_append_returns_every_position_so_far_and_grows_past_its_capacity():
    layer = _layer(capacity=2)
    layer.append(_keys(0, 1), _keys(0, 1))
    k, v = layer.append(_keys(2), _keys(2))  # past the capacity of 2
    assert layer.length == 3 and layer.self_k.size(2) >= 3
    assert k[:, 0, :, 0].tolist() == [[0, 1, 2], [100, 101, 102]] and torch.equal(k, v)


def test_a_window_keeps_what_a_query_can_still_see():
    layer = _layer(rows=1, window=2)
    for position in range(5):
        k, _ = layer.append(_keys(position, rows=1), _keys(position, rows=1))
    assert (layer.length, layer.start) == (5, 3)
    assert k[0, 0, :, 0].tolist() == [3, 4]  # the newest query sees its W - 1 predecessor


def test_reorder_select_and_repeat_move_rows_and_keep_cross_keys_per_sentence():
    layer = _layer(rows=4)  # 2 sentences x 2 beams
    layer.append(_keys(0, rows=4), _keys(0, rows=4))
    layer.reorder(torch.tensor([1, 1, 3, 2]))
    assert layer.self_k[:, 0, 0, 0].tolist() == [100, 100, 300, 200]
    cache = DecoderCache([layer], torch.ones(2, 1, 1, 3, dtype=torch.bool), beam=2)
    cache.layers[0].cross_k = torch.tensor([0.0, 1.0]).view(2, 1, 1, 1)
    cache.layers[0].cross_v = cache.layers[0].cross_k.clone()
    cache.select_sentences(torch.tensor([1]))  # the first sentence finished
    assert layer.self_k[:, 0, 0, 0].tolist() == [300, 200]
    assert layer.cross_k.view(-1).tolist() == [1.0] and cache.memory_mask.size(0) == 1
    cache.repeat(3)
    assert cache.beam == 6 and layer.self_k[:, 0, 0, 0].tolist() == [300] * 3 + [200] * 3
    assert layer.cross_k.size(0) == 1  # never per beam
    assert cache.length == 1 and cache.nbytes() == 2 * 6 * 4  # keys and values of one position
