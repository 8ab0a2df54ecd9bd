"""Forced decoding: a known target's log-probability and the attention that produced it."""

from __future__ import annotations

import torch

from transduce import Transformer
from transduce.decoding.scoring import forced_attention, score_targets

from ..conftest import tiny_config


def test_a_target_s_score_is_the_sum_of_its_tokens_and_eos_log_probabilities(device):
    torch.manual_seed(0)
    model = Transformer(tiny_config()).to(device).eval()
    c = model.config
    src = torch.tensor([[5, 6, 7, c.eos_id], [8, 9, c.eos_id, c.pad_id]], device=device)
    targets = [[10, 11, 12], [13]]
    scores = score_targets(model, src, targets)
    for b, target in enumerate(targets):
        tgt_in = torch.tensor([[c.start_id, *target]], device=device)
        with torch.no_grad():
            logprobs = model(src[b : b + 1, : 4 - b], tgt_in).log_softmax(-1)[0]
        expected = sum(float(logprobs[t, y]) for t, y in enumerate([*target, c.eos_id]))
        assert abs(float(scores[b]) - expected) < 1e-4


def test_forced_attention_has_one_query_per_target_piece_and_its_eos(device):
    model = Transformer(tiny_config()).to(device).eval()
    attention = forced_attention(model, [[5, 6, 7], [8]], [[10, 11], [12, 13, 14]])
    cross = attention.cross[0]  # (B, H, T, S): targets padded to 3 + the start; sources + eos
    assert cross.shape[0] == 2 and cross.shape[2:] == (4, 4)
    torch.testing.assert_close(cross.sum(-1), torch.ones_like(cross.sum(-1)))
    assert cross[1, :, :, 2:].abs().max() == 0  # the second source is one word and its eos
