import re
import json

import pytest

from transduce import ModelConfig, TrainConfig
from transduce.config import split_overrides


def test_presets_follow_the_paper():
    base = ModelConfig.preset("base", vocab_size=37000)
    assert (base.encoder_layers, base.d_model, base.d_ff, base.n_heads, base.d_k, base.dropout) == (
        6, 512, 2048, 8, 64, 0.1)
    big = ModelConfig.preset("big", vocab_size=37000)
    assert (big.encoder_layers, big.d_model, big.d_ff, big.n_heads, big.d_k, big.dropout) == (
        6, 1024, 4096, 16, 64, 0.3)
    small = ModelConfig.preset("small")
    assert (
        small.encoder_layers,
        small.decoder_layers,
        small.d_model,
        small.n_heads,
        small.d_ff,
    ) == (3, 3, 256, 4, 1024)
    assert (
        base.norm_position == "post"
        and base.activation == "relu"
        and base.positional == "sinusoidal"
    )
    assert base.tying == "all" and base.norm_eps == 1e-5 and base.scale_embedding


def test_json_round_trip():
    cfg = ModelConfig.preset(
        "small", positional="rope", activation="swiglu", tying="decoder", tgt_vocab_size=900
    )
    assert ModelConfig.from_json(cfg.to_json()) == cfg
    assert json.loads(cfg.to_json())["positional"] == "rope"
    train = TrainConfig(max_tokens=123, warmup=7)
    assert TrainConfig.from_json(train.to_json()) == train


@pytest.mark.parametrize("kwargs, words", [
    (dict(d_model=100, n_heads=8), "not divisible by n_heads"),
    (dict(tgt_vocab_size=500), "tying='all'"),
    (dict(activation="relu6"), "activation='relu6'"),
    (dict(positional="sinusoid"), "did you mean 'sinusoidal'"),
    (dict(dropout=1.5), "dropout must be in"),
    (dict(vocab_size=2), "outside the vocabulary"),
])
def test_invalid_combinations_say_what_to_change(kwargs, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        ModelConfig.preset("tiny", **kwargs)


def test_unknown_option_suggests_the_nearest():
    with pytest.raises(ValueError, match="did you mean 'd_model'"):
        ModelConfig.preset("tiny", dmodel=3)
    with pytest.raises(ValueError, match="did you mean 'n_heads'"):
        ModelConfig.from_dict({"n_head": 4})
    with pytest.raises(ValueError, match="unknown preset"):
        ModelConfig.preset("huge")


def test_overrides_parse_strings_to_field_types():
    cfg = ModelConfig.preset("tiny").with_overrides(
        {
            "d_model": "128",
            "dropout": "0.2",
            "scale_embedding": "false",
            "tgt_vocab_size": "none",
            "positional": "rope",
        }
    )
    assert (
        cfg.d_model == 128
        and cfg.dropout == 0.2
        and cfg.scale_embedding is False
        and cfg.tgt_vocab_size is None
    )
    with pytest.raises(ValueError, match="expected a value of type int"):
        ModelConfig.preset("tiny").with_overrides({"d_model": "wide"})
    model, train = split_overrides(
        {"d_model": 1, "warmup": 2, "train.seed": 3, "model.dropout": 0.0}
    )
    assert model == {"d_model": 1, "dropout": 0.0} and train == {"warmup": 2, "seed": 3}
    with pytest.raises(ValueError, match="did you mean 'warmup'"):
        split_overrides({"warmpu": 1})
