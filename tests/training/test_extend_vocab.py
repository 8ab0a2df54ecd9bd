"""A trained model's vocabulary extended for a new domain: ``prepare --tokenizer RUN --extend-vocab
N`` adds pieces, ``train --init-from RUN`` grows the model's rows from the pieces that spelled
them, the checkpoint records the tokenizer it was derived from, and the export to Hugging Face
keeps the new ids."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from transduce import load
from transduce.data.corpus import read_lines
from transduce.training.vocabulary import grow

from ..helpers import cli

DOMAIN = "tabby hamster rabbit bedroom sunset über".split() + ["the", "a", "cat", "dog"]


def write_domain(raw: Path, n_train: int = 300, n_valid: int = 20) -> None:
    rng = random.Random(3)
    raw.mkdir(parents=True)
    for split, n in (("train", n_train), ("valid", n_valid)):
        src = [" ".join(rng.choice(DOMAIN) for _ in range(rng.randint(2, 5))) for _ in range(n)]
        (raw / f"{split}.en").write_text("\n".join(src) + "\n")
        (raw / f"{split}.de").write_text("\n".join(" ".join(s.split()[::-1]) for s in src) + "\n")


def prepare_extended(run: Path, raw: Path, out: Path, *extra: str, check: bool = True):
    return cli("prepare", "--tokenizer", str(run), "--extend-vocab", "12", "--train-prefix",
               str(raw / "train"), "--valid-prefix", str(raw / "valid"), "--src", "en", "--tgt",
               "de", "--out", str(out), *extra, check=check)


@pytest.fixture(scope="module")
def grown(reverse_run, tmp_path_factory) -> Path:
    """The session's reverse model extended for the domain and trained one update at a learning
    rate that leaves its weights where they started (the growth is what is seen)."""
    root = tmp_path_factory.mktemp("extended")
    write_domain(root / "raw")
    result = prepare_extended(reverse_run / "run", root / "raw", root / "data")
    assert "source 12 new pieces (64 -> 76 ids)" in result.stdout, result.stdout
    cli("train", str(root / "data"), "--out", str(root / "tuned"), "--init-from",
        str(reverse_run / "run"), "--max-steps", "1", "--set", "peak_lr=1e-9", "--set",
        "warmup=1", "--precision", "fp32", "--quiet")
    return root


def test_the_new_rows_start_as_the_mean_of_the_pieces_that_spelled_them(reverse_run, grown):
    meta = json.loads((grown / "data" / "meta.json").read_text())
    base = reverse_run / "run" / "best"
    old_info = json.loads((base / "model.json").read_text())
    extension = meta["extension"]
    assert extension["from"] == old_info["tokenizer"]["fingerprint"]
    assert meta["vocab_size"] == {"src": 76, "tgt": 76}
    new = dict((i, spelled) for i, spelled in extension["new"]["src"])
    assert sorted(new) == list(range(64, 76))
    old = load_file(str(base / "model.safetensors"))
    tuned = load_file(str(grown / "tuned" / "best" / "model.safetensors"))
    for name in ("src_embed.tokens.weight", "output.weight"):
        if name not in tuned:
            continue  # (a tied weight stored once)
        rows = tuned[name]
        assert rows.shape[0] == 76
        torch.testing.assert_close(rows[:64], old[name], atol=1e-5, rtol=0)
        for i, spelled in new.items():
            torch.testing.assert_close(rows[i], old[name][spelled].mean(0), atol=1e-5, rtol=0)
    info = json.loads((grown / "tuned" / "best" / "model.json").read_text())
    assert info["tokenizer"]["derived_from"] == extension["from"]
    assert info["tokenizer"]["fingerprint"] == meta["tokenizer_fingerprint"] != extension["from"]
    assert info["model"]["vocab_size"] == 76
    assert f"extended from {extension['from']}" in cli("info", str(grown / "tuned")).stdout
    # the domain's text in fewer pieces, with the new ids, and the model translates it
    model = load(grown / "tuned", device="cpu")
    ids = model.tokenizer.encode_src(["tabby hamster über"])[0]
    assert set(ids) & set(new) and len(ids) < len(load(base, device="cpu").tokenizer.encode_src(
        ["tabby hamster über"])[0])
    assert len(model.translate(["tabby hamster über"], beam=2)) == 1


def test_grow_keeps_every_old_row_and_means_the_spelling():
    state = {"src_embed.tokens.weight": torch.arange(12.0).reshape(4, 3),
             "output_bias": torch.tensor([1.0, 2.0, 3.0, 4.0])}
    grown = grow(state, {"new": {"src": [[4, [1, 2]], [5, [3]]], "tgt": [[4, [0, 3]]]}})
    assert grown["src_embed.tokens.weight"].tolist() == [
        *state["src_embed.tokens.weight"].tolist(), [4.5, 5.5, 6.5], [9.0, 10.0, 11.0]]
    assert grown["output_bias"].tolist() == [1.0, 2.0, 3.0, 4.0, 2.5]


def test_the_export_to_hugging_face_keeps_the_new_ids(grown):
    transformers = pytest.importorskip("transformers", reason="the dev extra installs it")
    cli("export", str(grown / "tuned"), str(grown / "hf"), "--to", "hf")
    tokenizer = transformers.MarianTokenizer.from_pretrained(grown / "hf")
    model = load(grown / "tuned", device="cpu")
    lines = list(read_lines(grown / "raw" / "valid.en"))[:8]
    assert [tokenizer(line).input_ids for line in lines] == [
        row + [model.model.config.eos_id] for row in model.tokenizer.encode_src(lines)]
    hf = transformers.MarianMTModel.from_pretrained(grown / "hf").eval()
    encoded = tokenizer(lines, return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = hf.generate(**encoded, num_beams=1, do_sample=False, max_new_tokens=12)
    assert tokenizer.batch_decode(generated, skip_special_tokens=True) == model.translate(
        lines, beam=1, max_len_a=0, max_len_b=12)


@pytest.mark.parametrize("case", ["no --tokenizer", "no tokenizer of its own", "--lora",
                                  "another tokenizer"])
def test_bad_input_is_a_message_before_anything_is_written(reverse_run, grown, tmp_path, case):
    run, out = reverse_run / "run", tmp_path / "out"
    if case == "no --tokenizer":
        result = cli("prepare", "--extend-vocab", "5", "--train-prefix",
                     str(grown / "raw" / "train"), "--src", "en", "--tgt", "de", "--out", str(out),
                     check=False)
        needle = "--extend-vocab adds pieces to a model's tokenizer"
    elif case == "no tokenizer of its own":  # (as an imported language model)
        shutil.copytree(run / "best", tmp_path / "model")
        info = json.loads((tmp_path / "model" / "model.json").read_text())
        (tmp_path / "model" / "model.json").write_text(json.dumps({**info, "tokenizer": {}}))
        result = prepare_extended(tmp_path / "model", grown / "raw", out, check=False)
        needle = "has no tokenizer of its own"
    else:
        base = run
        if case == "another tokenizer":
            base = tmp_path / "model"
            shutil.copytree(run / "best", base)
            info = json.loads((base / "model.json").read_text())
            info["tokenizer"]["fingerprint"] = "0" * 16
            (base / "model.json").write_text(json.dumps(info))
        result = cli("train", str(grown / "data"), "--out", str(out), "--init-from", str(base),
                     "--max-steps", "1", *(["--lora", "4"] if case == "--lora" else []),
                     check=False)
        needle = "--lora freezes them" if case == "--lora" else "extends the tokenizer of"
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert needle in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not out.exists()
