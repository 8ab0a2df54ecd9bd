"""The command line round trip on a model trained here: prepare, train, translate, evaluate,
info."""

import json

import pytest

from transduce import load

from ..helpers import cli


@pytest.fixture(scope="module")
def trained(reverse_run):
    return reverse_run  # raw/, data/, run/ (tests/conftest.py)


def test_translate_stdin_to_stdout_keeps_empty_lines_and_order(trained):
    text = "the cat sat\n\nred blue dog\n   \nsees the mat on\n"
    out = cli("translate", str(trained / "run"), "--beam", "4", input=text)
    lines = out.stdout.split("\n")[:-1]
    assert len(lines) == 5 and lines[1] == "" and lines[3] == ""
    assert set(lines[0].split()) <= {"the", "cat", "sat"}  # the model learned the task's words
    # order and batching do not change the outputs
    alone = [
        cli("translate", str(trained / "run"), input=line + "\n").stdout.strip()
        for line in text.splitlines()
    ]
    assert alone == lines


def test_translate_files_nbest_and_sampling(trained, tmp_path):
    (tmp_path / "in.txt").write_text("the cat\na dog runs\n")
    cli(
        "translate",
        str(trained / "run"),
        "--input",
        str(tmp_path / "in.txt"),
        "--output",
        str(tmp_path / "out.txt"),
    )
    written = (tmp_path / "out.txt").read_text().splitlines()
    assert written == cli("translate", str(trained / "run"), input="the cat\na dog "
                                                                   "runs\n").stdout.splitlines()
    assert len(written) == 2 and all(written)
    nbest = [
        line.split("\t")
        for line in cli(
            "translate", str(trained / "run"), "--nbest", "3", input="the cat\n"
        ).stdout.splitlines()
    ]
    assert len(nbest) == 3 and all(index == "0" for index, _, _ in nbest)
    scores = [float(score) for _, score, _ in nbest]
    # ranked, distinct
    assert scores == sorted(scores, reverse=True) and len({text for _, _, text in nbest}) == 3
    assert nbest[0][2] == cli("translate", str(trained / "run"), input="the cat\n").stdout.strip()
    a = cli(
        "translate",
        str(trained / "run"),
        "--sampling",
        "--seed",
        "3",
        "--temperature",
        "2",
        input="the cat sat\n",
    )
    b = cli(
        "translate",
        str(trained / "run"),
        "--sampling",
        "--seed",
        "3",
        "--temperature",
        "2",
        input="the cat sat\n",
    )
    assert a.stdout == b.stdout and a.stdout.strip()
    prefix = cli("translate", str(trained / "run"), "--prefix", "dog", input="the cat sat\n").stdout
    assert prefix.startswith("dog")


def test_long_lines_are_truncated_with_a_warning_or_refused(trained):
    long_line = " ".join(["cat"] * 400)
    with pytest.warns(UserWarning, match="truncated"):
        load(trained / "run").translate([long_line], beam=1, max_len_b=5)
    strict = cli("translate", str(trained / "run"), "--strict", input=long_line + "\n", check=False)
    assert strict.returncode == 2 and "drop --strict" in strict.stderr


def test_evaluate_prints_signatures_and_checks_line_counts(trained, tmp_path):
    raw = trained / "raw"
    result = cli(
        "evaluate",
        str(trained / "run"),
        "--src",
        str(raw / "valid.en"),
        "--ref",
        str(raw / "valid.de"),
        "--json",
        "--save-hyp",
        str(tmp_path / "hyp.txt"),
    )
    scores = json.loads(result.stdout)
    print(f"reverse task after 500 steps: valid BLEU {scores['bleu']}")
    assert (
        scores["bleu"] > 30
        and "nrefs:1" in scores["bleu_signature"]
        and "nc:6" in scores["chrf_signature"]
    )
    int8 = json.loads(cli("evaluate", str(trained / "run"), "--src", str(raw / "valid.en"), "--ref",
                          str(raw / "valid.de"), "--json", "--precision", "int8").stdout)
    print(f"int8: valid BLEU {int8['bleu']}")
    # quantized weights: nearly the same translations
    assert abs(int8["bleu"] - scores["bleu"]) <= 2.0
    again = cli(
        "evaluate", "--hyp", str(tmp_path / "hyp.txt"), "--ref", str(raw / "valid.de"), "--json"
    )
    assert json.loads(again.stdout)["bleu"] == scores["bleu"]
    (tmp_path / "short.de").write_text("one line\n")
    bad = cli(
        "evaluate",
        str(trained / "run"),
        "--src",
        str(raw / "valid.en"),
        "--ref",
        str(tmp_path / "short.de"),
        check=False,
    )
    assert bad.returncode == 2 and "30 lines but" in bad.stderr and "short.de has 1" in bad.stderr
    text = cli(
        "evaluate", "--hyp", str(tmp_path / "hyp.txt"), "--ref", str(raw / "valid.de")
    ).stdout
    assert text.startswith("BLEU ") and "chrF" in text


