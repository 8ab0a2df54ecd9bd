"""No output inside an input: every command that writes is refused, before any work and with the
path in its message, when asked to write onto, over or inside one of its inputs, or among a
training run's checkpoints (only that run writes there). Nothing that existed changes."""

from __future__ import annotations

import json
import shutil

import pytest

from transduce.checkpoint import list_checkpoints
from transduce.choice import resolve

from ..helpers import cli
from .test_guarantees import tree_digest


@pytest.fixture
def world(reverse_run, tmp_path):
    """A copy of the session's run and data (a refusal that failed must not damage the shared ones),
    and a second run whose checkpoints are not this command's."""
    shutil.copytree(reverse_run / "run", tmp_path / "run")
    shutil.copytree(reverse_run / "data", tmp_path / "data")
    shutil.copytree(reverse_run / "run", tmp_path / "other")
    (tmp_path / "in.txt").write_text("the cat sat\n")
    (tmp_path / "hf").mkdir()  # an import's input folder (refused before it is read)
    return tmp_path


def _cases(w):
    run, data, other = w / "run", w / "data", w / "other"
    ckpt, step = resolve(run), list_checkpoints(run)[-1]
    other_step = list_checkpoints(other)[-1]
    valid_src, valid_ref = data / "valid.en.txt", data / "valid.de.txt"
    return {
        "translate onto a checkpoint's weights": [
            "translate",
            str(run),
            "--input",
            str(w / "in.txt"),
            "--output",
            str(step / "model.safetensors"),
        ],
        "translate inside the checkpoint it reads": [
            "translate",
            str(run),
            "--input",
            str(w / "in.txt"),
            "--output",
            str(ckpt / "out.txt"),
        ],
        "translate among another run's checkpoints": [
            "translate",
            str(run),
            "--input",
            str(w / "in.txt"),
            "--output",
            str(other_step / "out.txt"),
        ],
        "evaluate --save-hyp onto the tokenizer": [
            "evaluate",
            str(run),
            "--src",
            str(valid_src),
            "--ref",
            str(valid_ref),
            "--save-hyp",
            str(ckpt / "spm.model"),
        ],
        "average into another run's checkpoint": [
            "average",
            str(run),
            "--last",
            "1",
            "--out",
            str(other_step),
        ],
        "average inside a checkpoint it reads": [
            "average",
            str(run),
            "--last",
            "1",
            "--out",
            str(step / "avg"),
        ],
        "export to Hugging Face inside the checkpoint": [
            "export",
            str(run),
            "--to",
            "hf",
            str(ckpt / "hf"),
        ],
        "export to CTranslate2 among the run's checkpoints": [
            "export",
            str(run),
            "--to",
            "ctranslate2",
            str(run / "checkpoints" / "ct2"),
        ],
        "train inside its data": [
            "train",
            str(data),
            "--out",
            str(data / "run"),
            "--preset",
            "tiny",
            "--max-steps",
            "1",
        ],
        "train among a run's checkpoints": [
            "train",
            str(data),
            "--out",
            str(other_step / "run"),
            "--preset",
            "tiny",
            "--max-steps",
            "1",
        ],
        "prepare among a run's checkpoints": [
            "prepare",
            "--train-prefix",
            str(w / "in"),
            "--src",
            "en",
            "--tgt",
            "de",
            "--out",
            str(run / "checkpoints" / "data"),
        ],
        "import-hf inside its folder": ["import-hf", str(w / "hf"), "--out", str(w / "hf" / "run")],
        "attention inside the checkpoint": [
            "attention",
            str(run),
            "--src",
            "the cat",
            "--out",
            str(ckpt / "attention.png"),
        ],
        "plot onto the metrics it reads": ["plot", str(run), "--out", str(run / "metrics.jsonl")],
        "ablate inside its data": [
            "ablate",
            str(data),
            "--out",
            str(data / "table3"),
            "--max-steps",
            "1",
            "--dry-run",
        ],
    }


CASES = ["translate onto a checkpoint's weights", "translate inside the checkpoint it reads",
         "translate among another run's checkpoints", "evaluate --save-hyp onto the tokenizer",
         "average into another run's checkpoint", "average inside a checkpoint it reads",
         "export to Hugging Face inside the "
         "checkpoint", "export to CTranslate2 among the run's checkpoints",
         "train inside its "
         "data", "train among a run's checkpoints", "prepare among a run's checkpoints",
         "import-hf inside its "
         "folder", "attention inside the checkpoint", "plot onto the metrics it reads",
         "ablate inside its data"]


@pytest.mark.parametrize("case", CASES)
def test_no_command_writes_inside_its_inputs_or_a_runs_checkpoints(world, case):
    for lang in ("en", "de"):
        (world / f"in.{lang}").write_text("the cat sat\na dog\n")
    command = _cases(world)[case]
    before = tree_digest(world)
    result = cli(*command, check=False)
    assert result.returncode == 2, f"{case}: exit {result.returncode}\n{result.stderr[-2000:]}"
    assert "Traceback" not in result.stderr
    assert "input" in result.stderr or "checkpoints of the training run" in result.stderr, (
        result.stderr
    )
    assert tree_digest(world) == before, f"{case}: files changed"


def test_the_run_writes_its_own_checkpoints_and_outputs_beside_them_are_allowed(world):
    run = world / "run"
    out = cli(
        "translate",
        str(run),
        "--input",
        str(world / "in.txt"),
        "--output",
        str(run / "translations.txt"),
    )
    assert out.returncode == 0 and (run / "translations.txt").read_text().strip()
    # RUN/averaged, beside its checkpoints
    assert cli("average", str(run), "--last", "1").returncode == 0
    assert cli("plot", str(run)).returncode == 0 and (run / "curves.png").is_file()


def test_text_is_read_as_users_keep_it_gzipped_under_the_plain_name(reverse_run, tmp_path):
    """``--src test.en`` finds ``test.en.gz`` when only that exists (as prepare's prefixes do), for
    evaluate's --src/--ref and translate's --input; the scores are those of the plain files."""
    import gzip

    run, raw = reverse_run / "run", reverse_run / "raw"
    for lang in ("en", "de"):
        (tmp_path / f"test.{lang}.gz").write_bytes(
            gzip.compress((raw / f"valid.{lang}").read_bytes())
        )
    gz = cli(
        "evaluate",
        str(run),
        "--src",
        str(tmp_path / "test.en"),
        "--ref",
        str(tmp_path / "test.de"),
        "--json",
        "--beam",
        "1",
    )
    plain = cli(
        "evaluate",
        str(run),
        "--src",
        str(raw / "valid.en"),
        "--ref",
        str(raw / "valid.de"),
        "--json",
        "--beam",
        "1",
    )
    assert json.loads(gz.stdout)["bleu"] == json.loads(plain.stdout)["bleu"]
    translated = cli("translate", str(run), "--input", str(tmp_path / "test.en"), "--beam", "1")
    assert (
        translated.stdout
        == cli("translate", str(run), "--beam", "1", input=(raw / "valid.en").read_text()).stdout
    )
