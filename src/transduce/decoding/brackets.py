"""A constraint on search: outputs that are linearized trees over a given number of words.

``BracketRules`` masks, at every step and for every row of a search, the tokens that would make
its output something other than the start of a tree over exactly its sentence's words (the
linearization of ``data/trees.py``: ``(NP`` opens, ``)NP`` closes, ``XX`` stands for a word):

- ``(L`` opens a constituent while words are left to place (the first opens the root; after the
  root closes nothing opens), and only when what must follow still fits in the output's room;
- ``XX`` places the next word, inside an open constituent, while words are left;
- ``)L`` closes the innermost open constituent, whose label it must be, once it holds a word (the
  root closes only after the last word); in a vocabulary of bare ``)`` (``prepare --bare-close``)
  that one token closes every label;
- eos ends the output once the root is closed.

The room is what the search allows the sentence (``common.max_lengths``): a token is allowed only
if the shortest completion after it (one ``XX`` per word left, one ``)L`` per open constituent,
eos) fits, so the search ends with a tree by construction, never by a repair. Every row of a
search keeps its state in tensors (``(N,)`` and ``(N, depth)``), reordered with the beams.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor

from ..data.trees import PLACEHOLDER, is_word

NEG_INF = float("-inf")
OTHER, OPEN, CLOSE, WORD = 0, 1, 2, 3
DEPTH_ROOM = 8  # open constituents a row may hold beyond its words (unary chains above them)


class BracketVocabulary:
    """What each target id is (``kind``: other, open, close, word) and its label's index;
    ``pieces``: the target vocabulary's pieces (SentencePiece's word marker is ignored). A word is
    the placeholder ``XX``; in a vocabulary without it (``prepare --trees --tags``), every piece
    that is not a bracket nor a special one like ``<unk>``: a part-of-speech tag (``tagged``)."""

    def __init__(self, pieces: Sequence[str], eos_id: int) -> None:
        tokens = [p.lstrip("\u2581") for p in pieces]
        labels = sorted({t[1:] for t in tokens if len(t) > 1 and t[0] in "()"})
        index = {label: i for i, label in enumerate(labels)}
        self.eos_id = eos_id
        self.kind = torch.zeros(len(tokens), dtype=torch.long)
        self.label = torch.full((len(tokens),), -1, dtype=torch.long)
        self.close_id = torch.full((len(labels),), -1, dtype=torch.long)  # per label
        bare = None  # the id of a bare ")", which closes any label
        for i, t in enumerate(tokens):
            if t == PLACEHOLDER:
                self.kind[i] = WORD
            elif t == ")":  # closes any label that has no closing token of its own
                self.kind[i] = CLOSE
                bare = i
            elif len(t) > 1 and t[0] in "()":
                self.kind[i] = OPEN if t[0] == "(" else CLOSE
                self.label[i] = index[t[1:]]
                if t[0] == ")":
                    self.close_id[index[t[1:]]] = i
        if bare is not None:
            self.close_id[self.close_id < 0] = bare
        self.tagged = PLACEHOLDER not in tokens
        if self.tagged:
            for i, t in enumerate(tokens):
                if self.kind[i] == OTHER and is_word(t, tags=True):
                    self.kind[i] = WORD
        # a label without its closing token could never close: it never opens
        self.open_ids = [i for i, t in enumerate(tokens) if self.kind[i] == OPEN
                         and self.close_id[self.label[i]] >= 0]
        if not self.open_ids or not (self.kind == WORD).any():
            raise ValueError(f"the target vocabulary has no brackets or no {PLACEHOLDER}: it is "
                             "not a parser's (prepare --trees)")
        self.word_ids = (self.kind == WORD).nonzero().squeeze(1).tolist()

    @classmethod
    def of(cls, tokenizer, config) -> "BracketVocabulary":
        """The vocabulary of a model's targets (``config``: its ``ModelConfig``)."""
        pieces = tokenizer.tgt_pieces(list(range(config.target_vocab_size)))
        return cls(pieces, config.eos_id)


