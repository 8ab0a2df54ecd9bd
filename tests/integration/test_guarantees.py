"""What transduce guarantees, each proven by a test that fails without it: the saved recipe on
resume, aligned lines whatever characters they hold, streaming translation, fallback from a
damaged checkpoint, outputs that survive SIGKILL, one writer per run, SIGTERM saves, umask."""

from __future__ import annotations

import hashlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from transduce.checkpoint import list_checkpoints
from transduce.data import ParallelDataset

from ..helpers import (cli, killed_before_rename, prepare_reverse_task, transduce_command,
                       write_reverse_task)

TINY = [
    "--set",
    "dropout=0.1",
    "--max-tokens",
    "1500",
    "--threads",
    "1",
    "--quiet",
    "--precision",
    "fp32",
]
# Every character Python's str.splitlines() splits on, except \n and \r\n.
SEPARATORS = ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return prepare_reverse_task(tmp_path_factory.mktemp("guarantees"), valid=False, n_train=600)


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def tree_digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_resume_with_the_preset_keeps_the_saved_recipe(data, tmp_path):
    recipe = ["--preset", "tiny", "--set", "lr_schedule=inverse_sqrt_peak", "--set", "peak_lr=2e-3",
              "--set", "warmup=7", "--set", "log_every=1", *TINY]
    cli("train", str(data), "--out", str(tmp_path / "full"), "--max-steps", "12", *recipe)
    cli("train", str(data), "--out", str(tmp_path / "part"), "--max-steps", "6", *recipe)
    # The README's resume line: the preset and a new limit, none of the recipe's --set options.
    resumed = cli(
        "train",
        str(data),
        "--out",
        str(tmp_path / "part"),
        "--preset",
        "tiny",
        "--max-steps",
        "12",
        "--resume",
        *TINY,
    )
    assert "max_steps changed: 6 -> 12" in resumed.stdout + resumed.stderr
    full = {r["step"]: r["lr"] for r in metrics(tmp_path / "full") if r["type"] == "train"}
    part = {r["step"]: r["lr"] for r in metrics(tmp_path / "part") if r["type"] == "train"}
    assert part[7] == full[7] and part[12] == full[12]  # the learning rate of the saved schedule
    a = load_file(str(list_checkpoints(tmp_path / "full")[-1] / "model.safetensors"))
    b = load_file(str(list_checkpoints(tmp_path / "part")[-1] / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    saved = json.loads((tmp_path / "part" / "config.json").read_text())["train"]
    assert (
        saved["warmup"] == 7
        and saved["lr_schedule"] == "inverse_sqrt_peak"
        and saved["max_steps"] == 12
    )
    other = cli(
        "train",
        str(data),
        "--out",
        str(tmp_path / "part"),
        "--preset",
        "small",
        "--max-steps",
        "14",
        "--resume",
        *TINY,
        check=False,
    )
    assert other.returncode == 2 and "trained with the preset 'tiny', not 'small'" in other.stderr


def test_more_time_trains_that_much_longer(data, tmp_path):
    run = tmp_path / "run"
    cli("train", str(data), "--out", str(run), "--preset", "tiny", "--max-steps", "3", *TINY)
    elapsed = json.loads((list_checkpoints(run)[-1] / "trainer.json").read_text())["progress"][
        "elapsed"
    ]
    out = cli(
        "train",
        str(data),
        "--out",
        str(run),
        "--resume",
        "--more-time",
        "0.5",
        "--max-steps",
        "100000",
        *TINY,
    )
    assert "--more-time: training until" in out.stdout + out.stderr
    end = [r for r in metrics(run) if r["type"] == "end"][-1]
    # (the metrics round elapsed to 0.1 s)
    assert (
        end["stopped"].startswith("max_time")
        and end["elapsed"] >= elapsed + 0.5 - 0.05
        and end["step"] > 3
    )


def test_separator_characters_keep_lines_aligned(tmp_path):
    """A line holding each separator stays one line in prepare, the dataset, translate and
    evaluate."""
    raw = tmp_path / "raw"
    write_reverse_task(raw, n_train=300, n_valid=0, valid=False)
    odd = [f"the cat{sep}sat" for sep in SEPARATORS]
    valid_src = ["\ufeffthe dog"] + odd + ["a red cat", "the mat"]
    valid_tgt = ["\ufeffdog the"] + [f"sat{sep}cat "
                                     "the" for sep in SEPARATORS] + ["cat red a", "mat the"]
    (raw / "valid.en").write_bytes("".join(s + "\n" for s in valid_src).encode())
    # Windows line ends
    (raw / "valid.de").write_bytes("".join(t + "\r\n" for t in valid_tgt).encode())
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
        "--out",
        str(tmp_path / "data"),
        "--vocab-size",
        "64",
        "--threads",
        "1",
    )
    ds = ParallelDataset(tmp_path / "data", "valid")
    assert len(ds) == len(valid_src)
    # BOM dropped, the rest kept
    assert ds.raw_text("src") == ["the dog"] + odd + ["a red cat", "the mat"]
    assert (
        ds.raw_text("tgt")[-1] == "mat the"
        and ds.raw_text("tgt")[1] == f"sat{SEPARATORS[0]}cat the"
    )
    # validation scores the right references: train with validation, then check the metrics ran
    run = tmp_path / "run"
    cli("train", str(tmp_path / "data"), "--out", str(run), "--preset", "tiny", "--max-steps", "2",
        "--set", "valid_every=2", *TINY)
    assert [r for r in metrics(run) if r["type"] == "valid"]
    # translate writes exactly one line per input line, from a file and from stdin
    text = "".join(s + "\n" for s in valid_src)
    (tmp_path / "input.txt").write_bytes(text.encode())
    cli(
        "translate",
        str(run),
        "--input",
        str(tmp_path / "input.txt"),
        "--output",
        str(tmp_path / "out.txt"),
        "--beam",
        "1",
    )
    assert (tmp_path / "out.txt").read_bytes().count(b"\n") == len(valid_src)
    assert cli("translate", str(run), "--beam", "1", input=text).stdout.count("\n") == len(
        valid_src
    )
    # evaluate reads the files the same way: same counts, no misalignment error
    cli("evaluate", "--hyp", str(raw / "valid.de"), "--ref", str(raw / "valid.de"))


def _reader(stream, lines: queue.Queue) -> None:
    for line in iter(stream.readline, ""):
        lines.put(line)


def test_translate_streams_before_its_input_ends(data, tmp_path):
    run = tmp_path / "run"
    cli("train", str(data), "--out", str(run), "--preset", "tiny", "--max-steps", "2", *TINY)
    process = subprocess.Popen(
        [sys.executable, "-m", "transduce", "translate", str(run), "--beam", "2"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_reader, args=(process.stdout, lines), daemon=True).start()
    try:
        process.stdin.write("the cat sat\n")
        process.stdin.flush()
        # a deadlock guard, not a timing assertion: the pipe stays open
        first = lines.get(timeout=300)
        assert process.poll() is None  # still running: its input is not closed
        process.stdin.write("a dog\n\nthe mat\n")
        process.stdin.close()
        assert process.wait(timeout=300) == 0
    finally:
        process.kill()
    rest = []
    while not lines.empty():
        rest.append(lines.get())
    assert first.endswith("\n") and len([first] + rest) == 4 and rest[1] == "\n"


def test_resume_falls_back_from_a_damaged_newest_checkpoint(data, tmp_path):
    args = ["--preset", "tiny", "--set", "save_every=4", "--set", "keep_last=10", *TINY]
    cli("train", str(data), "--out", str(tmp_path / "full"), "--max-steps", "12", *args)
    cli("train", str(data), "--out", str(tmp_path / "part"), "--max-steps", "8", *args)
    newest = list_checkpoints(tmp_path / "part")[-1]
    assert newest.name == "step_00000008"
    (newest / "trainer.json").unlink()
    resumed = cli(
        "train", str(data), "--out", str(tmp_path / "part"), "--max-steps", "12", "--resume", *args
    )
    assert (
        f"warning: cannot resume from {newest}" in resumed.stderr
        and "step_00000004" in resumed.stdout
    )
    assert "warning" not in resumed.stdout  # warnings go where errors go
    a = load_file(str(list_checkpoints(tmp_path / "full")[-1] / "model.safetensors"))
    b = load_file(str(list_checkpoints(tmp_path / "part")[-1] / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)  # exact, from step 4


def test_a_second_writer_is_refused_with_the_first_ones_pid(data, tmp_path):
    from transduce.training.run_folder import RunLock

    run = tmp_path / "run"
    cli("train", str(data), "--out", str(run), "--preset", "tiny", "--max-steps", "2", *TINY)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from transduce.training.run_folder import RunLock; lock = "
                               "RunLock(Path(sys.argv[1])); "
                               "print('locked', flush=True); time.sleep(600)", str(run)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        second = cli(
            "train",
            str(data),
            "--out",
            str(run),
            "--max-steps",
            "4",
            "--resume",
            *TINY,
            check=False,
        )
        assert (
            second.returncode == 2
            and f"in use by another training process (pid {holder.pid})" in second.stderr
        )
    finally:
        holder.kill()
        holder.wait()
    RunLock(run).release()  # the kernel released the dead holder's lock


def test_sigterm_saves_a_checkpoint_like_ctrl_c(data, tmp_path):
    run = tmp_path / "run"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "transduce",
            "train",
            str(data),
            "--out",
            str(run),
            "--preset",
            "tiny",
            "--max-steps",
            "100000",
            "--set",
            "log_every=1",
            *TINY,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.time() + 300  # a deadlock guard: the run logs every step
    while time.time() < deadline and not ((run / "metrics.jsonl").is_file() and
                                          (run / "metrics.jsonl").read_text().count("\n") >= 3):
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output
    assert "terminated (SIGTERM): saving a checkpoint" in output
    found = list_checkpoints(run)
    assert found and int(found[-1].name[5:]) >= 3


def _kill_before_rename(command: list[str], name: str) -> int:
    """Run ``transduce COMMAND``, SIGKILLed when its output ``name`` is written whole in its
    temporary sibling, before the rename; return its exit status."""
    return subprocess.run(transduce_command(*command, prelude=killed_before_rename(name)),
                          capture_output=True, timeout=600).returncode


def test_sigkill_during_prepare_and_export_leaves_the_previous_output(tmp_path):
    raw = tmp_path / "raw"
    write_reverse_task(raw, n_train=600, n_valid=50, max_words=12)
    prepare = [
        "prepare",
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
        "--vocab-size",
        "64",
        "--threads",
        "1",
    ]
    cli(*prepare)
    before = tree_digest(tmp_path / "data")
    assert _kill_before_rename(prepare + ["--force"], "data") == -signal.SIGKILL
    assert tree_digest(tmp_path / "data") == before
    # the dead process's temporary
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".data.tmp-")]
    cli(*prepare, "--force")  # the next run cleans it
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".data.")]

    run = tmp_path / "run"
    cli(
        "train",
        str(tmp_path / "data"),
        "--out",
        str(run),
        "--preset",
        "small",
        "--max-steps",
        "1",
        *TINY,
    )
    export = ["export", str(run), "--to", "hf", str(tmp_path / "hf")]
    cli(*export)
    before = tree_digest(tmp_path / "hf")
    assert _kill_before_rename(export, "hf") == -signal.SIGKILL
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".hf.tmp-")]
    assert tree_digest(tmp_path / "hf") == before


