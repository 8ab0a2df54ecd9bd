import itertools
import math
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from transduce import Transformer
from transduce.config import DecodeConfig
from transduce.decoding import (
    SearchOptions,
    beam_search,
    filter_logits,
    greedy_search,
    length_penalty,
    merge_finished,
    sample,
    score_targets,
    top_candidates,
)

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
        self.config = SimpleNamespace(
            pad_id=PAD,
            bos_id=BOS,
            eos_id=EOS,
            start_id=BOS,
            max_positions=16,
            architecture="encoder-decoder",
            target_vocab_size=5,
        )
        # which source positions hold a token (what search asks a model's front end)
        self.src_embed = SimpleNamespace(real=lambda src: src != PAD)

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
    opts, uncached = DecodeConfig(max_len_a=0, max_len_b=3), SearchOptions(use_cache=False)
    [hyps] = beam_search(model, src, replace(opts, beam=2, alpha=0.0, nbest=2), uncached)
    assert [h.tokens for h in hyps] == [[B], [A]]
    assert [round(math.exp(h.logprob), 6) for h in hyps] == [0.36, 0.24]
    [greedy] = greedy_search(model, src, opts, uncached)
    assert greedy.tokens == [A] and math.exp(greedy.logprob) == pytest.approx(0.24)
    # With the paper's alpha 0.6 both finished hypotheses have |Y| = 2, so the order is the same,
    # and the score is logprob / ((5 + 2) / 6) ** 0.6.
    [hyps] = beam_search(model, src, replace(opts, beam=2, alpha=0.6, nbest=2), uncached)
    assert hyps[0].score == pytest.approx(math.log(0.36) / (7 / 6) ** 0.6, rel=1e-6)


def test_small_pieces():
    assert float(length_penalty(1, 0.6)) == pytest.approx(1.0)
    assert float(length_penalty(10, 0.6)) == pytest.approx((15 / 6) ** 0.6)
    assert float(length_penalty(10, 0.6, "power")) == pytest.approx(10**0.6)
    scores = torch.tensor([[0.0, -1.0]])
    logprobs = torch.log(torch.tensor([[[0.1, 0.9], [0.2, 0.8]]]))
    # .9, .8/e = .294, .1 (.2/e = .074 is out)
    values, beams, words = top_candidates(scores, logprobs, 3)
    assert beams.tolist() == [[0, 1, 0]] and words.tolist() == [[1, 1, 0]]
    torch.testing.assert_close(values, torch.log(torch.tensor([[0.9, 0.8 * math.exp(-1), 0.1]])))
    fin_s, fin_t, fin_l = merge_finished(
        torch.tensor([[-1.0, float("-inf")]]),
        torch.zeros(1, 2, 3, dtype=torch.long),
        torch.tensor([[-1.0, float("-inf")]]),
        torch.tensor([[-0.5, -3.0]]),
        torch.ones(1, 2, 3, dtype=torch.long),
        torch.tensor([[-0.7, -3.5]]),
    )
    assert fin_s.tolist() == [[-0.5, -1.0]] and fin_t[0, :, 0].tolist() == [1, 0]
    assert fin_l[0].tolist() == pytest.approx([-0.7, -1.0])


WORDS = [4, 5, 6, 7]  # the enumeration test's output words (pad, bos, eos, unk are 0-3)
MAX_OUT = 5  # at most 4 words and eos


def ambiguous_pairs() -> list[tuple[list[int], list[int]]]:
    """Each source has three readings: 4 or 5 followed by any word (likely first words, diffuse
    continuations), or 6 followed by the reversed source (a rarer first word, then certain).
    The best output is the third, which greedy search and a beam of 2 cannot reach."""
    pairs = []
    for source in (list(y) for k in (1, 2) for y in itertools.product(WORDS, repeat=k)):
        pairs += [(source, [4, w]) for w in WORDS] + [(source, [5, w]) for w in WORDS]
        pairs += [(source, [6] + source[::-1])] * 3
    return pairs


def enumerate_best(model, src, alpha: float, kind: str) -> list[list[tuple[float, list[int]]]]:
    """Every output of up to MAX_OUT - 1 words, scored as beam search ranks them, best first."""
    candidates = [list(y) for k in range(MAX_OUT) for y in itertools.product(WORDS, repeat=k)]
    ranked = []
    for b in range(src.size(0)):
        logprobs = score_targets(model, src[b : b + 1].expand(len(candidates), -1), candidates)
        scores = (
            logprobs
            / length_penalty(torch.tensor([len(y) + 1 for y in candidates]), alpha, kind).float()
        )
        order = scores.argsort(descending=True).tolist()
        ranked.append([(float(scores[i]), candidates[i]) for i in order])
    return ranked


