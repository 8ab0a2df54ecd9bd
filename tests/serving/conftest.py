"""The serving tests' model (``served_run``) and a real ``transduce serve`` process to test
against."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from ..helpers import transduce_command


@pytest.fixture(scope="session")
def served_run(reverse_run):
    """The tiny word-reversal model of ``tests/conftest.py``: outputs are the task's words."""
    return reverse_run / "run"


class ServerProcess:
    """``python -m transduce serve RUN ...`` in a process of its own; ``url`` once it listens.
    Its stderr is collected in ``log`` (a reader thread keeps the pipe from filling)."""

    def __init__(self, run, *flags: str, port: int = 0, timeout: float = 600.0,
                 prelude: str = ""):
        command = transduce_command("serve", str(run), "--port", str(port), "--threads", "1",
                                    *flags, prelude=prelude)
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        self.log: list[str] = []
        self.url = None
        deadline = time.monotonic() + timeout
        while self.url is None:
            line = self.process.stderr.readline()
            if not line:
                raise AssertionError("transduce serve ended before "
                                     f"listening:\n{''.join(self.log)}")
            self.log.append(line)
            if line.startswith("open http://"):
                self.url = line.split()[1].rstrip("/")
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"transduce serve did not listen within {timeout} "
                                     f"s:\n{''.join(self.log)}")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stderr:
            self.log.append(line)

    def stop(self, timeout: float = 60.0) -> int:
        if self.process.poll() is None:
            self.process.terminate()
        code = self.process.wait(timeout)
        self._reader.join(5)
        return code

    def text(self) -> str:
        return "".join(self.log)


@pytest.fixture()
def start_server():
    """Start ``transduce serve`` processes; every one still running is stopped after the test."""
    started: list[ServerProcess] = []

    def start(run, *flags, port: int = 0, prelude: str = "") -> ServerProcess:
        server = ServerProcess(run, *flags, port=port, prelude=prelude)
        started.append(server)
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait(30)


@pytest.fixture(scope="session")
def task_runs(tmp_path_factory):
    """A run of each other task the server serves, trained two updates (their pages are tested,
    not their quality): ``{"parse": RUN, "classify": RUN, "transcribe": RUN}`` and the inputs
    ``root / "images"`` and ``root / "table"`` (recordings)."""
    from ..helpers import cli, write_image_folder, write_tone_recordings
    from ..integration.test_parsing import treebank

    root = tmp_path_factory.mktemp("task-runs")
    fast = ["--max-steps", "2", "--quiet", "--threads", "1", "--precision", "fp32", "--set",
            "save_minutes=0", "--set", "valid_every=-1"]
    (root / "train.trees").write_text(treebank(40, 1))
    cli("prepare", "--trees", "--train-prefix", str(root / "train"), "--vocab-size", "40",
        "--out", str(root / "trees"))
    cli("train", str(root / "trees"), "--out", str(root / "parse"), "--preset", "tiny", *fast)
    write_image_folder(root / "images", 4)
    cli("prepare", "--images", str(root / "images"), "--hold-out", "3", "--out",
        str(root / "pixels"))
    cli("train", str(root / "pixels"), "--out", str(root / "classify"), "--preset", "vit-tiny",
        "--set", "patch_size=2", "--set", "encoder_layers=1", *fast)
    write_tone_recordings(root, 6)
    cli("prepare", "--audio", str(root / "table.tsv"), "--hold-out", "2", "--out",
        str(root / "sound"))
    cli("train", str(root / "sound"), "--out", str(root / "transcribe"), "--preset",
        "speech-small", "--set", "encoder_layers=1", "--set", "decoder_layers=1", "--set",
        "d_model=32", "--set", "n_heads=2", "--set", "d_ff=64", *fast)
    return root
