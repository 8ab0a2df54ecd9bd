"""The named presets: the paper's rows exactly, the descendants' shapes, and every preset valid."""

import pytest

from transduce import ModelConfig
from transduce.config.presets import PRESETS


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


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_a_valid_config_and_overrides_apply(name):
    cfg = ModelConfig.preset(name)
    assert ModelConfig.from_json(cfg.to_json()) == cfg
    assert ModelConfig.preset(name, dropout=0.0).dropout == 0.0


def test_a_preset_refuses_an_unknown_field_before_building():
    with pytest.raises(ValueError, match="did you mean 'dropout'"):
        ModelConfig.preset("base", drop_out=0.1)
    assert ModelConfig.preset_names()[:4] == ["base", "big", "small", "tiny"]


@pytest.mark.parametrize("deep, like", [("small-deep", "small"), ("base-deep", "base")])
def test_a_deep_encoder_and_shallow_decoder_spend_about_their_namesake_s_parameters(deep, like):
    import torch

    from transduce import Transformer

    config = ModelConfig.preset(deep, vocab_size=8000)
    assert config.decoder_layers == 1 and config.encoder_layers >= 6
    assert config.d_model == ModelConfig.preset(like).d_model
    with torch.device("meta"):
        sizes = [Transformer(ModelConfig.preset(name, vocab_size=8000)).num_parameters()["total"]
                 for name in (deep, like)]
    assert abs(sizes[0] / sizes[1] - 1) < 0.05, sizes
