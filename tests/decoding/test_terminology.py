"""Terminology constraints (``decoding/terminology.py``): every phrase appears in every output of
greedy and beam search, phrases overlapping, inside one another or repeated, a sentence's output
does not depend on its batch-mates, and what cannot fit is refused."""

from __future__ import annotations

import pytest
import torch

from transduce import ModelConfig, Transformer
from transduce.config import DecodeConfig
from transduce.decoding import translate_ids
from transduce.decoding.terminology import Terminology, check_room

from ..helpers import cli


def model_of(device):
    torch.manual_seed(0)
    config = ModelConfig.preset("tiny", vocab_size=40, max_positions=64)
    return Transformer(config).to(device).eval()


def occurrences(output: list[int], phrase: list[int]) -> int:
    n = len(phrase)
    return sum(output[i:i + n] == phrase for i in range(len(output) - n + 1))


SOURCES = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16, 17], [18, 19]]
PHRASES = [
    [[20, 21, 22]],  # one phrase
    [[23, 24], [24, 25]],  # overlapping: "23 24 25" holds both
    [[26], [26, 27], [28], [28]],  # one inside another; one repeated
    [],  # none
]


@pytest.mark.parametrize("beam, bonus", [(1, 0.0), (4, 0.0), (4, None)])
def test_every_phrase_is_in_every_output(device, beam, bonus):
    """Without the bonus the model places nothing of its own accord here (a random model): the
    phrases go in at the last moment the room allows."""
    model = model_of(device)
    decode = DecodeConfig(beam=beam, max_len_a=1, max_len_b=8)
    plain = translate_ids(model, SOURCES, decode)
    terms = Terminology(PHRASES, model.config.eos_id, bonus=bonus)
    got = translate_ids(model, SOURCES, decode, modifiers=[terms])
    for phrases, hyps, alone in zip(PHRASES, got, plain):
        output = hyps[0].tokens
        wanted: dict[tuple, int] = {}
        for phrase in phrases:
            wanted[tuple(phrase)] = wanted.get(tuple(phrase), 0) + 1
        for phrase, count in wanted.items():
            assert occurrences(output, list(phrase)) >= count, (phrases, output)
        if not phrases:  # no constraint: the search's own output
            assert output == alone[0].tokens
    # each sentence's output is its own, whatever its batch-mates
    for i, source in enumerate(SOURCES):
        single = translate_ids(model, [source], decode, modifiers=[terms.subset([i])])
        assert single[0][0].tokens == got[i][0].tokens, i


def test_phrases_that_fill_the_output_exactly_are_placed(device):
    model = model_of(device)
    decode = DecodeConfig(beam=4, max_len_a=0, max_len_b=6)  # 5 tokens and eos
    phrases = [[[30, 31], [32, 33, 34]]]
    terms = Terminology(phrases, model.config.eos_id, bonus=0.0)
    out = translate_ids(model, [[5, 6]], decode, modifiers=[terms])[0][0]
    assert sorted([out.tokens[:2], out.tokens[2:]]) == [[30, 31], [32, 33, 34]] or \
        sorted([out.tokens[:3], out.tokens[3:]]) == [[30, 31], [32, 33, 34]]
    assert check_room([[30, 31], [32, 33, 34]], 6) is None
    assert "take 5 tokens and eos 1, more than the 5" in check_room([[30, 31], [32, 33, 34]], 5)


def test_the_bonus_draws_a_phrase_to_where_the_model_may_place_it(device):
    model = model_of(device)
    decode = DecodeConfig(beam=4, max_len_a=0, max_len_b=12)
    late, early = (translate_ids(model, [[5, 6, 7]], decode, modifiers=[
        Terminology([[[20, 21]]], model.config.eos_id, bonus=bonus)])[0][0].tokens
        for bonus in (0.0, 100.0))
    assert early[:2] == [20, 21] and late[:2] != [20, 21], (early, late)


def test_a_completed_phrase_is_whole_words(device):
    """After a phrase, no piece that would glue it to a longer word."""
    model = model_of(device)
    glued = torch.zeros(40, dtype=torch.bool)
    glued[4:] = True  # every piece but the specials continues a word
    decode = DecodeConfig(beam=1, max_len_a=0, max_len_b=10)
    terms = Terminology([[[20, 21]]], model.config.eos_id, glued)
    out = translate_ids(model, [[5, 6, 7]], decode, modifiers=[terms])[0][0].tokens
    at = next(i for i in range(len(out) - 1) if out[i:i + 2] == [20, 21])
    assert at + 2 == len(out) or not glued[out[at + 2]], out


def test_translate_holds_each_line_s_terms(reverse_run, tmp_path):
    run = str(reverse_run / "run")
    source = tmp_path / "in.txt"
    source.write_text("blue blue red big mat\n\nsees sat big\n")
    terms = tmp_path / "terms.txt"
    terms.write_text("house\n\ndog\tcat\n")
    out = cli("translate", run, "--input", str(source), "--constraints", str(terms)).stdout
    lines = out.splitlines()
    assert "house" in lines[0].split() and lines[1] == ""
    assert {"dog", "cat"} <= set(lines[2].split())
    plain = cli("translate", run, "--input", str(source)).stdout.splitlines()
    assert "house" not in plain[0].split()
    long = tmp_path / "long.txt"
    long.write_text("\n\n" + "\t".join(["house dog cat"] * 20) + "\n")
    short = tmp_path / "short.txt"
    short.write_text("house\n")
    for flags, words in ((["--input", str(source), "--constraints", str(short)],
                          "has 1 line(s), --input"),
                         (["--constraints", str(short)], "give the sentences as --input FILE"),
                         (["--input", str(source), "--constraints", str(long)], "input line 3: "
                                                                                 "its constraints"),
                         (["--input", str(source), "--constraints", str(terms), "--draft",
                           "self:1"], "--draft searches greedily")):
        failed = cli("translate", run, *flags, input="", check=False)
        assert failed.returncode == 2 and words in failed.stderr, (flags, failed.stderr)


def test_a_row_that_would_end_begins_a_missing_phrase_instead():
    """Where eos is a row's best token, a missing phrase begins there rather than the row writing
    on with eos forbidden (which makes a model ramble until the room runs out)."""
    terms = Terminology([[[7, 8], [9]]], eos_id=2, bonus=0.0)
    terms.start(type("Start", (), {"per_row": 2})())
    logprobs = torch.log_softmax(torch.tensor([[0.0, 0.0, 5.0, 1.0, 0, 0, 0, 0, 0, 0, 0],
                                               [0.0, 0.0, 1.0, 5.0, 0, 0, 0, 0, 0, 0, 0]]), -1)
    step = type("Step", (), {"room": torch.tensor([20, 20])})()
    out = terms.adjust(logprobs.clone(), step)
    assert torch.isfinite(out[0]).nonzero().view(-1).tolist() == [7, 9]  # it would have ended
    # (at eos's score: the row stays as likely as the end it stands in for)
    assert out[0, 7] == out[0, 9] == logprobs[0, 2]
    assert not torch.isfinite(out[1, 2]) and torch.isfinite(out[1]).sum() == 10  # eos only barred
