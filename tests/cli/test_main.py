"""The command line's help: every task named at the top, each command's options and defaults
those of its task."""

from __future__ import annotations

import re

import pytest

from transduce.tasks import TASKS

from ..helpers import cli


def _help(*command: str) -> str:
    shown = cli(*command, "--help", check=False)
    assert shown.returncode == 0
    return shown.stdout


def test_the_top_level_help_names_every_task_with_its_data_and_commands():
    text = _help()
    for name, task in TASKS.items():
        assert re.search(rf"^  {re.escape(name)} +{re.escape(task.holds)} -> \w", text, re.M), name
    assert "parses" in text and "speech" in text


@pytest.mark.parametrize("command, absent, present", [
    ("parse", ["--ctc-weight", "--sampling", "--nbest", "--min-len", "--strict", "paper: 4"],
     ["--beam BEAM           beam size (1 = greedy) (default: 21)", "(default: 0.3)"]),
    ("translate", ["--ctc-weight"], ["--sampling", "paper: 4", "--nbest"]),
    ("serve", ["greedy) (default: 4)", "greedy; paper: 4"],
     ["--beam BEAM           beam size (1 = greedy)\n", "--ctc-weight",
      "take the served task's defaults"]),
    ("transcribe", ["--sampling", "--nbest", "paper: 4"], ["--ctc-weight", "--device"]),
    ("generate", ["--ctc-weight", "--nbest", "paper: 0.6"], ["--sampling", "--top-p"]),
])
def test_each_command_shows_its_task_s_search_options_only(command, absent, present):
    text = _help(command)
    for words in absent:
        assert words not in text, (command, words)
    for words in present:
        assert words in text, (command, words)


def test_train_says_how_the_default_preset_follows_the_data():
    text = " ".join(_help("train").split())
    assert ("a new run without one takes its data's task's: gpt-small for monolingual text, base "
            "for parallel text, base for a treebank, vit-tiny for images, speech-small for "
            "recordings") in text
