"""``data/trees.py``: Penn Treebank bracketings read, cleaned as parsing evaluation sees them,
linearized and read back, on hand-written trees and on the CRAFT treebank."""

from __future__ import annotations

import gzip
import re

import pytest

from transduce.data.trees import (
    PLACEHOLDER,
    Tree,
    TreeError,
    base_label,
    clean,
    delinearize,
    linearize,
    parse_trees,
    read_trees,
    repair,
    tree_pairs,
)
from transduce.errors import TransduceError

from ..conftest import SHARED_DATA

CRAFT = SHARED_DATA / "craft"


def one(text: str) -> Tree:
    trees = list(parse_trees(text))
    assert len(trees) == 1
    return trees[0][1]


def test_a_bracketing_over_several_lines_with_its_empty_root_and_bracket_words():
    text = """( (S
        (NP-SBJ (NN Bone) (-LRB- -LRB-) (NN BMP) (-RRB- -RRB-))
        (VP (VBZ acts) (PP (IN on) (NP (NN a(b)) (HYPH /) (NN c\\/d))))
        (. .)) )
    (FRAG (NP (NN Abstract)))"""
    (first_line, first), (second_line, second) = parse_trees(text)
    assert (first_line, second_line) == (1, 5)
    assert first.label == "" and first.children[0].label == "S"
    assert first.words() == [
        "Bone",
        "-LRB-",
        "BMP",
        "-RRB-",
        "acts",
        "on",
        "a(b)",
        "/",
        "c\\/d",
        ".",
    ]
    assert str(one(str(first))) == str(first)  # one line of bracketing, read back the same
    assert str(second) == "(FRAG (NP (NN Abstract)))"


@pytest.mark.parametrize(
    "text, where",
    [
        ("( (S (NP (NN a)) )", "line 1: the tree that begins here never closes its brackets"),
        ("(S (NN a))\n(S (NN b)\n(S (NN c))\n", "line 2: the tree that begins here never closes "
         "its brackets (1 still open at the end of the file); line 3 begins with '('"),
        ("(S (NP (NN a)))\n(S (NP))", "line 2: an empty constituent"),
        ("(S (NN a)) x", "expected '('"),
    ],
)
def test_a_broken_bracketing_names_its_line(text, where):
    with pytest.raises(TreeError, match=re.escape(where)):
        list(parse_trees(text))


def test_cleaning_removes_empty_elements_the_constituents_they_leave_and_function_tags():
    tree = one(
        "( (S (NP-SBJ-1 (-NONE- *PRO*)) (VP (VBZ is) (NP-PRD=2 (NP (-NONE- *T*-1)) (NN rain))"
        " (ADVP|PRT (RB up))) (-LRB- -LRB-)) )"
    )
    assert str(clean(tree)) == "( (S (VP (VBZ is) (NP (NN rain)) (ADVP (RB up))) (-LRB- -LRB-)) )"
    assert [base_label(x) for x in ("NP-SBJ-1", "PP-TMP", "NP=2", "-NONE-", "-LRB-", "S")] == [
        "NP",
        "PP",
        "NP",
        "-NONE-",
        "-LRB-",
        "S",
    ]
    assert clean(one("( (NP (-NONE- *)) )")) is None


def test_linearized_as_labeled_brackets_and_one_placeholder_a_word():
    tree = clean(one("( (S (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .)) )"))
    words, target = linearize(tree)
    assert words == ["The", "dog", "barks", "."]
    assert target == ["(S", "(NP", "XX", "XX", ")NP", "(VP", "XX", ")VP", "XX", ")S"]
    assert (
        str(delinearize(target, words)) == "( (S (NP (XX The) (XX dog)) (VP (XX barks)) (XX .)) )"
    )


@pytest.mark.parametrize(
    "target, words, error",
    [
        (["(S", "XX", ")NP"], ["a"], "closes S"),
        (["(S", "XX"], ["a"], "ends with S open"),
        (["(S", "XX", "XX", ")S"], ["a"], "past the sentence's 1 words"),
        (["(S", "XX", ")S"], ["a", "b"], "1 placeholders for 2 words"),
        (["(S", ")S"], [], "closes an empty constituent"),
        (["(S", "a", ")S"], ["a"], "neither a bracket nor XX"),
        ([")S"], ["a"], "closes nothing"),
    ],
)
def test_a_sequence_that_is_not_a_tree_over_the_words_says_where(target, words, error):
    with pytest.raises(TreeError, match=error):
        delinearize(target, words)


def test_every_craft_dev_tree_reads_back_from_its_linearization():
    """Every tree of CRAFT's development split (2,780): cleaned, linearized and read back, it is
    itself with its tags as placeholders; the counts are the README's."""
    path = CRAFT / "dev.trees.gz"
    if not path.is_file():
        pytest.skip(f"the CRAFT treebank is not in {CRAFT}")
    trees = read_trees(path)
    assert len(trees) == 2780
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        assert sum(1 for _ in handle) == 2780  # one tree a line in this release
    for tree in trees:
        words, target = linearize(tree)
        assert target.count(PLACEHOLDER) == len(words) and len(words) > 0
        assert not any(t in ("(-NONE-", ")-NONE-") or "-SBJ" in t for t in target)

        def tags_as_placeholders(node):
            if node.preterminal:
                return Tree(PLACEHOLDER, node.children)
            return Tree(node.label, [tags_as_placeholders(c) for c in node.children])

        assert str(delinearize(target, words)) == str(tags_as_placeholders(tree))


