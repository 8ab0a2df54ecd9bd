"""Labeled bracketing scores of constituency trees, as EVALB computes them with COLLINS.prm (the
parameter file every published Penn Treebank F1 since Collins 1997 uses, the paper's included).

For each pair of trees (gold, test):

- words: the two trees must have the same words once empty elements (``-NONE-``) go, else the
  pair is an error that names its line (EVALB counts it as an error sentence and goes on; a score
  over the other sentences would hide it). A round bracket inside a word and its treebank spelling
  are the same word (``IL-2(+)`` and ``IL-2-LRB-+-RRB-``: ``transduce parse`` writes the second);
- deleted words: the punctuation preterminals ``, : `` '' .`` (and ``-NONE-``) leave both trees
  before spans are counted, so a bracket's span is measured in the words that remain. EVALB reads
  each tree's own tags; here the gold tree's tags decide for both, which is the same when the tags
  agree and is what a parser without tags (``transduce parse`` writes the placeholder ``XX``) needs;
- brackets: every constituent above the preterminals is a (label, start, end) bracket; its label
  is cut at the first ``-`` or ``=`` (``NP-SBJ-1`` -> ``NP``); brackets that cover no remaining
  word, the root (``TOP``, or the treebank's outer bracket without a label) and brackets labeled
  with a deleted label are not counted; ``ADVP`` and ``PRT`` are one label;
- matched: brackets are a multiset, each gold bracket matches at most one test bracket of the same
  span and label, so two identical brackets (a unary chain ``(NP (NP ...))``) count twice;
- crossing: test brackets that cross a gold bracket (overlap without nesting);
- complete match: as many gold as test brackets, all matched;
- skipped: a sentence with no word left once punctuation goes counts among the sentences but, as
  EVALB's "skip sentence", in none of the scores; complete match and crossing are shares of the
  other ("valid") sentences.

Totals: recall = matched / gold brackets, precision = matched / test brackets, F1 their harmonic
mean, over all sentences and over those of at most 40 words (EVALB's two sections; the length
counts every word but the empty elements).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from .data.trees import Tree, TreeError, escape, walk

DELETED = frozenset({"TOP", "-NONE-", ",", ":", "``", "''", "."})  # COLLINS.prm's DELETE_LABEL
EMPTY = "-NONE-"  # COLLINS.prm's DELETE_LABEL_FOR_LENGTH
EQUIVALENT = {"PRT": "ADVP"}  # COLLINS.prm's EQ_LABEL
CUTOFF = 40


@dataclass
class SentenceScore:
    """One pair of trees: EVALB's row (``length``: the words but empty elements; ``words``: those
    left once punctuation goes)."""

    line: int
    length: int
    matched: int
    gold: int
    test: int
    crossing: int
    words: int

    @property
    def skipped(self) -> bool:
        """No word left once punctuation goes: EVALB's status 2, in none of the scores."""
        return self.words == 0

    @property
    def complete(self) -> bool:
        return self.gold == self.test == self.matched

    @property
    def recall(self) -> float:
        return 100.0 * self.matched / self.gold if self.gold else 0.0

    @property
    def precision(self) -> float:
        return 100.0 * self.matched / self.test if self.test else 0.0


@dataclass
class Totals:
    """Sums over sentences, and the scores EVALB prints from them."""

    sentences: int = 0
    skipped: int = 0
    matched: int = 0
    gold: int = 0
    test: int = 0
    crossing: int = 0
    complete: int = 0
    no_crossing: int = 0
    words: int = 0

    def add(self, s: SentenceScore) -> None:
        self.sentences += 1
        if s.skipped:
            self.skipped += 1
            return
        self.matched += s.matched
        self.gold += s.gold
        self.test += s.test
        self.crossing += s.crossing
        self.complete += s.complete
        self.no_crossing += s.crossing == 0
        self.words += s.words

    @property
    def recall(self) -> float:
        return 100.0 * self.matched / self.gold if self.gold else 0.0

    @property
    def precision(self) -> float:
        return 100.0 * self.matched / self.test if self.test else 0.0

    @property
    def f1(self) -> float:
        r, p = self.recall, self.precision
        return 2 * p * r / (p + r) if p + r else 0.0

    @property
    def valid(self) -> int:
        return self.sentences - self.skipped

    def as_dict(self) -> dict:
        n = max(self.valid, 1)
        return {
            "sentences": self.sentences,
            "skipped": self.skipped,
            "recall": round(self.recall, 2),
            "precision": round(self.precision, 2),
            "f1": round(self.f1, 2),
            "complete_match": round(100.0 * self.complete / n, 2),
            "average_crossing": round(self.crossing / n, 2),
            "no_crossing": round(100.0 * self.no_crossing / n, 2),
            "matched": self.matched,
            "gold_brackets": self.gold,
            "test_brackets": self.test,
        }


