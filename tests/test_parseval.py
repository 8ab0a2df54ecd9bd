"""``parseval.py``: EVALB's numbers (COLLINS.prm) on trees worked by hand: punctuation at the edges
and inside constituents, unary chains counted as a multiset, empty elements and function tags,
ADVP = PRT, crossing brackets, and the errors EVALB would count as error sentences."""

from __future__ import annotations

import pytest

from transduce.cli.main import main
from transduce.data.trees import TreeError, parse_trees
from transduce.parseval import parseval, score_pair


def tree(text: str):
    return next(parse_trees(text))[1]


def row(gold: str, test: str):
    return score_pair(tree(gold), tree(test), 1)


# (gold, test, matched, gold brackets, test brackets, crossing, words kept, length)
CASES = {
    # quotes and a full stop at the edges leave before spans count: 3 brackets over 3 words
    "punctuation at the edges": (
        "( (S (`` ``) (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .)) )",
        "( (S (XX ``) (NP (XX The) (XX dog)) (VP (XX barks)) (XX .)) )", 3, 3, 3, 0, 3, 5),
    # a unary chain NP over NP is two brackets; the test's one NP matches one of them
    "a unary chain in the gold tree": (
        "( (S (NP (NP (NN cells))) (VP (VBP grow))) )",
        "( (S (NP (XX cells)) (VP (XX grow))) )", 3, 4, 3, 0, 2, 2),
    # and three NPs in the test tree: two of them match, the third is extra
    "a longer unary chain in the test tree": (
        "( (S (NP (NP (NN cells))) (VP (VBP grow))) )",
        "( (S (NP (NP (NP (XX cells)))) (VP (XX grow))) )", 4, 4, 5, 0, 2, 2),
    # the comma and the stop attach elsewhere in the test tree: once deleted, every span agrees
    "punctuation attached elsewhere": (
        "( (S (NP (NNP Smad4)) (, ,) (VP (VBZ binds) (NP (NN DNA))) (. .)) )",
        "( (S (NP (XX Smad4) (XX ,)) (VP (XX binds) (NP (XX DNA) (XX .)))) )", 4, 4, 4, 0, 3, 5),
    # a constituent over punctuation alone covers no word once it goes: not counted
    "a constituent of punctuation only": (
        "( (S (NP (NNP Smad4)) (, ,) (VP (VBZ binds) (NP (NN DNA))) (. .)) )",
        "( (S (NP (XX Smad4)) (PRN (XX ,)) (VP (XX binds) (NP (XX DNA))) (XX .)) "
        ")", 4, 4, 4, 0, 3, 5),
    # empty elements go with the brackets they leave empty, function tags are cut, PRT = ADVP;
    # the gold's S over the empty subject and ADJP is a sixth bracket, the test lacks it
    "empty elements, function tags, ADVP = PRT": (
        "( (S (NP-SBJ-1 (PRP It)) (VP (VBD turned) (PRT (RP out)) "
        "(S (NP-SBJ (-NONE- *-1)) (ADJP (JJ fine))))) )",
        "( (S (NP (XX It)) (VP (XX turned) (ADVP (XX out)) (ADJP (XX fine)))) )", 5, 6, 5, 0, 4, 4),
    # X over b c crosses NP over a b; only S matches
    "a crossing bracket": (
        "( (S (NP (DT a) (NN b)) (VP (VB c) (NP (NN d)))) )",
        "( (S (XX a) (X (XX b) (XX c)) (XX d)) )", 1, 4, 2, 1, 4, 4),
    # a root labeled TOP is the root, as the one without a label
    "a TOP root": (
        "(TOP (S (NP (DT a)) (VP (VB b))))",
        "( (S (NP (XX a)) (VP (XX b))) )", 3, 3, 3, 0, 2, 2),
}


@pytest.mark.parametrize("name", list(CASES))
def test_rows_as_evalb_prints_them(name):
    gold, test, matched, n_gold, n_test, crossing, words, length = CASES[name]
    r = row(gold, test)
    assert (r.matched, r.gold, r.test, r.crossing, r.words, r.length) == (
        matched, n_gold, n_test, crossing, words, length)
    assert r.complete == (matched == n_gold == n_test)


