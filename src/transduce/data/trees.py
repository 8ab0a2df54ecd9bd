"""Constituency trees in Penn Treebank bracketing: read, cleaned as parsing evaluation sees them,
and linearized for a sequence-to-sequence model (the paper's section 6.3, after Vinyals et al.
2015, "Grammar as a Foreign Language").

The linearization: the source is the sentence's words; the target is the bracket sequence of the
tree, each opening bracket with its label (``(NP``), each closing bracket with it too (``)NP``),
and each preterminal (the part-of-speech tag and its word) replaced by one placeholder ``XX``:

    (S (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .))
    source: The dog barks .
    target: (S (NP XX XX )NP (VP XX )VP XX )S

Closing labels make the vocabulary larger but let a reader (and a constrained search) check each
bracket against the one it closes; ``bare_close`` writes each closing bracket ``)`` without its
label (the search still closes the innermost open constituent with it). The treebank's outer
bracket without a label (or labeled ``TOP`` or ``ROOT``) is the root; its children are linearized
one after the other (almost always one).

Cleaning (``clean``), as parsing evaluation does: empty elements (``-NONE-``) and the
constituents left without words by their removal go; function tags and coindexation go
(``NP-SBJ-1`` -> ``NP``, ``NP=2`` -> ``NP``, ``ADVP|PRT`` -> ``ADVP``); labels that begin with
``-`` (``-LRB-``, ``-RRB-``, ``-NONE-``) are kept whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Sequence, Union

from ..errors import TransduceError
from .corpus import read_lines

PLACEHOLDER = "XX"
ROOTS = ("", "TOP", "ROOT")  # the labels of a root above the sentence's own top constituent


@dataclass
class Tree:
    """A constituent: its label and its children, each a ``Tree`` or a word (a preterminal has
    exactly one child, its word)."""

    label: str
    children: list[Union["Tree", str]] = field(default_factory=list)

    @property
    def preterminal(self) -> bool:
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def words(self) -> list[str]:
        return [node for kind, node in walk(self) if kind == "word"]

    def __str__(self) -> str:
        """The tree in one line of Penn bracketing (the root without a label as ``( ... )``)."""
        out: list[str] = []
        space = False  # whether the next child needs a space before it
        for kind, node in walk(self):
            if kind == "close":
                out.append(")" if node.label else " )")
                space = True
                continue
            if space:
                out.append(" ")
            if kind == "word":
                out.append(node)
                space = True
            elif kind == "open":
                out.append(f"({node.label} " if node.label else "( ")
                space = False
        return "".join(out)


def walk(tree: Tree) -> Iterator[tuple[str, Union[Tree, str]]]:
    """The tree depth first, as ``("open", node)``, its children, ``("close", node)``, each word as
    ``("word", word)``: without recursion, since a tree may be deeper than Python's stack allows
    (a right-branching tree of a long sentence)."""
    stack: list[tuple[Union[Tree, str], bool]] = [(tree, False)]
    while stack:
        node, closing = stack.pop()
        if isinstance(node, str):
            yield "word", node
        elif closing:
            yield "close", node
        else:
            yield "open", node
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(node.children))


class TreeError(TransduceError):
    """A bracketing that is not a tree, with where it went wrong."""


def parse_trees(text: str, source: str = "<text>") -> Iterator[tuple[int, Tree]]:
    """Every tree in ``text`` (one or several lines a tree, trees one after another), with the
    line it starts on. A word may hold balanced brackets (``a(b)``)."""
    i, n, line = 0, len(text), 1
    while True:
        while i < n and text[i].isspace():
            line += text[i] == "\n"
            i += 1
        if i >= n:
            return
        if text[i] != "(":
            raise TreeError(
                f"{source}, line {line}: expected '(' to begin a tree, found {text[i : i + 20]!r}"
            )
        start = line
        tree, i, line = _read(text, i, line, source)
        yield start, tree


def _read(text: str, i: int, line: int, source: str) -> tuple[Tree, int, int]:
    """The tree opening at ``text[i] == '('``; returns it, the index after its last ')', the line
    (iteratively, as ``walk``)."""
    n, start = len(text), line
    stack: list[Tree] = []
    # the first line inside the tree that begins with '(' at its first column, as a new tree's
    # first line does: where a ')' is most likely missing, if the brackets never close
    suspect = 0
    while True:
        while i < n and text[i].isspace():
            line += text[i] == "\n"
            i += 1
        if i >= n:
            raise TreeError(_unclosed(source, start, len(stack), suspect))
        if text[i] == "(" and stack and not suspect and i > 0 and text[i - 1] == "\n":
            suspect = line
        if text[i] == "(":
            j = i + 1
            while j < n and not text[j].isspace() and text[j] not in "()":
                j += 1
            node = Tree(text[i + 1 : j])
            if stack:
                stack[-1].children.append(node)
            stack.append(node)
            i = j
            continue
        if text[i] == ")":
            node = stack.pop()
            if not node.children:
                raise TreeError(f"{source}, line {line}: an empty constituent ({node.label})")
            i += 1
            if not stack:
                return node, i, line
            continue
        j, depth = i, 0  # a word: up to the ')' that is not its own, or a space
        while j < n and not text[j].isspace():
            if text[j] == "(":
                depth += 1
            elif text[j] == ")":
                if depth == 0:
                    break
                depth -= 1
            j += 1
        stack[-1].children.append(text[i:j])
        i = j


def _unclosed(source: str, start: int, open_: int, suspect: int) -> str:
    """The message for a tree whose brackets never close: its first line, and the line where the
    next tree seems to begin."""
    message = (f"{source}, line {start}: the tree that begins here never closes its brackets "
               f"({open_} still open at the end of the file)")
    if suspect:
        message += (f"; line {suspect} begins with '(' at its first column, as a new tree does: "
                    f"is a ')' missing before it, at the end of the tree of line {start}?")
    return message


def read_trees(path) -> list[Tree]:
    """The trees of a file (gzipped or not), each cleaned (``clean``); errors name the line."""
    trees = []
    for line, tree in parse_trees("\n".join(read_lines(path)), str(path)):
        cleaned = clean(tree)
        if cleaned is None:
            raise TreeError(f"{path}, line {line}: the tree has no words once its empty elements "
                            "go")
        trees.append(cleaned)
    return trees


def base_label(label: str) -> str:
    """``NP-SBJ-1`` -> ``NP``, ``NP=2`` -> ``NP``, ``ADVP|PRT`` -> ``ADVP``; ``-LRB-`` stays."""
    if not label or label.startswith("-"):
        return label
    for mark in "-=|":
        label = label.split(mark)[0]
    return label


def clean(tree: Tree) -> Tree | None:
    """``tree`` without empty elements, constituents left empty, function tags and coindexation
    (None if nothing is left)."""
    made: list[list[Tree | str]] = [[]]  # the cleaned children of each open constituent
    for kind, node in walk(tree):
        if kind == "open":
            made.append([])
        elif kind == "word":
            made[-1].append(node)
        else:
            children = made.pop()
            keep = children and not (node.preterminal and node.label == "-NONE-")
            if keep:
                made[-1].append(Tree(base_label(node.label), children))
    return made[0][0] if made[0] else None  # type: ignore[return-value]


def linearize(tree: Tree, tags: bool = False,
              bare_close: bool = False) -> tuple[list[str], list[str]]:
    """``(words, target)``: the sentence and the bracket sequence described in the module
    docstring; ``tags``: each word's part-of-speech tag in the target instead of the placeholder
    (a parser that tags too); ``bare_close``: closing brackets without their labels."""
    target: list[str] = []
    for kind, node in walk(tree):
        if kind == "word" or node is tree and tree.label in ROOTS:
            continue  # (the root is no bracket of the target)
        if node.preterminal:
            if kind == "open":
                target.append(node.label if tags else PLACEHOLDER)
        else:
            target.append(f"({node.label}" if kind == "open"
                          else ")" if bare_close else f"){node.label}")
    return tree.words(), target


def is_word(token: str, tags: bool = False) -> bool:
    """Whether a target token stands for a word: the placeholder, or (``tags``) any token that is
    neither a bracket nor a special one like ``<unk>``."""
    if token == PLACEHOLDER:
        return True
    special = token[:1] == "<" and token[-1:] == ">"
    return tags and bool(token) and token[0] not in "()" and not special


def delinearize(target: Sequence[str], words: Sequence[str], tag: str = PLACEHOLDER,
                tags: bool = False) -> Tree:
    """The tree a bracket sequence describes over ``words``: each placeholder becomes the
    preterminal ``(tag word)`` (``tags``: every token that is not a bracket is a word's tag), the
    words in order (``escape``d), under a root without a label. A sequence that does not
    describe a tree over exactly these words is an error saying where."""
    root = Tree("")
    stack, used = [root], 0
    for k, token in enumerate(target):
        if is_word(token, tags):
            if used == len(words):
                raise TreeError(f"token {k}: a placeholder past the sentence's {len(words)} words")
            stack[-1].children.append(Tree(token if tags else tag, [escape(words[used])]))
            used += 1
        elif token.startswith("(") and len(token) > 1:
            node = Tree(token[1:])
            stack[-1].children.append(node)
            stack.append(node)
        elif token.startswith(")"):  # (a bare ")" closes whatever is open)
            if len(stack) == 1 or token[1:] not in ("", stack[-1].label):
                opened = stack[-1].label if len(stack) > 1 else "nothing"
                raise TreeError(f"token {k}: {token} closes {opened}")
            if not stack[-1].children:
                raise TreeError(f"token {k}: {token} closes an empty constituent")
            stack.pop()
        else:
            raise TreeError(f"token {k}: {token!r} is neither a bracket nor {PLACEHOLDER}")
    if len(stack) > 1:
        raise TreeError(f"the sequence ends with {stack[-1].label} open")
    if used != len(words):
        raise TreeError(f"{used} placeholders for {len(words)} words")
    return root


def escape(word: str) -> str:
    """A word as a leaf of Penn bracketing: its round brackets written ``-LRB-`` and ``-RRB-``, as
    the treebank writes them (a bracket in a leaf would open or close a constituent)."""
    return word.replace("(", "-LRB-").replace(")", "-RRB-")


def tree_pairs(
    path, encoding_errors: str = "strict", tags: bool = False, bare_close: bool = False
) -> Iterator[tuple[str, str]]:
    """A treebank file as parallel text: per tree (cleaned), its words and its linearized target
    (``tags``: with the part-of-speech tags; ``bare_close``: closing brackets without labels),
    each joined by spaces. Errors name the file and line."""
    text = "\n".join(read_lines(path, encoding_errors))
    for line, tree in parse_trees(text, str(path)):
        cleaned = clean(tree)
        if cleaned is None:
            raise TreeError(f"{path}, line {line}: the tree has no words once its empty elements "
                            "go")
        words, target = linearize(cleaned, tags, bare_close)
        yield " ".join(words), " ".join(target)


def repair(target: Sequence[str], words: int, root: str = "S", tags: bool = False) -> list[str]:
    """The nearest bracket sequence to ``target`` that is a tree over ``words`` words (for an
    unconstrained search's output): tokens that fit nowhere go (an unknown token, a placeholder
    past the words, a bracket after the root closed, a constituent left without words), a closing
    bracket closes the innermost open constituent whatever its label, missing placeholders join
    the innermost open constituent at the end, and open constituents close. ``root`` labels a
    root the sequence lacks; ``tags``: every token but a bracket or ``<unk>`` is a word's tag."""
    out: list[str] = []
    stack: list[tuple[str, int, int]] = []  # open constituents: label, index in out, words then
    used = 0
    for token in target:
        closed = bool(out) and not stack
        if is_word(token, tags):
            if used == words or closed:
                continue
            if not stack:
                stack.append((root, len(out), used))
                out.append(f"({root}")
            out.append(token)
            used += 1
        elif token.startswith("(") and len(token) > 1:
            if used < words and not closed:
                stack.append((token[1:], len(out), used))
                out.append(token)
        elif token.startswith(")") and stack:
            _close(out, stack, used)
    if used < words and not stack:
        if out:  # the root closed early: open it again
            out.pop()
            label = out[0][1:]
            stack.append((label, 0, 0))
        else:
            stack.append((root, 0, 0))
            out.append(f"({root}")
    out += [PLACEHOLDER] * (words - used)
    used = words
    while stack:
        _close(out, stack, used)
    return out


def _close(out: list[str], stack: list[tuple[str, int, int]], used: int) -> None:
    """Close the innermost open constituent, or drop it when it holds no word."""
    label, at, before = stack.pop()
    if used > before:
        out.append(f"){label}")
    else:
        del out[at:]  # (only empty constituents opened after it)


def word_tags(src, tgt_out, leaves, pad_id: int):
    """Each source word's tag ``(B, S)`` in a batch of tagged trees (``prepare --trees --tags``):
    the target's tags in order (``leaves``: whether each target id is a tag), one a word; pad at
    eos and padding, and for a sentence whose tags do not count its source tokens (subword
    pieces), which then teaches no tags."""
    import torch

    is_leaf = leaves.to(tgt_out.device)[tgt_out]  # (B, T)
    counted = is_leaf.sum(1) == (src != pad_id).sum(1) - 1  # (without eos)
    tags = torch.full_like(src, pad_id)
    rank = is_leaf.long().cumsum(1) - 1
    rows, cols = (is_leaf & counted[:, None]).nonzero(as_tuple=True)
    tags[rows, rank[rows, cols]] = tgt_out[rows, cols]
    return tags
