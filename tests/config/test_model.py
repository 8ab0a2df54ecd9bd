import re
import json

import pytest

from transduce import ModelConfig, TrainConfig
from transduce.config import split_overrides


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


def test_derived_sizes_follow_the_fields():
    cfg = ModelConfig.preset("tiny", vocab_size=100)
    assert (cfg.d_k, cfg.kv_heads, cfg.target_vocab_size, cfg.output_size) == (16, 4, 100, 100)
    assert ModelConfig.preset("tiny", head_dim=8).d_k == 8
    assert ModelConfig.preset("tiny", n_kv_heads=1).kv_heads == 1
    split = ModelConfig.preset("tiny", tying="decoder", tgt_vocab_size=70, vocab_size=100)
    assert split.target_vocab_size == 70 and split.output_size == 70
    assert cfg.has_encoder and cfg.has_decoder
    gpt = ModelConfig.preset("gpt-tiny")
    assert not gpt.has_encoder and gpt.has_decoder and gpt.start_id == gpt.eos_id
    bert = ModelConfig.preset("bert-tiny")
    assert bert.has_encoder and not bert.has_decoder
    assert cfg.start_id == cfg.bos_id
    assert ModelConfig.preset("tiny", decoder_start_id=0).start_id == 0


@pytest.mark.parametrize("name", ["tiny", "small", "base"])
def test_the_size_estimate_is_within_a_few_percent_of_the_built_model(name):
    from transduce.model import Transformer

    cfg = ModelConfig.preset(name, vocab_size=8000)
    built = sum(p.numel() for p in Transformer(cfg).parameters())
    assert abs(cfg.size_estimate() - built) / built < 0.05, (cfg.size_estimate(), built)


def test_beyond_paper_names_the_first_option_marian_cannot_express():
    assert ModelConfig.preset("tiny").beyond_paper() is None
    assert ModelConfig.preset("tiny", n_kv_heads=4).beyond_paper() is None  # every head: the paper
    assert ModelConfig.preset("tiny", n_kv_heads=1).beyond_paper() == "n_kv_heads=1"
    assert ModelConfig.preset("tiny", attention_window=8).beyond_paper() == "attention_window=8"
    assert ModelConfig.preset("tiny", head_dim=8).beyond_paper() == "head_dim=8"


@pytest.mark.parametrize("kwargs, words", [
    (dict(architecture="decoder-only"), "has no encoder: set encoder_layers=0"),
    (dict(decoder_layers=0), "decoder_layers must be at least 1"),
    (dict(n_kv_heads=3), "must divide n_heads=4"),
    (dict(n_heads=128), "n_heads=128 is more than d_model=64"),
    (dict(encoder_layers=2000), "encoder_layers must be at most 1024"),
    (dict(positional="rope", head_dim=7), "even head dimension"),
    (dict(ffn="moe", moe_top_k=3, moe_experts=2), "1 <= moe_top_k <= moe_experts"),
    (dict(positional="relative", relative_buckets=5), "even relative_buckets"),
    (dict(d_model=100, n_heads=8), "e.g. n_heads=10"),
])
def test_each_rule_of_the_shape_is_a_message_that_names_it(kwargs, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        ModelConfig.preset("tiny", **kwargs)
