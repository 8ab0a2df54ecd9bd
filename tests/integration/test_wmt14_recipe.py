"""The WMT14 recipe's steps that need no network, on a tiny stand-in of the official archives."""

import importlib.util
import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from ..helpers import cli

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "wmt14"


def load(name):
    spec = importlib.util.spec_from_file_location(name, RECIPE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tar(path: Path, files: dict[str, str]) -> None:
    with tarfile.open(path, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


@pytest.fixture
def archives(tmp_path):
    """Archives with the official member names and a few lines each; the recipe's table, shrunk."""
    prepare = load("prepare_wmt14")
    raw = tmp_path / "raw"
    raw.mkdir()
    sizes = {"training-parallel-europarl-v7.tgz": 30, "training-parallel-commoncrawl.tgz": 20,
             "training-parallel-nc-v9.tgz": 10, "dev.tgz": 8}
    table = {}
    for name, (url, members) in prepare.ARCHIVES.items():
        [(en_member, de_member)] = members
        n = sizes[name]
        en = "".join(f"the {name[:12]} cat number {i}\n" for i in range(n))
        # a Windows line end
        de = "".join(f"die {name[:12]} katze nummer {i}\r\n" for i in range(n))
        tar(raw / name, {en_member: en, de_member: de, "../../evil": "never written\n"})
        table[name] = (url, {(en_member, de_member): n})
    return prepare, raw, table


def test_extract_joins_the_training_corpora_and_checks_their_lines(archives, tmp_path):
    prepare, raw, table = archives
    counts = prepare.extract(raw, tmp_path / "text", table)
    assert counts == {"train": 60, "valid": 8}
    train_en = (tmp_path / "text" / "train.en").read_text().splitlines()
    assert len(train_en) == 60 and train_en[0] == "the training-par cat number 0"
    assert train_en[30].startswith("the training-par") and train_en[-1].endswith("number 9")
    assert (tmp_path / "text" / "valid.de").read_bytes().count(b"\r") == 0
    assert sorted(p.name for p in (tmp_path / "text").iterdir()) == [
        "train.de",
        "train.en",
        "valid.de",
        "valid.en",
    ]
    assert not (tmp_path / "evil").exists() and not (tmp_path.parent / "evil").exists()


def test_extract_refuses_a_corpus_of_the_wrong_size(archives, tmp_path):
    prepare, raw, table = archives
    url, members = table["training-parallel-commoncrawl.tgz"]
    wrong = {**table, "training-parallel-commoncrawl.tgz": (url, {k: 21 for k in members})}
    with pytest.raises(prepare.RecipeError, match="has 20 lines .* the published corpus has 21 "
                                                  "each"):
        prepare.extract(raw, tmp_path / "text", wrong)
    assert not any((tmp_path / "text").iterdir())  # no half-written split
    (raw / "dev.tgz").unlink()
    with pytest.raises(prepare.RecipeError, match="dev.tgz is missing"):
        prepare.extract(raw, tmp_path / "text", table)


def test_the_recipe_prepares_and_trains_on_the_extracted_text(archives, tmp_path):
    prepare, raw, table = archives
    prepare.extract(raw, tmp_path / "text", table)
    text = tmp_path / "text"
    for lang in ("en", "de"):
        (text / f"test.{lang}").write_text((text / f"valid.{lang}").read_text())
    cli(
        "prepare",
        "--train-prefix",
        str(text / "train"),
        "--valid-prefix",
        str(text / "valid"),
        "--test-prefix",
        str(text / "test"),
        "--src",
        "en",
        "--tgt",
        "de",
        "--out",
        str(tmp_path / "data"),
        "--vocab-size",
        "60",
        "--max-len",
        "250",
        "--max-ratio",
        "1.5",
        "--threads",
        "1",
    )
    for model in ("base", "big"):  # the recipe's files parse, and drive a (tiny) run
        out = cli(
            "train",
            str(tmp_path / "data"),
            "--out",
            str(tmp_path / model),
            "--config",
            str(RECIPE / f"{model}.toml"),
            "--preset",
            "tiny",
            "--max-steps",
            "2",
            "--max-tokens",
            "500",
            "--update-freq",
            "2",
            "--threads",
            "1",
            "--quiet",
        ).stdout
        assert "schedule: inverse_sqrt, warmup 4,000 updates" in out
        config = json.loads((tmp_path / model / "config.json").read_text())
        assert config["train"]["save_minutes"] == 10 and config["train"]["update_freq"] == 2
    assert subprocess.run(["bash", "-n", str(RECIPE / "run.sh")]).returncode == 0


def test_plan_sizes_updates_and_hours(tmp_path):
    plan = load("plan")
    assert (
        plan.update_freq(8, 4096) == 1
        and plan.update_freq(1, 4096) == 7
        and plan.update_freq(2, 8192) == 2
    )
    for gpus, max_tokens in ((1, 4096), (4, 3000), (8, 4096)):
        tokens = gpus * max_tokens * plan.update_freq(gpus, max_tokens) * plan.FILL
        assert abs(tokens - 25_000) / 25_000 < 0.5
    wall, device = plan.gpu_hours(25_000, "base", gpus=8)
    assert device == pytest.approx(100_000 / 3600) and wall == pytest.approx(device / 8)
    results = tmp_path / "throughput.json"
    results.write_text(
        json.dumps(
            {
                "machine": {"cpu": "x", "threads": 2, "torch": "2"},
                "rows": [
                    {"preset": "base", "precision": "fp32", "rate_median": 250.0},
                    {"preset": "base", "precision": "bf16", "rate_median": 500.0},
                ],
            }
        )
    )
    assert plan.measured_tokens_per_s(results, "base")[0] == 500.0
