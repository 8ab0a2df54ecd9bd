"""``checkpoint.py``: a checkpoint folder written atomically and read back exactly, averaging, and
damaged or hostile folders named."""

from __future__ import annotations

import json

import pytest
import torch

from transduce import Transformer
from transduce.averaging import average_checkpoints
from transduce.checkpoint import (CheckpointError, load_model_from, read_info, tokenizer_paths,
                                  verify, write_checkpoint)
from transduce.errors import TransduceError

from .conftest import tiny_config


def _write(folder, model, tokenizer_file, **extra):
    info = {
        "model": model.config.to_dict(),
        "src": "en",
        "tgt": "de",
        "tokenizer": {"src": tokenizer_file.name, "tgt": tokenizer_file.name},
        "step": 0,
        **extra,
    }
    return write_checkpoint(folder, model, info, [tokenizer_file])


@pytest.fixture
def spm_file(tmp_path):
    path = tmp_path / "spm.model"
    path.write_bytes(b"not read by these tests")
    return path


def test_a_checkpoint_loads_back_the_same_weights_and_config(tmp_path, spm_file):
    model = Transformer(tiny_config()).eval()
    folder = _write(tmp_path / "ckpt", model, spm_file)
    assert sorted(p.name for p in folder.iterdir()) == [
        ".transduce",
        "model.json",
        "model.safetensors",
        "spm.model",
    ]
    loaded, info = load_model_from(folder)
    assert loaded.config == model.config and info["transduce_version"]
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    verify(folder)


def test_averaging_is_the_elementwise_mean(tmp_path, spm_file):
    torch.manual_seed(0)
    a, b = Transformer(tiny_config()).eval(), Transformer(tiny_config()).eval()
    folders = [_write(tmp_path / "a", a, spm_file), _write(tmp_path / "b", b, spm_file)]
    mean, info = load_model_from(average_checkpoints(folders, tmp_path / "avg"))
    assert info["averaged_from"] == ["a", "b"]
    for name, tensor in mean.state_dict().items():
        torch.testing.assert_close(tensor, (a.state_dict()[name] + b.state_dict()[name]) / 2)
    other = Transformer(tiny_config(d_ff=128)).eval()
    with pytest.raises(TransduceError, match="different model configurations"):
        average_checkpoints(
            [folders[0], _write(tmp_path / "c", other, spm_file)], tmp_path / "avg2"
        )


def test_a_checkpoint_from_before_a_field_existed_averages_with_a_newer_one(tmp_path, spm_file):
    """A run resumed by a newer transduce: its older checkpoints' model.json lack the fields added
    since, which hold their defaults."""
    import json

    torch.manual_seed(0)
    folders = [_write(tmp_path / name, Transformer(tiny_config()).eval(), spm_file)
               for name in ("old", "new")]
    meta = json.loads((folders[0] / "model.json").read_text())
    for field in ("linear_bias", "relative_buckets", "init"):
        del meta["model"][field]
    (folders[0] / "model.json").write_text(json.dumps(meta))
    average_checkpoints(folders, tmp_path / "avg")


def test_damaged_and_escaping_checkpoints_are_named(tmp_path, spm_file):
    folder = _write(tmp_path / "ckpt", Transformer(tiny_config()).eval(), spm_file)
    info = read_info(folder)
    outside = tmp_path / "secret.txt"
    outside.write_text("private")
    for name in ("../secret.txt", str(outside)):  # a name that leaves the folder is refused
        with pytest.raises(TransduceError, match="tokenizer file"):
            tokenizer_paths(folder, {**info, "tokenizer": {"src": name, "tgt": "spm.model"}})
    (folder / "model.safetensors").write_bytes(b"\0" * 16)
    with pytest.raises(CheckpointError, match="model.safetensors"):
        verify(folder)
    (folder / "model.json").write_text(json.dumps({"model": {}}))
    with pytest.raises(CheckpointError, match="lacks the 'model' or 'tokenizer' section"):
        read_info(folder)
    with pytest.raises(CheckpointError, match="not a transduce checkpoint"):
        read_info(tmp_path)


def test_files_linking_out_of_the_checkpoint_are_refused(tmp_path, spm_file):
    folder = _write(tmp_path / "ckpt", Transformer(tiny_config()).eval(), spm_file)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in ("model.safetensors", "model.json"):
        target = elsewhere / name
        (folder / name).rename(target)
        (folder / name).symlink_to(target)  # the same bytes, but outside the folder
        with pytest.raises(CheckpointError, match="link to a file outside the checkpoint folder"):
            load_model_from(folder)
        (folder / name).unlink()
        target.rename(folder / name)
    load_model_from(folder)


@pytest.mark.parametrize("damage", ["int8", "bool", "shape"])
def test_weights_of_the_wrong_dtype_or_shape_are_named(tmp_path, spm_file, damage):
    from safetensors.torch import load_file, save_file

    folder = _write(tmp_path / "ckpt", Transformer(tiny_config()).eval(), spm_file)
    state = load_file(str(folder / "model.safetensors"))
    name = "decoder.0.ffn.w1.weight"
    state[name] = {"int8": lambda t: t.to(torch.int8), "bool": lambda t: t > 0,
                   "shape": lambda t: t[:-1].contiguous()}[damage](state[name])
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match=name.replace(".", r"\.")):
        load_model_from(folder)


@pytest.mark.parametrize("field, value, words", [
    ("d_model", "64", "d_model = '64': expected a value of type int"),
    ("dropout", None, "dropout = None: expected a value of type float"),
    ("d_model", 10**9, "GiB"), ("encoder_layers", 100_000, "encoder_layers must be at most 1024"),
    ("max_positions", 10**12, "GiB"),
    ("vocab_size", 10**10, "GiB")])
def test_a_hostile_model_json_is_refused_before_anything_is_built(
    tmp_path, spm_file, field, value, words, monkeypatch
):
    import transduce.model.transformer as transformer

    folder = _write(tmp_path / "ckpt", Transformer(tiny_config()).eval(), spm_file)
    info = json.loads((folder / "model.json").read_text())
    info["model"][field] = value
    if field == "d_model":  # keep the heads dividing it, so that only the size is at stake
        info["model"]["n_heads"] = 1
    (folder / "model.json").write_text(json.dumps(info))
    monkeypatch.setattr(
        transformer.Transformer, "__init__", lambda *a, **k: pytest.fail("the model was built")
    )
    with pytest.raises(TransduceError, match=words):
        load_model_from(folder)


def test_every_file_of_a_checkpoint_follows_the_umask(tmp_path, spm_file):
    import os

    old = os.umask(0o022)
    try:
        folder = _write(tmp_path / "ckpt", Transformer(tiny_config()).eval(), spm_file)
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir()}
    assert set(modes.values()) == {0o644}, modes  # (safetensors alone would write 0600)
