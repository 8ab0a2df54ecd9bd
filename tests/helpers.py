"""Small generated corpora and runs shared by the integration tests."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

WORDS = "the a cat dog sat on mat house big small red blue runs walks sees".split()


def write_reverse_task(
    folder: Path,
    n_train: int = 2000,
    n_valid: int = 100,
    seed: int = 0,
    max_words: int = 6,
    valid: bool = True,
) -> None:
    """Target = source words in reverse order: a task a tiny model learns in seconds."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    splits = [("train", n_train)] + ([("valid", n_valid)] if valid else [])
    for split, n in splits:
        src = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, max_words))) for _ in range(n)
        ]
        (folder / f"{split}.en").write_text("\n".join(src) + "\n")
        (folder / f"{split}.de").write_text(
            "\n".join(" ".join(reversed(s.split())) for s in src) + "\n"
        )


def prepare_reverse_task(folder: Path, valid: bool = True, vocab_size: int = 64, **kw) -> Path:
    from transduce.data import PrepareOptions, prepare

    write_reverse_task(folder / "raw", valid=valid, **kw)
    out = folder / "data"
    prepare(
        PrepareOptions(
            src="en",
            tgt="de",
            train_prefix=str(folder / "raw" / "train"),
            valid_prefix=str(folder / "raw" / "valid") if valid else None,
            vocab_size=vocab_size,
            threads=1,
        ),
        out,
        log=None,
    )
    return out


def write_counting(root: Path, n_train: int) -> dict:
    """The built-in counting text as ``root/train.txt`` and ``root/valid.txt`` (100 lines), one
    count a line; returns the splits (start, length) as ``counting_splits`` gives them."""
    from transduce.demo.counting import counting_line, counting_splits

    splits = counting_splits(n_train, 100, 100, seed=1)
    for split in ("train", "valid"):
        (root / f"{split}.txt").write_text(
            "".join(counting_line(s, n) + "\n" for s, n in splits[split]))
    return splits


def transduce_command(*args: str, prelude: str = "") -> list[str]:
    """The command line of ``python -m transduce ARGS`` in a fresh process; ``prelude`` is Python
    run in that process first (a patch that stops it at a chosen step, say)."""
    if not prelude:
        return [sys.executable, "-m", "transduce", *args]
    code = (f"{prelude}\nimport sys\nfrom transduce.cli.main import main\n"
            "sys.exit(main(sys.argv[1:]))")
    return [sys.executable, "-c", code, *args]


def killed_at_save(step: int) -> str:
    """A prelude: training SIGKILLs itself once its checkpoint of update ``step`` is saved, as a
    power cut would, at a chosen update instead of whenever a poll notices."""
    return f"""
import os, signal
from transduce.training.trainer import Trainer
_save = Trainer.save
def save(self):
    _save(self)
    if self.progress.step >= {step}:
        os.kill(os.getpid(), signal.SIGKILL)
Trainer.save = save
"""


def killed_before_rename(name: str) -> str:
    """A prelude: the process SIGKILLs itself when its output folder ``name`` is written whole in
    its temporary sibling, the moment before the rename that publishes it."""
    return f"""
import os, signal
import transduce.files as files
_marker = files.write_marker
def write_marker(folder, kind):
    _marker(folder, kind)
    if folder.name.startswith(".{name}.tmp-"):
        os.kill(os.getpid(), signal.SIGKILL)
files.write_marker = write_marker
"""


def cli(*args: str, check: bool = True, input: str | None = None, subprocess_: bool = False,
        env=None) -> subprocess.CompletedProcess:
    """Run ``transduce ARGS`` (in this process, or in a fresh one) and return what it did."""
    if subprocess_:
        result = subprocess.run(
            [sys.executable, "-m", "transduce", *args],
            capture_output=True,
            text=True,
            input=input,
            env=env,
            timeout=600,
        )
    else:
        import contextlib
        import io

        from transduce.cli.main import main

        out, err = io.StringIO(), io.StringIO()
        stdin = sys.stdin
        sys.stdin = io.TextIOWrapper(io.BytesIO((input or "").encode("utf-8")), encoding="utf-8")
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main(list(args))
                except SystemExit as exit_:  # argparse refusing an option, as the command would
                    code = exit_.code if isinstance(exit_.code, int) else 1
        finally:
            sys.stdin = stdin
        result = subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())
    if check and result.returncode != 0:
        raise AssertionError(f"transduce {' '.join(args)} failed "
                             f"({result.returncode}):\n{result.stderr[-3000:]}")
    return result


