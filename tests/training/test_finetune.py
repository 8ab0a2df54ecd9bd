"""Fine-tuning a trained model: data encoded with its own tokenizer, the tokenizer fingerprint that
keeps --init-from and --resume from mixing vocabularies, the finetune recipe, a second validation
set."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ..helpers import WORDS, cli, write_reverse_task


def other_vocabulary(root: Path) -> Path:
    """A dataset of the same size of vocabulary as the reverse run's (64), over other pieces: the
    words capitalized, so the same ids mean other pieces."""
    raw = root / "raw-other"
    write_reverse_task(raw, n_train=600, n_valid=20, seed=7)
    for path in raw.iterdir():
        path.write_text(path.read_text().title())
    cli(
        "prepare",
        "--train-prefix",
        str(raw / "train"),
        "--valid-prefix",
        str(raw / "valid"),
        "--src",
        "en",
        "--tgt",
        "de",
        "--vocab-size",
        "64",
        "--out",
        str(root / "other"),
    )
    return root / "other"


def refused(result, *needles: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


def test_a_models_own_tokenizer_gives_its_ids_and_its_fingerprint(reverse_run, tmp_path):
    raw, run = reverse_run / "raw", reverse_run / "run"
    result = cli(
        "prepare",
        "--tokenizer",
        str(run),
        "--train-prefix",
        str(raw / "train"),
        "--valid-prefix",
        str(raw / "valid"),
        "--src",
        "en",
        "--tgt",
        "de",
        "--out",
        str(tmp_path / "data"),
    )
    assert (
        "no vocabulary is trained" in result.stdout
        and "0.00% of target pieces are unknown" in result.stdout
    )
    # the very ids the model learned
    for name in ("train.en.bin", "train.de.bin", "valid.de.bin", "spm.model"):
        assert (tmp_path / "data" / name).read_bytes() == (reverse_run / "data" / name).read_bytes()
    meta = json.loads((tmp_path / "data" / "meta.json").read_text())
    own = json.loads((reverse_run / "data" / "meta.json").read_text())
    checkpoint = json.loads((run / "best" / "model.json").read_text())
    assert (
        meta["tokenizer_fingerprint"]
        == own["tokenizer_fingerprint"]
        == checkpoint["tokenizer"]["fingerprint"]
    )
    # an option that trains a vocabulary cannot go with it
    refused(
        cli(
            "prepare",
            "--tokenizer",
            str(run),
            "--train-prefix",
            str(raw / "train"),
            "--src",
            "en",
            "--tgt",
            "de",
            "--vocab-size",
            "100",
            "--out",
            str(tmp_path / "x"),
            check=False,
        ),
        "--vocab-size",
    )
    assert not (tmp_path / "x").exists()


def test_init_from_and_resume_refuse_data_of_another_tokenizer(reverse_run, tmp_path):
    other = other_vocabulary(tmp_path)
    result = cli(
        "train",
        str(other),
        "--out",
        str(tmp_path / "mixed"),
        "--init-from",
        str(reverse_run / "run"),
        "--max-steps",
        "2",
        check=False,
    )
    refused(result, "its tokenizer", "transduce prepare --tokenizer "
                                     f"{reverse_run / 'run' / 'best'}",
            "--train-prefix " + str(tmp_path / "raw-other" / "train"))
    assert not (tmp_path / "mixed").exists()  # found before the run folder is made
    shutil.copytree(reverse_run / "run", tmp_path / "run")
    before = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    result = cli(
        "train",
        str(other),
        "--out",
        str(tmp_path / "run"),
        "--resume",
        "--max-steps",
        "510",
        check=False,
    )
    refused(result, "--resume", "Resume with the data the run was trained on")
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == before


def test_checkpoints_and_datasets_without_fingerprints_are_compared_by_their_files(
    reverse_run, tmp_path
):
    """Written before fingerprints: a warning, then the tokenizer files themselves decide."""
    shutil.copytree(reverse_run / "run", tmp_path / "run")
    shutil.copytree(reverse_run / "data", tmp_path / "data")
    for info in (tmp_path / "run").rglob("model.json"):
        data = json.loads(info.read_text())
        del data["tokenizer"]["fingerprint"]
        # fields added since: their defaults
        for field in ("ffn", "moe_experts", "moe_top_k", "moe_aux_weight"):
            del data["model"][field]
        info.write_text(json.dumps(data))
    meta = json.loads((tmp_path / "data" / "meta.json").read_text())
    del meta["tokenizer_fingerprint"]
    (tmp_path / "data" / "meta.json").write_text(json.dumps(meta))
    result = cli(
        "train",
        str(tmp_path / "data"),
        "--out",
        str(tmp_path / "ft"),
        "--init-from",
        str(tmp_path / "run"),
        "--max-steps",
        "2",
        "--quiet",
    )
    assert "tokenizer fingerprints; their tokenizer files were compared" in result.stderr
    other = other_vocabulary(tmp_path)
    refused(
        cli(
            "train",
            str(other),
            "--out",
            str(tmp_path / "mixed"),
            "--init-from",
            str(tmp_path / "run"),
            "--max-steps",
            "2",
            check=False,
        ),
        "tokenizer fingerprints; their tokenizer files were compared",
        "its tokenizer",
    )
    # a dataset whose tokenizer file was replaced after its ids were written is refused too
    shutil.copyfile(other / "spm.model", tmp_path / "data" / "spm.model")
    meta["tokenizer_fingerprint"] = json.loads((reverse_run / "data" / "meta.json").read_text())[
        "tokenizer_fingerprint"
    ]
    (tmp_path / "data" / "meta.json").write_text(json.dumps(meta))
    refused(
        cli(
            "train",
            str(tmp_path / "data"),
            "--out",
            str(tmp_path / "ft2"),
            "--max-steps",
            "2",
            "--preset",
            "tiny",
            check=False,
        ),
        "changed after `transduce prepare`",
    )


def test_the_finetune_recipe_validates_first_keeps_the_model_and_scores_a_second_set(
    reverse_run, tmp_path, monkeypatch
):
    run = reverse_run / "run"
    extra = tmp_path / "general"
    write_reverse_task(extra, n_train=1, n_valid=15, seed=3)
    result = cli(
        "train",
        str(reverse_run / "data"),
        "--out",
        str(tmp_path / "ft"),
        "--init-from",
        str(run),
        "--recipe",
        "finetune",
        "--max-steps",
        "30",
        "--set",
        "valid_every=10",
        "--set",
        "dropout=0.2",
        "--valid-extra",
        str(extra / "valid"),
        "--quiet",
    )
    assert "keeping its model (2+2 layers, d_model 64)" in result.stderr
    assert (
        "changing dropout 0.0 -> 0.2" in result.stderr
        and "validating before the first update" in result.stderr
    )
    assert "warmup 50 updates to a peak learning rate of 1.00e-04" in result.stdout
    records = [
        json.loads(line) for line in (tmp_path / "ft" / "metrics.jsonl").read_text().splitlines()
    ]
    valid = [r for r in records if r["type"] == "valid"]
    assert [r["step"] for r in valid] == [0, 10, 20, 30]
    assert valid[0]["bleu"] > 50  # the trained model's own score, before any update
    assert all(r["extra_sentences"] == 15 and r["extra_bleu"] > 0 for r in valid)
    config = json.loads((tmp_path / "ft" / "config.json").read_text())
    assert config["train"]["patience"] == 5 and config["model"]["dropout"] == 0.2
    assert config["settings"]["valid_extra"] == str(extra / "valid")
    # the fine-tuned checkpoints carry the tokenizer the data and the starting model share
    info = json.loads(
        (tmp_path / "ft" / "checkpoints" / "step_00000030" / "model.json").read_text()
    )
    assert (
        info["tokenizer"]["fingerprint"]
        == json.loads((run / "best" / "model.json").read_text())["tokenizer"]["fingerprint"]
    )
    # the plot draws the second set beside the first
    import transduce.visualize as visualize

    figures = []
    monkeypatch.setattr(visualize, "_save", lambda fig, out, **kw: figures.append(fig) or Path(out))
    cli("plot", str(tmp_path / "ft"))
    bleu = figures[0].axes[1]
    assert [line.get_label() for line in bleu.get_lines()] == ["valid", "valid-extra"]
    assert list(bleu.get_lines()[1].get_ydata()) == [r["extra_bleu"] for r in valid]
    # resumed, the run keeps its second validation set
    cli(
        "train",
        str(reverse_run / "data"),
        "--out",
        str(tmp_path / "ft"),
        "--resume",
        "--max-steps",
        "40",
        "--quiet",
    )
    last = json.loads((tmp_path / "ft" / "metrics.jsonl").read_text().splitlines()[-2])
    assert last["type"] == "valid" and last["step"] == 40 and "extra_bleu" in last


def test_unknown_pieces_are_counted_and_warned_about(reverse_run, tmp_path):
    raw = tmp_path / "raw"
    write_reverse_task(raw, n_train=50, valid=False)
    # letters it never saw
    (raw / "train.de").write_text((raw / "train.de").read_text().replace("the", "ΘΞΨ"))
    result = cli(
        "prepare",
        "--tokenizer",
        str(reverse_run / "run"),
        "--train-prefix",
        str(raw / "train"),
        "--src",
        "en",
        "--tgt",
        "de",
        "--out",
        str(tmp_path / "data"),
    )
    unknown = json.loads((tmp_path / "data" / "meta.json").read_text())["splits"]["train"][
        "unknown"
    ]
    assert unknown["src"] == 0 and unknown["tgt"] > 0
    assert (
        "of the train split's target pieces are unknown to the model's tokenizer" in result.stderr
    )


@pytest.mark.parametrize("case", ["missing", "no tokenizer", "tokenizer file "
                                                             "missing", "other languages",
                                  "too long for the "
                                  "model", "finetune without a model", "valid-extra missing"])
def test_bad_input_is_a_message_before_anything_is_written(reverse_run, tmp_path, case):
    raw, run = reverse_run / "raw", reverse_run / "run"
    model = tmp_path / "model"
    shutil.copytree(run / "best", model)
    prefix, src = str(raw / "train"), "en"
    if case == "no tokenizer":  # as an imported language model
        info = json.loads((model / "model.json").read_text())
        info["tokenizer"] = {}
        (model / "model.json").write_text(json.dumps(info))
    elif case == "tokenizer file missing":
        (model / "spm.model").unlink()
    elif case == "other languages":
        (tmp_path / "train.fr").write_text((raw / "train.en").read_text())
        shutil.copyfile(raw / "train.de", tmp_path / "train.de")
        prefix, src = str(tmp_path / "train"), "fr"
    tokenizer = str(tmp_path / "nowhere") if case == "missing" else str(model)
    if case in ("too long for the model", "finetune without a model", "valid-extra missing"):
        long = tmp_path / "long"
        write_reverse_task(long, n_train=100, n_valid=5)
        # a validation sentence longer than the model's positions
        if case == "too long for the model":
            (long / "valid.en").write_text(
                " ".join(WORDS * 30) + "\n" + (long / "valid.en").read_text()
            )
            (long / "valid.de").write_text(
                " ".join(WORDS * 30) + "\n" + (long / "valid.de").read_text()
            )
        cli(
            "prepare",
            "--tokenizer",
            tokenizer,
            "--train-prefix",
            str(long / "train"),
            "--valid-prefix",
            str(long / "valid"),
            "--src",
            "en",
            "--tgt",
            "de",
            "--out",
            str(tmp_path / "data"),
        )
        options = {
            "too long for the model": ["--init-from", tokenizer],
            "finetune without a model": ["--recipe", "finetune"],
            "valid-extra missing": [
                "--init-from",
                tokenizer,
                "--valid-extra",
                str(tmp_path / "nothing"),
            ],
        }[case]
        result = cli(
            "train",
            str(tmp_path / "data"),
            "--out",
            str(tmp_path / "out"),
            "--max-steps",
            "2",
            *options,
            check=False,
        )
        needle = {"too long for the model": "positions", "finetune without a model": "--init-from",
                  "valid-extra missing": "nothing.en"}[case]
    else:
        result = cli(
            "prepare",
            "--tokenizer",
            tokenizer,
            "--train-prefix",
            prefix,
            "--src",
            src,
            "--tgt",
            "de",
            "--out",
            str(tmp_path / "out"),
            check=False,
        )
        needle = {"missing": "does not exist", "no tokenizer": "has no tokenizer of its own",
                  "tokenizer file "
                  "missing": "spm.model is missing", "other languages": "translates en -> de"}[case]
    refused(result, needle)
    assert not (tmp_path / "out").exists()


def _dataset_differing_in(difference: str, reverse_run: Path, root: Path) -> Path:
    """The reverse task's data prepared so that it differs from the reverse run's model in one
    way."""
    raw = reverse_run / "raw"
    if difference == "vocabulary size":
        cli(
            "prepare",
            "--train-prefix",
            str(raw / "train"),
            "--valid-prefix",
            str(raw / "valid"),
            "--src",
            "en",
            "--tgt",
            "de",
            "--vocab-size",
            "80",
            "--out",
            str(root / "data"),
        )
    # as a dataset of an imported model's tokenizer may number them
    elif difference == "special ids":
        shutil.copytree(reverse_run / "data", root / "data")
        meta = json.loads((root / "data" / "meta.json").read_text())
        meta["special_ids"].update(pad_id=2, eos_id=0)
        (root / "data" / "meta.json").write_text(json.dumps(meta))
    elif difference == "languages":
        for split in ("train", "valid"):
            (root / "raw").mkdir(exist_ok=True)
            shutil.copyfile(raw / f"{split}.en", root / "raw" / f"{split}.en")
            shutil.copyfile(raw / f"{split}.de", root / "raw" / f"{split}.fr")
        cli(
            "prepare",
            "--train-prefix",
            str(root / "raw" / "train"),
            "--valid-prefix",
            str(root / "raw" / "valid"),
            "--src",
            "en",
            "--tgt",
            "fr",
            "--vocab-size",
            "64",
            "--out",
            str(root / "data"),
        )
    else:
        return other_vocabulary(root)
    return root / "data"


@pytest.mark.parametrize(
    "difference", ["vocabulary size", "special ids", "languages", "tokenizer fingerprint"]
)
def test_every_refusal_of_a_dataset_carries_the_command_that_prepares_it(
    reverse_run, tmp_path, difference
):
    data = _dataset_differing_in(difference, reverse_run, tmp_path)
    fix = "transduce prepare --tokenizer "
    started = cli(
        "train",
        str(data),
        "--out",
        str(tmp_path / "new"),
        "--init-from",
        str(reverse_run / "run"),
        "--max-steps",
        "2",
        check=False,
    )
    refused(started, "--init-from "
                     f"{reverse_run / 'run'}", "the same ids would mean other pieces", fix,
            "--out NEW_DIR")
    shutil.copytree(reverse_run / "run", tmp_path / "run")
    resumed = cli(
        "train",
        str(data),
        "--out",
        str(tmp_path / "run"),
        "--resume",
        "--max-steps",
        "510",
        check=False,
    )
    refused(resumed, "--resume", "Resume with the data the run was trained on", fix)
    assert not (tmp_path / "new").exists()
