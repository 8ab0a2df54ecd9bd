"""``checkpoint.py``: a checkpoint folder written atomically and read back exactly, a run's
preferred checkpoint, averaging, and damaged or hostile folders named."""

from __future__ import annotations

import json

import pytest
import torch

from transduce import Transformer
from transduce.checkpoint import (CheckpointError, average_checkpoints, list_checkpoints, load_model_from, read_info,
                                  resolve, tokenizer_paths, verify, write_checkpoint)
from transduce.errors import TransduceError

from .conftest import tiny_config


def _write(folder, model, tokenizer_file, **extra):
    info = {"model": model.config.to_dict(), "src": "en", "tgt": "de", "tokenizer": {"src": tokenizer_file.name,
                                                                                    "tgt": tokenizer_file.name},
            "step": 0, **extra}
    return write_checkpoint(folder, model, info, [tokenizer_file])


@pytest.fixture
def spm_file(tmp_path):
    path = tmp_path / "spm.model"
    path.write_bytes(b"not read by these tests")
    return path


def test_a_checkpoint_loads_back_the_same_weights_and_config(tmp_path, spm_file):
    model = Transformer(tiny_config()).eval()
    folder = _write(tmp_path / "ckpt", model, spm_file)
    assert sorted(p.name for p in folder.iterdir()) == [".transduce", "model.json", "model.safetensors", "spm.model"]
    loaded, info = load_model_from(folder)
    assert loaded.config == model.config and info["transduce_version"]
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    verify(folder)


def test_resolve_prefers_averaged_then_best_then_the_latest(tmp_path, spm_file):
    model = Transformer(tiny_config()).eval()
    run = tmp_path / "run"
    for step in (2, 10):  # numeric order, not the names' order
        _write(run / "checkpoints" / f"step_{step:08d}", model, spm_file)
    assert [p.name for p in list_checkpoints(run)] == ["step_00000002", "step_00000010"]
    assert resolve(run).name == "step_00000010"
    _write(run / "best", model, spm_file)
    assert resolve(run).name == "best"
    _write(run / "averaged", model, spm_file)
    assert resolve(run).name == "averaged" and resolve(run / "best").name == "best"
    with pytest.raises(TransduceError, match="does not exist"):
        resolve(tmp_path / "nowhere")


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
        average_checkpoints([folders[0], _write(tmp_path / "c", other, spm_file)], tmp_path / "avg2")


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
