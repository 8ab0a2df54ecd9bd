"""T5's options on the paper's blocks: the relative position buckets, worked by hand, the bias they
make, and the presets' shapes."""

from __future__ import annotations

import pytest
import torch

from transduce import ModelConfig, Transformer
from transduce.model.positions import RelativeBuckets, relative_bucket

from ..conftest import random_batch, tiny_config


def buckets(distances, bidirectional, n=32, max_distance=128):
    return relative_bucket(torch.tensor(distances), bidirectional, n, max_distance).tolist()


def test_buckets_worked_by_hand():
    # causal: 32 buckets, the first 16 exact; then 16 + floor(log(d / 16) / log(128 / 16) * 16)
    assert buckets([0, 1, 15], False) == [0, 1, 15]
    assert buckets([16, 20, 127, 128, 10_000], False) == [16, 17, 31, 31, 31]  # log(20/16)/log 8
    assert buckets([-1, -50], False) == [0, 0]  # keys after the query: masked anyway
    # bidirectional: 16 a direction, 8 exact; keys after the query in 16..31
    assert buckets([0, 1, 7, 8, 127, 1000], True) == [0, 1, 7, 8, 15, 15]
    assert buckets([-1, -7, -8, -127], True) == [17, 23, 24, 31]
    # log(12/8) / log(16) * 8 = 1.17: bucket 9 (the step a test of the rounding sees)
    assert buckets([12, -12], True) == [9, 25]


def test_the_bias_is_the_table_row_of_each_bucket():
    config = tiny_config(positional="relative", relative_buckets=8, relative_max_distance=20)
    table = RelativeBuckets(config, bidirectional=True)
    bias = table(3, 5, offset=2)  # queries at 2..4, keys at 0..4
    assert bias.shape == (1, config.n_heads, 3, 5)
    for q in range(3):
        for k in range(5):
            bucket = relative_bucket(torch.tensor(q + 2 - k), True, 8, 20)
            torch.testing.assert_close(bias[0, :, q, k], table.buckets.weight[bucket])
    torch.testing.assert_close(table.by_distance(torch.tensor([[2, -1]])).permute(1, 2, 0)[0],
                               table.buckets.weight[[2, 5]])


def test_each_stack_has_its_table_and_cross_attention_none(device):
    model = Transformer(ModelConfig.preset("t5-tiny", vocab_size=50)).to(device).eval()
    assert model.encoder_relative.bidirectional and not model.decoder_relative.bidirectional
    src, _ = random_batch(2, 6, 50, device=device)
    tgt = torch.randint(4, 50, (2, 5), device=device)
    before = model(src, tgt)
    with torch.no_grad():  # the encoder's table moves the output; so does the decoder's
        model.encoder_relative.buckets.weight.add_(1.0 + torch.arange(
            model.config.relative_buckets, device=device)[:, None])
    assert not torch.allclose(model(src, tgt), before)


def test_t5_small_has_the_shape_and_size_of_hugging_faces():
    config = ModelConfig.preset("t5-small")
    assert (config.encoder_layers, config.decoder_layers, config.d_model, config.d_ff,
            config.n_heads, config.d_k, config.vocab_size) == (6, 6, 512, 2048, 8, 64, 32128)
    # T5ForConditionalGeneration(T5Config()) counts 60,506,624 (tests/interop/test_t5.py builds it)
    assert Transformer(config).num_parameters()["total"] == 60_506_624
    assert config.size_estimate() == pytest.approx(60_506_624, rel=0.02)


def test_no_biases_and_the_gated_feed_forward():
    model = Transformer(tiny_config(linear_bias=False, activation="geglu", norm_type="rmsnorm"))
    assert not [n for n, _ in model.named_parameters() if n.endswith(".bias")]
    ffn = model.encoder[0].ffn
    x = torch.randn(2, 3, model.config.d_model)
    expected = ffn.w2(torch.nn.functional.gelu(ffn.w1(x), approximate="tanh") * ffn.w3(x))
    torch.testing.assert_close(ffn(x), expected)


def test_tying_embeddings_shares_the_table_but_not_the_output():
    model = Transformer(tiny_config(tying="embeddings"))
    assert model.src_embed.tokens.weight is model.tgt_embed.tokens.weight
    assert model.output.weight is not model.tgt_embed.tokens.weight
    with pytest.raises(ValueError, match="tying='embeddings' shares one embedding"):
        tiny_config(tying="embeddings", tgt_vocab_size=30)


def test_scale_output_rescales_the_logits_by_d_model():
    config = tiny_config(norm_position="pre")
    plain = Transformer(config).eval()
    scaled = Transformer(tiny_config(norm_position="pre", scale_output=True)).eval()
    scaled.load_state_dict(plain.state_dict())
    src, _ = random_batch(2, 5, 40)
    tgt = torch.randint(4, 40, (2, 4))
    torch.testing.assert_close(scaled(src, tgt), plain(src, tgt) * config.d_model**-0.5)


def test_t5_init_folds_the_attention_scale_into_the_queries():
    config = ModelConfig.preset("t5-small", encoder_layers=1, decoder_layers=1, vocab_size=100)
    model = Transformer(config)
    qkv = model.encoder[0].self_attn.qkv.weight
    assert qkv[:512].std().item() == pytest.approx((512 * 64) ** -0.5, rel=0.05)
    assert qkv[512:].std().item() == pytest.approx(512**-0.5, rel=0.05)
    assert model.src_embed.tokens.weight.std().item() == pytest.approx(1.0, rel=0.05)


@pytest.mark.parametrize("value", [(6, 128), (32, 16), (31, 128)])
def test_bucket_settings_that_cannot_work_are_refused(value):
    with pytest.raises(ValueError, match="relative_buckets"):
        tiny_config(positional="relative", relative_buckets=value[0],
                    relative_max_distance=value[1] if value[0] != 6 else 2)
