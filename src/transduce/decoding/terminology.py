"""Terminology constraints: target phrases that must appear in a sentence's output, as a score
modifier (``modifiers.ScoreModifier``; the search loop does not name it).

Every row of the search tracks, for each of its sentence's phrases (token ids), how many times its
output holds it so far (a phrase given twice must appear twice; one phrase inside another counts
where it occurs), and the phrase it is writing, if any. At each step, per row:

- while a phrase is being written, only its next token (a phrase, once begun, is finished);
- while phrases are missing, no eos;
- when the room left (``Step.room``, this token included) is exactly what the missing phrases and
  eos take, only the first token of a missing phrase: the output makes room for them by
  construction, so every output of every search (greedy, beam) holds every phrase.

A row begins a phrase when it writes the phrase's first token while the phrase is missing (the
longest such phrase when several begin with it). The model chooses where each phrase goes, as long
as the room allows; the last moment places what is still missing. A sentence whose phrases and
eos do not fit in its output's room is refused before the search (``check_room``). This is simpler
than dynamic beam allocation (Post & Vilar 2018), which also reserves beam slots by how many
constraints a hypothesis has met; here the beam ranks by the model's score alone.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor

NEG_INF = float("-inf")
BONUS = 2.0  # added to a missing phrase's first token: chosen on Multi30k validation (docs)


class _Row:
    """One row's progress: its output so far, each phrase's count, the phrase being written and
    how far."""

    __slots__ = ("output", "counts", "writing", "at", "ended")

    def __init__(self, phrases: int) -> None:
        self.output: list[int] = []
        self.counts = [0] * phrases
        self.writing: Optional[int] = None
        self.at = 0
        self.ended = False  # a missing phrase was just completed: its last word ends here

    def copy(self) -> "_Row":
        row = _Row(0)
        row.output, row.counts = list(self.output), list(self.counts)
        row.writing, row.at, row.ended = self.writing, self.at, self.ended
        return row


class Terminology:
    """Each sentence's phrases (per sentence, a list of token-id lists, possibly empty) appear in
    its output; see the module docstring."""

    name = "terminology constraints"
    running = False  # (state per sentence from its start)

    def __init__(self, phrases: Sequence[Sequence[Sequence[int]]], eos_id: int,
                 glued: Optional[Tensor] = None, bonus: Optional[float] = None) -> None:
        self.phrases = [[list(p) for p in sentence if len(p)] for sentence in phrases]
        self.eos_id, self.glued = eos_id, glued
        self.bonus = BONUS if bonus is None else bonus
        self.rows: list[_Row] = []
        self.per_row = 1

    def subset(self, sentences: Sequence[int]) -> "Terminology":
        return Terminology([self.phrases[i] for i in sentences], self.eos_id, self.glued,
                           self.bonus)

    def start(self, start) -> None:
        self.per_row = start.per_row
        self.sentence_of = [n for n in range(len(self.phrases)) for _ in range(start.per_row)]
        self.rows = [_Row(len(self.phrases[n])) for n in self.sentence_of]

    def _missing(self, n: int, row: _Row) -> list[int]:
        """The phrases of sentence ``n`` the row still lacks, once per missing occurrence."""
        wanted: dict[tuple, int] = {}
        for phrase in self.phrases[n]:
            wanted[tuple(phrase)] = wanted.get(tuple(phrase), 0) + 1
        missing = []
        for i, phrase in enumerate(self.phrases[n]):
            key = tuple(phrase)
            if wanted[key] > row.counts[i]:
                missing.append(i)
                wanted[key] -= 1  # (a repeated phrase: each copy its own occurrence)
        return missing

    def _needed(self, n: int, row: _Row, missing: list[int]) -> int:
        """The tokens the missing phrases still take (the one being written: what is left)."""
        phrases = self.phrases[n]
        needed = sum(len(phrases[i]) for i in missing if i != row.writing)
        if row.writing is not None:
            needed += len(phrases[row.writing]) - row.at
        return needed

    def adjust(self, logprobs: Tensor, step) -> Tensor:
        if not any(self.phrases):
            return logprobs
        room = step.room.tolist()
        for r, (n, row) in enumerate(zip(self.sentence_of, self.rows)):
            phrases = self.phrases[n]
            if not phrases:
                continue
            if row.writing is not None:
                _only(logprobs, r, [phrases[row.writing][row.at]])
                continue
            if row.ended and self.glued is not None:  # (a phrase is whole words)
                logprobs[r].masked_fill_(self.glued.to(logprobs.device), NEG_INF)
            missing = self._missing(n, row)
            if not missing:
                continue
            starts = sorted({phrases[i][0] for i in missing})
            # the row would end, or has no room left to wait: a missing phrase begins now
            ending = bool(logprobs[r].argmax() == self.eos_id)
            if ending:  # the phrase stands in for the end the model chose: at eos's score, so
                # that the row competes with rows that ramble on instead
                logprobs[r, starts] = torch.maximum(logprobs[r, starts], logprobs[r, self.eos_id])
            if ending or self._needed(n, row, missing) + 1 >= room[r]:
                _only(logprobs, r, starts)
            else:
                logprobs[r, self.eos_id] = NEG_INF
                logprobs[r, starts] += self.bonus
        return logprobs

    def advance(self, tokens: Tensor, pick: Optional[Tensor] = None) -> None:
        if pick is not None:
            self.rows = [self.rows[i].copy() for i in pick.tolist()]
        for n, row, token in zip(self.sentence_of, self.rows, tokens.tolist()):
            phrases = self.phrases[n]
            if not phrases:
                continue
            row.output.append(token)
            missing = set(self._missing(n, row))
            row.ended = False
            for i, phrase in enumerate(phrases):  # every phrase that now ends here counts
                if row.output[-len(phrase):] == phrase and (i == 0 or phrase not in phrases[:i]):
                    row.ended |= any(phrases[j] == phrase for j in missing)
                    for j in range(i, len(phrases)):
                        row.counts[j] += phrases[j] == phrase
            if row.writing is not None:
                row.at += 1
                if row.at == len(phrases[row.writing]):
                    row.writing = None
                continue
            begun = [i for i in self._missing(n, row) if phrases[i][0] == token
                     and len(phrases[i]) > 1]
            if begun:
                row.writing, row.at = max(begun, key=lambda i: len(phrases[i])), 1

    def keep(self, rows: Tensor, sentences: Tensor) -> None:
        kept = rows.tolist()
        self.rows = [self.rows[i] for i in kept]
        self.sentence_of = [self.sentence_of[i] for i in kept]


def _only(logprobs: Tensor, row: int, tokens: list[int]) -> None:
    """Row ``row`` may write only ``tokens`` (their scores kept)."""
    keep = logprobs[row, tokens].clone()
    logprobs[row] = NEG_INF
    logprobs[row, tokens] = keep


def check_room(phrases: Sequence[Sequence[int]], room: int) -> Optional[str]:
    """Why ``phrases`` cannot fit in an output of ``room`` tokens (eos included), or None."""
    needed = sum(len(p) for p in phrases)
    if needed + 1 > room:
        return (f"its constraints take {needed} tokens and eos 1, more than the {room} its "
                "output may hold")
    return None


def terminology(translator, constraints: Sequence[Sequence[str]], sources: Sequence[Sequence[int]],
                decode, numbers: Sequence[int]) -> Terminology:
    """The modifier for ``constraints`` (per source, its phrases as text) of a ``Translator``'s
    search: each phrase in target ids, each sentence's checked against its output's room (a
    ``TransduceError`` naming the input line)."""
    from ..errors import TransduceError

    phrases = []
    for texts, ids, number in zip(constraints, sources, numbers):
        texts = [text for text in texts if text.strip()]
        mine = translator.tokenizer.encode_tgt(texts) if texts else []
        why = check_room(mine, translator.output_room(ids, decode))
        if why is not None:
            raise TransduceError(f"input line {number}: {why}; shorten or drop a constraint, or "
                                 "raise --max-len-a/--max-len-b")
        phrases.append(mine)
    return Terminology(phrases, translator.model.config.eos_id, glued_pieces(translator))


def glued_pieces(translator) -> Tensor:
    """``(V,)``: the target pieces that continue a word with a letter or digit (no word-start
    mark): none may follow a completed phrase, which would then be part of a longer word."""
    config = translator.model.config
    pieces = translator.tokenizer.tgt_pieces(range(config.target_vocab_size))
    return torch.tensor([bool(p) and p[0].isalnum() for p in pieces])


def check_constraints(translator, lines: Sequence[str], constraints: Sequence[Sequence[str]],
                      decode) -> None:
    """Every line's phrases fit in its output's room (a ``TransduceError`` naming the first line
    where they do not), before a search begins."""
    todo = [i for i, line in enumerate(lines) if line.strip()]
    sources = translator.encode([lines[i] for i in todo], strict=decode.strict,
                                numbers=[i + 1 for i in todo])
    terminology(translator, [constraints[i] for i in todo], sources, decode,
                [i + 1 for i in todo])