@pytest.fixture(scope="module")
def ambiguous_model():
    """A tiny Transformer trained (full batch, a few seconds) until search is hard: for every test
    sentence the best output has an intermediate length, and greedy and a beam of 2 miss it."""
    from transduce.data.dataset import pad_sequences

    torch.manual_seed(0)
    model = Transformer(tiny_config(vocab_size=8, d_model=32, d_ff=64, dropout=0.0))
    pairs = ambiguous_pairs()
    src = pad_sequences([p[0] for p in pairs], PAD, suffix=EOS)
    tgt_in = pad_sequences([p[1] for p in pairs], PAD, prefix=BOS)
    tgt_out = pad_sequences([p[1] for p in pairs], PAD, suffix=EOS)
    # sentences of different lengths
    test_src = pad_sequences([[4], [5, 7], [7, 6], [6]], PAD, suffix=EOS)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    opts = DecodeConfig(max_len_a=0, max_len_b=MAX_OUT)
    for step in range(1, 301):  # bounded by steps; the search below decides when the model is ready
        model.train()
        loss = nn.functional.cross_entropy(
            model(src, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=PAD
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20:
            continue
        model.eval()
        best = [r[0][1] for r in enumerate_best(model, test_src, 0.6, "gnmt")]
        greedy = [h.tokens for h in greedy_search(model, test_src, opts)]
        narrow = [
            h[0].tokens for h in beam_search(model, test_src, replace(opts, beam=2, alpha=0.6))
        ]
        if all(0 < len(y) < MAX_OUT - 1 for y in best) and len({len(y) for y in best}) > 1 and \
                greedy != best and narrow != best:
            return model, test_src
    pytest.fail("the model never made search hard; the task or the training steps need a look")


@pytest.mark.parametrize(
    "alpha, kind", [(0.6, "gnmt"), (1.0, "gnmt"), (1.0, "power"), (0.0, "gnmt")]
)
def test_wide_beam_equals_exhaustive_enumeration(ambiguous_model, alpha, kind):
    model, src = ambiguous_model
    opts = DecodeConfig(max_len_a=0, max_len_b=MAX_OUT)
    ranked = enumerate_best(model, src, alpha, kind)
    wide = beam_search(
        model,
        src,
        replace(opts, beam=len(WORDS) ** (MAX_OUT - 1), alpha=alpha, nbest=3, length_penalty=kind),
    )
    greedy = greedy_search(model, src, opts)
    narrow = beam_search(model, src, replace(opts, beam=2, alpha=alpha, length_penalty=kind))
    for b in range(src.size(0)):
        expected = ranked[b][:3]
        # the 3 best, in order, distinct
        assert [h.tokens for h in wide[b]] == [y for _, y in expected]
        assert [h.score for h in wide[b]] == pytest.approx([s for s, _ in expected], abs=1e-5)
        # an intermediate length, not empty, not the longest
        assert 0 < len(expected[0][1]) < MAX_OUT - 1
    if (alpha, kind) == (0.6, "gnmt"):  # the test's power: cheaper searches miss the optimum
        assert [g.tokens for g in greedy] != [r[0][1] for r in ranked]
        assert [h[0].tokens for h in narrow] != [r[0][1] for r in ranked]


def test_length_penalty_flips_the_ranking_by_hand():
    """fairseq-style: two sentences, beam 2, scripted probabilities, worked out by hand.

    Sentence 0 (source A): p(A)=.6 p(B)=.4; after A: eos .6, A .25, B .15; after B: B .85, eos .15;
    after AA, AB or BB: eos 1.
      step 0: live A (.6), B (.4)
      step 1: candidates A.eos .36, B.B .34, A.A .15, A.B .09, B.eos .06 -> finished "A" (.36,
    |Y|=2);
              live BB (.34), AA (.15)
      step 2: BB.eos .34 (|Y|=3), AA.eos .15 (|Y|=3)
      alpha 0:   "A"  log .36 = -1.0217  beats  "BB" log .34 = -1.0788
      alpha 1 (gnmt, lp = (5+|Y|)/6):  "A" -1.0217/(7/6) = -0.8757  loses to  "BB" -1.0788/(8/6) =
    -0.8091
    Sentence 1 (source B): p(B)=.7 p(A)=.3; after B: eos .8, A .12, B .08; after A: A 1; after AA,
    BA, BB: eos 1. "B" (.56) wins at both alphas:
      alpha 0: log .56 = -0.5798;  "AA" log .3 = -1.2040
      alpha 1: -0.5798/(7/6) = -0.4970;  "AA" -1.2040/(8/6) = -0.9030
    """
    table = {
        A: {(): {A: 0.6, B: 0.4}, (A,): {EOS: 0.6, A: 0.25, B: 0.15}, (B,): {B: 0.85, EOS: 0.15}},
        B: {(): {B: 0.7, A: 0.3}, (B,): {EOS: 0.8, A: 0.12, B: 0.08}, (A,): {A: 1.0}},
    }

    class TwoSentences(ScriptedModel):
        def forward(self, src, tgt):
            logits = torch.full((tgt.size(0), tgt.size(1), 5), float("-inf"))
            for b, t in itertools.product(range(tgt.size(0)), range(tgt.size(1))):
                prefix = tuple(tgt[b, 1 : t + 1].tolist())
                for token, p in table[int(src[b, 0])].get(prefix, {EOS: 1.0}).items():
                    logits[b, t, token] = math.log(p)
            return logits

    model = TwoSentences()
    src = torch.tensor([[A, EOS], [B, EOS]])
    opts, uncached = DecodeConfig(max_len_a=0, max_len_b=4), SearchOptions(use_cache=False)
    plain = beam_search(model, src, replace(opts, beam=2, alpha=0.0, nbest=2), uncached)
    assert [h.tokens for h in plain[0]] == [[A], [B, B]]
    assert [h.score for h in plain[0]] == pytest.approx([-1.0217, -1.0788], abs=1e-4)
    assert plain[1][0].tokens == [B] and plain[1][0].score == pytest.approx(-0.5798, abs=1e-4)
    flipped = beam_search(model, src, replace(opts, beam=2, alpha=1.0, nbest=2), uncached)
    assert [h.tokens for h in flipped[0]] == [[B, B], [A]]
    assert [h.score for h in flipped[0]] == pytest.approx([-0.8091, -0.8757], abs=1e-4)
    assert [h.logprob for h in flipped[0]] == pytest.approx(
        [math.log(0.34), math.log(0.36)], abs=1e-6
    )
    assert flipped[1][0].tokens == [B] and flipped[1][0].score == pytest.approx(-0.4970, abs=1e-4)
    assert [h.tokens for h in flipped[1]] == [[B], [A, A]]
    assert flipped[1][1].score == pytest.approx(-0.9030, abs=1e-4)


def test_beam_one_equals_greedy_and_scores_equal_forced_decoding(device):
    model = Transformer(tiny_config()).to(device).eval()
    src, _ = random_batch(5, 7, 40, device=device)
    opts = DecodeConfig(max_len_a=1.0, max_len_b=5)
    greedy = greedy_search(model, src, opts)
    beam1 = beam_search(model, src, replace(opts, beam=1, stop="k_finished"))
    assert [g.tokens for g in greedy] == [b[0].tokens for b in beam1]
    beam4 = beam_search(model, src, replace(opts, beam=4))
    forced = score_targets(model, src, [h[0].tokens for h in beam4])
    torch.testing.assert_close(
        forced.cpu(), torch.tensor([h[0].logprob for h in beam4]), atol=1e-4, rtol=0
    )


@pytest.mark.parametrize("positional", ["sinusoidal", "rope", "alibi", "relative"])
def test_cached_equals_uncached_and_batch_equals_alone(positional, device):
    model = Transformer(tiny_config(positional=positional)).to(device).eval()
    src, _ = random_batch(4, 8, 40, device=device)
    opts = DecodeConfig(max_len_a=1.0, max_len_b=4)
    cached = beam_search(model, src, replace(opts, beam=3, nbest=3))
    uncached = beam_search(
        model, src, replace(opts, beam=3, nbest=3), SearchOptions(use_cache=False)
    )
    assert [[h.tokens for h in hs] for hs in cached] == [[h.tokens for h in hs] for hs in uncached]
    for b in range(4):
        alone = src[b : b + 1, : int(src[b].ne(0).sum())]  # no padding at all
        assert [h.tokens for h in beam_search(model, alone, replace(opts, beam=3, nbest=3))[0]] == \
            [h.tokens for h in cached[b]]
        assert (
            greedy_search(model, alone, opts)[0].tokens == greedy_search(model, src, opts)[b].tokens
        )


def test_constraints_prefix_min_and_max_length(device):
    model = Transformer(tiny_config()).to(device).eval()
    src, _ = random_batch(3, 6, 40, device=device)
    prefix = [[7, 8], [], [9]]
    opts, forced = DecodeConfig(max_len_a=0, max_len_b=6, min_len=4), SearchOptions(prefix=prefix)
    for hyps in (
        greedy_search(model, src, opts, forced),
        [h[0] for h in beam_search(model, src, replace(opts, beam=4), forced)],
    ):
        for h, p in zip(hyps, prefix):
            assert h.tokens[: len(p)] == p
            assert 4 <= len(h.tokens) <= 5  # eos counts towards the 6


def test_search_never_outputs_pad_or_the_start_token(device):
    """Pad and the start/bos token are banned at every step, in every search and on both decode
    paths, even where the model prefers them above all."""
    model = Transformer(tiny_config(output_bias=True)).to(device).eval()
    config = model.config
    banned = {config.pad_id, config.bos_id, config.start_id}
    with torch.no_grad():
        model.output_bias[list(banned)] = 50.0
    src, _ = random_batch(3, 6, 40, device=device)
    for fast in (True, False):
        opts, engine = DecodeConfig(max_len_a=0, max_len_b=6), SearchOptions(fast=fast)
        outputs = [
            *greedy_search(model, src, opts, engine),
            *[
                h
                for hs in beam_search(model, src, replace(opts, beam=3, nbest=3), engine)
                for h in hs
            ],
            *sample(model, src, opts, engine, generator=torch.Generator(device).manual_seed(0)),
        ]
        assert len(outputs) == 15 and all(h.tokens for h in outputs)  # (eos was never the choice)
        assert not banned & {t for h in outputs for t in h.tokens}


def test_sampling_is_seeded_and_top_k_one_is_greedy(device):
    model = Transformer(tiny_config()).to(device).eval()
    src, _ = random_batch(4, 6, 40, device=device)
    opts = DecodeConfig(max_len_a=0, max_len_b=8)
    a = sample(
        model, src, replace(opts, temperature=1.0), generator=torch.Generator(device).manual_seed(5)
    )
    b = sample(
        model, src, replace(opts, temperature=1.0), generator=torch.Generator(device).manual_seed(5)
    )
    assert [h.tokens for h in a] == [h.tokens for h in b]
    top1 = sample(
        model, src, replace(opts, top_k=1), generator=torch.Generator(device).manual_seed(9)
    )
    assert [h.tokens for h in top1] == [h.tokens for h in greedy_search(model, src, opts)]


def test_filter_logits_top_p_keeps_the_nucleus():
    lp = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = filter_logits(lp, top_p=0.75).isfinite()
    assert kept.tolist() == [[True, True, False, False]]
    assert filter_logits(lp, top_k=3).isfinite().sum() == 3


def test_explicit_attention_with_beams_folded_equals_the_fast_path_and_the_full_pass(device):
    """decode(need_weights=True) with K beams per sentence (queries folded as (B, H, K*T, Dh)):
    the same logits as the fast path, and cross weights equal to a full pass on repeated sources."""
    model = Transformer(tiny_config()).to(device).eval()
    src, _ = random_batch(2, 6, 40, device=device)
    tgt = torch.randint(4, 40, (6, 3), device=device)  # 2 sentences x 3 beams
    memory = model.encode(src)
    fast_cache, slow_cache = (
        model.start_decoding(src, memory, beam=3),
        model.start_decoding(src, memory, beam=3),
    )
    fast = model.decode(tgt, fast_cache)
    slow, cross = model.decode(tgt, slow_cache, need_weights=True)
    torch.testing.assert_close(slow, fast, atol=1e-5, rtol=0)
    _, full = model(src.repeat_interleave(3, 0), tgt, need_weights=True)
    assert len(cross) == len(full.cross)
    for ours, reference in zip(cross, full.cross):  # (B*K, H, T, S) each
        torch.testing.assert_close(ours, reference, atol=1e-5, rtol=0)


def test_k_finished_stops_early_and_bound_is_never_worse(ambiguous_model):
    """fairseq's rule stops at K finished hypotheses; the exact bound keeps searching while a live
    beam can still win, so its best score is never lower, and it equals enumeration."""
    model, src = ambiguous_model
    opts = DecodeConfig(max_len_a=0, max_len_b=MAX_OUT)
    gains = []
    for beam in (2, 3, 4):
        bound = beam_search(model, src, replace(opts, beam=beam, alpha=1.0, stop="bound"))
        k_finished = beam_search(model, src, replace(opts, beam=beam, alpha=1.0, stop="k_finished"))
        gains += [b[0].score - k[0].score for b, k in zip(bound, k_finished)]
    # never worse, and here strictly better somewhere
    assert min(gains) >= -1e-6 and max(gains) > 0.1
    ranked = enumerate_best(model, src, 1.0, "gnmt")
    wide = beam_search(
        model, src, replace(opts, beam=len(WORDS) ** (MAX_OUT - 1), alpha=1.0, stop="k_finished")
    )
    # K finished out of all prefixes: exact too
    assert [h[0].tokens for h in wide] == [r[0][1] for r in ranked]
