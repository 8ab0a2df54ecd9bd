"""Vocabulary extension (``prepare --tokenizer MODEL --extend-vocab N``): new pieces learned on a
new domain's text and appended to a model's tokenizer, so that the words its pieces split into many
(or do not know) become fewer pieces.

The pieces are learned by continuing byte-pair encoding from the model's own segmentation of the
text: the most frequent pair of adjacent pieces within a word becomes a piece, again and again, up
to N pieces (a pair seen once is not learned); characters the model does not know come first. A
SentencePiece model takes them as appended pieces: a BPE model merges them after all of its own
merges (lower scores, in the order learned), a unigram model prefers each over the two pieces it
joins (a score just above theirs together), so the model's segmentation is kept except where a new
piece applies. Each new piece records the old pieces that spelled it: ``train --init-from`` starts
its embedding from their mean (``training/vocabulary.py``).

Written here rather than taken from a library: SentencePiece trains from scratch only, and the
pieces must continue the model's own merges for its ids to keep their meaning.
"""

from __future__ import annotations

import heapq
import json
import struct
from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable, Iterable, Optional

import sentencepiece as spm

from ..errors import DataError
from .binarize import chunks
from .tokenizer import _read_vocab, spm_model_type

UNKNOWN = None  # a character the model does not know and that is not learned: never merged
# a unigram piece's score above the two pieces it joins, so that Viterbi prefers it to them
UNIGRAM_MARGIN = 0.01
CHUNK = 10_000


class Learner:
    """Counts the words of one SentencePiece model's text as that model splits them, then learns
    pieces on them (``learn``). ``vocab``: a Marian tokenizer's vocab.json, where a piece without
    an entry is unknown."""

    def __init__(self, path: Path, vocab: Optional[dict[str, int]] = None) -> None:
        self.path = path
        self.processor = sp = spm.SentencePieceProcessor(model_file=str(path))
        unk = sp.id_to_piece(sp.unk_id())
        self.known: Callable[[str], bool] = vocab.__contains__ if vocab is not None else \
            (lambda p: p == unk or sp.piece_to_id(p) != sp.unk_id())
        self.kind = spm_model_type(self.processor)
        if self.kind not in ("bpe", "unigram"):
            raise DataError(f"{path} is a SentencePiece {self.kind} model: new pieces extend BPE "
                            "and unigram models only")
        self.words: Counter = Counter()
        self.pieces = self.unknown = 0

    def count(self, lines: list[str]) -> None:
        for row in self.processor.encode(lines, out_type=str):
            self.pieces += len(row)
            word: list = []
            for piece in row:
                if piece.startswith("\u2581") and word:
                    self.words[tuple(word)] += 1
                    word = []
                if self.known(piece):
                    word.append(piece)
                else:  # (a unigram model joins a run of unknown characters into one piece)
                    self.unknown += 1
                    word.extend(c if self.known(c) else ("", c) for c in piece)
            if word:
                self.words[tuple(word)] += 1

    def learn(self, budget: int, min_count: int = 2) -> list[tuple[str, float, tuple]]:
        """Up to ``budget`` new pieces: (piece, score, the old pieces that spelled it, where
        ``UNKNOWN`` stands for the unknown piece)."""
        proto = self.processor
        has = {proto.id_to_piece(i) for i in range(proto.get_piece_size())}
        chars: Counter = Counter()
        for word, n in self.words.items():
            for symbol in word:
                if isinstance(symbol, tuple):
                    chars[symbol[1]] += n
        scores = {p: proto.get_score(proto.piece_to_id(p)) for p in has}
        lowest = min(scores.values())
        new: list[tuple[str, float, tuple]] = []
        spelling: dict[str, tuple] = {}
        for char, n in chars.most_common():
            if len(new) == budget or n < min_count:
                break
            lowest -= 1
            new.append((char, lowest, (UNKNOWN,)))
            spelling[char], scores[char] = (UNKNOWN,), lowest
        words, freqs = [], []
        for word, n in self.words.items():
            words.append([s if not isinstance(s, tuple) else s[1] if s[1] in spelling else UNKNOWN
                          for s in word])
            freqs.append(n)
        for a, b in _merges(words, freqs, budget - len(new), lambda p: p in has or p in spelling,
                            min_count):
            if self.kind == "bpe":
                lowest -= 1
                score = lowest
            else:
                score = scores.get(a, lowest) + scores.get(b, lowest) + UNIGRAM_MARGIN
            scores[a + b] = score
            spelling[a + b] = spelling.get(a, (a,)) + spelling.get(b, (b,))
            new.append((a + b, score, spelling[a + b]))
        return new