def test_a_file_that_is_not_a_treebank_names_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.trees"
    bad.write_text("( (S (NN a)) )\n( (S (NP (-NONE- *))) )\n", encoding="utf-8")
    with pytest.raises(TreeError, match=r"bad.trees, line 2: the tree has no words"):
        read_trees(bad)
    with pytest.raises(TransduceError, match="missing.trees: no such file"):
        read_trees(tmp_path / "missing.trees")


def test_a_tree_deeper_than_pythons_stack_reads_writes_and_linearizes():
    """A right-branching tree of 3,000 words: no traversal recurses."""
    n = 3000
    text = "( " + "".join(f"(S (NN w{i}) "
                          "" for i in range(n - 1)) + f"(NN w{n - 1})" + ")" * (n - 1) + " )"
    tree = next(parse_trees(text))[1]
    assert str(tree) == text
    cleaned = clean(tree)
    words, target = linearize(cleaned)
    assert len(words) == n and len(target) == 3 * (n - 1) + 1
    assert str(delinearize(target, words)) == text.replace("(NN", f"({PLACEHOLDER}")


@pytest.mark.parametrize(
    "target,words,repaired",
    [
        ("(S (NP XX XX )NP )S", 2, "(S (NP XX XX )NP )S"),  # a tree stays as it is
        ("(S (NP XX XX XX )VP )S XX", 2, "(S (NP XX XX )NP )S"),  # extra words, a wrong label
        ("(NP )NP XX", 3, "(S XX XX XX )S"),  # an empty constituent, words outside any
        ("", 2, "(S XX XX )S"),  # nothing at all
        ("(S (NP XX )NP )S (VP XX )VP", 3, "(S (NP XX )NP XX XX )S"),  # a second root
        ("(S (VP XX (NP XX", 3, "(S (VP XX (NP XX XX )NP )VP )S"),  # unclosed, a word short
        ("(S <unk> XX XX )S", 2, "(S XX XX )S"),  # a token that is no bracket
    ],
)
def test_repair_turns_any_sequence_into_a_tree_over_the_words(target, words, repaired):
    out = repair(target.split(), words)
    assert " ".join(out) == repaired
    delinearize(out, ["w"] * words)


def test_a_treebank_reads_as_parallel_text(tmp_path):
    path = tmp_path / "t.trees"
    path.write_text("( (S (NP-SBJ (-NONE- *)) (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .)) )\n"
                    "(TOP (NP (NN Abstract)))\n", encoding="utf-8")
    assert list(tree_pairs(path)) == [
        ("The dog barks .", "(S (NP XX XX )NP (VP XX )VP XX )S"),
        ("Abstract", "(NP XX )NP"),  # a root labeled TOP is the root
    ]


def test_tags_in_the_target_read_back_as_the_trees_own():
    tree = one("( (S (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .)) )")
    words, target = linearize(tree, tags=True)
    assert " ".join(target) == "(S (NP DT NN )NP (VP VBZ )VP . )S"
    assert str(delinearize(target, words, tags=True)) == str(tree)
    assert " ".join(repair("(S DT NN <unk> )S".split(), 3, tags=True)) == "(S DT NN XX )S"


def test_bare_closing_brackets_read_back_as_the_tree(tmp_path):
    """``prepare --bare-close``: each constituent closes with ``)``, which closes whatever is open;
    every CRAFT development tree reads back as itself."""
    tree = one("( (S (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .)) )")
    words, target = linearize(tree, tags=True, bare_close=True)
    assert " ".join(target) == "(S (NP DT NN ) (VP VBZ ) . )"
    assert str(delinearize(target, words, tags=True)) == str(tree)
    assert " ".join(repair("(S (NP DT ) NN".split(), 2, tags=True)) == "(S (NP DT )NP NN )S"
    with pytest.raises(TreeError, match="token 3: \\) closes nothing"):
        delinearize(["(S", "XX", ")", ")"], ["a"])
    path = tmp_path / "t.trees"
    path.write_text("(TOP (NP (NN Abstract)))\n", encoding="utf-8")
    assert list(tree_pairs(path, bare_close=True)) == [("Abstract", "(NP XX )")]
    if (CRAFT / "dev.trees.gz").is_file():
        for tree in read_trees(CRAFT / "dev.trees.gz")[:500]:
            words, target = linearize(tree, tags=True, bare_close=True)
            assert str(delinearize(target, words, tags=True)) == str(tree)


def test_brackets_in_the_input_words_are_written_as_the_treebank_writes_them():
    """A sentence with "(" or ")" among its words (as raw text has them) still gives a tree that
    reads back: the leaves are -LRB- and -RRB-, inside a word too."""
    words = ["cells", "(", "IL-2", ")", "f(x)"]
    target = ["(S", "(NP", "XX", "XX", "XX", "XX", ")NP", "XX", ")S"]
    text = str(delinearize(target, words))
    assert text == "( (S (NP (XX cells) (XX -LRB-) (XX IL-2) (XX -RRB-)) (XX f-LRB-x-RRB-)) )"
    [(_, tree)] = list(parse_trees(text))
    assert tree.words() == ["cells", "-LRB-", "IL-2", "-RRB-", "f-LRB-x-RRB-"]
