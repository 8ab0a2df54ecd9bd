"""Exact speculative greedy search (``decoding/speculative.py``): whatever the draft proposes and
however many tokens at a time, each sentence's output is the model's own greedy output."""

from __future__ import annotations

import pytest
import torch

from transduce import ModelConfig, Transformer
from transduce.config import DecodeConfig
from transduce.decoding import Draft, shallow_copy, translate_ids
from transduce.decoding.speculative import check_draft


def model_of(seed: int, device, **overrides):
    torch.manual_seed(seed)
    config = ModelConfig.preset("tiny", vocab_size=50, max_positions=64, **overrides)
    return Transformer(config).to(device).eval()


def sources(seed: int = 3) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(4, 50, (n,), generator=g).tolist() for n in (3, 9, 14, 1, 20)]


@pytest.mark.parametrize("decode", [DecodeConfig(beam=1, max_len_a=1, max_len_b=5, min_len=2),
                                    DecodeConfig(beam=1, max_len_a=0, max_len_b=7)])
def test_every_draft_and_k_give_the_model_s_greedy_output(device, decode):
    model = model_of(0, device)
    drafts = {"itself": model, "its first layer": shallow_copy(model, 1),
              "another model": model_of(1, device, decoder_layers=1),
              "a model of another mind": model_of(7, device, d_model=32, d_ff=64)}
    if torch.device(device).type == "cpu":  # (int8 weights are the CPU's)
        drafts["its int8 weights"] = model
    alone = translate_ids(model, sources(), decode)
    for name, draft_model in drafts.items():
        for k in (1, 3, 5) if name == "its first layer" else (2,):
            draft = Draft(draft_model, k, "int8" if name == "its int8 weights" else "fp32",
                          adaptive=k == 5)
            got = translate_ids(model, sources(), decode, draft=draft)
            assert [h[0].tokens for h in got] == [h[0].tokens for h in alone], (name, k)
            assert [h[0].logprob for h in got] == pytest.approx([h[0].logprob for h in alone],
                                                                abs=1e-4)
            assert draft.proposed > 0 and 0 <= draft.accepted <= draft.proposed
            if name == "itself":  # the model drafting for itself: every proposal kept
                assert draft.accepted == draft.proposed, k
    assert Draft(model, 4).rate == 0.0


def test_a_trained_model_s_translations_are_its_own_whatever_drafts(reverser):
    model, src = reverser
    ids = [row[(row != 0) & (row != model.config.eos_id)].tolist() for row in src[:12]]
    decode = DecodeConfig(beam=1)
    greedy = [h[0].tokens for h in translate_ids(model, ids, decode)]
    shallow, int8 = Draft(shallow_copy(model, 1), 3), Draft(model, 3, "int8")
    for draft in (shallow, int8):
        assert [h[0].tokens for h in translate_ids(model, ids, decode, draft=draft)] == greedy
    # (measured 0.12: one layer was never trained to predict alone; it guesses, the model decides)
    assert shallow.rate > 0.05
    assert int8.rate > 0.9  # int8 weights rarely change the model's choice


def test_what_a_draft_cannot_serve_is_refused(device):
    model = model_of(0, device)
    draft = Draft(shallow_copy(model, 1), 2)
    for decode, words in ((DecodeConfig(beam=4), "not beam search"),
                          (DecodeConfig(beam=1, sampling=True), "not sampling")):
        with pytest.raises(ValueError, match=words):
            translate_ids(model, sources(), decode, draft=draft)
    if torch.device(device).type == "cpu":
        for precision in ("int8", "bf16"):
            with pytest.raises(ValueError, match=f"not {precision} weights"):
                translate_ids(model, sources(), DecodeConfig(beam=1), precision=precision,
                              draft=draft)
    with pytest.raises(ValueError, match="not forced prefixes"):
        translate_ids(model, sources()[:1], DecodeConfig(beam=1), prefixes=[[5]], draft=draft)
    with pytest.raises(ValueError, match="the draft's vocab_size is 60, the model's 50"):
        check_draft(model, Transformer(ModelConfig.preset("tiny", vocab_size=60)))
    with pytest.raises(ValueError, match="1 to 1 of its 2"):
        shallow_copy(model, 2)
