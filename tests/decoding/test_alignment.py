"""Word alignments from the cross-attention (``decoding/alignment.py``): pieces merged into words,
the link rule, and a trained word-reversal model, whose alignment is known: target word j is
source word n - 1 - j."""

from __future__ import annotations

import pytest
import torch

from transduce import load
from transduce.config import DecodeConfig
from transduce.data.corpus import read_lines
from transduce.decoding.alignment import align_lines, check_rule, pharaoh, word_links, words_of

from ..helpers import cli


def test_pieces_are_merged_at_the_word_start_mark():
    assert words_of(["\u2581A", "\u2581big", "g", "er", "\u2581dog", "."]) == [0, 1, 1, 1, 2, 2]
    assert words_of(["un", "\u2581known"]) == [0, 1]  # (the first piece begins a word anyway)
    assert words_of([]) == []


def test_a_target_word_links_to_the_source_word_it_attends_to_most():
    # source pieces: word 0 = [0], word 1 = [1, 2, 3]; target pieces: word 0 = [0], word 1 = [1, 2]
    weights = torch.tensor([[0.4, 0.2, 0.2, 0.2],  # word 1's pieces sum to 0.6 > 0.4
                            [0.9, 0.0, 0.0, 0.1],
                            [0.0, 0.3, 0.3, 0.4]])  # the mean of rows 1-2 favours word 1 (0.55)
    links = word_links(weights, [0, 1, 1, 1], [0, 1, 1])
    assert links == [(1, 0), (1, 1)]
    assert pharaoh(links) == "1-0 1-1"
    assert word_links(weights[:, :1], [0], [0, 1, 1]) == [(0, 0), (0, 1)]
    assert word_links(weights[:0], [0, 1, 1, 1], []) == []


def test_the_rule_takes_the_model_s_layers_and_heads_only():
    config = type("Config", (), {"decoder_layers": 2, "n_heads": 4})()
    check_rule(config, 1, 3)
    check_rule(config, None, None)
    with pytest.raises(ValueError, match="decoder layers are 0 to 1"):
        check_rule(config, 2, None)
    with pytest.raises(ValueError, match="heads are 0 to 3"):
        check_rule(config, None, 4)


def test_a_reversal_model_s_alignment_is_the_reversal(reverse_run):
    translator = load(reverse_run / "run")
    lines = list(read_lines(reverse_run / "raw" / "valid.en"))
    aligned = align_lines(translator, lines + [""], DecodeConfig(beam=1))
    assert aligned[-1] == ("", "")
    mirrored = total = reversed_outputs = 0
    for line, (text, pairs) in zip(lines, aligned):
        words = line.split()
        assert text == translator.translate([line], beam=1)[0]
        links = [tuple(map(int, pair.split("-"))) for pair in pairs.split()]
        assert sorted(t for _, t in links) == list(range(len(text.split())))  # each word once
        if text.split() == words[::-1]:
            reversed_outputs += 1
            n = len(words)
            # a word repeated in the source may link to either of its copies
            mirrored += sum(words[s] == words[n - 1 - t] for s, t in links)
            total += n
    assert reversed_outputs >= len(lines) // 2
    assert mirrored >= 0.9 * total, (mirrored, total)


def test_translate_writes_each_translation_with_its_alignment(reverse_run):
    run = str(reverse_run / "run")
    text = "blue blue red big mat\n\nsees sat big\n"
    plain = cli("translate", run, input=text).stdout.splitlines()
    out = cli("translate", run, "--alignments", input=text).stdout.splitlines()
    assert [line.split("\t")[0] for line in out] == plain and out[1] == "\t"
    head = cli("translate", run, "--alignments", "--alignment-layer", "0", "--alignment-head",
               "1", input=text).stdout.splitlines()
    assert [line.split("\t")[0] for line in head] == plain
    assert [line.split("\t")[1] for line in head] != [line.split("\t")[1] for line in out]
    for flags, words in ((["--alignments", "--alignment-layer", "2"], "decoder layers are 0 to 1"),
                         (["--alignments", "--alignment-head", "4"], "heads are 0 to 3"),
                         (["--alignment-head", "1"], "add --alignments"),
                         (["--alignments", "--nbest", "2", "--beam", "2"], "leave out --nbest"),
                         ([run, "--alignments"], "not an ensemble")):
        failed = cli("translate", run, *flags, input=text, check=False)
        assert failed.returncode == 2 and words in failed.stderr, (flags, failed.stderr)


def test_a_task_prefix_s_words_are_not_the_user_s(reverse_run):
    translator = load(reverse_run / "run")
    translator.task_prefix = "red red "
    lines = list(read_lines(reverse_run / "raw" / "valid.en"))[:10]
    for line, (text, pairs) in zip(lines, align_lines(translator, lines, DecodeConfig(beam=1))):
        sources = [int(pair.split("-")[0]) for pair in pairs.split()]
        assert max(sources) < len(line.split()), (line, text, pairs)