class BracketRules:
    """The constraint for the sentences of one search (``words``: each one's number of words); see
    the module docstring. ``RunningSearch`` calls ``start`` when they join, ``mask`` before each
    choice, ``advance`` after it and ``keep`` when sentences leave."""

    name = "a constraint on the outputs (trees)"
    running = False

    def __init__(self, vocabulary: BracketVocabulary, words: Sequence[int]) -> None:
        self.vocab = vocabulary
        self.words = list(words)

    def subset(self, sentences: Sequence[int]) -> "BracketRules":
        """The rules for some of the sentences, in the order given (a batch of them)."""
        return BracketRules(self.vocab, [self.words[i] for i in sentences])

    @staticmethod
    def shortest(words: int) -> int:
        """The fewest output tokens, eos included, of a tree over ``words`` words."""
        return words + 3

    def start(self, start) -> None:
        """A batch joins (``modifiers.Start``)."""
        self.begin(start.per_row, start.device)

    def adjust(self, logprobs: Tensor, step) -> Tensor:
        return self.mask(logprobs, step.room)

    def begin(self, per_sentence: int, device: torch.device) -> None:
        """Rows for the sentences, ``per_sentence`` each (the beam), at the start of their
        output."""
        v = self.vocab
        self.kind, self.label = v.kind.to(device), v.label.to(device)
        self.close_id = v.close_id.to(device)
        self.open_ids = torch.tensor(v.open_ids, dtype=torch.long, device=device)
        self.word_ids = torch.tensor(v.word_ids, dtype=torch.long, device=device)
        n = torch.tensor(self.words, dtype=torch.long, device=device).repeat_interleave(
            per_sentence
        )
        # each row's own cap on open constituents (its words + 8), never the batch's: a sentence
        # is searched as alone, whatever its batch-mates
        N, depth = n.numel(), max(self.words, default=0) + DEPTH_ROOM
        self.n, self.capacity = n, n + DEPTH_ROOM
        self.placed = torch.zeros(N, dtype=torch.long, device=device)
        self.depth = torch.zeros(N, dtype=torch.long, device=device)
        self.started = torch.zeros(N, dtype=torch.bool, device=device)
        self.labels = torch.zeros(N, depth, dtype=torch.long, device=device)  # open constituents
        self.opened_at = torch.zeros(N, depth, dtype=torch.long, device=device)  # words then placed

    def mask(self, logprobs: Tensor, room: Tensor) -> Tensor:
        """``logprobs (N, V)`` with every token the rules forbid at -inf; ``room (N,)``: the tokens
        each row may still output, this one included."""
        left = self.n - self.placed
        depth, capacity = self.depth, self.capacity
        inside = depth > 0
        top = (depth - 1).clamp(min=0)[:, None]
        top_label = self.labels.gather(1, top).squeeze(1)
        top_has_word = self.placed > self.opened_at.gather(1, top).squeeze(1)
        may_open = ((left > 0) & (inside | ~self.started) & (depth < capacity)
                    & (1 + left + depth + 1 + 1 <= room))
        may_place = inside & (left > 0) & (left + depth + 1 <= room)
        may_close = inside & top_has_word & ((depth > 1) | (left == 0))
        may_end = ~inside & self.started & (left == 0)
        allowed = torch.zeros_like(logprobs, dtype=torch.bool)
        allowed[:, self.open_ids] = may_open[:, None]
        allowed[:, self.word_ids] = may_place[:, None]
        closing = may_close.nonzero().squeeze(1)
        allowed[closing, self.close_id[top_label[closing]]] = True
        allowed[:, self.vocab.eos_id] |= may_end
        return logprobs.masked_fill_(~allowed, NEG_INF)

    def advance(self, tokens: Tensor, pick: Optional[Tensor] = None) -> None:
        """Each row's new token ``tokens (N,)``, after rows were reordered by ``pick (N,)`` (beam
        search: the rows each new row continues)."""
        if pick is not None:
            self._select(pick)
        kind = self.kind[tokens]
        opening, closing = kind == OPEN, kind == CLOSE
        # (a row whose score is -inf continues with any token: keep its index in bounds)
        at = self.depth.clamp(0, self.labels.size(1) - 1)[:, None]
        if opening.any():
            self.labels.scatter_(1, at, torch.where(opening, self.label[tokens],
                                                     self.labels.gather(1, at).squeeze(1))[:, None])
            self.opened_at.scatter_(
                1,
                at,
                torch.where(opening, self.placed, self.opened_at.gather(1, at).squeeze(1))[:, None],
            )
        self.depth += opening.long() - closing.long()
        self.started |= opening
        self.placed += (kind == WORD).long()

    def keep(self, rows: Tensor, sentences: Optional[Tensor] = None) -> None:
        """Only ``rows`` stay (sentences left the search)."""
        self._select(rows)

    def _select(self, rows: Tensor) -> None:
        for name in ("n", "capacity", "placed", "depth", "started", "labels", "opened_at"):
            setattr(self, name, getattr(self, name)[rows])