def test_info_prints_the_paper_parameter_count():
    out = cli("info", "--preset", "base", "--vocab-size", "37000").stdout
    assert "63,082,496" in out and "d_model              512" in out
    assert "24.0 KiB per position of each hypothesis (8 key/value heads of 8)" in out
    mqa = cli("info", "--preset", "base", "--set", "n_kv_heads=1").stdout
    # the preset's own vocabulary
    assert "3.0 KiB per position" in mqa and "vocab_size           37000" in mqa
    gpt2 = cli("info", "--preset", "gpt2").stdout
    assert "124,439,808" in gpt2 and "vocab_size           50257" in gpt2
    bert = cli("info", "--preset", "bert-base").stdout
    # an encoder-only model does not decode
    assert "109,512,762" in bert and "decoding cache" not in bert


@pytest.mark.slow
def test_compiled_translation_equals_eager(trained):
    text = "the cat sat\n\nred blue dog\nsees the mat on\n"
    for beam in ("1", "3"):
        eager = cli(
            "translate", str(trained / "run"), "--beam", beam, "--nbest", "1", input=text
        ).stdout
        compiled = cli(
            "translate", str(trained / "run"), "--beam", beam, "--compile", input=text
        ).stdout
        assert compiled == eager and eager.count("\n") == 4 and eager.strip()


def test_a_draft_gives_greedy_search_s_translations_and_says_how_many_it_guessed(trained,
                                                                                  tmp_path):
    import shutil

    text = "the cat sat\n\nred blue dog\nsees the mat on a big house\n"
    run = str(trained / "run")
    greedy = cli("translate", run, "--beam", "1", input=text).stdout
    for draft in ("self:1", run):
        out = cli("translate", run, "--draft", draft, "--draft-tokens", "3", input=text)
        assert out.stdout == greedy, draft
        assert "proposed tokens kept" in out.stderr
    assert "100.0%" in out.stderr  # the model drafting for itself
    scored = json.loads(cli("evaluate", run, "--src", str(trained / "raw" / "valid.en"), "--ref",
                            str(trained / "raw" / "valid.de"), "--draft", "self:1",
                            "--json").stdout)
    plain = json.loads(cli("evaluate", run, "--src", str(trained / "raw" / "valid.en"), "--ref",
                           str(trained / "raw" / "valid.de"), "--beam", "1", "--json").stdout)
    assert scored["bleu"] == plain["bleu"]
    # another tokenizer (its fingerprint), a beam, a layer the model lacks: messages, exit 2
    other = tmp_path / "other"
    shutil.copytree(trained / "run" / "best", other)
    info = json.loads((other / "model.json").read_text())
    info["tokenizer"]["fingerprint"] = "0" * 16
    (other / "model.json").write_text(json.dumps(info))
    turned = tmp_path / "turned"
    shutil.copytree(trained / "run" / "best", turned)
    info["tokenizer"]["fingerprint"] = json.loads((turned / "model.json").read_text())[
        "tokenizer"]["fingerprint"]
    info["src"], info["tgt"] = info["tgt"], info["src"]
    (turned / "model.json").write_text(json.dumps(info))
    failed = cli("translate", run, run, "--draft", "self:1", input=text, check=False)
    assert failed.returncode == 2 and "not an ensemble" in failed.stderr
    for flags, words in ((["--draft", str(other)], "its tokenizer is not the model's"),
                         (["--draft", str(turned)], "it translates de -> en, the model en -> de"),
                         (["--draft", "self:1", "--beam", "5"], "--draft searches greedily"),
                         (["--draft", "self:9"], "takes 1 to 1 of its 2"),
                         (["--draft", "self-int8", "--precision", "int8"],
                          "--draft with --precision int8")):
        failed = cli("translate", run, *flags, input=text, check=False)
        assert failed.returncode == 2 and words in failed.stderr, (flags, failed.stderr)
