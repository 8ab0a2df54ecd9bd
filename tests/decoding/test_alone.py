"""Every constraint and scorer of a search leaves each sentence's output as it is searched alone,
whatever its batch-mates: the bracket rules (a parser's), the length rules (--min-len,
--max-len-a/b), forced prefixes, and the joint CTC scorer (a speech model's, recordings of other
lengths)."""

from __future__ import annotations

import pytest
import torch

from transduce import Transformer
from transduce.config import DecodeConfig
from transduce.data.trees import delinearize
from transduce.decoding import BracketRules, BracketVocabulary, translate_ids

from ..conftest import tiny_config
from .test_brackets import PIECES, tokens
from .test_ctc import speech_model


def assert_alone(batched, alone):
    for number, (b, a) in enumerate(zip(batched, alone)):
        assert [h.tokens for h in b] == [h.tokens for h in a], f"sentence {number}"
        for x, y in zip(b, a):
            assert x.score == pytest.approx(y.score, rel=1e-5, abs=1e-4), f"sentence {number}"


@pytest.mark.parametrize("beam", [1, 3])
def test_a_parse_is_the_parse_of_its_sentence_alone(beam, device):
    """A model that prefers opening constituents above all opens as many as the rules let a row
    hold: that cap is the sentence's own (words + 8), not its longest batch-mate's."""
    torch.manual_seed(1)
    model = Transformer(tiny_config(tgt_vocab_size=len(PIECES), tying="decoder",
                                    max_positions=128, output_bias=True))
    with torch.no_grad():
        model.output_bias[PIECES.index("\u2581(NP")] = 30.0
    model = model.to(device).eval()
    vocabulary = BracketVocabulary(PIECES, model.config.eos_id)
    words = [1, 15, 3, 9]
    g = torch.Generator().manual_seed(2)
    sources = [torch.randint(4, 40, (n,), generator=g).tolist() for n in words]
    decode = DecodeConfig(beam=beam, max_len_a=1.0, max_len_b=60)
    batched = translate_ids(model, sources, decode, modifiers=[BracketRules(vocabulary, words)])
    alone = [translate_ids(model, [s], decode, modifiers=[BracketRules(vocabulary, [n])])[0]
             for s, n in zip(sources, words)]
    assert_alone(batched, alone)
    one_word = tokens(batched[0][0].tokens)
    delinearize(one_word, ["w"], tags=False)  # (a tree over its one word)
    assert one_word.count("(NP") == 1 + 8  # its own cap: its word + 8 open constituents


@pytest.mark.parametrize("beam", [1, 4])
def test_length_rules_and_prefixes_are_each_sentences_own(beam, device):
    model = Transformer(tiny_config()).to(device).eval()
    g = torch.Generator().manual_seed(3)
    sources = [torch.randint(4, 40, (n,), generator=g).tolist() for n in (2, 12, 5, 1)]
    prefixes = [[7], [], [9, 10], [11]]
    decode = DecodeConfig(beam=beam, max_len_a=0.5, max_len_b=3, min_len=2)
    batched = translate_ids(model, sources, decode, prefixes)
    alone = [translate_ids(model, [s], decode, [p])[0] for s, p in zip(sources, prefixes)]
    assert_alone(batched, alone)
    for hyps, src in zip(batched, sources):
        assert 2 <= len(hyps[0].tokens) <= int(0.5 * (len(src) + 1) + 3) - 1


@pytest.mark.parametrize("beam", [1, 3])
def test_a_joint_ctc_search_is_each_recordings_own(beam):
    model = speech_model()
    g = torch.Generator().manual_seed(4)
    recordings = [torch.randn(n, 6, generator=g).numpy() for n in (30, 9, 21)]
    decode = DecodeConfig(beam=beam, max_len_a=0, max_len_b=8, ctc_weight=0.5)
    batched = translate_ids(model, recordings, decode)
    alone = [translate_ids(model, [r], decode)[0] for r in recordings]
    assert_alone(batched, alone)


@pytest.mark.parametrize("beam", [1, 4])
def test_an_int8_search_is_each_sentences_own(beam):
    """int8 quantizes each activation row over its own range and attends in float64, so a
    sentence's numbers, and so its output and scores, are bit for bit its own: batched (with
    padding, other lengths, other beams) as searched alone."""
    torch.manual_seed(5)
    model = Transformer(tiny_config(d_model=64, d_ff=128)).eval()
    g = torch.Generator().manual_seed(6)
    sources = [torch.randint(4, 40, (n,), generator=g).tolist() for n in (3, 14, 7, 1, 9, 5, 30)]
    decode = DecodeConfig(beam=beam, max_len_a=1.0, max_len_b=6)
    batched = translate_ids(model, sources, decode, precision="int8")
    alone = [translate_ids(model, [s], decode, precision="int8")[0] for s in sources]
    for number, (b, a) in enumerate(zip(batched, alone)):
        assert [(h.tokens, h.score) for h in b] == [(h.tokens, h.score) for h in a], number
