"""Masks: boolean, True = may attend, shaped to broadcast against (B, H, T, S) scores."""

import torch

from transduce.model.masks import local_mask, padding_mask


def test_padding_mask_marks_real_keys():
    tokens = torch.tensor([[5, 6, 0], [7, 0, 0]])
    mask = padding_mask(tokens, pad_id=0)
    assert mask.shape == (2, 1, 1, 3)
    assert mask[:, 0, 0].tolist() == [[True, True, False], [True, False, False]]


def test_causal_mask_with_a_cache_is_the_docstring_example():
    """3 cached tokens and 2 new queries: query 0 sees keys 0..3, query 1 keys 0..4."""
    mask = local_mask(2, 5, window=0, causal=True, offset=3)
    assert mask.shape == (1, 1, 2, 5)
    assert mask[0, 0].tolist() == [[True, True, True, True, False], [True] * 5]


def test_a_causal_window_sees_the_last_w_positions_and_dropped_keys_shift():
    mask = local_mask(4, 4, window=2, causal=True)[0, 0]
    assert mask.tolist() == [[True, False, False, False], [True, True, False, False],
                             [False, True, True, False], [False, False, True, True]]
    # the cache dropped keys 0 and 1: key column 0 is position 2
    shifted = local_mask(1, 2, window=2, causal=True, offset=3, key_offset=2)[0, 0]
    assert shifted.tolist() == [[True, True]] and not local_mask(
        1, 2, window=1, causal=True, offset=3, key_offset=2)[0, 0, 0, 0]


def test_the_encoder_window_is_symmetric_and_no_window_sees_everything():
    mask = local_mask(4, 4, window=2, causal=False)[0, 0]
    assert torch.equal(mask, mask.T)
    assert mask.tolist()[1] == [True, True, True, False]
    assert local_mask(3, 3, window=0, causal=False).all()