def test_prepare_redoes_a_folder_whose_files_are_missing_and_cleans_stale_temporaries(tmp_path):
    data = prepare_reverse_task(tmp_path, valid=False, n_train=200)
    (data / "train.en.bin").unlink()
    stale = tmp_path / ".data.tmp-999999999-x"  # no such process
    stale.mkdir()
    out = cli(
        "prepare",
        "--train-prefix",
        str(tmp_path / "raw" / "train"),
        "--src",
        "en",
        "--tgt",
        "de",
        "--out",
        str(data),
        "--vocab-size",
        "64",
        "--threads",
        "1",
    )
    assert "train.en.bin is missing; preparing again" in out.stdout
    assert (data / "train.en.bin").is_file() and len(ParallelDataset(data, "train")) == 200
    assert not stale.exists()


def test_outputs_follow_the_umask(tmp_path):
    from transduce.files import output_dir, write_text

    old = os.umask(0o027)
    try:
        write_text(tmp_path / "a.txt", "x\n")
        with output_dir(tmp_path / "folder", "test") as folder:
            (folder / "b.txt").write_text("y\n")
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "folder").stat().st_mode & 0o777 == 0o750


def test_checkpoints_from_before_the_blocks_had_names_load_and_resume(data, tmp_path):
    """An older run (residual blocks saved as sub1/sub2/sub3) translates, averages and resumes
    exactly as if it had been written today."""
    from safetensors.torch import save_file

    from transduce.checkpoint import load_model_from

    args = [str(data), "--preset", "tiny", "--ema", "0.9", "--set", "save_every=4", *TINY]
    cli("train", *args, "--out", str(tmp_path / "full"), "--max-steps", "8")
    cli("train", *args, "--out", str(tmp_path / "old"), "--max-steps", "4")
    src, tgt = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 8, 9]])
    before = load_model_from(list_checkpoints(tmp_path / "old")[-1])[0](src, tgt)
    legacy = {"self_attn_block": "sub1", "ffn_block": None, "cross_attn_block": "sub2"}
    for folder in [*list_checkpoints(tmp_path / "old"), tmp_path / "old" / "ema"]:
        for name in ("model.safetensors", "ema.safetensors"):
            if not (folder / name).is_file():
                continue
            state = load_file(str(folder / name))
            renamed = {}
            for key, value in state.items():
                for new, old in legacy.items():
                    if f".{new}." in key:
                        old = old or ("sub3" if key.startswith("decoder") else "sub2")
                        key = key.replace(f".{new}.", f".{old}.")
                renamed[key] = value
            assert any(".sub3." in k for k in renamed) or name == "ema.safetensors"
            save_file(renamed, str(folder / name))
    model, _ = load_model_from(list_checkpoints(tmp_path / "old")[-1])
    assert torch.equal(model(src, tgt), before)
    assert cli("translate", str(tmp_path / "old"), input="the cat\n").returncode == 0
    cli("train", *args, "--out", str(tmp_path / "old"), "--max-steps", "8", "--resume")
    a = load_file(str(list_checkpoints(tmp_path / "full")[-1] / "model.safetensors"))
    b = load_file(str(list_checkpoints(tmp_path / "old")[-1] / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # resumed exactly


def test_resume_says_what_changes_and_what_it_does_not_use(data, tmp_path):
    run = tmp_path / "run"
    cli("train", str(data), "--out", str(run), "--preset", "tiny", "--max-steps", "2", *TINY)
    noted = cli(
        "train",
        str(data),
        "--out",
        str(run),
        "--resume",
        "--max-steps",
        "3",
        "--recipe",
        "paper",
        *TINY,
    )
    assert "warning: --recipe paper is not used on --resume" in noted.stderr
    assert TINY[-2:] == ["--precision", "fp32"]
    resumed = cli("train", str(data), "--out", str(run), "--resume", "--max-steps", "4", *TINY[:-2],
                  "--precision", "bf16")
    assert "--resume: precision changed: fp32 -> bf16" in resumed.stdout
