"""Which checkpoint a command uses: one rule (``checkpoint.choose``), said on every load, never a
stale average or EMA in silence, and no average of one checkpoint that would shadow ``best/``."""

from __future__ import annotations

import pytest

from ..helpers import cli, prepare_reverse_task

TRAIN = (
    "--preset",
    "tiny",
    "--quiet",
    "--precision",
    "fp32",
    "--max-tokens",
    "1500",
    "--set",
    "save_every=10",
    "--set",
    "valid_every=10",
    "--set",
    "valid_share=0",
    "--set",
    "warmup=20",
)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return prepare_reverse_task(tmp_path_factory.mktemp("choice"), n_train=300, n_valid=10)


def using(result) -> str:
    """The line that names the checkpoint a command used."""
    lines = [line for line in result.stderr.splitlines() if line.startswith("using ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_an_average_older_than_the_run_is_passed_over_with_the_command_that_refreshes_it(
    data, tmp_path
):
    run = tmp_path / "run"
    cli("train", str(data), "--out", str(run), "--max-steps", "30", *TRAIN)
    cli("average", str(run), "--last", "2")
    fresh = cli("translate", str(run), input="the cat\n")
    assert using(fresh) == f"using {run}/averaged: the average of 2 checkpoints (updates 20-30)"
    assert "warning" not in fresh.stderr

    cli("train", str(data), "--out", str(run), "--resume", "--max-steps", "50", *TRAIN)
    stale = cli("translate", str(run), input="the cat\n")
    assert (
        f"warning: {run}/averaged was made at update 30, before the run's newest checkpoint "
        f"(update 50): not used; `transduce average {run} --last 2` refreshes it"
    ) in stale.stderr
    assert using(stale).startswith(f"using {run}/best: update ")
    assert "the best validation BLEU" in using(stale)
    named = cli(
        "translate", str(run / "averaged"), input="the cat\n"
    )  # named: used, and said to be old
    assert using(named).startswith(f"using {run}/averaged") and "used as named" in named.stderr
    described = cli("info", str(run)).stdout
    assert "trained    50 updates" in described and f"commands use {run}/best" in described

    cli("average", str(run), "--last", "2")
    again = cli(
        "evaluate",
        str(run),
        "--src",
        str(data.parent / "raw" / "valid.en"),
        "--ref",
        str(data.parent / "raw" / "valid.de"),
        "--beam",
        "1",
    )
    assert using(again) == f"using {run}/averaged: the average of 2 checkpoints (updates 40-50)"


def test_an_average_of_one_checkpoint_is_refused_and_best_stays_in_use(data, tmp_path):
    run = tmp_path / "run"
    cli("train", str(data), "--out", str(run), "--max-steps", "10", *TRAIN)
    refused = cli("average", str(run), check=False)  # --last 5 of a run with one checkpoint
    assert refused.returncode == 2
    assert (
        "has only one checkpoint (step_00000010)" in refused.stderr and "--last 1" in refused.stderr
    )
    assert not (run / "averaged").exists()
    assert using(cli("translate", str(run), input="the cat\n")).startswith(
        f"using {run}/best: update 10"
    )
    copied = cli("average", str(run), "--last", "1")  # asked for by name: done
    assert "averaged step_00000010" in copied.stdout and (run / "averaged").is_dir()


def test_an_ema_older_than_the_run_warns_when_named_and_is_never_chosen_silently(data, tmp_path):
    run = tmp_path / "run"
    cli("train", str(data), "--out", str(run), "--max-steps", "20", "--ema", "0.9", *TRAIN)
    current = cli("translate", str(run / "ema"), input="the cat\n")
    assert (
        using(current)
        == f"using {run}/ema: the exponential moving average of the weights (decay 0.9) at update "
           "20"
    )
    assert "warning" not in current.stderr
    cli(
        "train",
        str(data),
        "--out",
        str(run),
        "--resume",
        "--max-steps",
        "30",
        *TRAIN,
        "--set",
        "ema=0",
    )
    old = cli("translate", str(run / "ema"), input="the cat\n")
    assert (
        f"warning: {run}/ema was made at update 20, before the run's newest checkpoint (update "
        "30): used as named"
    ) in old.stderr
    assert "--resume --ema 0.9" in old.stderr
    assert using(cli("translate", str(run), input="the cat\n")).startswith(f"using {run}/best")


def test_every_command_that_loads_a_run_says_which_checkpoint(reverse_run, tmp_path):
    run = reverse_run / "run"
    expected = f"using {run}/best: update "
    assert using(cli("translate", str(run), input="the cat\n")).startswith(expected)
    assert using(
        cli("attention", str(run), "--src", "the cat", "--out", str(tmp_path / "a.png"))
    ).startswith(expected)
    assert using(cli("export", str(run), "--to", "hf", str(tmp_path / "hf"))).startswith(expected)
    assert using(
        cli(
            "evaluate",
            str(run),
            "--src",
            str(reverse_run / "raw" / "valid.en"),
            "--ref",
            str(reverse_run / "raw" / "valid.de"),
            "--json",
            "--beam",
            "1",
        )
    ).startswith(expected)
