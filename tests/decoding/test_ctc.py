"""Joint CTC/attention search: CTC's prefix scores against the enumeration of every alignment, and
the search that uses them."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import pytest
import torch

from transduce import ModelConfig, Transformer
from transduce.config import DecodeConfig
from transduce.decoding import beam_search, greedy_search
from transduce.decoding.ctc import CTCPrefixScorer

BLANK, EOS = 0, 2


def collapse(path) -> tuple:
    out, previous = [], None
    for token in path:
        if token != previous and token != BLANK:
            out.append(token)
        previous = token
    return tuple(out)


def enumerate_ctc(logprobs: torch.Tensor, length: int) -> dict:
    """Every alignment of the first ``length`` positions of ``logprobs (T, V)``: the probability of
    each collapsed label sequence."""
    V = logprobs.size(-1)
    found: dict = {}
    for path in itertools.product(range(V), repeat=length):
        p = math.exp(sum(float(logprobs[t, k]) for t, k in enumerate(path)))
        key = collapse(path)
        found[key] = found.get(key, 0.0) + p
    return found


class Fixed(torch.nn.Module):
    """A stand-in speech model whose CTC head gives fixed log-probabilities."""

    def __init__(self, logits: torch.Tensor, lengths: list[int]) -> None:
        super().__init__()
        self.logits, self.lengths = logits, lengths
        self.ctc = lambda memory: self.logits
        self.src_embed = SimpleNamespace(real=lambda src: torch.arange(logits.size(1))[None]
                                         < torch.tensor(lengths)[:, None])

    def encode(self, src):
        return src


def test_prefix_scores_are_the_sums_over_every_alignment():
    torch.manual_seed(0)
    V, T = 5, 5  # (blank 0, tokens 1, 3, 4; 2 is eos and never in an alignment)
    logits = torch.randn(2, T, V)
    logits[..., EOS] = -1e9
    model = Fixed(logits, [5, 3])  # the second recording is shorter: its padding is ignored
    scorer = CTCPrefixScorer(0.5, beam=1, blank=BLANK, eos=EOS)
    scorer.begin(model, torch.zeros(2, T, 1), K=1)
    logprobs = torch.log_softmax(logits, -1)
    for row, length in enumerate([5, 3]):
        exact = enumerate_ctc(logprobs[row], length)

        def prefix(h):
            return sum(p for seq, p in exact.items() if seq[:len(h)] == h)

        for h in [(), (1,), (3,), (1, 1), (1, 3), (4, 4, 1)]:
            # the scorer's state for h: advance one row along h
            scorer.begin(model, torch.zeros(2, T, 1), K=1)
            for token in h:
                candidates = torch.tensor([[token], [token]])
                psi, r_n, r_b = scorer.extend(candidates)
                scorer.pending = (candidates, psi, r_n, r_b)
                scorer.advance(torch.tensor([token, token]))
            candidates = torch.tensor([[1, 3, 4, EOS]] * 2)
            psi, _, _ = scorer.extend(candidates)
            for c, value in zip([1, 3, 4], psi[row, :3].tolist()):
                assert math.exp(value) == pytest.approx(prefix(h + (c,)), rel=1e-4, abs=1e-9)
            assert math.exp(psi[row, 3]) == pytest.approx(exact.get(h, 0.0), rel=1e-4, abs=1e-9)


def speech_model(ctc_weight: float = 0.3) -> Transformer:
    torch.manual_seed(1)
    config = ModelConfig.preset("speech-small", encoder_layers=1, decoder_layers=1, d_model=32,
                                n_heads=4, d_ff=64, channels=6, vocab_size=9, dropout=0.0,
                                ctc_weight=ctc_weight)
    return Transformer(config).eval()


def test_weight_zero_is_the_decoders_search_and_a_weight_changes_the_scores():
    model = speech_model()
    frames = torch.randn(3, 30, 6)
    frames[1, 20:] = float("nan")
    plain = beam_search(model, frames, DecodeConfig(beam=3, max_len_a=0, max_len_b=8))
    joint = beam_search(model, frames, DecodeConfig(beam=3, max_len_a=0, max_len_b=8,
                                                    ctc_weight=0.5))
    assert [h[0].score for h in plain] != [h[0].score for h in joint]
    for one, alone in zip(joint, [beam_search(model, frames[i:i + 1, :n], DecodeConfig(
            beam=3, max_len_a=0, max_len_b=8, ctc_weight=0.5))[0] for i, n in
            enumerate([30, 20, 30])]):
        assert one[0].tokens == alone[0].tokens  # each recording as alone
        assert one[0].score == pytest.approx(alone[0].score, abs=1e-4)
    greedy = greedy_search(model, frames, DecodeConfig(beam=1, max_len_a=0, max_len_b=8,
                                                       ctc_weight=0.5))
    assert len(greedy) == 3


def test_a_model_without_a_ctc_head_is_refused_by_name():
    model = speech_model(ctc_weight=0.0)
    with pytest.raises(ValueError, match="needs a model with a CTC head"):
        beam_search(model, torch.randn(1, 10, 6), DecodeConfig(beam=2, ctc_weight=0.3))