def randomize_hf(model, norm_key: str) -> None:
    """Give a Hugging Face model random weights everywhere (norms and biases too: a weight mapped to
    the wrong place then shows) and large enough for activation variants to differ."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if norm_key in name or name.endswith("bias"):
                p.normal_(0, 0.2).add_(1.0 if name.endswith("weight") else 0.0)
            else:
                p.normal_(0, 0.25)


BARS = ("across", "down", "slash")


def write_image_folder(root: Path, per_class: int, size: int = 8, seed: int = 0,
                       mode: str = "L") -> Path:
    """An image folder of three classes a tiny ViT tells apart in a hundred updates: a bright
    horizontal bar (``across``), a vertical one (``down``) or a diagonal (``slash``) at a random
    place on a noisy dark background, as ``root/CLASS/N.png``."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for label, name in enumerate(BARS):
        (root / name).mkdir(parents=True, exist_ok=True)
        for n in range(per_class):
            pixels = rng.integers(0, 60, size=(size, size)).astype(np.uint8)
            at = int(rng.integers(1, size - 1))
            if name == "across":
                pixels[at, :] = 230
            elif name == "down":
                pixels[:, at] = 230
            else:
                pixels[np.arange(size), np.arange(size)[::-1]] = 230
            image = Image.fromarray(pixels, "L")
            (image.convert(mode) if mode != "L" else image).save(root / name / f"{n}.png")
    return root


TONES = {"A": 400.0, "B": 1000.0, "C": 2200.0}  # each letter a pitch


def write_tone_recordings(root: Path, count: int, seed: int = 0, name: str = "table") -> Path:
    """Recordings a tiny speech model learns to transcribe in a few hundred updates: words of one
    to three letters of A, B, C, each letter 0.12 s of its own pitch (``TONES``), words apart by a
    silence, with a little noise; written as ``root/NAME/N.flac`` and the table ``root/NAME.tsv``
    (path, transcript)."""
    import numpy as np
    import soundfile

    rng = np.random.default_rng(seed)
    rate, letter = 16_000, int(0.12 * 16_000)
    (root / name).mkdir(parents=True, exist_ok=True)
    lines = ["path\ttranscript"]
    t = np.arange(letter) / rate
    for n in range(count):
        words = ["".join(rng.choice(list(TONES), size=int(rng.integers(1, 4))))
                 for _ in range(int(rng.integers(1, 3)))]
        pieces = [np.zeros(int(0.05 * rate))]
        for word in words:
            pieces += [0.4 * np.sin(2 * np.pi * TONES[c] * t) for c in word]
            pieces.append(np.zeros(int(0.08 * rate)))
        samples = np.concatenate(pieces) + 0.005 * rng.standard_normal(sum(map(len, pieces)))
        soundfile.write(root / name / f"{n}.flac", samples.astype(np.float32), rate)
        lines.append(f"{name}/{n}.flac\t{' '.join(words)}")
    (root / f"{name}.tsv").write_text("\n".join(lines) + "\n")
    return root / f"{name}.tsv"


def assert_torchrun_equals_accumulation(common: list[str], tmp_path: Path) -> None:
    """``transduce train *common`` in two processes under torchrun ends with the weights of one
    process accumulating the same two batches a step (``--update-freq 2``)."""
    import os
    import subprocess
    import sys

    import torch
    from safetensors.torch import load_file

    from transduce.checkpoint import list_checkpoints

    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "-m", "transduce", "train", *common, "--out", str(tmp_path / "ddp")],
        capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    cli("train", *common, "--out", str(tmp_path / "single"), "--update-freq", "2")
    a, b = (load_file(str(list_checkpoints(tmp_path / run)[-1] / "model.safetensors"))
            for run in ("ddp", "single"))
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-5, rtol=1e-4)
