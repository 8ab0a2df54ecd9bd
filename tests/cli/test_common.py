"""Every numeric option of every command is parsed by one shared check: finite, in its range,
refused
before any work with the option's name; and the configs hold the same rules for the Python API."""

from __future__ import annotations

import argparse
import math

import pytest

from transduce.cli.main import build_parser
from transduce.config import DecodeConfig, ModelConfig, TrainConfig

from ..helpers import cli

HOSTILE = ["nan", "inf", "-inf", "-1", "0", "1e30", str(10**30), "0.5", "abc"]


def _numeric_options():
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, sub in commands.items():
        for action in sub._actions:
            if action.option_strings and (
                action.type in (int, float) or hasattr(action.type, "bounds")
            ):
                yield name, action


OPTIONS = list(_numeric_options())


def test_every_numeric_option_goes_through_the_shared_check():
    raw = [
        f"{command} {action.option_strings[0]}"
        for command, action in OPTIONS
        if action.type in (int, float)
    ]
    assert not raw, f"numeric options parsed without bounds: {raw}"
    assert len(OPTIONS) >= 60  # (every command's)


@pytest.mark.parametrize(
    "command, action", OPTIONS, ids=[f"{c} {a.option_strings[0]}" for c, a in OPTIONS]
)
def test_hostile_numbers_are_refused_or_within_the_options_range(command, action):
    kind, low, high = action.type.bounds
    for text in HOSTILE:
        try:
            value = action.type(text)
        except argparse.ArgumentTypeError as error:
            assert text in str(error)
            continue
        assert math.isfinite(value) and isinstance(value, kind)
        assert (low is None or value >= low) and value <= high, f"{text} -> {value}"
    # the default is in range too
    if action.default is not None and action.default != argparse.SUPPRESS:
        assert (low is None or action.default >= low) and action.default <= high


@pytest.mark.parametrize(
    "command",
    [
        ["translate", "RUN", "--beam", "100000000"],
        ["translate", "RUN", "--alpha", "nan"],
        ["evaluate", "RUN", "--ref", "r", "--max-len-a", "inf"],
        ["translate", "RUN", "--threads", "100000"],
        [
            "prepare",
            "--train-prefix",
            "p",
            "--src",
            "en",
            "--tgt",
            "de",
            "--out",
            "o",
            "--max-ratio",
            "nan",
        ],
        [
            "prepare",
            "--train-prefix",
            "p",
            "--src",
            "en",
            "--tgt",
            "de",
            "--out",
            "o",
            "--threads",
            "5000",
        ],
        ["train", "DATA", "--out", "o", "--seed", "1e30"],
        ["train", "DATA", "--out", "o", "--seed", "-1"],
        ["demo", "--max-steps", "-1"],
        ["download", "multi30k", "o", "--timeout", "-1"],
        ["serve", "RUN", "--port", "-5"],
    ],
)
def test_the_message_names_the_option_and_nothing_is_written(tmp_path, command, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli(*command, check=False)
    assert result.returncode == 2 and f"argument {command[-2]}" in result.stderr, result.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("make, words", [
    (lambda: DecodeConfig(alpha=float("nan")), "alpha must be a finite number"),
    (lambda: DecodeConfig(beam=10**8), "beam must be at most 1,024"),
    (lambda: TrainConfig(seed=-1), "seed must be at least 0"),
    (lambda: TrainConfig(valid_share=float("nan")), "valid_share must be a finite number"),
    (lambda: TrainConfig(max_time=float("inf")), "max_time must be a finite number"),
    (lambda: ModelConfig(dropout=float("nan")), "dropout must be a finite number"),
    (lambda: ModelConfig.preset("tiny", decoder_layers=100_000), "decoder_layers must be at most "
                                                                 "1024")])
def test_the_python_api_holds_the_same_rules(make, words):
    with pytest.raises(ValueError, match=words):
        make()


def test_a_config_that_is_a_folder_or_not_utf8_names_the_file(reverse_run, tmp_path):
    (tmp_path / "latin1.toml").write_bytes("[train]\n# \xe9t\xe9\n".encode("latin-1"))
    for path, words in ((tmp_path, "is a folder"), (tmp_path / "latin1.toml", "latin1.toml: not "
                                                                              "UTF-8")):
        result = cli(
            "train",
            str(reverse_run / "data"),
            "--out",
            str(tmp_path / "run"),
            "--config",
            str(path),
            check=False,
        )
        assert (
            result.returncode == 2 and words in result.stderr and "Traceback" not in result.stderr
        )
