"""Turning text into ids: which pairs are kept, the sample the tokenizer learns from, the
closed bracket vocabulary."""

from __future__ import annotations

import collections

import pytest
import sentencepiece as spm

from transduce.data.binarize import chunks, closed_vocabulary, keep_pair, reservoir
from transduce.data.options import PrepareOptions
from transduce.errors import DataError


@pytest.mark.parametrize("pair, ids, reason", [
    (("", "x"), ([], [1]), "empty"),
    (("a", "b"), ([1] * 5, [1]), "too_long"),
    (("a", "b"), ([1] * 4, [1]), "ratio"),
    (("a", "b"), ([1] * 3, [1]), None),
])
def test_a_pair_is_kept_unless_empty_too_long_or_out_of_ratio(pair, ids, reason):
    dropped = collections.Counter()
    options = PrepareOptions("en", "de", "train", max_len=4, max_ratio=3.0)
    assert keep_pair(*pair, *ids, options, dropped) is (reason is None)
    assert dropped == (collections.Counter({reason: 1}) if reason else collections.Counter())


def test_trees_are_kept_whatever_their_ratio():
    options = PrepareOptions("words", "trees", "train", trees=True)
    assert keep_pair("a", "(S XX )S", [1], [1] * 4, options, collections.Counter())


def test_the_sample_is_uniform_seeded_and_skips_empty_pairs():
    pairs = [(str(n), str(n)) if n % 10 else ("", "x") for n in range(2000)]
    src, tgt, read = reservoir(iter(pairs), 100, seed=1)
    assert read == 2000 and len(src) == 100 and src == tgt and "" not in src
    assert reservoir(iter(pairs), 100, seed=1)[0] == src != reservoir(iter(pairs), 100, seed=2)[0]
    assert sum(int(s) >= 1000 for s in src) > 30  # the second half is sampled too
    assert reservoir(iter(pairs[:50]), 100, seed=1)[0] == [s for s, _ in pairs[:50] if s]


def test_chunks_cut_a_stream_and_keep_the_rest():
    assert [len(c) for c in chunks(iter([("a", "b")] * 7), 3)] == [3, 3, 1]


def test_the_closed_vocabulary_holds_every_bracket_whole(tmp_path):
    lines = ["(S (NP-SBJ-LONG-LABEL XX )NP-SBJ-LONG-LABEL (VP XX )VP )S"] * 3
    closed_vocabulary(iter(lines), tmp_path / "brackets.model")
    model = spm.SentencePieceProcessor(model_file=str(tmp_path / "brackets.model"))
    pieces = model.encode(lines[0], out_type=str)
    assert [p.lstrip("\u2581") for p in pieces] == lines[0].split()
    with pytest.raises(DataError, match="SentencePiece keeps pieces of at most 512"):
        closed_vocabulary(iter(["(S " + "X" * 600 + " )S"]), tmp_path / "long.model")
