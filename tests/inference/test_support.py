"""What the fast passes serve, generated over every choice of every ``ModelConfig`` field: each
supported configuration computes exactly what ``Transformer.encode``/``decode`` compute, each other
one is refused by name, and a field nobody declared fails here first."""

from __future__ import annotations

from dataclasses import fields

import pytest
import torch

from transduce import ModelConfig, Transformer
from transduce.config import DecodeConfig
from transduce.decoding import SearchOptions, greedy_search
from transduce.inference import FastDecoder, FastEncoder, unsupported
from transduce.inference.support import SUPPORTED

from ..conftest import random_batch, tiny_config

# Values to try for the fields whose choices the config does not enumerate (choices come from the
# field's metadata, booleans are tried both ways). A new field must be added here or to the
# metadata: test_every_field_is_declared_and_tried fails until it is.
SAMPLES = {
    "encoder_layers": [1, 3],
    "decoder_layers": [1, 3],
    "d_model": [32, 48],
    "n_heads": [2, 8],
    "head_dim": [None, 10, 24],
    "n_kv_heads": [None, 4, 2, 1],
    "attention_window": [0, 3],
    "d_ff": [16, 100],
    "dropout": [0.0, 0.3],
    "attention_dropout": [0.0, 0.2],
    "activation_dropout": [0.0, 0.2],
    "norm_eps": [1e-5, 1e-2],
    "vocab_size": [40, 50],
    "tgt_vocab_size": [None, 30],
    "pad_id": [0, 5],
    "bos_id": [1, 6],
    "eos_id": [2, 7],
    "unk_id": [3, 8],
    "decoder_start_id": [None, 0, 9],
    "max_positions": [64, 20],
    "mask_id": [None, 4],
    "moe_experts": [1, 3],
    "moe_top_k": [1, 2],
    "moe_aux_weight": [0.0, 0.1],
}


def _values(field) -> list:
    if "choices" in field.metadata:
        return list(field.metadata["choices"])
    if field.type in (bool, "bool"):
        return [False, True]
    return SAMPLES[field.name]


def _config(name: str, value) -> ModelConfig | None:
    """The tiny test model with ``name=value`` and what that choice needs (None: the config refuses it)."""
    extra = {"architecture": {"decoder-only": {"encoder_layers": 0}, "encoder-only": {"decoder_layers": 0,
                                                                                       "mask_id": 4}},
             "tgt_vocab_size": {30: {"tying": "decoder"}}}.get(name, {}).get(value, {})
    try:
        return tiny_config(**{name: value, **extra})
    except ValueError:
        return None


# (test_every_field_is_declared_and_tried checks that every field has a value other than its
# default that builds; the values the config refuses on the tiny model are not decode cases)
CASES = [(f.name, v) for f in fields(ModelConfig) for v in _values(f) if _config(f.name, v) is not None]


def test_every_field_is_declared_and_tried():
    names = {f.name for f in fields(ModelConfig)}
    assert names == set(SUPPORTED), f"declare in inference/support.py: {sorted(names ^ set(SUPPORTED))}"
    for f in fields(ModelConfig):
        built = [v for v in _values(f) if _config(f.name, v) is not None]
        assert any(v != f.default for v in built), f"{f.name}: no value other than the default was tried"


def _perturbed(config: ModelConfig, device) -> Transformer:
    model = Transformer(config).to(device).eval()
    with torch.no_grad():  # biases start at zero and norms at one: make every parameter count
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))).to(device) * 0.1)
    return model


@pytest.mark.parametrize("name, value", CASES, ids=[f"{n}={v}" for n, v in CASES])
def test_each_choice_is_decoded_exactly_or_refused_by_name(name, value, device):
    config = _config(name, value)
    model = _perturbed(config, device)
    vocab = min(config.vocab_size, config.target_vocab_size)
    reason = unsupported(config)
    if reason is not None:
        assert reason.startswith(f"{name}="), reason
        for make in (FastDecoder, FastEncoder):
            with pytest.raises(ValueError, match=f"does not support {name}="):
                make(model)
        if config.architecture == "encoder-decoder":  # search falls back to the model's own pass
            src, _ = random_batch(2, 5, vocab, pad_id=config.pad_id, device=device)
            fast = greedy_search(model, src, DecodeConfig(max_len_a=1.0, max_len_b=4))
            slow = greedy_search(model, src, DecodeConfig(max_len_a=1.0, max_len_b=4), SearchOptions(fast=False))
            assert [h.tokens for h in fast] == [h.tokens for h in slow]
        return
    batch, beam = 2, 2
    src, _ = random_batch(batch, 6, vocab, pad_id=config.pad_id, device=device)
    src[src == config.eos_id] = vocab - 1
    src[1, 4:] = config.pad_id
    with torch.no_grad():
        memory = model.encode(src)
        torch.testing.assert_close(FastEncoder(model)(src), memory, atol=2e-5, rtol=1e-4)
        fast = FastDecoder(model)
        reference = model.start_decoding(src, memory, beam=beam)
        cache = fast.start(src, memory, beam, capacity=6)
        g = torch.Generator().manual_seed(3)
        tokens = torch.full((batch * beam,), config.start_id, device=device)
        for _ in range(min(6, config.max_positions)):
            expected = model.decode(tokens[:, None], reference)[:, -1]
            torch.testing.assert_close(fast.step(tokens, cache), expected, atol=2e-5, rtol=1e-4)
            rows = torch.randint(0, batch * beam, (batch * beam,), generator=g).to(device)
            reference.reorder(rows)
            cache.reorder(rows)
            tokens = torch.randint(4, config.target_vocab_size, (batch * beam,), generator=g).to(device)