def _merges(words: list[list], freqs: list[int], budget: int, taken: Callable[[str], bool],
            min_count: int) -> list[tuple[str, str]]:
    """Byte-pair encoding's merges on ``words`` (lists of symbols, changed in place), the pair
    counts kept up to date word by word (a heap with stale entries skipped)."""
    pairs: Counter = Counter()
    where: dict = defaultdict(set)

    def each_pair(word):
        return (p for p in zip(word, word[1:]) if UNKNOWN not in p and _joins(*p))

    for w, word in enumerate(words):
        for pair in each_pair(word):
            pairs[pair] += freqs[w]
            where[pair].add(w)
    heap = [(-n, a, b) for (a, b), n in pairs.items()]
    heapq.heapify(heap)
    merges: list[tuple[str, str]] = []
    made: set[str] = set()
    while heap and len(merges) < budget:
        n, a, b = heapq.heappop(heap)
        joined = a + b
        if pairs.get((a, b)) != -n or taken(joined) or joined in made:
            continue  # (an entry from before its count changed, or a piece that exists)
        if -n < min_count:
            break
        merges.append((a, b))
        made.add(joined)
        changed = set()
        for w in where.pop((a, b)):
            word = words[w]
            for pair in each_pair(word):
                pairs[pair] -= freqs[w]
                changed.add(pair)
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    out.append(joined)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            word[:] = out
            for pair in each_pair(word):
                pairs[pair] += freqs[w]
                where[pair].add(w)
                changed.add(pair)
        pairs.pop((a, b), None)
        for pair in changed - {(a, b)}:
            if pairs[pair] > 0:
                heapq.heappush(heap, (-pairs[pair], *pair))
    return merges


def _kind(piece: str) -> Optional[str]:
    text = piece.lstrip("\u2581")
    return None if not text else "letters" if text.isalpha() else "digits" if text.isdigit() \
        else "other"


def _joins(a: str, b: str) -> bool:
    """Whether two pieces may become one: as SentencePiece trains (by default), letters, digits
    and other characters (punctuation) stay apart; a word's leading space joins anything."""
    return _kind(a) is None or _kind(a) == _kind(b)


