"""GPT-2 as a transduce decoder-only model: a tiny random GPT2LMHeadModel built here (no download)
gives the same logits after import-hf, and greedy generation equals its generate()."""

import json
from dataclasses import replace

import pytest
import torch
import transformers

from transduce.checkpoint import load_model_from
from transduce.config import DecodeConfig
from transduce.decoding import SearchOptions, beam_search, greedy_search
from transduce.errors import TransduceError
from transduce.interop.huggingface import import_hf

from ..helpers import randomize_hf


def tiny_gpt2(tmp_path, **overrides):
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=61, n_positions=48,
                                     bos_token_id=60, eos_token_id=60, **overrides)
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(config).eval()
    randomize_hf(hf, "ln")
    folder = tmp_path / "hf"
    hf.save_pretrained(folder, safe_serialization=True)
    return hf, folder


@pytest.mark.parametrize("activation", ["gelu_new", "gelu"])
def test_import_gives_the_same_logits(tmp_path, activation):
    hf, folder = tiny_gpt2(tmp_path, activation_function=activation)
    ckpt = import_hf(folder, tmp_path / "run")
    model, info = load_model_from(ckpt)
    assert model.config.architecture == "decoder-only" and info["tokenizer"] == {}
    ids = torch.randint(0, 61, (3, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        theirs = hf(input_ids=ids).logits
        ours = model(ids)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    assert model.num_parameters()["total"] == sum(p.numel() for p in hf.parameters())


def test_greedy_generation_equals_hf_generate(tmp_path):
    hf, folder = tiny_gpt2(tmp_path)
    model, _ = load_model_from(import_hf(folder, tmp_path / "run"))
    for prompt in ([5, 17, 33], [42], [7, 7, 8, 9, 10, 11]):
        # transduce starts a text after eos (GPT-2's <|endoftext|>); HF gets the same context
        context = torch.tensor([[60] + prompt])
        theirs = hf.generate(
            context,
            max_new_tokens=15,
            do_sample=False,
            eos_token_id=60,
            pad_token_id=60,
            attention_mask=torch.ones_like(context),
        )[0, context.size(1) :].tolist()
        theirs = theirs[: theirs.index(60)] if 60 in theirs else theirs
        options = DecodeConfig(max_len_a=0.0, max_len_b=16)  # 15 tokens and the end
        ours = greedy_search(model, torch.tensor([prompt]), options)[0].tokens
        assert ours == theirs and len(ours) > 3
        without_cache = greedy_search(
            model,
            torch.tensor([prompt]),
            DecodeConfig(max_len_a=0.0, max_len_b=16),
            SearchOptions(use_cache=False),
        )[0].tokens
        assert without_cache == ours
        # beam search over a prompt: the cache (prompt read once, rows reordered) equals full passes
        two = torch.tensor([prompt, prompt[::-1]])
        cached = beam_search(model, two, replace(options, beam=3, nbest=3))
        plain = beam_search(
            model,
            two,
            DecodeConfig(beam=3, nbest=3, max_len_a=0.0, max_len_b=16),
            SearchOptions(use_cache=False),
        )
        assert [[h.tokens for h in hyps] for hyps in cached] == [
            [h.tokens for h in hyps] for hyps in plain
        ]
        for a, b in zip(cached, plain):
            assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


def test_import_refuses_what_transduce_cannot_express(tmp_path):
    _, folder = tiny_gpt2(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    for key, value in (
        ("activation_function", "quick_gelu"),
        ("scale_attn_by_inverse_layer_idx", True),
        ("add_cross_attention", True),
    ):
        broken = tmp_path / f"broken-{key}"
        broken.mkdir()
        (broken / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
        (broken / "config.json").write_text(json.dumps({**config, key: value}))
        with pytest.raises(TransduceError, match=key):
            import_hf(broken, tmp_path / f"run-{key}")
        assert not (tmp_path / f"run-{key}").exists()  # nothing half-written
