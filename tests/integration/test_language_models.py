"""The descendants end to end on the built-in counting language: prepare --monolingual, train a
tiny GPT and a tiny BERT through the CLI (step-bounded), exact resume, generate and fill-mask."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from transduce.cli.demo import next_number_accuracy
from transduce.config import DecodeConfig
from transduce.data import TokenStream, collate_masked
from transduce.demo.numbers import english
from transduce.lm import LanguageModel

from ..helpers import cli, write_counting

FAST = [
    "--threads",
    "1",
    "--quiet",
    "--precision",
    "fp32",
    "--max-tokens",
    "2048",
    "--recipe",
    "paper",
    "--set",
    "dropout=0",
    "--set",
    "label_smoothing=0",
    "--set",
    "lr_schedule=inverse_sqrt_peak",
    "--set",
    "peak_lr=3e-3",
    "--set",
    "warmup=100",
    "--set",
    "save_minutes=0",
    "--set",
    "valid_every=200",
]


@pytest.fixture(scope="module")
def counting(tmp_path_factory):
    root = tmp_path_factory.mktemp("counting")
    splits = write_counting(root, 3000)
    cli(
        "prepare",
        "--monolingual",
        "--train",
        str(root / "train.txt"),
        "--valid",
        str(root / "valid.txt"),
        "--out",
        str(root / "data"),
        "--vocab-size",
        "200",
        "--threads",
        "1",
    )
    return root, splits


@pytest.fixture(scope="module")
def gpt(counting):
    root, _ = counting
    out = cli(
        "train",
        str(root / "data"),
        "--out",
        str(root / "gpt"),
        "--preset",
        "gpt-tiny",
        "--max-steps",
        "400",
        "--set",
        "block_size=128",
        *FAST,
    ).stdout
    assert "next: transduce generate" in out and "fill-mask" not in out.split("next:")[-1]
    return root / "gpt", out


@pytest.fixture(scope="module")
def bert(counting):
    root, _ = counting
    out = cli(
        "train",
        str(root / "data"),
        "--out",
        str(root / "bert"),
        "--preset",
        "bert-tiny",
        "--max-steps",
        "500",
        "--set",
        "block_size=64",
        *FAST,
    ).stdout
    # what to run next names the command of this kind of model only
    assert "next: transduce fill-mask" in out and "generate" not in out.split("next:")[-1]
    return root / "bert"


def test_info_names_the_descendant(gpt, bert, reverse_run):
    assert ": GPT, a decoder-only language model" in cli("info", str(gpt[0])).stdout
    assert ": BERT, an encoder-only" in cli("info", str(bert)).stdout
    assert ": the paper's Transformer, " in cli("info", str(reverse_run / "run")).stdout


def test_tiny_gpt_learns_to_count(counting, gpt):
    _, splits = counting
    run, _ = gpt
    lm = LanguageModel.load(run / "best", "decoder-only", "cpu")
    accuracy, examples = next_number_accuracy(
        lm, [s for s, _ in splits["valid"]], DecodeConfig(beam=1)
    )
    print(f"tiny GPT: the next number is right for {accuracy:.2f} of held-out counts after 400 "
          "steps")
    assert accuracy >= 0.6  # measured 0.85; an untrained model gets 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r["type"] == "valid"]
    assert valid[-1]["ppl"] < 2.0 < valid[0]["ppl"] or valid[-1]["ppl"] < valid[0]["ppl"] / 2


def test_tiny_bert_learns_to_fill_in(counting, bert):
    root, _ = counting
    lm = LanguageModel.load(bert, "encoder-only", "cpu")
    stream = TokenStream(root / "data", "valid")
    batch = collate_masked(stream, list(range(stream.num_blocks(64, False))), 64, lm.config, 0.15,
                           np.random.default_rng(0))
    with torch.no_grad():
        predicted = lm.model(batch.tgt_in).argmax(-1)
    masked = batch.tgt_out != 0
    accuracy = float((predicted[masked] == batch.tgt_out[masked]).float().mean())
    common = float(np.bincount(batch.tgt_out[masked].numpy()).max() / int(masked.sum()))
    print(f"tiny BERT: {accuracy:.2f} of masked validation tokens right (the most common token "
          f"alone: {common:.2f})")
    assert accuracy >= 0.5 and accuracy >= 2 * common  # measured 0.75 (most common token: 0.14)


def test_exact_resume_of_both_objectives(counting, tmp_path):
    root, _ = counting
    # BERT's masks come from (seed, epoch, batch)
    for preset, block in (("gpt-tiny", "64"), ("bert-tiny", "32")):
        args = [str(root / "data"), "--preset", preset, "--set", f"block_size={block}", *FAST]
        cli("train", *args, "--out", str(tmp_path / f"{preset}-full"), "--max-steps", "20")
        cli("train", *args, "--out", str(tmp_path / f"{preset}-part"), "--max-steps", "8")
        cli(
            "train",
            *args,
            "--out",
            str(tmp_path / f"{preset}-part"),
            "--max-steps",
            "20",
            "--resume",
        )
        a = load_file(
            str(
                sorted((tmp_path / f"{preset}-full" / "checkpoints").iterdir())[-1]
                / "model.safetensors"
            )
        )
        b = load_file(
            str(
                sorted((tmp_path / f"{preset}-part" / "checkpoints").iterdir())[-1]
                / "model.safetensors"
            )
        )
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), preset


def test_generate_streams_what_it_returns(counting, gpt):
    run, log = gpt
    assert "tokens in blocks of 128" in log and "valid at step 400: loss" in log and "ppl" in log
    prompt = f"{english(4321)}, {english(4322)},"
    printed = cli(
        "generate", str(run), "--prompt", prompt, "--max-new-tokens", "12", "--threads", "1"
    ).stdout
    lm = LanguageModel.load(run, "decoder-only", "cpu")
    pieces = []
    text = lm.generate(prompt, DecodeConfig(beam=1), 12, on_text=pieces.append)
    assert printed == prompt + text + "\n" and "".join(pieces) == text and len(pieces) > 2
    assert text.startswith(" " + english(4323))
    import transduce

    assert transduce.load_lm(run).generate(prompt, DecodeConfig(beam=1), 12) == text
    beam = cli(
        "generate", str(run), "--prompt", prompt, "--beam", "4", "--max-new-tokens", "12"
    ).stdout
    assert beam.startswith(prompt + " ")
    sampled = [
        cli(
            "generate",
            str(run),
            "--prompt",
            prompt,
            "--sampling",
            "--temperature",
            "1.5",
            "--seed",
            str(s),
            "--max-new-tokens",
            "12",
        ).stdout
        for s in (1, 1, 2, 3)
    ]
    assert sampled[0] == sampled[1] and len(set(sampled)) > 1  # seeded draws
    assert len(lm.tokenizer.encode_src([text])[0]) <= 12


def test_fill_mask_prints_candidates(bert):
    text = f"{english(2005)}, two <mask> six, {english(2007)}"
    out = cli("fill-mask", str(bert), text, "--top-k", "3", "--threads", "1").stdout.splitlines()
    lm = LanguageModel.load(bert, "encoder-only", "cpu")
    [candidates] = lm.fill_mask(text, 3)
    probabilities = [p for _, p in candidates]
    assert probabilities == sorted(probabilities, reverse=True) and sum(probabilities) <= 1.0
    # " <mask>" stands for one whole piece, its word start included, as in training
    ids = lm.tokenizer.encode_src([text.replace("<mask>", "thousand")])[0]
    k = [i for i, t in enumerate(ids) if lm.tokenizer.src.id_to_piece(t) == "\u2581thousand"][1]
    masked = torch.tensor([ids[:k] + [lm.config.mask_id] + ids[k + 1 :]])
    with torch.no_grad():
        best = int(lm.model(masked)[0, k, 5:].argmax()) + 5
    assert candidates[0][0] == lm.tokenizer.src.id_to_piece(best)
    word = candidates[0][0].replace("\u2581", "")
    assert len(out) == 3 and out[0].split()[0].endswith("%") and f"two {word} six" in out[0]
    two = cli("fill-mask", str(bert), "<mask> thousand <mask>", "--top-k", "2").stdout.splitlines()
    assert two[0] == "<mask> 1:" and two[3] == "<mask> 2:" and len(two) == 6


@pytest.mark.parametrize(
    "command,message",
    [
        (
            ["generate", "{bert}"],
            "holds a model of the encoder-only architecture, not decoder-only; "
            "use `transduce fill-mask`",
        ),
        (
            ["fill-mask", "{gpt}", "a <mask>"],
            "holds a model of the decoder-only architecture, not "
            "encoder-only; use `transduce generate`",
        ),
        (
            ["translate", "{gpt}"],
            "is a decoder-only language model, which does not translate; use `transduce generate`",
        ),
        (["serve", "{gpt}", "--port", "0"], "holds a decoder-only language model; transduce serve "
         "serves translation, parsing, image classification and speech recognition models (run "
         "this one with transduce generate)"),
        (["generate", "{gpt}", "--max-new-tokens", "300"], "--max-new-tokens 300 does not fit"),
        (
            ["generate", "{gpt}", "--prompt", "one " * 300],
            "the prompt has 300 tokens; the model holds 256 positions",
        ),
        (
            ["generate", "{gpt}", "--max-new-tokens", "0"],
            "argument --max-new-tokens: 0 is out of range",
        ),
        (["generate", "{gpt}", "--temperature", "0", "--sampling"], "temperature must be positive"),
        (["fill-mask", "{bert}", "no mask here"], "no <mask> in"),
        (
            ["train", "{data}", "--out", "{tmp}/x", "--preset", "tiny", "--max-steps", "1"],
            "holds monolingual text",
        ),
        (
            [
                "train",
                "{data}",
                "--out",
                "{tmp}/x",
                "--preset",
                "gpt-tiny",
                "--max-steps",
                "1",
                "--set",
                "block_size=999",
            ],
            "block_size=999 is longer than the model's max_positions=256",
        ),
        (
            [
                "train",
                "{data}",
                "--out",
                "{tmp}/x",
                "--preset",
                "gpt-tiny",
                "--max-steps",
                "1",
                "--set",
                "n_kv_heads=3",
            ],
            "n_kv_heads=3 must divide n_heads=4",
        ),
        (["prepare", "--monolingual", "--out", "{tmp}/y"], "--monolingual needs --train FILE"),
        (
            [
                "prepare",
                "--monolingual",
                "--train",
                "{root}/train.txt",
                "--src",
                "en",
                "--out",
                "{tmp}/y",
            ],
            "--src belong to parallel text",
        ),
        (["prepare", "--train", "{root}/train.txt", "--out", "{tmp}/y"], "add --monolingual"),
        (
            ["prepare", "--monolingual", "--train", "{root}/nothing.txt", "--out", "{tmp}/y"],
            "no such file",
        ),
    ],
)
def test_language_model_user_errors(counting, gpt, bert, tmp_path, command, message):
    root, _ = counting
    values = {"gpt": gpt[0], "bert": bert, "data": root / "data", "tmp": tmp_path, "root": root}
    result = cli(
        *[part.format(**{k: str(v) for k, v in values.items()}) for part in command], check=False
    )
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert result.stdout == ""  # found before any output
    assert "Traceback" not in result.stderr and not (tmp_path / "x" / "checkpoints").exists()