@dataclass
class Report:
    """Every sentence's row and the totals (all sentences; those of at most ``CUTOFF`` words)."""

    rows: list[SentenceScore] = field(default_factory=list)
    all: Totals = field(default_factory=Totals)
    short: Totals = field(default_factory=Totals)

    def table(self) -> Iterable[str]:
        """EVALB's layout: a header, one line a sentence, then the summary."""
        yield "  Sent.                        Matched  Bracket   Cross"
        yield " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words"
        yield "=" * 64
        for r in self.rows:
            status = 2 if r.skipped else 0
            yield (f"{r.line:4d}  {r.length:3d}    {status}  {r.recall:6.2f} {r.precision:6.2f}   "
                   f"{r.matched:3d}    {r.gold:3d}  {r.test:3d}    {r.crossing:3d}   {r.words:4d}")
        yield "=" * 64
        yield from self.summary()

    def summary(self) -> Iterable[str]:
        for title, totals in (("All", self.all), (f"len<={CUTOFF}", self.short)):
            d = totals.as_dict()
            yield f"-- {title} --"
            yield f"Number of sentence        = {d['sentences']:6d}"
            yield f"Number of Skip  sentence  = {d['skipped']:6d}"
            yield f"Number of Valid sentence  = {totals.valid:6d}"
            yield f"Bracketing Recall         = {d['recall']:6.2f}"
            yield f"Bracketing Precision      = {d['precision']:6.2f}"
            yield f"Bracketing FMeasure       = {totals.f1:6.2f}"
            yield f"Complete match            = {d['complete_match']:6.2f}"
            yield f"Average crossing          = {d['average_crossing']:6.2f}"
            yield f"No crossing               = {d['no_crossing']:6.2f}"


def _leaves(tree: Tree) -> list[tuple[str, str]]:
    """(tag, word) of every preterminal, in order (iteratively: a tree may be deeper than Python's
    stack allows)."""
    return [(node.label, node.children[0]) for kind, node in walk(tree)
            if kind == "open" and node.preterminal]  # type: ignore[union-attr, misc]


def _brackets(tree: Tree, kept: Sequence[bool]) -> list[tuple[str, int, int]]:
    """The counted (label, start, end) brackets of ``tree``; ``kept[i]``: whether its i-th leaf
    (empty elements included) stays."""
    out: list[tuple[str, int, int]] = []
    leaf = position = 0
    starts: list[int] = []  # the position at which each open constituent began
    for kind, node in walk(tree):
        if kind == "word" or node.preterminal:  # type: ignore[union-attr]
            if kind == "close":
                position += kept[leaf]
                leaf += 1
            continue
        if kind == "open":
            starts.append(position)
            continue
        start = starts.pop()
        label = _label(node.label)  # type: ignore[union-attr]
        root = node is tree
        if position > start and label not in DELETED and not (root and not label):
            out.append((EQUIVALENT.get(label, label), start, position))
    return out


def _label(label: str) -> str:
    """EVALB's ``modify_label``: cut at the first ``-`` or ``=``."""
    for i, c in enumerate(label):
        if c in "-=":
            return label[:i]
    return label


def score_pair(gold: Tree, test: Tree, line: int = 0, where: str = "") -> SentenceScore:
    """One pair's row; trees whose words differ are a ``TreeError`` naming ``where`` and
    ``line``."""
    gold_leaves, test_leaves = _leaves(gold), _leaves(test)
    gold_words = [escape(w) for t, w in gold_leaves if t != EMPTY]
    test_words = [escape(w) for t, w in test_leaves if t != EMPTY]
    if gold_words != test_words:
        raise TreeError(f"{where}line {line}: {_difference(gold_words, test_words)}; a test tree "
                        "must have the gold tree's words, in order")
    gold_kept = [t not in DELETED for t, _ in gold_leaves]
    gold_tags = iter(t for t, _ in gold_leaves if t != EMPTY)
    test_kept = [t != EMPTY and next(gold_tags) not in DELETED for t, _ in test_leaves]
    g, t = _brackets(gold, gold_kept), _brackets(test, test_kept)
    matched = sum((Counter(g) & Counter(t)).values())
    crossing = sum(
        any(a < s < b < e or s < a < e < b for _, a, b in g) for _, s, e in t
    )
    return SentenceScore(line, len(gold_words), matched, len(g), len(t), crossing, sum(gold_kept))


def _difference(gold: list[str], test: list[str]) -> str:
    if len(gold) != len(test):
        return f"the gold tree has {len(gold)} words, the test tree {len(test)}"
    k = next(i for i, (a, b) in enumerate(zip(gold, test)) if a != b)
    return f"word {k + 1} is {gold[k]!r} in the gold tree but {test[k]!r} in the test tree"


def parseval(gold: Sequence[tuple[int, Tree]], test: Sequence[tuple[int, Tree]],
             gold_name: str = "gold", test_name: str = "test") -> Report:
    """Score ``test`` against ``gold``, each a list of (line, tree) as ``data.trees.parse_trees``
    gives; the n-th tree of one is paired with the n-th of the other."""
    if len(gold) != len(test):
        raise TreeError(f"{gold_name} has {len(gold)} trees but {test_name} has {len(test)}; "
                        "give one test tree per gold tree, in the same order")
    report = Report()
    for (line, g), (_, t) in zip(gold, test):
        row = score_pair(g, t, line, f"{test_name}, ")
        report.rows.append(row)
        report.all.add(row)
        if row.length <= CUTOFF:
            report.short.add(row)
    return report


def read_tree_file(path) -> list[tuple[int, Tree]]:
    """Every tree of a file (gzipped or not) with the line it starts on, as written (uncleaned:
    the scorer applies EVALB's own rules)."""
    from .data.corpus import read_lines
    from .data.trees import parse_trees

    return list(parse_trees("\n".join(read_lines(path)), str(path)))
