"""Parsing end to end on a tiny treebank: ``prepare --trees``, ``train``, ``parse`` (every output a
tree over its line's words, empty lines kept, written atomically), ``parseval``; and the bad
inputs, each a message naming the file and line with nothing written."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from transduce.data.trees import parse_trees

from ..helpers import cli

NOUNS = ["cells", "mice", "genes", "proteins", "embryos", "limbs"]
VERBS = ["express", "bind", "regulate", "lack", "need"]


def treebank(n: int, seed: int) -> str:
    """Penn bracketings of simple sentences, with the treebank's function tags, empty elements and
    punctuation."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        subject, verb, obj = rng.choice(NOUNS), rng.choice(VERBS), rng.choice(NOUNS)
        adjective = rng.choice(["", "(JJ mutant) ", "(JJ normal) "])
        lines.append(f"( (S (NP-SBJ-1 {adjective}(NNS {subject})) (VP (VBP {verb}) (NP (NNS "
                     f"{obj}))) (NP (-NONE- *T*-1)) (. .)) )")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def parser_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("parsing")
    (root / "train.trees").write_text(treebank(120, 1))
    (root / "dev.trees").write_text(treebank(12, 2))
    cli(
        "prepare",
        "--trees",
        "--train-prefix",
        str(root / "train"),
        "--valid-prefix",
        str(root / "dev"),
        "--test-prefix",
        str(root / "dev"),
        "--vocab-size",
        "40",
        "--out",
        str(root / "data"),
    )
    cli(
        "train",
        str(root / "data"),
        "--out",
        str(root / "run"),
        "--preset",
        "tiny",
        "--max-steps",
        "4",
        "--set",
        "train.valid_every=-1",
        "--quiet",
    )
    return root


def test_prepare_tags_puts_the_tags_in_the_target_and_bare_close_drops_closing_labels(parser_run):
    root = parser_run
    cli("prepare", "--trees", "--tags", "--train-prefix", str(root / "train"), "--vocab-size", "40",
        "--out", str(root / "tagged"))
    import sentencepiece as spm

    meta = json.loads((root / "tagged" / "meta.json").read_text())
    target = spm.SentencePieceProcessor(model_file=str(root / "tagged" / meta["spm"]["tgt"]))
    pieces = {target.id_to_piece(i).lstrip("\u2581") for i in range(target.get_piece_size())}
    assert meta["tags"] is True and {"NNS", "VBP", "JJ", ".", "(NP", ")VP"} <= pieces
    assert "XX" not in pieces
    refused = cli(
        "prepare",
        "--tags",
        "--train-prefix",
        str(root / "train"),
        "--src",
        "a",
        "--tgt",
        "b",
        "--out",
        str(root / "x"),
        check=False,
    )
    assert refused.returncode == 2 and "--tags is for a treebank" in refused.stderr
    cli("prepare", "--trees", "--tags", "--bare-close", "--train-prefix", str(root / "train"),
        "--vocab-size", "40", "--out", str(root / "bare"))
    meta = json.loads((root / "bare" / "meta.json").read_text())
    target = spm.SentencePieceProcessor(model_file=str(root / "bare" / meta["spm"]["tgt"]))
    pieces = {target.id_to_piece(i).lstrip("\u2581") for i in range(target.get_piece_size())}
    assert meta["bare_close"] is True and {"NNS", "(NP", ")"} <= pieces and ")VP" not in pieces
    refused = cli("prepare", "--bare-close", "--train-prefix", str(root / "train"), "--src", "a",
                  "--tgt", "b", "--out", str(root / "x"), check=False)
    assert refused.returncode == 2 and "--bare-close is for a treebank" in refused.stderr


def words_of(line: str) -> list[str]:
    return next(parse_trees(line))[1].words()


def test_parse_writes_a_tree_over_each_lines_words_and_parseval_scores_it(parser_run):
    root = parser_run
    sentences = ["mutant cells bind genes .", "", "mice lack limbs ."]
    (root / "in.txt").write_text("\n".join(sentences) + "\n")
    out = root / "out.trees"
    result = cli(
        "parse",
        str(root / "run"),
        "--input",
        str(root / "in.txt"),
        "--output",
        str(out),
        "--beam",
        "3",
        "--max-len-b",
        "20",
    )
    assert "wrote 3 trees" in result.stderr
    lines = out.read_text().split("\n")
    assert lines[1] == "" and len(lines) == 4
    for sentence, line in zip(sentences, lines):
        if sentence:
            assert words_of(line) == sentence.split() and line.startswith("( (")
    piped = cli(
        "parse",
        str(root / "run"),
        "--beam",
        "3",
        "--max-len-b",
        "20",
        input="\n".join(sentences) + "\n",
    )
    assert piped.stdout == out.read_text()
    scored = cli("parse", str(root / "run"), "--scores", "--beam", "3", "--max-len-b", "20",
                 input="\n".join(sentences) + "\n").stdout.split("\n")
    score, tree = scored[0].split("\t")
    assert float(score) < 0 and tree == lines[0] and scored[1] == ""
    free = cli(
        "parse",
        str(root / "run"),
        "--unconstrained",
        "--beam",
        "3",
        "--max-len-b",
        "20",
        "--max-len-b",
        "20",
        input=sentences[0] + "\n",
    )
    assert words_of(free.stdout) == sentences[0].split()
    # the gold trees of the development split, parsed and scored
    words = root / "dev.words"
    words.write_text(
        "".join(
            " ".join(t.words()) + "\n" for _, t in parse_trees((root / "dev.trees").read_text())
        ).replace(" *T*-1", "")
    )
    cli(
        "parse",
        str(root / "run"),
        "--input",
        str(words),
        "--output",
        str(root / "dev.parsed"),
        "--beam",
        "2",
        "--max-len-b",
        "20",
    )
    scored = cli("parseval", str(root / "dev.trees"), str(root / "dev.parsed"), "--json")
    assert '"sentences": 12' in scored.stdout
    # evaluate --trees: the same parses, the same scores, in one command
    evaluated = cli("evaluate", str(root / "run"), "--trees", str(root / "dev.trees"), "--beam",
                    "2", "--max-len-b", "20", "--json", "--save-hyp", str(root / "dev.again"))
    assert (root / "dev.again").read_text() == (root / "dev.parsed").read_text()
    report, again = json.loads(scored.stdout), json.loads(evaluated.stdout)
    assert again["sentences"] == 12 and again["f1"] == report["all"]["f1"]


