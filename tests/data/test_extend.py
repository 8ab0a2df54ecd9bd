"""Vocabulary extension's learning: new pieces continue the model's own segmentation (BPE and
unigram SentencePiece models, a Marian vocab.json), the merges' counts kept up to date equal
counting again, the pieces a model takes appended after its own."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import sentencepiece as spm

from transduce.data.extend import UNKNOWN, Learner, _joins, _merges, append_pieces, extend_tokenizer
from transduce.data.tokenizer import Tokenizer, train_sentencepiece
from transduce.errors import DataError

from ..helpers import WORDS

# a new domain: words the general pieces spell in several, one letter (ü) they do not know
DOMAIN = "tabby hamster rabbit bedroom sunset über tabby-cat 2024".split()


def general_text(n: int = 400) -> list[str]:
    rng = random.Random(0)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))) for _ in range(n)]


def domain_text(n: int = 200, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(DOMAIN + WORDS[:4]) for _ in range(rng.randint(2, 6)))
            for _ in range(n)]


@pytest.fixture(params=["bpe", "unigram"])
def general(request, tmp_path) -> Path:
    path = tmp_path / f"{request.param}.model"
    train_sentencepiece(general_text(), path, 36, request.param, threads=1)
    return path


def test_new_pieces_shorten_the_domains_text_and_keep_the_models_ids(general, tmp_path):
    learner = Learner(general)
    text = domain_text()
    learner.count(text)
    assert learner.unknown > 0  # ü
    new = learner.learn(30)
    assert len(new) == 30
    for piece, _, spelling in new:  # each spelled by old pieces (a new letter by <unk>)
        if spelling == (UNKNOWN,):
            assert len(piece) == 1 and learner.processor.piece_to_id(piece) == 3
        else:  # (a letter learned stood for <unk> in the old spelling)
            assert re.fullmatch("".join(re.escape(p) if p else "." for p in spelling), piece)
            assert len(spelling) > 1
            assert all(learner.processor.piece_to_id(p) != 3 for p in spelling if p)
    assert "ü" in [p for p, _, _ in new]
    grown = tmp_path / "grown.model"
    grown.write_bytes(append_pieces(general.read_bytes(), [(p, s) for p, s, _ in new]))
    old, sp = learner.processor, spm.SentencePieceProcessor(model_file=str(grown))
    size = old.get_piece_size()
    assert sp.get_piece_size() == size + 30
    assert [sp.id_to_piece(i) for i in range(size)] == [old.id_to_piece(i) for i in range(size)]
    assert [sp.piece_to_id(p) for p, _, _ in new] == list(range(size, size + 30))
    # below every old piece's score for BPE (merged last, in the order learned)
    assert [sp.get_score(size + i) for i in range(30)] == pytest.approx([s for _, s, _ in new])
    if learner.kind == "bpe":
        assert max(s for _, s, _ in new) < min(old.get_score(i) for i in range(size))
    before, after = old.encode(text), sp.encode(text)
    assert sum(map(len, after)) < 0.75 * sum(map(len, before))
    assert sum(row.count(3) for row in after) == 0  # ü is a piece now
    assert sp.decode(after) == text
    # letters, digits and punctuation stay apart, as SentencePiece trains them
    assert not any(p.strip("\u2581").isalpha() is False and any(c.isalpha() for c in p)
                   for p, _, _ in new)


def test_a_pair_seen_once_is_not_learned_and_the_budget_holds(general):
    learner = Learner(general)
    learner.count(domain_text(40) + ["zebrafinch"])
    new = learner.learn(10_000)
    text = " " + " ".join(domain_text(40)) + " zebrafinch"
    for piece, _, spelling in new:
        if spelling != (UNKNOWN,):
            assert text.count(piece.replace("\u2581", " ")) >= 2, piece
    assert "\u2581zebrafinch" not in [p for p, _, _ in new]
    assert len(learner.learn(5)) == 5


def naive_merges(words, freqs, budget, min_count=2):
    """Byte-pair encoding counting every pair again after each merge: what the incremental counts
    must give."""
    merges = []
    while len(merges) < budget:
        pairs = Counter()
        for word, n in zip(words, freqs):
            for pair in zip(word, word[1:]):
                if UNKNOWN not in pair and _joins(*pair):
                    pairs[pair] += n
        best = min(pairs.items(), key=lambda item: (-item[1], item[0]), default=None)
        if best is None or best[1] < min_count:
            return merges
        (a, b), _ = best
        merges.append((a, b))
        for word in words:
            i = 0
            while i < len(word) - 1:
                if word[i] == a and word[i + 1] == b:
                    word[i : i + 2] = [a + b]
                i += 1
    return merges


@pytest.mark.parametrize("seed", range(3))
def test_the_merges_kept_up_to_date_equal_counting_again(seed):
    rng = random.Random(seed)
    words = [["\u2581" + rng.choice("ab")] + [rng.choice("abc") for _ in range(rng.randint(0, 7))]
             + ([UNKNOWN] if rng.random() < 0.1 else []) for _ in range(60)]
    freqs = [rng.randint(1, 4) for _ in words]
    copy = [list(w) for w in words]
    assert _merges(words, freqs, 25, lambda p: False, 2) == naive_merges(copy, freqs, 25)
    assert words == copy


def marian_layout(folder: Path) -> tuple[dict, SimpleNamespace]:
    """A Marian tokenizer's files (eos 0, unk 1, the pieces, pad last) over a general model."""
    train_sentencepiece(general_text(), folder / "source.spm", 36, "unigram", threads=1)
    sp = spm.SentencePieceProcessor(model_file=str(folder / "source.spm"))
    vocab = {"</s>": 0, "<unk>": 1,
             **{sp.id_to_piece(i): i - 1 for i in range(3, sp.get_piece_size())}}
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    names = {"src": "source.spm", "tgt": "source.spm", "vocab": "vocab.json"}
    return names, SimpleNamespace(vocab_size=len(vocab), target_vocab_size=len(vocab), unk_id=1)


def test_a_marian_vocab_json_gets_the_new_ids_after_the_models_rows(tmp_path):
    names, config = marian_layout(tmp_path)
    old = json.loads((tmp_path / "vocab.json").read_text())
    text = domain_text()
    pairs = [(line, line.upper()) for line in text]
    record = extend_tokenizer(tmp_path, names, config, pairs, 12, lambda *a: None)
    vocab = json.loads((tmp_path / "vocab.json").read_text())
    assert {p: vocab[p] for p in old} == old  # the model's ids (pad last) keep their meaning
    new = record["new"]["src"]
    assert [i for i, _ in new] == list(range(len(old), len(old) + 12))
    assert new == record["new"]["tgt"]
    assert record["vocab_size"] == {"src": len(old) + 12, "tgt": len(old) + 12}
    assert all(0 < i < len(old) - 1 for _, spelled in new for i in spelled)  # vocab.json's ids
    tokenizer = Tokenizer(tmp_path / "source.spm", vocab=tmp_path / "vocab.json", unk_id=1)
    ids = tokenizer.encode_src(text)
    assert {i for row in ids for i in row} & set(range(len(old), len(old) + 12))
    assert sum(map(len, ids)) < record["before"]["src"]["pieces"]


def test_a_model_of_whole_words_is_refused_by_name(tmp_path):
    train_sentencepiece(general_text(), tmp_path / "words.model", 19, "word", threads=1)
    with pytest.raises(DataError, match="SentencePiece word model: new pieces extend BPE"):
        Learner(tmp_path / "words.model")
