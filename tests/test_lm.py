"""``lm.py``: the descendants on text. generate streams exactly what it returns, beam search and
sampling go through the same search as translation, fill_mask ranks candidates; bad prompts and
the wrong kind of model are messages. (Random weights: what is checked is the plumbing; learning
is checked in tests/integration/test_language_models.py.)"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from transduce import ModelConfig, Transformer
from transduce.checkpoint import write_checkpoint
from transduce.config import DecodeConfig
from transduce.data import prepare_monolingual
from transduce.decoding import beam_search
from transduce.errors import TransduceError
from transduce.lm import LanguageModel

TEXT = "".join(
    f"{a} {b} {c} {a}\n"
    for a in ("one", "two", "three")
    for b in ("four", "five")
    for c in ("six", "x")
)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A random gpt-tiny and bert-tiny with a real SentencePiece vocabulary (<mask> at id 4)."""
    root = tmp_path_factory.mktemp("lm")
    (root / "train.txt").write_text(TEXT * 20)
    meta = prepare_monolingual(
        root / "train.txt", root / "data", vocab_size=40, threads=1, log=None
    )
    spm = root / "data" / meta["spm"]["src"]
    out = {}
    for preset in ("gpt-tiny", "bert-tiny"):
        torch.manual_seed(0)
        config = ModelConfig.preset(
            preset, vocab_size=meta["vocab_size"]["src"], max_positions=32, dropout=0.0
        )
        info = {"model": config.to_dict(), "src": "text", "tgt": "text", "step": 0,
                "tokenizer": {"src": spm.name, "tgt": spm.name}}
        out[preset] = write_checkpoint(root / preset, Transformer(config).eval(), info, [spm])
    return out


def test_generate_streams_what_it_returns_and_beam_is_the_search(models):
    lm = LanguageModel.load(models["gpt-tiny"], "decoder-only", "cpu")
    pieces: list[str] = []
    text = lm.generate(
        "one four", DecodeConfig(beam=1, min_len=6), max_new_tokens=8, on_text=pieces.append
    )
    # piece by piece as decided, not all at the end
    assert "".join(pieces) == text and len(pieces) >= 2
    drawn = [lm.generate("one", DecodeConfig(beam=1, sampling=True, seed=3), 8) for _ in range(2)]
    assert drawn[0] == drawn[1]  # seeded
    ids = lm.prompt_ids("one four", 8)
    decode = DecodeConfig(beam=3)
    expected = beam_search(
        lm.model, torch.tensor([ids]), replace(decode, max_len_a=0.0, max_len_b=9, nbest=1)
    )
    got = lm.generate("one four", decode, max_new_tokens=8)
    assert got == lm.generate("one four", decode, max_new_tokens=8)
    assert expected[0][0].tokens is not None and isinstance(got, str)


def test_prompts_that_do_not_fit_are_refused(models):
    lm = LanguageModel.load(models["gpt-tiny"], "decoder-only", "cpu")
    with pytest.raises(TransduceError, match="--max-new-tokens 40 does not fit"):
        lm.prompt_ids("one four", 40)
    with pytest.raises(TransduceError, match="shorten the prompt"):
        lm.prompt_ids("one four six " * 20, 1)


def test_fill_mask_ranks_candidates_without_specials(models):
    lm = LanguageModel.load(models["bert-tiny"], "encoder-only", "cpu")
    [candidates] = lm.fill_mask("one <mask> six", top_k=4)
    probs = [p for _, p in candidates]
    assert (
        len(candidates) == 4 and probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-6
    )
    assert not {"<pad>", "<s>", "</s>", "<unk>", "<mask>"} & {piece for piece, _ in candidates}
    with pytest.raises(TransduceError, match="no <mask>"):
        lm.fill_mask("one four six")


def test_the_wrong_kind_of_model_names_the_command(models):
    with pytest.raises(TransduceError, match="use `transduce fill-mask`"):
        LanguageModel.load(models["bert-tiny"], "decoder-only", "cpu")
    with pytest.raises(TransduceError, match="use `transduce generate`"):
        LanguageModel.load(models["gpt-tiny"], "encoder-only", "cpu")
