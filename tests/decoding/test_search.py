import itertools
import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from transduce import Transformer
from transduce.decoding import (SearchOptions, beam_search, filter_logits, greedy_search, length_penalty,
                                merge_finished, sample, score_targets, top_candidates)

from ..conftest import random_batch, tiny_config

PAD, BOS, EOS, A, B = 0, 1, 2, 3, 4


class ScriptedModel(nn.Module):
    """Next-token probabilities fixed per prefix; only the full forward pass (no cache)."""

    table = {
        (): {A: 0.6, B: 0.4},
        (A,): {EOS: 0.4, A: 0.3, B: 0.3},
        (B,): {EOS: 0.9, A: 0.05, B: 0.05},
        (A, A): {EOS: 1.0},
        (A, B): {EOS: 0.5, A: 0.5},
    }

    def __init__(self):
        super().__init__()
        self.config = SimpleNamespace(pad_id=PAD, bos_id=BOS, eos_id=EOS, start_id=BOS, max_positions=16,
                                      target_vocab_size=5)

    def forward(self, src, tgt):
        logits = torch.full((tgt.size(0), tgt.size(1), 5), float("-inf"))
        for b, t in itertools.product(range(tgt.size(0)), range(tgt.size(1))):
            prefix = tuple(tgt[b, 1 : t + 1].tolist())
            for token, p in self.table.get(prefix, {EOS: 1.0}).items():
                logits[b, t, token] = math.log(p)
        return logits


def test_scripted_beams_match_the_hand_computation():
    # Beam 2, alpha 0 (no length penalty), at most 3 output tokens.
    # step 0: live A (.6), B (.4)
    # step 1: candidates B.eos .36, A.eos .24, A.A .18, A.B .18 -> finished [B, A]; live [AA, AB]
    #         the best live beam (.18) cannot beat the best finished (.36): the sentence is done.
    # Greedy takes A (.6) then eos (.4): p = .24, worse than beam's B eos (.36).
    model = ScriptedModel()
    src = torch.tensor([[A, EOS]])
    opts = SearchOptions(max_len_a=0, max_len_b=3, use_cache=False)
    [hyps] = beam_search(model, src, beam=2, alpha=0.0, options=opts, nbest=2)
    assert [h.tokens for h in hyps] == [[B], [A]]
    assert [round(math.exp(h.logprob), 6) for h in hyps] == [0.36, 0.24]
    [greedy] = greedy_search(model, src, opts)
    assert greedy.tokens == [A] and math.exp(greedy.logprob) == pytest.approx(0.24)
    # With the paper's alpha 0.6 both finished hypotheses have |Y| = 2, so the order is the same,
    # and the score is logprob / ((5 + 2) / 6) ** 0.6.
    [hyps] = beam_search(model, src, beam=2, alpha=0.6, options=opts, nbest=2)
    assert hyps[0].score == pytest.approx(math.log(0.36) / (7 / 6) ** 0.6, rel=1e-6)


def test_small_pieces():
    assert float(length_penalty(1, 0.6)) == pytest.approx(1.0)
    assert float(length_penalty(10, 0.6)) == pytest.approx((15 / 6) ** 0.6)
    assert float(length_penalty(10, 0.6, "power")) == pytest.approx(10**0.6)
    scores = torch.tensor([[0.0, -1.0]])
    logprobs = torch.log(torch.tensor([[[0.1, 0.9], [0.2, 0.8]]]))
    values, beams, words = top_candidates(scores, logprobs, 3)  # .9, .8/e = .294, .1 (.2/e = .074 is out)
    assert beams.tolist() == [[0, 1, 0]] and words.tolist() == [[1, 1, 0]]
    torch.testing.assert_close(values, torch.log(torch.tensor([[0.9, 0.8 * math.exp(-1), 0.1]])))
    fin_s, fin_t, fin_l = merge_finished(torch.tensor([[-1.0, float("-inf")]]), torch.zeros(1, 2, 3, dtype=torch.long),
                                         torch.tensor([[-1.0, float("-inf")]]), torch.tensor([[-0.5, -3.0]]),
                                         torch.ones(1, 2, 3, dtype=torch.long), torch.tensor([[-0.7, -3.5]]))
    assert fin_s.tolist() == [[-0.5, -1.0]] and fin_t[0, :, 0].tolist() == [1, 0]
    assert fin_l[0].tolist() == pytest.approx([-0.7, -1.0])


