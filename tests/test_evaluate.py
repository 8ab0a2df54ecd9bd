"""The paper's tokenized BLEU (``evaluate --paper-bleu``) and the error rates of speech
recognition, on examples counted by hand."""

import math

import pytest

from transduce.errors import TransduceError

from transduce.evaluate import paper_bleu, score  # sacremoses: the paper extra, in the dev extra

from .helpers import cli


def bleu(matches: list[tuple[int, int]], hyp_len: int, ref_len: int) -> float:
    """Corpus BLEU from clipped n-gram matches/totals for n = 1..4 (multi-bleu.perl's formula)."""
    brevity = min(1.0, math.exp(1 - ref_len / hyp_len))
    return 100 * brevity * math.exp(sum(math.log(m / t) for m, t in matches) / 4)


def test_compounds_count_as_several_words():
    # hyp: Ein Mann fährt Rad ##AT##-##AT## Rennen . (7 tokens) ref: Ein Mann fährt ein Rad
    # ##AT##-##AT## Rennen . (8 tokens) 1-grams 7/7; 2-grams 5/6 (not "fährt Rad"); 3-grams 3/5;
    # 4-grams 1/4 ("Rad ##AT##-##AT## Rennen .")
    expected = bleu([(7, 7), (5, 6), (3, 5), (1, 4)], 7, 8)
    assert paper_bleu(
        ["Ein Mann fährt Rad-Rennen."], ["Ein Mann fährt ein Rad-Rennen."], "de"
    ) == round(expected, 2)
    # without compound splitting (another language) "Rad-Rennen" is one token:
    # hyp: Ein Mann fährt Rad-Rennen . (5), ref 6 tokens; 1-grams 5/5, 2-grams 3/4, 3-grams 1/3,
    # 4-grams 0/2
    assert paper_bleu(["Ein Mann fährt "
                       "Rad-Rennen."], ["Ein Mann fährt ein Rad-Rennen."], "en") == 0.0
    # and neither is sacreBLEU's figure
    assert score(["Ein Mann fährt "
                  "Rad-Rennen."], ["Ein Mann fährt ein Rad-Rennen."])["bleu"] != round(expected, 2)


def test_a_corpus_sums_counts_over_sentences():
    hyps = ["Zwei Hunde spielen im Schnee.", "Ein Kind-Spiel-Zeug liegt da."]
    refs = ["Zwei Hunde spielen im Schnee.", "Ein Kind-Spiel-Zeug liegt hier."]
    # sentence 1: 6 tokens, every n-gram matches: 6/6, 5/5, 4/4, 3/3
    # sentence 2: Ein Kind ##AT##-##AT## Spiel ##AT##-##AT## Zeug liegt da . (9 tokens; both hyphens
    #   split, as perl's s{(\S)-(\S)}{...}g does), the ref has "hier" for "da":
    #   1-grams 8/9, 2-grams 6/8, 3-grams 5/7, 4-grams 4/6
    expected = bleu([(14, 15), (11, 13), (9, 11), (7, 9)], 15, 15)
    assert paper_bleu(hyps, refs, "de") == round(expected, 2)


def test_evaluate_prints_it_labelled(tmp_path):
    (tmp_path / "hyp.de").write_text("Ein Mann fährt Rad-Rennen.\n")
    (tmp_path / "ref.de").write_text("Ein Mann fährt ein Rad-Rennen.\n")
    out = cli(
        "evaluate",
        "--hyp",
        str(tmp_path / "hyp.de"),
        "--ref",
        str(tmp_path / "ref.de"),
        "--paper-bleu",
        "de",
    )
    assert "paper BLEU 51.54  (de: tokenized BLEU as the paper's" in out.stdout
    assert "NOT comparable with sacreBLEU" in out.stdout
    missing = cli(
        "evaluate",
        "--hyp",
        str(tmp_path / "hyp.de"),
        "--ref",
        str(tmp_path / "ref.de"),
        "--paper-bleu",
        check=False,
    )
    assert (
        missing.returncode == 2
        and "name the target language, e.g. --paper-bleu de" in missing.stderr
    )


def test_edit_distance_counts_the_fewest_edits():
    from itertools import product

    from transduce.evaluate import edit_distance

    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance("", "abc") == 3 and edit_distance("abc", "") == 3
    assert edit_distance(["a", "b"], ["a", "b"]) == 0

    def brute(h, r):  # every alignment, recursively: the definition itself
        if not h or not r:
            return len(h) + len(r)
        return min(brute(h[1:], r) + 1, brute(h, r[1:]) + 1, brute(h[1:], r[1:]) + (h[0] != r[0]))

    for h, r in product(["", "a", "ab", "ba", "abc", "cab"], repeat=2):
        assert edit_distance(h, r) == brute(h, r), (h, r)


def test_word_and_character_error_rates():
    from transduce.evaluate import error_rate

    refs = ["TWO SIX EIGHT", "YES"]
    hyps = ["TWO SEX EIGHT FOUR", "YES"]
    wer = error_rate(hyps, refs, "word")
    assert wer == {"rate": 2 / 4, "errors": 2, "length": 4}  # one substitution, one insertion
    cer = error_rate(hyps, refs, "char")
    # "TWO SIX EIGHT" (13) -> "TWO SEX EIGHT FOUR": I->E, then " FOUR" inserted (5); "YES" (3)
    assert cer == {"rate": 6 / 16, "errors": 6, "length": 16}
    assert error_rate(["  TWO   SIX "], ["TWO SIX"], "char")["errors"] == 0  # spacing ignored
    with pytest.raises(TransduceError, match="aligned one to one"):
        error_rate(["A"], ["A", "B"])
    with pytest.raises(TransduceError, match="the references are empty"):
        error_rate([""], [""])