def append_pieces(model: bytes, pieces: Iterable[tuple[str, float]]) -> bytes:
    """A serialized SentencePiece model with ``pieces`` appended (ids after its own): each is one
    more ``pieces`` entry (field 1 of ModelProto: piece, score, type NORMAL) at the end, which a
    protobuf reader appends to the ones before it."""
    out = bytearray(model)
    for piece, score in pieces:
        text = piece.encode("utf-8")
        # piece (field 1, bytes), score (field 2, float), type (field 3) NORMAL
        entry = b"\x0a" + _varint(len(text)) + text + b"\x15" + struct.pack("<f", score) \
            + b"\x18\x01"
        out += b"\x0a" + _varint(len(entry)) + entry
    return bytes(out)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def extend_tokenizer(folder: Path, names: dict[str, str], config, pairs: Iterable[tuple[str, str]],
                     budget: int, log) -> dict:
    """Learn up to ``budget`` pieces for each SentencePiece model of the tokenizer files in
    ``folder`` (``names``: role -> file name, as ``checkpoint.TOKENIZER_KEYS``) on ``pairs`` (the
    training text), rewrite the files with them and return the record ``meta.json`` keeps: for
    each side the ids the model had (``rows``), each new id with the old ids that spelled it
    (``new``), the old tokenizer's pieces and unknown pieces on the text (``before``) and the new
    vocabulary sizes (``vocab_size``).
    """
    if "added" in names:
        raise DataError("the model's tokenizer has pieces outside its SentencePiece models (T5's "
                        "sentinels): --extend-vocab extends SentencePiece and Marian vocabularies")
    vocab_roles = {"src": "vocab", "tgt": "tgt_vocab" if "tgt_vocab" in names else "vocab"}
    vocabs: dict[str, dict] = {}
    for side, role in vocab_roles.items():
        if role in names:  # (one dict for a shared vocab.json: new ids continue across sides)
            vocabs[side] = vocabs.get("src") if role == "vocab" and "src" in vocabs \
                else _read_vocab(folder / names[role])
    rows = {"src": config.vocab_size, "tgt": config.target_vocab_size}
    learners: dict[str, Learner] = {}
    for side in ("src", "tgt"):
        name = names[side]
        if name in learners:
            continue
        learners[name] = learner = Learner(folder / name, vocabs.get(side))
        size = learner.processor.get_piece_size()
        if side not in vocabs and size != rows[side]:
            raise DataError(f"the model has {rows[side]:,} rows for the {size:,} pieces of its "
                            f"{name}: --extend-vocab needs them equal, or a vocab.json")
    for chunk in chunks(iter(pairs), CHUNK):
        for name, learner in learners.items():
            learner.count([line for pair in chunk for side, line in zip(("src", "tgt"), pair)
                           if names[side] == name])
    learned = {name: learner.learn(budget) for name, learner in learners.items()}
    for name, pieces in learned.items():
        path, sp = folder / name, learners[name].processor
        fresh = [(p, s) for p, s, _ in pieces if sp.piece_to_id(p) == sp.unk_id()]
        path.write_bytes(append_pieces(path.read_bytes(), fresh))
    record: dict = {"rows": dict(rows), "new": {}, "before": {}}
    for side in ("src", "tgt"):
        learner, vocab = learners[names[side]], vocabs.get(side)
        pieces = learned[names[side]]
        if vocab is None:  # the SentencePiece model's own ids
            unk, lookup = learner.processor.unk_id(), learner.processor.piece_to_id
            grown = spm.SentencePieceProcessor(model_file=str(folder / names[side]))
            ids = {p: grown.piece_to_id(p) for p, _, _ in pieces}
        else:  # appended to vocab.json, after the model's rows
            unk, lookup = vocab.get("<unk>", config.unk_id), dict(vocab).__getitem__
            following = max(rows[side], max(vocab.values()) + 1)
            for p, _, _ in pieces:
                if p not in vocab:
                    vocab[p], following = following, following + 1
            ids = {p: vocab[p] for p, _, _ in pieces}
        # (a piece that had an id already, another side's in a shared vocab.json, keeps its row)
        record["new"][side] = [[ids[p], [unk if q is UNKNOWN else lookup(q) for q in spelled]]
                               for p, _, spelled in pieces if ids[p] >= rows[side]]
        record["before"][side] = {"pieces": learner.pieces, "unknown": learner.unknown}
    for side, role in vocab_roles.items():
        if side in vocabs:
            (folder / names[role]).write_text(
                json.dumps(vocabs[side], ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    record["vocab_size"] = {side: max([rows[side]] + [i + 1 for i, _ in record["new"][side]])
                            for side in ("src", "tgt")}
    log("extending the vocabulary: " + ", ".join(
        f"{'source' if side == 'src' else 'target'} {len(record['new'][side]):,} new pieces "
        f"({rows[side]:,} -> {record['vocab_size'][side]:,} ids)" for side in ("src", "tgt")))
    return record
