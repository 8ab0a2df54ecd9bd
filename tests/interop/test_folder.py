"""``interop/folder.py``: what an import reads from a Hugging Face folder is checked in one place:
config.json's numbers (type and range, before anything is built) and the tensors no converter read
(refused by name, except those a family's checkpoints may carry without use)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from transduce.errors import TransduceError
from transduce.interop.folder import IGNORED, NUMBERS, Tensors, check_config, check_numbers


@pytest.mark.parametrize("key, value, message", [
    ("d_model", "64", "d_model = '64' should be an integer"),
    ("d_model", 64.0, "d_model = 64.0 should be an integer"),
    ("encoder_layers", True, "encoder_layers = True should be an integer"),
    ("decoder_layers", 0, "decoder_layers = 0 is out of range (at least 1)"),
    ("pad_token_id", -1, "pad_token_id = -1 is out of range (at least 0)"),
    ("dropout", 1.5, "dropout = 1.5 is out of range (from 0 up to 1)"),
    ("dropout", "0.1", "dropout = '0.1' should be a number"),
])
def test_a_number_of_the_wrong_type_or_range_is_named(key, value, message):
    with pytest.raises(TransduceError, match=f"config.json: {message}".replace("(", r"\(")
                       .replace(")", r"\)")):
        check_config({key: value}, "config.json", "whisper")
    check_config({key: None}, "config.json", "whisper")  # (absent or null: the default applies)


def test_every_family_has_its_numbers_and_epsilons_must_be_positive():
    assert set(NUMBERS) == set(IGNORED) == {"marian", "t5", "vit", "whisper", "gpt2", "bert"}
    with pytest.raises(TransduceError, match=r"layer_norm_eps = 0 is out of range \(above 0\)"):
        check_numbers({"layer_norm_eps": 0}, "config.json", positive=("layer_norm_eps",))


def test_a_tensor_no_converter_read_is_refused_by_name():
    state = Tensors({**{f"h.{i}.w": torch.zeros(1) for i in range(3)},
                     "h.0.attn.bias": torch.zeros(1)})
    assert "h.2.w" in state and not state.read  # (asking is not reading)
    state["h.0.w"], state["h.1.w"]
    with pytest.raises(TransduceError, match=r"1 tensor\(s\) that config.json does not account "
                                             r"for \(h\.2\.w\)"):
        state.refuse_unread(Path("folder"), IGNORED["gpt2"])
    state["h.2.w"]
    state.refuse_unread(Path("folder"), IGNORED["gpt2"])  # (the mask buffer: ignored by design)