def test_totals_are_summed_over_sentences_before_dividing():
    names = ["punctuation at the "
             "edges", "a unary chain in the gold tree", "punctuation attached elsewhere",
             "empty elements, function tags, ADVP = PRT"]
    gold = [(k + 1, tree(CASES[n][0])) for k, n in enumerate(names)]
    test = [(k + 1, tree(CASES[n][1])) for k, n in enumerate(names)]
    report = parseval(gold, test)
    # 15 matched of 17 gold and 15 test brackets: recall 88.24, precision 100, F1 2*15/32
    d = report.all.as_dict()
    assert (d["recall"], d["precision"], d["f1"]) == (88.24, 100.0, 93.75)
    assert d["complete_match"] == 50.0  # the first and the third
    assert report.short.as_dict() == d  # every sentence is short
    table = list(report.table())
    assert table[3].split()[:9] == ["1", "5", "0", "100.00", "100.00", "3", "3", "3", "0"]
    assert table[6].split()[3:5] == ["83.33", "100.00"]


def test_a_sentence_without_words_once_punctuation_goes_is_skipped_as_evalb_does():
    """EVALB's status 2: counted among the sentences, in none of the scores; complete match and
    crossing are shares of the valid sentences."""
    gold = [(1, tree("( (S (NP (DT a)) (VP (VB b))) )")), (2, tree("( (FRAG (. .)) )")),
            (3, tree("( (S (NP (DT a)) (VP (VB b))) )"))]
    test = [(1, tree("( (S (XX a) (XX b)) )")), (2, tree("( (X (XX .)) )")),
            (3, tree("( (S (NP (XX a)) (VP (XX b))) )"))]
    report = parseval(gold, test)
    d = report.all.as_dict()
    assert (d["sentences"], d["skipped"], report.all.valid) == (3, 1, 2)
    assert d["complete_match"] == 50.0 and d["no_crossing"] == 100.0  # of 2, not of 3
    assert [r.skipped for r in report.rows] == [False, True, False]
    assert list(report.table())[4].split()[:3] == ["2", "1", "2"]  # its row's status
    assert "Number of Valid sentence  =      2" in list(report.summary())


def test_a_words_round_brackets_equal_the_treebanks_spelling_of_them():
    gold = [(1, tree("( (S (NN IL-2(+)) (NN cells)) )"))]
    row_ = parseval(gold, [(1, tree("( (S (XX IL-2-LRB-+-RRB-) (XX cells)) )"))]).rows[0]
    assert row_.matched == row_.gold == 1


def test_words_that_differ_are_an_error_naming_the_line():
    gold = [(7, tree("( (S (NP (DT a)) (VP (VB b))) )"))]
    with pytest.raises(TreeError, match=r"line 7: word 2 is 'b' in the gold tree but 'c'"):
        parseval(gold, [(1, tree("( (S (XX a) (XX c)) )"))])
    with pytest.raises(TreeError, match="line 7: the gold tree has 2 words, the test tree 3"):
        parseval(gold, [(1, tree("( (S (XX a) (XX b) (XX c)) )"))])
    with pytest.raises(TreeError, match="has 1 trees but test has 2"):
        parseval(gold, [(1, tree("( (S (XX a) (XX b)) )"))] * 2)


def test_the_command_prints_the_summary_and_refuses_a_mismatch(tmp_path, capsys):
    gold, test = tmp_path / "gold.trees", tmp_path / "test.trees"
    names = list(CASES)[:2]
    gold.write_text("".join(CASES[n][0] + "\n" for n in names))
    test.write_text("".join(CASES[n][1] + "\n" for n in names))
    assert main(["parseval", str(gold), str(test)]) == 0
    out = capsys.readouterr().out
    assert "Bracketing FMeasure       =  92.31" in out  # 6 of 7 gold, 6 of 6 test: 2*6/13
    test.write_text(CASES[names[0]][1] + "\n( (S (XX cells) (XX grew)) )\n")
    assert main(["parseval", str(gold), str(test)]) == 2
    assert "line 2: word 2 is 'grow'" in capsys.readouterr().err
