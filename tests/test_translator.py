"""``translator.py``: text in, text out, in input order; the facade over the search driver."""

from __future__ import annotations

import warnings

import pytest
import torch

from transduce import load
from transduce.config import DecodeConfig
from transduce.decoding import translate_ids
from transduce.errors import TransduceError


@pytest.fixture(scope="module")
def translator(reverse_run):
    return load(reverse_run / "run")


def test_lines_keep_their_order_and_empty_lines_stay_empty(translator):
    lines = ["the cat sat", "", "a big dog runs on the mat", "red"]
    out = translator.translate(lines, beam=2)
    assert out[1] == "" and all(out[i] for i in (0, 2, 3))
    assert out[0] == "sat cat the" and out[3] == "red"  # the reversal task, learned
    alone = [translator.translate([line], beam=2)[0] for line in lines]
    assert alone == out  # batching never changes an output


def test_the_facade_is_the_driver_plus_the_tokenizer(translator):
    lines = ["the cat sat", "a dog"]
    decode = DecodeConfig(beam=3, nbest=2)
    ids = translate_ids(translator.model, translator.encode(lines), decode)
    got = translator.translate_nbest(lines, decode=decode)
    assert [[text for text, _ in hyps] for hyps in got] == \
        [[translator.tokenizer.decode_tgt(h.tokens) for h in hyps] for hyps in ids]
    assert [[score for _, score in hyps] for hyps in got] == [
        [h.score for h in hyps] for hyps in ids
    ]
    # options are DecodeConfig's fields
    assert translator.translate_nbest(lines, nbest=2, beam=3) == got


def test_over_long_lines_are_truncated_or_refused(translator):
    long = " ".join(["cat"] * (translator.max_source_tokens + 5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        translator.translate([long], beam=1, max_len_b=3)
    assert any("is truncated" in str(w.message) for w in caught)
    with pytest.raises(TransduceError, match="input line 7 has .* tokens"):
        translator.translate([long], beam=1, strict=True, first_line=7)
    with pytest.raises(TransduceError, match="--min-len"):
        translator.translate(["red"], beam=1, min_len=500, max_len_b=3)


def test_one_return_shape_per_method_and_options_given_once(translator):
    lines = ["the cat sat", "", "red"]
    best = translator.translate(lines, beam=3)
    lists = translator.translate_nbest(lines, beam=3, nbest=2)
    assert all(isinstance(text, str) for text in best) and best[1] == ""
    assert lists[1] == [] and [hyps[0][0] for hyps in (lists[0], lists[2])] == [best[0], best[2]]
    assert translator.translate_nbest(lines, beam=3)[0] == [lists[0][0]]  # nbest 1: still a list
    with pytest.raises(TransduceError, match="translate_nbest"):
        translator.translate(lines, nbest=2, beam=3)
    with pytest.raises(TypeError, match="not both"):  # beam=5 would be dropped in silence
        translator.translate(lines, decode=DecodeConfig(beam=2), beam=5)
    with pytest.raises(TypeError, match="unknown search option 'beams'"):
        translator.translate(lines, beams=5)


def test_the_package_exports_the_translator_and_loads_where_the_commands_do(reverse_run):
    import inspect

    import transduce
    from transduce.translator import Translator

    assert transduce.Translator is Translator and "Translator" in transduce.__all__
    for function in (transduce.load, transduce.load_lm, Translator.load):
        assert inspect.signature(function).parameters["device"].default == "auto", function


def test_evaluate_translates_and_scores_with_sacrebleu(translator):
    from transduce.evaluate import score

    sources = ["the cat sat", "a dog runs"]
    references = ["sat cat the", "runs dog a"]
    result = translator.evaluate(sources, references, beam=2)
    assert (result.metric, result.count) == ("bleu", 2)
    assert result.outputs == translator.translate(sources, beam=2)
    assert result.scores == score(result.outputs, references)
    assert result.value == result["bleu"] and "chrf" in result.to_dict()
    with pytest.raises(TransduceError, match="2 sources but 1 references"):
        translator.evaluate(sources, references[:1])


def test_attention_takes_lines_as_translate_does_or_token_ids(translator):
    lines = ["the cat sat", "a big dog runs"]
    ids = translator.encode(lines)
    own = [translator.tokenizer.encode_tgt([t])[0] for t in translator.translate(lines)]
    by_ids = translator.attention(ids, own)
    for given in (translator.attention(lines),
                  translator.attention(lines, translator.translate(lines))):
        assert len(given.cross) == len(by_ids.cross)
        assert all(torch.equal(a, b) for a, b in zip(given.cross, by_ids.cross))
    first = translator.attention(lines, ["sat cat the", "runs dog big a"]).cross[0]
    assert first.shape[0] == 2 and first.shape[-1] == max(map(len, ids)) + 1  # (eos: a column)
    with pytest.raises(TransduceError, match="2 sources but 1 targets"):
        translator.attention(lines, ["sat cat the"])
