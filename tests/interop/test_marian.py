"""Marian's format (``interop/marian.py``) without ``transformers``: config fields both ways, the
weights renamed and back, and what Marian cannot express named."""

from __future__ import annotations

import re

import pytest
import torch

from transduce import ModelConfig, Transformer
from transduce.errors import TransduceError
from transduce.interop.marian import (check_exportable, config_from_hf, hf_config,
                                      hf_to_transduce, transduce_to_hf)

CONFIG = ModelConfig.preset("tiny", vocab_size=50, positional="sinusoidal_concat",
                            activation="gelu", decoder_start_id=0, pad_id=0, bos_id=0, eos_id=2,
                            unk_id=1, output_bias=True)


def test_a_config_goes_to_marian_and_comes_back_the_same():
    assert config_from_hf(hf_config(CONFIG), "config.json") == CONFIG


@pytest.mark.parametrize("change, words", [
    ({"model_type": "bart"}, "model_type is 'bart', not 'marian'"),
    ({"activation_function": "relu6"}, "activation_function='relu6' is not supported"),
    ({"decoder_ffn_dim": 7}, "encoder_ffn_dim=256 differs from decoder_ffn_dim=7"),
])
def test_a_marian_config_transduce_cannot_run_is_named(change, words):
    with pytest.raises((TransduceError, ValueError), match=re.escape(words)):
        config_from_hf({**hf_config(CONFIG), **change}, "config.json")


@pytest.mark.parametrize("positional", ["sinusoidal", "sinusoidal_concat"])
def test_weights_round_trip_through_marian_s_names(positional):
    """The paper's interleaved sinusoids are exported by permuting the residual stream: the
    permuted weights come back as Marian's order, never as the original."""
    torch.manual_seed(0)
    cfg = ModelConfig.preset("tiny", vocab_size=50, positional=positional, output_bias=True)
    state = Transformer(cfg).state_dict()
    theirs = transduce_to_hf(state, cfg)
    assert "model.encoder.layers.0.self_attn.k_proj.weight" in theirs
    back = hf_to_transduce(theirs, cfg)
    if positional == "sinusoidal_concat":
        assert all(torch.equal(back[k], state[k]) for k in back)
    else:  # [s0 c0 s1 c1 ...] -> [s0 s1 ... | c0 c1 ...]: even dimensions first
        order = torch.cat([torch.arange(0, 64, 2), torch.arange(1, 64, 2)])
        w2 = "encoder.0.ffn.w2.weight"  # writes the residual stream: its rows move
        assert torch.equal(back[w2], state[w2][order])
        w1 = "encoder.0.ffn.w1.weight"  # reads it: its columns move
        assert torch.equal(back[w1], state[w1][:, order])


@pytest.mark.parametrize("change, words", [
    (dict(norm_position="pre"), "norm_position='pre' cannot be expressed in Marian"),
    (dict(positional="rope"), "positional='rope' cannot be expressed"),
    (dict(activation="swiglu"), "activation='swiglu' cannot be expressed"),
    (dict(n_kv_heads=1), "n_kv_heads=1 cannot be expressed in Marian"),
    (dict(norm_eps=1e-6), "norm_eps=1e-06 cannot be expressed"),
])
def test_what_marian_cannot_express_is_named(change, words):
    with pytest.raises((TransduceError, ValueError), match=re.escape(words)):
        check_exportable(ModelConfig.preset("tiny", **change))
    check_exportable(ModelConfig.preset("tiny"))
