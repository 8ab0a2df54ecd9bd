"""The Multi30k recipe's files: the TOML recipes drive a run as the README says, the scripts
parse."""

import json
import subprocess
from pathlib import Path

import pytest

from ..helpers import cli, prepare_reverse_task

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "multi30k"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return prepare_reverse_task(tmp_path_factory.mktemp("m30k"), n_train=200, n_valid=10)


@pytest.mark.parametrize(
    "recipe, expected",
    [
        # the final recipe (EXPERIMENTS.md): batches of 2,048 tokens, warmup 800 of them, the EMA
        # of the weights
        (
            "small.toml",
            {
                "max_tokens": 2048,
                "warmup": 800,
                "peak_lr": 1.5e-3,
                "ema": 0.999,
                "label_smoothing": 0.1,
            },
        ),
        # the base of the Table 3 ablation: no EMA, a warmup sized for rows of 800 updates
        (
            "table3.toml",
            {
                "max_tokens": 2048,
                "warmup": 200,
                "peak_lr": 1.5e-3,
                "ema": 0.0,
                "label_smoothing": 0.1,
            },
        ),
    ],
)
def test_the_recipes_drive_a_run(data, tmp_path, recipe, expected):
    out = cli(
        "train",
        str(data),
        "--out",
        str(tmp_path / "run"),
        "--config",
        str(RECIPE / recipe),
        "--preset",
        "tiny",
        "--max-steps",
        "2",
        "--threads",
        "1",
        "--quiet",
    ).stdout
    assert f"warmup {expected['warmup']} updates to a peak learning rate of 1.50e-03" in out
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert {key: config["train"][key] for key in expected} == expected
    assert config["model"]["dropout"] == 0.1
    assert (tmp_path / "run" / "ema").is_dir() == (expected["ema"] > 0)


@pytest.mark.parametrize("script", ["run.sh", "mark.sh", "search.sh"])
def test_the_scripts_parse(script):
    assert subprocess.run(["bash", "-n", str(RECIPE / script)]).returncode == 0