def test_bad_input_is_a_message_naming_file_and_line_and_nothing_is_written(
    parser_run, reverse_run
):
    root = parser_run
    bad = root / "bad"
    bad.mkdir(exist_ok=True)
    (bad / "train.trees").write_text("( (S (NN a)) )\n( (S (NP (NN b)) )\n")
    result = cli(
        "prepare",
        "--trees",
        "--train-prefix",
        str(bad / "train"),
        "--out",
        str(bad / "data"),
        check=False,
    )
    assert (
        result.returncode == 2
        and "train.trees, line 2" in result.stderr
        and "never closes its brackets" in result.stderr
    )
    assert not (bad / "data").exists()
    clash = cli("prepare", "--trees", "--train-prefix", str(bad / "train"), "--src", "en", "--out",
                str(bad / "data"), check=False)
    assert clash.returncode == 2 and "--src cannot apply" in clash.stderr.replace(", ", " ")
    (bad / "long.txt").write_text("cells bind genes .\n" + " ".join(["cells"] * 400) + "\n")
    too_long = cli(
        "parse",
        str(root / "run"),
        "--input",
        str(bad / "long.txt"),
        "--output",
        str(bad / "out"),
        check=False,
    )
    assert too_long.returncode == 2 and "long.txt: input line 2" in too_long.stderr
    assert not (bad / "out").exists()
    other = cli("parse", str(reverse_run / "run"), check=False, input="a b\n")
    assert other.returncode == 2 and "not a parser" in other.stderr


def test_the_semi_supervised_recipe_tokenizes_and_keeps_the_most_confident_trees(tmp_path):
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "recipes" / "parsing" / "silver.py"
    text = tmp_path / "text.txt"
    text.write_text(
        "Two young, White males are outside.\nHi.\nTwo young, White males are outside.\n"
        "The mouse's gene isn't here.\n"
    )
    words = subprocess.run(
        [sys.executable, str(script), "words", str(text), "10"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    # punctuation split off, too short and repeated sentences left out
    assert words == ["Two young , White males are outside .", "The mouse 's gene is n't here ."]
    scored = tmp_path / "scored.txt"
    scored.write_text(
        "-0.5000\t( (S (XX a)) )\n-0.1000\t( (S (XX b)) )\n\n-0.9000\t( (S (XX c)) )\n"
        "-0.2000\t( (S (XX d)) )\n"
    )
    kept = subprocess.run(
        [sys.executable, str(script), "keep", str(scored), "0.5"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert kept == ["( (S (XX b)) )", "( (S (XX d)) )"]


def test_training_chooses_a_parser_by_the_f1_it_measures(parser_run, tmp_path):
    """Validation parses the validation trees with the constrained search and scores them as
    parseval does; best/ and patience follow F1; the run loads as a ``Parser``."""
    import json

    import transduce
    from transduce.data.corpus import read_lines
    from transduce.data.trees import parse_trees
    from transduce.parseval import parseval

    run = tmp_path / "run"
    done = cli("train", str(parser_run / "data"), "--out", str(run), "--preset", "tiny",
               "--max-steps", "12", "--set", "train.valid_every=3", "--set", "train.patience=1",
               "--set", "train.valid_beam=2", "--set", "train.valid_share=0")
    log = done.stdout + done.stderr
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r["type"] == "valid"]
    assert valid and all("f1" in r and "bleu" not in r for r in valid)
    assert "F1" in log and "BLEU" not in log
    newest = sorted((run / "checkpoints").iterdir())[-1]
    trainer = json.loads((newest / "trainer.json").read_text())["progress"]
    best = max(valid, key=lambda r: r["f1"])
    assert trainer["best_metric"] == "f1" and trainer["best_value"] == best["f1"]
    # patience 1: the first validation no better than those before it is the last (training stops
    # there, saying why, unless it is the last update anyway; valid_share=0: every third update
    # validates, whatever validation's share of the time)
    worse = [n for n in range(1, len(valid))
             if valid[n]["f1"] <= max(r["f1"] for r in valid[:n])]
    if worse:
        assert worse[0] == len(valid) - 1
        assert valid[-1]["step"] == 12 or "no better validation F1 in 1 validations" in log
    parser = transduce.load(run / "best", device="cpu")
    assert isinstance(parser, transduce.Parser)
    # the F1 of best/ is what parseval gives its parses of the same sentences (beam 2)
    words = list(read_lines(parser_run / "data" / "valid.words.txt"))
    trees = parser.parse(words, beam=2, alpha=0.3, max_len_a=1.0, max_len_b=300)
    gold = list(parse_trees((parser_run / "dev.trees").read_text()))
    test = list(parse_trees("\n".join(trees)))
    assert round(parseval(gold, test).all.f1, 2) == best["f1"]
    with pytest.raises(transduce.errors.TransduceError, match="transduce.Parser"):
        transduce.Classifier.load(run, device="cpu")
