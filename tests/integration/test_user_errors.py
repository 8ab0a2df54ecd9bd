"""Every user error is a message, found before work starts, and nothing that existed is lost.

One row per case: the command, the text its message must contain. Each row asserts exit status 2,
no traceback, the message, and that every file under the test's folder (inputs, runs, the user's
own files) is still there with the same bytes afterwards.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..helpers import cli, write_reverse_task

TINY = [
    "--preset",
    "tiny",
    "--set",
    "warmup=10",
    "--max-tokens",
    "1500",
    "--threads",
    "1",
    "--quiet",
    "--precision",
    "fp32",
]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A user's folder: raw text, a prepared dataset, a trained run, an HF export, files of their
    own."""
    root = tmp_path_factory.mktemp("world")
    raw = root / "raw"
    write_reverse_task(raw, n_train=400, n_valid=20)
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
        str(root / "data"),
        "--vocab-size",
        "64",
        "--threads",
        "1",
    )
    cli(
        "train",
        str(root / "data"),
        "--out",
        str(root / "run"),
        "--max-steps",
        "6",
        "--set",
        "save_every=3",
        "--set",
        "valid_every=3",
        *TINY,
    )
    cli("export", str(root / "run"), "--to", "hf", str(root / "hf"))
    mine = root / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes\n")
    (root / "file.txt").write_text("a file of mine\n")
    os.symlink(mine, root / "link")
    (root / "empty.txt").write_text("")
    (root / "bad-utf8.txt").write_bytes(b"the cat\n\xff\xfe sat\n")
    long_line = " ".join(["cat"] * 2000)
    (root / "input.txt").write_text(f"the cat\n\n\n\n{long_line}\n")
    (root / "toml-model-5.toml").write_text("model = 5\n")
    (root / "toml-float.toml").write_text("[model]\nd_model = 64.5\n")
    # checkpoints whose model.json points outside their folder, and damaged ones
    step = sorted((root / "run" / "checkpoints").iterdir())[-1]
    for name, vocab in (("escape-abs", "/etc/hostname"), ("escape-up", "../../file.txt")):
        bad = root / name
        shutil.copytree(step, bad)
        info = json.loads((bad / "model.json").read_text())
        info["tokenizer"]["vocab"] = vocab
        (bad / "model.json").write_text(json.dumps(info))
    damaged = root / "damaged-run"
    shutil.copytree(root / "run", damaged)
    newest = sorted((damaged / "checkpoints").iterdir())[-1]
    weights = (newest / "model.safetensors").read_bytes()
    (newest / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    best = (damaged / "best" / "model.safetensors").read_bytes()
    (damaged / "best" / "model.safetensors").write_bytes(best[:100])
    # Hugging Face folders with broken config.json files, and a malicious pickle
    config = json.loads((root / "hf" / "config.json").read_text())
    variants = {
        "hf-list": [1, 2],
        "hf-missing": {k: v for k, v in config.items() if k != "d_model"},
        "hf-type": {**config, "encoder_layers": "two"},
        "hf-shape": {
            **config,
            "d_model": 32,
            "encoder_attention_heads": 4,
            "decoder_attention_heads": 4,
        },
    }
    for name, content in variants.items():
        shutil.copytree(root / "hf", root / name)
        (root / name / "config.json").write_text(json.dumps(content))
    shutil.copytree(root / "hf", root / "hf-pickle")
    (root / "hf-pickle" / "model.safetensors").unlink()
    (root / "hf-pickle" / "pytorch_model.bin").write_bytes(pickle.dumps(Exploit()))
    # a dataset with a pair longer than the tiny preset's 256 positions
    long_raw = root / "long-raw"
    long_raw.mkdir()
    (long_raw / "train.en").write_text("the cat\n" * 50 + " ".join(["the cat"] * 150) + "\n")
    (long_raw / "train.de").write_text("cat the\n" * 50 + " ".join(["cat the"] * 150) + "\n")
    cli(
        "prepare",
        "--train-prefix",
        str(long_raw / "train"),
        "--src",
        "en",
        "--tgt",
        "de",
        "--out",
        str(root / "long-data"),
        "--vocab-size",
        "12",
        "--max-len",
        "1000",
        "--max-ratio",
        "100",
        "--threads",
        "1",
    )
    return root


class Exploit:
    def __reduce__(self):
        return (os.system, ("echo owned > /tmp/transduce-owned",))


def snapshot(root: Path) -> dict[str, str]:
    files = {}
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.name != ".lock":
            files[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return files


def run_in_process(args: list[str], stdin: bytes = b"", cwd: Path | None = None):
    from transduce.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    saved_stdin, saved_cwd = sys.stdin, os.getcwd()
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    try:
        if cwd:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(args)
            except SystemExit as exit_:  # argparse refusing an option, as the command would
                code = exit_.code
    finally:
        sys.stdin = saved_stdin
        os.chdir(saved_cwd)
    return code, out.getvalue(), err.getvalue()


# (id, command with {root} for the folder, text the message must contain, options)
CASES = [
    # 1. outputs that would delete or overwrite what transduce did not create
    (
        "prepare-out-is-raw",
        "prepare --train-prefix {root}/raw/train --src en --tgt de --out {root}/raw",
        "contains or lies inside an input",
        {},
    ),
    (
        "prepare-out-is-cwd",
        "prepare --train-prefix {root}/raw/train --src en --tgt de --out .",
        "contains or lies inside an input",
        {"cwd": "raw"},
    ),
    (
        "prepare-out-is-users-cwd",
        "prepare --train-prefix {root}/raw/train --src en --tgt de --out .",
        "current directory",
        {"cwd": "mine"},
    ),
    (
        "prepare-out-is-users-folder",
        "prepare --train-prefix {root}/raw/train --src en --tgt de --out {root}/mine",
        "holds files transduce did not write (notes.txt)",
        {},
    ),
    (
        "prepare-out-is-a-file",
        "prepare --train-prefix {root}/raw/train --src en --tgt de --out {root}/file.txt",
        "is an existing file",
        {},
    ),
    (
        "prepare-out-is-a-symlink",
        "prepare --train-prefix {root}/raw/train --src en --tgt de --out {root}/link",
        "is a symbolic link",
        {},
    ),
    (
        "prepare-out-is-a-run",
        "prepare --train-prefix {root}/raw/train --src en --tgt de --out {root}/run",
        "holds a transduce run",
        {},
    ),
    (
        "export-into-its-own-run",
        "export {root}/run --to hf {root}/run",
        "contains or lies inside an input",
        {},
    ),
    (
        "export-ct2-into-its-own-run",
        "export {root}/run --to ctranslate2 {root}/run",
        "contains or lies inside an input",
        {},
    ),
    (
        "export-into-users-folder",
        "export {root}/run --to hf {root}/mine",
        "holds files transduce did not write",
        {},
    ),
    ("export-into-a-file", "export {root}/run --to hf {root}/file.txt", "is an existing file", {}),
    (
        "average-into-its-run",
        "average {root}/run --out {root}/run",
        "contains or lies inside an input",
        {},
    ),
    (
        "average-into-users-folder",
        "average {root}/run --out {root}/mine",
        "holds files transduce did not write",
        {},
    ),
    (
        "train-into-users-folder",
        "train {root}/data --out {root}/mine --max-steps 1 " + " ".join(TINY),
        "holds files transduce did not write",
        {},
    ),
    (
        "demo-into-users-folder",
        "demo --out {root}/mine --max-steps 1",
        "holds files transduce did not write",
        {},
    ),
    ("import-hf-into-a-run", "import-hf {root}/hf --out {root}/run", "not empty", {}),
    (
        "translate-output-is-a-folder",
        "translate {root}/run --output {root}/mine",
        "is a folder",
        {"stdin": b"cat\n"},
    ),
    (
        "translate-output-is-the-input",
        "translate {root}/run --input {root}/file.txt --output {root}/file.txt",
        "contains or lies inside an input",
        {},
    ),
    (
        "evaluate-save-hyp-is-the-ref",
        "evaluate {root}/run --src {root}/raw/valid.en --ref {root}/raw/valid.de --save-hyp "
        "{root}/raw/valid.de",
        "contains or lies inside an input",
        {},
    ),
    # 4. checkpoint files confined to their folder
    (
        "model-json-absolute-path",
        "translate {root}/escape-abs",
        "not a plain file name",
        {"stdin": b"cat\n"},
    ),
    (
        "model-json-climbs-out",
        "translate {root}/escape-up",
        "not a plain file name",
        {"stdin": b"cat\n"},
    ),
    (
        "export-of-escaping-checkpoint",
        "export {root}/escape-up --to hf {root}/new-export",
        "not a plain file name",
        {},
    ),
    # 6. damaged checkpoints
    (
        "translate-damaged-checkpoint",
        "translate {root}/damaged-run/checkpoints/step_00000006",
        "usable checkpoints",
        {"stdin": b"cat\n"},
    ),
    (
        "translate-damaged-best",
        "translate {root}/damaged-run",
        "best/model.safetensors is damaged",
        {"stdin": b"cat\n"},
    ),
    # 8. errors that used to come after an epoch
    (
        "valid-beam-0",
        "train {root}/data --out {root}/new-run --max-steps 1 --set valid_beam=0 " + " ".join(TINY),
        "valid_beam must be at least 1",
        {},
    ),
    (
        "bleu-tokenize-foo",
        "train {root}/data --out {root}/new-run --max-steps 1 --set bleu_tokenize=foo "
        "" + " ".join(TINY),
        "bleu_tokenize='foo' is not supported",
        {},
    ),
    (
        "log-every-0",
        "train {root}/data --out {root}/new-run --max-steps 1 --set log_every=0 " + " ".join(TINY),
        "log_every must be at least 1",
        {},
    ),
    (
        "pair-longer-than-positions",
        "train {root}/long-data --out {root}/new-run --max-steps 1 " + " ".join(TINY),
        "holds 256 positions",
        {},
    ),
    # 9. tracebacks that are now messages
    (
        "device-cuda-99",
        "train {root}/data --out {root}/new-run --max-steps 1 --device cuda:99",
        "--device cuda:99",
        {},
    ),
    (
        "device-foo",
        "translate {root}/run --device foo",
        "--device 'foo' is not a device",
        {"stdin": b"cat\n"},
    ),
    (
        "threads-negative",
        "translate {root}/run --threads -1",
        "argument --threads: -1 is out of range",
        {"stdin": b"cat\n"},
    ),
    (
        "compile-with-int8",
        "translate {root}/run --precision int8 --compile on",
        "--compile on does not combine with --precision int8",
        {"stdin": b"cat\n"},
    ),
    (
        "toml-model-not-a-table",
        "train {root}/data --out {root}/new-run --max-steps 1 --config {root}/toml-model-5.toml",
        "model must be a table",
        {},
    ),
    (
        "toml-float-for-int",
        "train {root}/data --out {root}/new-run --max-steps 1 --config {root}/toml-float.toml",
        "d_model = 64.5: expected a value of type int",
        {},
    ),
    (
        "temperature-0",
        "translate {root}/run --sampling --temperature 0",
        "temperature must be positive",
        {"stdin": b"cat\n"},
    ),
    (
        "top-p-0",
        "translate {root}/run --sampling --top-p 0",
        "top_p must be in (0, 1]",
        {"stdin": b"cat\n"},
    ),
    (
        "min-len-beyond-max",
        "translate {root}/run --min-len 500",
        "--min-len 500 leaves no room",
        {"stdin": b"cat\n"},
    ),
    (
        "invalid-utf8-stdin",
        "translate {root}/run",
        "stdin, line 2: invalid UTF-8 (invalid start byte at byte 0); transduce reads UTF-8",
        {"stdin": b"cat\n\xff sat\n"},
    ),
    (
        "invalid-utf8-file",
        "translate {root}/run --input {root}/bad-utf8.txt",
        "bad-utf8.txt, line 2: invalid UTF-8",
        {},
    ),
    (
        "evaluate-tokenize-foo",
        "evaluate --hyp {root}/raw/valid.de --ref {root}/raw/valid.de --tokenize foo",
        "--tokenize 'foo'",
        {},
    ),
    (
        "evaluate-empty-files",
        "evaluate --hyp {root}/empty.txt --ref {root}/empty.txt",
        "is empty",
        {},
    ),
    (
        "hf-config-a-list",
        "import-hf {root}/hf-list --out {root}/new-import",
        "expected a JSON object",
        {},
    ),
    (
        "hf-config-missing-key",
        "import-hf {root}/hf-missing --out {root}/new-import",
        "the key 'd_model' is missing",
        {},
    ),
    (
        "hf-config-wrong-type",
        "import-hf {root}/hf-type --out {root}/new-import",
        "hf-type/config.json: encoder_layers = 'two' should be an integer",
        {},
    ),
    (
        "hf-config-shape-mismatch",
        "import-hf {root}/hf-shape --out {root}/new-import",
        "do not fit",
        {},
    ),
    (
        "hf-malicious-pickle",
        "import-hf {root}/hf-pickle --out {root}/new-import",
        "never unpickles",
        {},
    ),
    # 10. misleading or late messages
    (
        "prepare-vocab-size-0",
        "prepare --train-prefix {root}/raw/train --src en --tgt de --out {root}/new-data "
        "--vocab-size 0",
        "argument --vocab-size: 0 is out of range",
        {},
    ),
    (
        "prepare-threads-0",
        "prepare --train-prefix {root}/raw/train --src en --tgt de --out {root}/new-data "
        "--threads 0",
        "argument --threads: 0 is out of range: give a value from 1",
        {},
    ),
    (
        "prepare-vocab-sample-0",
        "prepare --train-prefix {root}/raw/train --src en --tgt de --out {root}/new-data "
        "--vocab-sample 0",
        "argument --vocab-sample: 0 is out of range: give a value from 1",
        {},
    ),
    (
        "strict-names-the-real-line",
        "translate {root}/run --strict --input {root}/input.txt",
        "input line 5",
        {},
    ),
    (
        "corrupt-json-named",
        "train {root}/damaged-data --out {root}/new-run --max-steps 1",
        "damaged-data/meta.json",
        {"setup": "corrupt-meta"},
    ),
    ("average-last-0", "average {root}/run --last 0", "argument --last: 0 is out of range", {}),
    (
        "evaluate-nbest",
        "evaluate {root}/run --src {root}/raw/valid.en --ref {root}/raw/valid.de --nbest 3",
        "--nbest",
        {},
    ),
    (
        "more-time-without-resume",
        "train {root}/data --out {root}/new-run --more-time 1m",
        "--more-time",
        {},
    ),
    # 12. missing paths say they are missing, every one of them
    (
        "train-data-misspelt",
        "train {root}/dta --out {root}/new-run --max-steps 1",
        "{root}/dta does not exist",
        {},
    ),
    (
        "evaluate-both-missing",
        "evaluate {root}/run --src {root}/raw/test.en --ref {root}/raw/test.de",
        "missing files: --src {root}/raw/test.en (nor .gz); --ref {root}/raw/test.de (nor .gz)",
        {},
    ),
    (
        "translate-input-missing",
        "translate {root}/run --input {root}/raw/nothing.en",
        "missing file: --input {root}/raw/nothing.en (nor .gz)",
        {},
    ),
    (
        "prepare-every-missing-file",
        "prepare --train-prefix {root}/raw/train --valid-prefix {root}/raw/dev --src en --tgt de "
        "--out {root}/new-data",
        "missing files: {root}/raw/dev.en (nor .gz); {root}/raw/dev.de (nor .gz)",
        {},
    ),
    (
        "valid-extra-missing",
        "train {root}/data --out {root}/new-run --max-steps 1 --valid-extra {root}/raw/dev "
        "" + " ".join(TINY),
        "missing files: {root}/raw/dev.en (nor .gz); {root}/raw/dev.de (nor .gz)",
        {},
    ),
    # 11. serve: every bad setting is found before the port is taken or the model loaded
    ("serve-no-model", "serve {root}/no-such-run --port 0", "no-such-run", {}),
    (
        "serve-port-out-of-range",
        "serve {root}/run --port 70000",
        "argument --port: 70000 is out of range: give a value from 0 to 65,535",
        {},
    ),
    (
        "serve-host-unknown",
        "serve {root}/run --host no.such.host.invalid --port 0",
        "--host no.such.host.invalid: not an address",
        {},
    ),
    (
        "serve-max-chars-0",
        "serve {root}/run --max-chars 0 --port 0",
        "argument --max-chars: 0 is out of range",
        {},
    ),
    (
        "serve-wait-negative",
        "serve {root}/run --max-wait-ms -1 --port 0",
        "argument --max-wait-ms: -1 is out of range",
        {},
    ),
    ("serve-sampling", "serve {root}/run --sampling --port 0", "sampling is not served", {}),
    (
        "serve-beam-over-max",
        "serve {root}/run --beam 20 --max-beam 16 --port 0",
        "--beam 20 is more than --max-beam 16",
        {},
    ),
    (
        "serve-int8-compile",
        "serve {root}/run --precision int8 --compile on --port 0",
        "does not combine",
        {},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_user_error_is_a_message_and_nothing_is_lost(world, case):
    name, command, expected, options = case
    if options.get("setup") == "corrupt-meta" and not (world / "damaged-data").exists():
        shutil.copytree(world / "data", world / "damaged-data")
        (world / "damaged-data" / "meta.json").write_text("{not json")
    before = snapshot(world)
    args = [a.replace("{root}", str(world)) for a in command.split()]
    cwd = world / options["cwd"] if "cwd" in options else None
    code, out, err = run_in_process(args, options.get("stdin", b""), cwd)
    assert code == 2, f"{name}: exit {code}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    assert "Traceback" not in out + err
    assert expected.replace("{root}", str(world)) in err, err
    assert "weights_only=False" not in err
    after = snapshot(world)
    lost = {path for path, digest in before.items() if after.get(path) != digest}
    assert not lost, f"{name}: changed or deleted {sorted(lost)[:5]}"
    assert not (world / "new-run").exists() and not (world / "new-import").exists()
    assert not (world / "new-data").exists() and not (world / "new-export").exists()
    assert not Path("/tmp/transduce-owned").exists()


def test_a_failing_command_is_a_message_in_a_fresh_process_too(world):
    """The same in a real process: the exit status and the output a shell sees."""
    result = subprocess.run(
        [sys.executable, "-m", "transduce", "translate", str(world / "run"), "--device", "foo"],
        capture_output=True,
        text=True,
        input="cat\n",
        timeout=300,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("transduce translate: error: --device 'foo'")
