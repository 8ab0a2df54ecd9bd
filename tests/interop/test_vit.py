"""Hugging Face ViT in and out, against tiny random ViTForImageClassification folders built here
(never downloaded): the same logits, the image processor's normalization and the class names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from transduce.checkpoint import load_model_from
from transduce.errors import TransduceError
from transduce.interop.huggingface import export_hf, import_hf

from ..helpers import cli, randomize_hf

transformers = pytest.importorskip("transformers", reason="the dev extra installs transformers")

MEAN, STD = [0.4, 0.5, 0.6], [0.2, 0.3, 0.25]


def vit_folder(folder: Path, **overrides) -> Path:
    """A random ViTForImageClassification with every weight random (norms and biases too) and its
    image processor (its own normalization), saved as the Hub has them."""
    torch.manual_seed(0)
    fields = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, image_size=16, patch_size=4, num_channels=3,
                  id2label={i: name for i, name in enumerate(["cat", "dog", "eel", "fox", "gnu"])},
                  label2id={name: i for i, name in enumerate(["cat", "dog", "eel", "fox", "gnu"])})
    model = transformers.ViTForImageClassification(
        transformers.ViTConfig(**{**fields, **overrides})).eval()
    randomize_hf(model, "layernorm")
    model.save_pretrained(folder)
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "ViTImageProcessor", "do_resize": True,
        "size": {"height": 16, "width": 16}, "do_rescale": True, "rescale_factor": 1 / 255,
        "do_normalize": True, "image_mean": MEAN, "image_std": STD}))
    return folder


def their_logits(folder: Path, images: torch.Tensor) -> torch.Tensor:
    model = transformers.ViTForImageClassification.from_pretrained(folder).eval()
    processor = json.loads((folder / "preprocessor_config.json").read_text())
    mean = torch.tensor(processor["image_mean"])[:, None, None]
    std = torch.tensor(processor["image_std"])[:, None, None]
    pixels = (images.float() * processor["rescale_factor"] - mean) / std  # the processor's steps
    with torch.no_grad():
        return model(pixel_values=pixels).logits


@pytest.fixture
def images():
    return torch.randint(0, 256, (4, 3, 16, 16), dtype=torch.uint8,
                         generator=torch.Generator().manual_seed(3))


def test_an_imported_vit_gives_hugging_faces_logits(tmp_path, images):
    folder = vit_folder(tmp_path / "hf")
    ours, info = load_model_from(import_hf(folder, tmp_path / "run"))
    theirs = their_logits(folder, images)
    with torch.no_grad():
        logits = ours(images)[:, 0]
    assert theirs.std() > 0.5 and (theirs.argmax(-1) != theirs.argmax(-1)[0]).any()
    torch.testing.assert_close(logits, theirs, atol=1e-4, rtol=1e-4)
    assert info["classes"] == ["cat", "dog", "eel", "fox", "gnu"]
    assert ours.config.image_mean == tuple(MEAN) and ours.config.image_std == tuple(STD)


def test_export_loads_in_transformers_with_the_same_logits(tmp_path, images):
    folder = vit_folder(tmp_path / "hf")
    out = cli("import-hf", str(folder), "--out", str(tmp_path / "run")).stdout
    assert "an image classifier of 5 classes); try: transduce classify" in out
    assert "exported" not in cli("export", str(tmp_path / "run"), "--to", "hf",
                                 str(tmp_path / "back")).stderr
    torch.testing.assert_close(their_logits(tmp_path / "back", images),
                               their_logits(folder, images), atol=1e-5, rtol=1e-5)
    config = transformers.AutoConfig.from_pretrained(tmp_path / "back")
    assert config.id2label[3] == "fox"
    processor = transformers.AutoImageProcessor.from_pretrained(tmp_path / "back")
    assert list(processor.image_mean) == MEAN and list(processor.image_std) == STD


def test_a_trained_classifier_exports_with_its_classes(tmp_path, images):
    from transduce import ModelConfig, Transformer
    from transduce.checkpoint import write_checkpoint

    config = ModelConfig.preset("vit-tiny", encoder_layers=1, d_model=16, n_heads=2, d_ff=32,
                                image_size=16, patch_size=4, channels=3, image_mean=MEAN,
                                image_std=STD, classes=2)
    model = Transformer(config).eval()
    write_checkpoint(tmp_path / "ours", model, {"model": config.to_dict(), "tokenizer": {},
                                                "classes": ["no", "yes"]}, [])
    export_hf(tmp_path / "ours", tmp_path / "hf")
    with torch.no_grad():
        torch.testing.assert_close(their_logits(tmp_path / "hf", images), model(images)[:, 0],
                                   atol=1e-5, rtol=1e-5)
    assert transformers.AutoConfig.from_pretrained(tmp_path / "hf").id2label[1] == "yes"


@pytest.mark.parametrize("overrides, message", [
    (dict(qkv_bias=False), "qkv_bias=false is not supported"),
    (dict(hidden_act="silu"), "hidden_act='silu' is not supported"),
])
def test_variants_not_computed_are_refused_by_name(tmp_path, overrides, message):
    folder = vit_folder(tmp_path / "hf", **overrides)
    with pytest.raises(TransduceError, match=message):
        import_hf(folder, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_what_hugging_faces_vit_cannot_hold_is_refused_by_name(tmp_path):
    from transduce import ModelConfig, Transformer
    from transduce.checkpoint import write_checkpoint

    config = ModelConfig.preset("vit-tiny", encoder_layers=1, d_model=16, n_heads=2, d_ff=32,
                                pooling="mean")
    write_checkpoint(tmp_path / "ours", Transformer(config),
                     {"model": config.to_dict(), "tokenizer": {}}, [])
    with pytest.raises(TransduceError, match="pooling='mean': Hugging Face's ViT has "
                                             "pooling='cls'"):
        export_hf(tmp_path / "ours", tmp_path / "hf")
    result = cli("export", str(tmp_path / "ours"), "--to", "ctranslate2", str(tmp_path / "ct2"),
                 check=False)
    assert result.returncode == 2 and "CTranslate2 has none" in result.stderr
    assert not (tmp_path / "hf").exists() and not (tmp_path / "ct2").exists()