@pytest.mark.parametrize("alpha, kind", [(0.6, "gnmt"), (1.0, "power"), (0.0, "gnmt")])
def test_wide_beam_equals_exhaustive_enumeration(alpha, kind):
    torch.manual_seed(3)
    model = Transformer(tiny_config(vocab_size=6, d_model=32, d_ff=64)).eval()
    src, _ = random_batch(2, 4, 6)
    L = 4  # at most 3 tokens and eos
    opts = SearchOptions(max_len_a=0, max_len_b=L)
    words = [3, 4, 5]  # pad and bos are never generated; eos ends
    results = beam_search(model, src, beam=len(words) ** (L - 1), alpha=alpha, options=opts, length_penalty_kind=kind)
    for b in range(2):
        candidates = [list(y) for k in range(L) for y in itertools.product(words, repeat=k)]
        logprobs = score_targets(model, src[b : b + 1].expand(len(candidates), -1), candidates)
        scores = logprobs / length_penalty(torch.tensor([len(y) + 1 for y in candidates]), alpha, kind).float()
        best = int(scores.argmax())
        assert results[b][0].tokens == candidates[best]
        assert results[b][0].score == pytest.approx(float(scores[best]), abs=1e-5)


def test_beam_one_equals_greedy_and_scores_equal_forced_decoding():
    model = Transformer(tiny_config()).eval()
    src, _ = random_batch(5, 7, 40)
    opts = SearchOptions(max_len_a=1.0, max_len_b=5)
    greedy = greedy_search(model, src, opts)
    beam1 = beam_search(model, src, beam=1, options=opts, stop="k_finished")
    assert [g.tokens for g in greedy] == [b[0].tokens for b in beam1]
    beam4 = beam_search(model, src, beam=4, options=opts)
    forced = score_targets(model, src, [h[0].tokens for h in beam4])
    torch.testing.assert_close(forced, torch.tensor([h[0].logprob for h in beam4]), atol=1e-4, rtol=0)


@pytest.mark.parametrize("positional", ["sinusoidal", "rope", "alibi"])
def test_cached_equals_uncached_and_batch_equals_alone(positional):
    model = Transformer(tiny_config(positional=positional)).eval()
    src, _ = random_batch(4, 8, 40)
    opts = SearchOptions(max_len_a=1.0, max_len_b=4)
    cached = beam_search(model, src, beam=3, options=opts, nbest=3)
    uncached = beam_search(model, src, beam=3, options=SearchOptions(1.0, 4, use_cache=False), nbest=3)
    assert [[h.tokens for h in hs] for hs in cached] == [[h.tokens for h in hs] for hs in uncached]
    for b in range(4):
        alone = src[b : b + 1, : int(src[b].ne(0).sum())]  # no padding at all
        assert [h.tokens for h in beam_search(model, alone, beam=3, options=opts, nbest=3)[0]] == \
            [h.tokens for h in cached[b]]
        assert greedy_search(model, alone, opts)[0].tokens == greedy_search(model, src, opts)[b].tokens


def test_constraints_prefix_min_and_max_length():
    model = Transformer(tiny_config()).eval()
    src, _ = random_batch(3, 6, 40)
    prefix = [[7, 8], [], [9]]
    opts = SearchOptions(max_len_a=0, max_len_b=6, min_len=4, prefix=prefix)
    for hyps in (greedy_search(model, src, opts), [h[0] for h in beam_search(model, src, 4, options=opts)]):
        for h, p in zip(hyps, prefix):
            assert h.tokens[: len(p)] == p
            assert 4 <= len(h.tokens) <= 5  # eos counts towards the 6


def test_sampling_is_seeded_and_top_k_one_is_greedy():
    model = Transformer(tiny_config()).eval()
    src, _ = random_batch(4, 6, 40)
    opts = SearchOptions(max_len_a=0, max_len_b=8)
    a = sample(model, src, opts, temperature=1.0, generator=torch.Generator().manual_seed(5))
    b = sample(model, src, opts, temperature=1.0, generator=torch.Generator().manual_seed(5))
    assert [h.tokens for h in a] == [h.tokens for h in b]
    top1 = sample(model, src, opts, top_k=1, generator=torch.Generator().manual_seed(9))
    assert [h.tokens for h in top1] == [h.tokens for h in greedy_search(model, src, opts)]


def test_filter_logits_top_p_keeps_the_nucleus():
    lp = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = filter_logits(lp, top_p=0.75).isfinite()
    assert kept.tolist() == [[True, True, False, False]]
    assert filter_logits(lp, top_k=3).isfinite().sum() == 3
