"""The Vision Transformer through the command line (step-bounded): train on an image folder with
the same trainer (exact resume, EMA, averaging, bf16, torchrun), classify, evaluate, draw the
attention rollout, and the user errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from transduce.checkpoint import list_checkpoints
from transduce.visualize import read_metrics

from ..helpers import BARS, assert_torchrun_equals_accumulation, cli, write_image_folder

SHAPE = ["--preset", "vit-tiny", "--set", "encoder_layers=2", "--set", "d_model=32", "--set",
         "n_heads=4", "--set", "d_ff=64", "--set", "patch_size=2"]
FAST = [*SHAPE, "--threads", "1", "--quiet", "--precision", "fp32", "--set", "batch_size=16",
        "--set", "lr_schedule=inverse_sqrt_peak", "--set", "peak_lr=3e-3", "--set", "warmup=30",
        "--set", "save_minutes=0", "--set", "crop_padding=1"]


def weights(run):
    return load_file(str(list_checkpoints(run)[-1] / "model.safetensors"))


@pytest.fixture(scope="module")
def bars(tmp_path_factory):
    root = tmp_path_factory.mktemp("vit")
    write_image_folder(root / "train", 40, seed=0)
    write_image_folder(root / "test", 10, seed=1)
    cli("prepare", "--images", str(root / "train"), "--hold-out", "24", "--out",
        str(root / "data"))
    return root


@pytest.fixture(scope="module")
def trained(bars):
    out = cli("train", str(bars / "data"), "--out", str(bars / "run"), "--max-steps", "150",
              "--set", "valid_every=50", *FAST).stdout
    assert "transduce classify" in out.split("next:")[-1]
    return bars / "run"


def test_a_tiny_vit_learns_the_bars(bars, trained):
    records = read_metrics(trained)
    valid = [r for r in records if r["type"] == "valid"]
    assert valid[-1]["accuracy"] >= 0.9 and valid[-1]["images"] == 24
    assert [r for r in records if r["type"] == "train"][0]["images_per_s"] > 0
    end = records[-1]
    assert end["type"] == "end" and end["best_accuracy"] == max(r["accuracy"] for r in valid)
    info = json.loads((trained / "best" / "model.json").read_text())
    assert info["classes"] == sorted(BARS)


def test_info_describes_an_image_classifier(trained):
    out = cli("info", str(trained)).stdout
    assert "ViT, an image classifier of 3 classes, preset vit-tiny" in out
    assert "8x8x1 images in 2x2 patches" in out and "best       validation accuracy" in out


def test_load_returns_a_classifier_and_the_translator_names_it(trained):
    import transduce
    from transduce.errors import TransduceError

    assert isinstance(transduce.load(trained, device="cpu"), transduce.Classifier)
    with pytest.raises(TransduceError, match=r"use `transduce classify` with it \(in Python: "
                                             r"transduce.Classifier"):
        transduce.Translator.load(trained, device="cpu")


def test_plot_draws_the_validation_accuracy(trained, tmp_path):
    out = cli("plot", str(trained), "--out", str(tmp_path / "curves.png")).stdout
    assert "curves.png" in out and (tmp_path / "curves.png").stat().st_size > 1000


def test_evaluate_scores_a_folder_with_the_confusion_matrix(bars, trained, tmp_path):
    result = json.loads(cli("evaluate", str(trained), "--images", str(bars / "test"), "--json",
                            "--confusion", str(tmp_path / "confusion.png")).stdout.splitlines()[0])
    assert result["images"] == 30 and result["accuracy"] >= 0.9
    confusion = np.asarray(result["confusion"])
    assert confusion.sum() == 30 and (confusion.sum(1) == 10).all()
    assert result["accuracy"] == pytest.approx(np.trace(confusion) / 30)
    assert set(result["per_class"]) == set(BARS)
    assert (tmp_path / "confusion.png").stat().st_size > 1000
    text = cli("evaluate", str(trained), "--images", str(bars / "test")).stdout
    assert text.startswith("accuracy ") and "across\t" in text


def test_classify_prints_the_top_classes_of_files_and_folders(bars, trained, tmp_path):
    files = sorted((bars / "test" / "down").iterdir())[:3]
    lines = cli("classify", str(trained), *map(str, files), "--top", "2").stdout.splitlines()
    assert len(lines) == 3 and all(line.startswith(str(f)) for line, f in zip(lines, files))
    rows = [json.loads(line) for line in cli("classify", str(trained), str(bars / "test" / "down"),
                                             "--json").stdout.splitlines()]
    assert len(rows) == 10 and all(len(r["classes"]) == 3 for r in rows)
    assert sum(r["classes"][0]["label"] == "down" for r in rows) >= 9
    for r in rows:
        probabilities = [c["probability"] for c in r["classes"]]
        assert probabilities == sorted(probabilities, reverse=True)
        assert sum(probabilities) == pytest.approx(1, abs=1e-4)
    out = tmp_path / "classes.jsonl"
    done = cli("classify", str(trained), str(bars / "test" / "down"), "--json", "--output",
               str(out))
    assert done.stdout == "" and [json.loads(line) for line in out.read_text().splitlines()] == rows
    assert f"wrote 10 images' classes to {out}" in done.stderr


def test_the_attention_rollout_follows_the_bar(bars, trained, tmp_path):
    from transduce import Classifier

    classifier = Classifier.load(trained, device="cpu")
    file = sorted((bars / "test" / "across").iterdir())[0]
    image = classifier.read([file])[0]
    grid, label, _ = classifier.rollout(image)
    assert grid.shape == (4, 4) and classifier.classes[label] == "across"
    assert 0 < grid.sum() <= 1 + 1e-5
    out = cli("attention", str(trained), "--image", str(file), "--out",
              str(tmp_path / "rollout.png")).stdout
    assert "predicted across" in out and (tmp_path / "rollout.png").stat().st_size > 1000


def test_exact_resume_with_augmentation(bars, tmp_path):
    args = [str(bars / "data"), "--set", "valid_every=-1", *FAST]
    cli("train", *args, "--out", str(tmp_path / "straight"), "--max-steps", "20")
    cli("train", *args, "--out", str(tmp_path / "parts"), "--max-steps", "10")
    cli("train", *args, "--out", str(tmp_path / "parts"), "--max-steps", "20", "--resume")
    a, b = weights(tmp_path / "straight"), weights(tmp_path / "parts")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_ema_averaging_and_bf16_work_on_images(bars, tmp_path):
    run = tmp_path / "run"
    cli("train", str(bars / "data"), "--out", str(run), "--max-steps", "12", "--ema", "0.9",
        "--set", "save_every=4", "--set", "valid_every=-1", *FAST[:-6], "--precision", "bf16",
        "--set", "save_minutes=0")
    assert (run / "ema").is_dir()
    cli("average", str(run), "--last", "3", "--out", str(tmp_path / "avg"))
    avg = load_file(str(tmp_path / "avg" / "model.safetensors"))
    parts = [load_file(str(c / "model.safetensors")) for c in list_checkpoints(run)[-3:]]
    key = "src_embed.project.weight"
    torch.testing.assert_close(avg[key], sum(p[key] for p in parts) / 3)
    assert "accuracy" in cli("evaluate", str(tmp_path / "avg"), "--images",
                             str(bars / "test")).stdout


def test_torchrun_two_processes_equal_one_process_over_the_same_batches(bars, tmp_path):
    common = [str(bars / "data"), "--max-steps", "4", "--set", "valid_every=-1", "--device",
              "cpu", *FAST]
    assert_torchrun_equals_accumulation(common, tmp_path)


def test_images_and_text_do_not_mix(bars, trained, tmp_path, reverse_run):
    cases = [
        (["train", str(bars / "data"), "--out", str(tmp_path / "a"), "--preset", "tiny",
          "--max-steps", "1"], "holds images: train an image classifier (--preset vit-tiny) on it"),
        (["train", str(reverse_run / "data"), "--out", str(tmp_path / "b"), "--preset",
          "vit-tiny", "--max-steps", "1"], "the model is an image classifier (input='image'"),
        (["classify", str(reverse_run / "run"), str(bars / "test")],
         "is a translation model, which does not classify images; use `transduce translate`"),
        (["classify", str(trained), str(tmp_path / "missing.png")], "no such file or folder"),
        (["translate", str(trained)], "is an image classifier, which does not translate; use "
                                      "`transduce classify`"),
        (["fill-mask", str(trained), "a <mask>"],
         "is an image classifier, which does not generate"),
        (["serve", str(trained), "--beam", "5"], "--beam does not apply to an image classifier: "
                                                  "`transduce classify --help` lists"),
        (["serve", str(trained), "--compile", "on", "--port", "0"],
         "--compile on captures a search step;"),
        (["attention", str(trained), "--image", str(bars / "test"), "--src", "a b",
          "--out", str(tmp_path / "x.png")], "--src and --tgt are for translation models"),
        (["evaluate", str(trained), "--images", str(bars / "test"), "--ref", "x"],
         "--ref are for translation"),
        (["train", str(bars / "data"), "--out", str(tmp_path / "c"), *SHAPE, "--set",
          "channels=3", "--set", "image_mean=0.5,0.5,0.5", "--set", "image_std=0.5,0.5,0.5",
          "--max-steps", "1"], "has channels 1 but the model has channels=3"),
        (["train", str(bars / "data"), "--out", str(tmp_path / "d"), "--preset", "vit-b16",
          "--max-steps", "1"], "image_size=8 must be a multiple of patch_size=16"),
    ]
    for args, message in cases:
        result = cli(*args, check=False)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)
    odd = tmp_path / "odd"
    write_image_folder(odd, 1, size=10)
    result = cli("classify", str(trained), str(odd), check=False)
    assert result.returncode == 2 and "10x10 pixels, not 8x8" in result.stderr
    assert "--resize" in result.stderr
    assert len(cli("classify", str(trained), str(odd), "--resize").stdout.splitlines()) == 3
    (odd / "extra").mkdir()
    write_image_folder(odd / "extra", 1)
    result = cli("evaluate", str(trained), "--images", str(odd), check=False)
    assert result.returncode == 2 and "class folders the model does not know: extra" in \
        result.stderr
