"""The tokenizer: SentencePiece's ids, a Hugging Face vocab.json's, and added pieces (T5's
sentinels) kept whole; ids past the vocabulary decode as unknown."""

from __future__ import annotations

import json

import pytest

from transduce.data.tokenizer import SPECIAL_IDS, Tokenizer, train_sentencepiece
from transduce.errors import DataError

LINES = ["the cat sat on the mat", "a dog runs in the park", "the red house is big"] * 30


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("spm") / "joint.model"
    train_sentencepiece(LINES, path, vocab_size=40, user_symbols=["<mask>"])
    return path


def test_the_special_ids_come_first_and_user_symbols_after_them(model):
    tokenizer = Tokenizer(model)
    pieces = tokenizer.src_pieces(range(5))
    assert pieces == ["<pad>", "<s>", "</s>", "<unk>", "<mask>"]
    assert SPECIAL_IDS == {"pad_id": 0, "bos_id": 1, "eos_id": 2, "unk_id": 3}
    assert tokenizer.joint and tokenizer.encode_src(["<mask>"])[0][-1] == 4


def test_text_round_trips_and_an_id_past_the_pieces_is_unknown(model):
    tokenizer = Tokenizer(model)
    ids = tokenizer.encode_tgt(["the dog sat"])[0]
    assert tokenizer.decode_tgt(ids) == "the dog sat"
    assert tokenizer.tgt_pieces([1000]) == ["<unk>"]
    assert tokenizer.decode_tgt([*ids, 1000]).startswith("the dog sat")


def test_a_vocab_json_maps_pieces_to_other_ids(model, tmp_path):
    plain = Tokenizer(model)
    pieces = plain.src_pieces(range(plain.src.get_piece_size()))
    vocab = {piece: i + 100 for i, piece in enumerate(reversed(pieces))}
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    mapped = Tokenizer(model, vocab=tmp_path / "vocab.json")
    ids = mapped.encode_src(["the cat"])[0]
    assert ids == [vocab[p] for p in plain.src_pieces(plain.encode_src(["the cat"])[0])]
    assert mapped.decode_tgt(ids) == "the cat"


def test_added_pieces_are_one_id_each_and_written_back(model, tmp_path):
    (tmp_path / "added.json").write_text(json.dumps({"<extra_id_0>": 90, "<extra_id_0>x": 91}))
    tokenizer = Tokenizer(model, added=tmp_path / "added.json")
    ids = tokenizer.encode_src(["the cat <extra_id_0>x on the mat<extra_id_0>"])[0]
    assert ids.count(91) == 1 and ids[-1] == 90  # the longer one is not split by the shorter
    assert tokenizer.decode_tgt(ids) == "the cat<extra_id_0>x on the mat<extra_id_0>"


def test_a_vocabulary_larger_than_the_text_supports_names_the_largest_that_works(tmp_path):
    with pytest.raises(DataError, match=r"vocab"):
        train_sentencepiece(["ab ab ab"] * 5, tmp_path / "small.model", vocab_size=5000)
