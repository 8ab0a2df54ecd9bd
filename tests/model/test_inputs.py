"""The Vision Transformer as a front end of the same encoder: the patch embedding, the shapes,
the presets' sizes against Hugging Face's, and the configuration errors."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from transduce import ModelConfig, Transformer
from transduce.model.inputs import PatchEmbeddings


def tiny(**overrides) -> ModelConfig:
    fields = dict(encoder_layers=2, d_model=32, n_heads=4, d_ff=64, image_size=8, patch_size=2,
                  classes=3)
    return ModelConfig.preset("vit-tiny", **{**fields, **overrides})


@pytest.mark.parametrize("preset, shape", [
    ("vit-ti16", dict(hidden_size=192, num_attention_heads=3, intermediate_size=768)),
    ("vit-b16", {}),
    ("vit-tiny", dict(hidden_size=128, num_hidden_layers=6, num_attention_heads=4,
                      intermediate_size=256, image_size=28, patch_size=7, num_channels=1,
                      num_labels=10)),
])
def test_the_presets_have_hugging_faces_parameter_counts(preset, shape):
    from transformers import ViTConfig, ViTForImageClassification

    with torch.device("meta"):
        ours = Transformer(ModelConfig.preset(preset)).num_parameters()["total"]
        theirs = ViTForImageClassification(ViTConfig(**{"num_labels": 1000, **shape}))
    assert ours == sum(p.numel() for p in theirs.parameters())
    if preset == "vit-b16":
        assert ours == 86_567_656  # ViT-B/16 with ImageNet's 1,000 classes


def test_the_patch_embedding_is_a_linear_map_of_each_patch():
    config = tiny(channels=3, image_mean=(0.4, 0.5, 0.6), image_std=(0.2, 0.3, 0.25))
    front = PatchEmbeddings(config).eval()
    images = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
    pixels = (images.float() / 255 - torch.tensor([0.4, 0.5, 0.6])[:, None, None]) \
        / torch.tensor([0.2, 0.3, 0.25])[:, None, None]
    # each 2x2 patch, row by row, flattened (channel, row, column) as the convolution's weight
    patches = pixels.unfold(2, 2, 2).unfold(3, 2, 2)  # (B, C, 4, 4, 2, 2)
    patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(2, 16, 12)
    expected = patches @ front.project.weight.reshape(32, 12).T + front.project.bias
    expected = torch.cat([front.cls.expand(2, 1, 32), expected], dim=1) + front.positions
    torch.testing.assert_close(front(images), expected, atol=1e-5, rtol=1e-5)


def test_a_classifier_returns_one_row_of_class_logits_per_image():
    model = Transformer(tiny()).eval()
    images = torch.randint(0, 256, (5, 8, 8), dtype=torch.uint8)  # one channel: (B, H, W) too
    logits = model(images)
    assert logits.shape == (5, 1, 3)
    torch.testing.assert_close(model(images[:, None]), logits)
    # each image's logits are its own: a batch gives what the images give alone
    torch.testing.assert_close(model(images[2:3]), logits[2:3], atol=1e-5, rtol=1e-5)
    logits, attention = model(images, need_weights=True)
    assert [w.shape for w in attention.encoder] == [(5, 4, 17, 17)] * 2


def test_mean_pooling_has_no_cls_position():
    model = Transformer(tiny(pooling="mean")).eval()
    assert model.src_embed.cls is None and model.src_embed.positions.shape == (1, 16, 32)
    images = torch.randint(0, 256, (2, 1, 8, 8), dtype=torch.uint8)
    x = model.encode(images)
    torch.testing.assert_close(model(images), model._project(x.mean(1, keepdim=True), norm=None))


def test_an_image_of_another_shape_is_refused_with_what_was_expected():
    model = Transformer(tiny())
    with pytest.raises(ValueError, match=r"1 channel\(s\) of 8x8 pixels.*\(2, 1, 9, 9\)"):
        model(torch.zeros(2, 1, 9, 9, dtype=torch.uint8))


@pytest.mark.parametrize("overrides, message", [
    (dict(image_size=9), "image_size=9 must be a multiple of patch_size=2"),
    (dict(channels=3), "one number per channel \\(3\\)"),
    (dict(image_std=(0.0,)), "image_std must be positive"),
    (dict(classes=0), "input='image' is for a classifier"),
    (dict(tying="all"), "tying='none'"),
    (dict(image_mean="a,b"), "image_mean = 'a,b': expected one number per channel"),
])
def test_bad_image_settings_are_named(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny(**overrides)


def test_a_classifier_is_an_encoder_only_model():
    with pytest.raises(ValueError, match="a classifier is an encoder-only model"):
        ModelConfig.preset("small", classes=3, tying="none")


def test_image_settings_come_back_from_json_and_from_set():
    config = tiny(channels=3, image_mean="0.1,0.2,0.3", image_std=[1, 1, 1])
    assert config.image_mean == (0.1, 0.2, 0.3) and config.image_std == (1.0, 1.0, 1.0)
    assert ModelConfig.from_json(config.to_json()) == config


def test_the_rollout_multiplies_each_layers_attention_with_the_residual():
    """Abnar & Zuidema's rollout: per layer the heads' mean attention A, (A + I) / 2 (the residual
    path, rows still summing to 1), multiplied from the first layer up; the [CLS] row's patches."""
    from transduce.vision import Classifier

    model = Transformer(tiny(encoder_layers=3)).eval()
    classifier = Classifier(model, {"classes": ["a", "b", "c"]}, torch.device("cpu"), "fp32",
                            None)
    image = torch.randint(0, 256, (1, 8, 8), dtype=torch.uint8)
    grid, label, prob = classifier.rollout(image)
    with torch.no_grad():
        logits, attention = model(image[None], need_weights=True)
    flow = torch.eye(17)
    for weights in attention.encoder:
        flow = (0.5 * weights[0].mean(0) + 0.5 * torch.eye(17)) @ flow
    torch.testing.assert_close(torch.from_numpy(grid), flow[0, 1:].reshape(4, 4))
    assert label == int(logits[0, 0].argmax())
    assert prob == pytest.approx(float(torch.softmax(logits[0, 0], -1).max()))


