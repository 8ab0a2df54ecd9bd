"""``training/recipe.py``: what a new run's schedule is when its configuration leaves it open, the
same for ``transduce train`` and for a ``Trainer`` built in Python."""

from __future__ import annotations

import json

import pytest

from transduce.config import ModelConfig, TrainConfig
from transduce.training import RunSettings, Trainer
from transduce.training.recipe import FINETUNE, apply_recipe, given_fields

from ..helpers import cli, prepare_reverse_task


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return prepare_reverse_task(tmp_path_factory.mktemp("recipe"), n_train=400, n_valid=10)


def model():
    return ModelConfig.preset("tiny", vocab_size=64)


def test_auto_scales_the_warmup_to_the_data_and_keeps_what_is_given(data):
    train, from_recipe = apply_recipe(TrainConfig(max_tokens=500), model(), str(data), "auto")
    assert from_recipe and train.lr_schedule == "inverse_sqrt_peak" and train.peak_lr == 1e-3
    assert 100 <= train.warmup <= 4000  # about 4 epochs of this data, within the bounds
    given, from_recipe = apply_recipe(
        TrainConfig(max_tokens=500, warmup=7), model(), str(data), "auto"
    )
    assert not from_recipe and given.warmup == 7 and given.lr_schedule == TrainConfig().lr_schedule
    peak, _ = apply_recipe(TrainConfig(peak_lr=3e-4), model(), str(data), "paper")
    assert (
        peak.lr_schedule == "inverse_sqrt_peak" and peak.peak_lr == 3e-4
    )  # a peak implies its schedule
    assert apply_recipe(TrainConfig(), model(), str(data), "paper") == (TrainConfig(), True)
    with pytest.raises(ValueError, match="choose one of auto, paper, finetune"):
        apply_recipe(TrainConfig(), model(), str(data), "fast")


def test_finetune_warms_up_to_a_tenth_and_validates_first_unless_told_otherwise(data):
    auto, _ = apply_recipe(TrainConfig(max_tokens=500), model(), str(data), "auto")
    tuned, from_recipe = apply_recipe(TrainConfig(max_tokens=500), model(), str(data), "finetune")
    assert (
        from_recipe
        and tuned.peak_lr == pytest.approx(auto.peak_lr / 10)
        and tuned.warmup < auto.warmup
    )
    assert (tuned.valid_at_start, tuned.patience) == (
        FINETUNE["valid_at_start"],
        FINETUNE["patience"],
    )
    kept, _ = apply_recipe(
        TrainConfig(max_tokens=500, peak_lr=5e-5, patience=2), model(), str(data), "finetune"
    )
    assert kept.peak_lr == 5e-5 and kept.patience == 2 and kept.warmup == tuned.warmup
    assert given_fields(TrainConfig(max_tokens=500, patience=2)) == {"max_tokens", "patience"}
    # LoRA adapters start at zero: they take auto's peak (measured in docs/finetuning.md)
    lora, _ = apply_recipe(TrainConfig(max_tokens=500, lora=8), model(), str(data), "finetune")
    assert lora.peak_lr == pytest.approx(auto.peak_lr) and lora.warmup == tuned.warmup


TINY = ("--preset", "tiny", "--max-steps", "1", "--quiet", "--max-tokens", "500")


def test_the_command_line_and_a_python_trainer_get_the_same_schedule(data, tmp_path):
    cli("train", str(data), "--out", str(tmp_path / "seed"), *TINY)
    cli("train", str(data), "--out", str(tmp_path / "cli"), *TINY, "--recipe", "finetune",
        "--init-from", str(tmp_path / "seed"))
    from_cli = json.loads((tmp_path / "cli" / "config.json").read_text())["train"]
    trainer = Trainer(model(), TrainConfig(max_steps=1, max_tokens=500),
                      RunSettings(str(data), str(tmp_path / "py"), quiet=True), log=lambda *a: None,
                      recipe="finetune")
    for key in ("lr_schedule", "warmup", "peak_lr", "valid_at_start", "patience"):
        assert getattr(trainer.tc, key) == from_cli[key], key