# --- speech: log-mel frames through two convolutions --------------------------------------------


def speech(**overrides) -> ModelConfig:
    fields = dict(encoder_layers=2, decoder_layers=1, d_model=32, n_heads=4, d_ff=64, channels=5,
                  vocab_size=12, dropout=0.0, max_positions=40, source_positions=40)
    return ModelConfig.preset("speech-small", **{**fields, **overrides})


@pytest.mark.parametrize("subsample, conv", [(2, "1d"), (4, "1d"), (4, "2d")])
def test_a_recording_is_encoded_in_a_batch_exactly_as_alone(subsample, conv):
    torch.manual_seed(0)
    model = Transformer(speech(subsample=subsample, audio_conv=conv, conv_channels=3)).eval()
    with torch.no_grad():  # (the biases start at zero: a padded frame would then pass unseen)
        for p in model.src_embed.parameters():
            p.add_(0.1 * torch.randn_like(p))
    lengths = [23, 16, 9]
    frames = torch.full((3, 23, 5), float("nan"))
    for i, n in enumerate(lengths):
        frames[i, :n] = torch.randn(n, 5)
    with torch.no_grad():
        batch = model.encode(frames)
        real = model.src_embed.real(frames)
        for i, n in enumerate(lengths):
            alone = model.encode(frames[i:i + 1, :n])
            positions = -(-n // subsample)  # ceil
            assert int(real[i].sum()) == positions == alone.size(1)
            torch.testing.assert_close(batch[i, :positions], alone[0], atol=1e-5, rtol=1e-5)
    assert batch.size(1) == -(-23 // subsample)


def test_the_speech_presets_have_the_sizes_of_their_models():
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    with torch.device("meta"):
        ours = Transformer(ModelConfig.preset("whisper-tiny")).num_parameters()["total"]
        theirs = WhisperForConditionalGeneration(WhisperConfig(
            d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
            decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536)).num_parameters()
    # Whisper's keys have no bias (one would not change the attention): 12 attentions of 384
    assert ours == theirs + 12 * 384
    assert ModelConfig.preset("speech-small", vocab_size=30).size_estimate() == pytest.approx(
        Transformer(ModelConfig.preset("speech-small", vocab_size=30)).num_parameters()["total"],
        rel=0.03)
    for channels in (0, 32):  # ESPnet's front end: its two 3x3 convolutions and the projection
        config = ModelConfig.preset("speech-small", vocab_size=30, audio_conv="2d",
                                    conv_channels=channels)
        C, front = channels or 256, Transformer(config).src_embed
        assert sum(p.numel() for p in front.parameters()) == (
            10 * C + 9 * C * C + C + C * 20 * 256 + 256)
        assert config.size_estimate() == pytest.approx(
            Transformer(config).num_parameters()["total"], rel=0.03)


def test_frames_of_another_shape_or_too_long_are_refused_with_what_was_expected():
    model = Transformer(speech()).eval()
    with pytest.raises(ValueError, match=r"log-mel frames \(B, T, 5\), got a tensor of shape "
                                         r"\(2, 9, 7\)"):
        model.encode(torch.zeros(2, 9, 7))
    with pytest.raises(ValueError, match="makes 41 encoder positions, more than the model's 40"):
        model.encode(torch.zeros(1, 161, 5))


@pytest.mark.parametrize("overrides, message", [
    (dict(architecture="encoder-only", decoder_layers=0), "input='audio' is for an "
                                                          "encoder-decoder"),
    (dict(tying="all"), "has no source tokens to share"),
    (dict(subsample=3), "subsample 2 or 4"),
    (dict(audio_conv="2d", subsample=2), "audio_conv='2d' subsamples 4 times"),
    (dict(audio_conv="3d"), "audio_conv"),
])
def test_bad_speech_settings_are_named(overrides, message):
    with pytest.raises(ValueError, match=message):
        speech(**overrides)


def test_a_ctc_head_is_for_speech():
    with pytest.raises(ValueError, match="a CTC head is for input='audio'"):
        ModelConfig.preset("tiny", vocab_size=20, ctc_weight=0.3)


def test_the_ctc_loss_is_pytorchs_over_the_encoders_positions():
    from transduce.training.loss import with_ctc

    torch.manual_seed(0)
    model = Transformer(speech(ctc_weight=0.4)).train()
    frames = torch.randn(2, 20, 5)
    frames[1, 12:] = float("nan")
    tgt_out = torch.tensor([[5, 6, 7, 2], [8, 2, 0, 0]])  # (eos = 2, pad = 0)
    tgt_in = torch.tensor([[1, 5, 6, 7], [1, 8, 0, 0]])
    model(frames, tgt_in)
    logits, positions = model.ctc_output
    assert positions.tolist() == [5, 3]
    expected = torch.nn.functional.ctc_loss(
        torch.log_softmax(logits, -1).transpose(0, 1), torch.tensor([[5, 6, 7], [8, 0, 0]]),
        positions, torch.tensor([3, 1]), blank=0, reduction="sum")
    mixed = with_ctc(model, torch.tensor(10.0), SimpleNamespace(tgt_out=tgt_out, pad_id=0))
    torch.testing.assert_close(mixed, 0.6 * 10.0 + 0.4 * expected)
    assert model.ctc_output is None  # used once
    model.eval()
    model(frames, tgt_in)
    assert model.ctc_output is None  # computed only in training
