"""The demo end to end (reduced), attention pictures, plots, and the download command."""

import gzip
import json
import http.server
import shutil
import threading
from functools import partial
from pathlib import Path

import pytest
from PIL import Image

from transduce.visualize import DPI

from ..conftest import MULTI30K
from ..helpers import cli, prepare_reverse_task


def test_demo_runs_end_to_end_in_a_reduced_form(tmp_path):
    out = tmp_path / "demo"
    result = cli(
        "demo",
        "--out",
        str(out),
        "--max-steps",
        "30",
        "--max-time",
        "60",
        "--train-size",
        "2000",
        "--test-size",
        "50",
        "--quiet",
    )
    assert "exact match:" in result.stdout and "files written:" in result.stdout
    for name in (
        "attention.png",
        "cross_attention.png",
        "curves.png",
        "positional_encoding.png",
        "test.hyp.de",
    ):
        assert (out / name).is_file() and str(out / name) in result.stdout
    assert len((out / "test.hyp.de").read_text().splitlines()) == 50
    assert (out / "run" / "checkpoints").is_dir()
    # says which happened
    assert "stopped at a limit (max_steps 30) before the target" in result.stdout
    assert "Run it again with a longer --max-time" in result.stdout
    again = cli(
        "demo",
        "--out",
        str(out),
        "--max-steps",
        "5",
        "--train-size",
        "2000",
        "--test-size",
        "50",
        "--quiet",
    )
    assert "exact match:" in again.stdout  # its own folder: run again in place


def test_lm_demo_runs_end_to_end_in_a_reduced_form(tmp_path):
    out = tmp_path / "demo-lm"
    result = cli(
        "demo",
        "--lm",
        "--out",
        str(out),
        "--max-steps",
        "30",
        "--train-size",
        "1000",
        "--test-size",
        "20",
        "--quiet",
    )
    assert (
        "the next number is right for" in result.stdout and "of 20 held-out counts" in result.stdout
    )
    assert "validation perplexity" in result.stdout and "try: transduce generate" in result.stdout
    assert (out / "curves.png").is_file() and (out / "run" / "best" / "model.safetensors").is_file()
    again = cli(
        "demo",
        "--lm",
        "--out",
        str(out),
        "--max-steps",
        "5",
        "--train-size",
        "1000",
        "--test-size",
        "5",
        "--quiet",
    )
    assert "of 5 held-out counts" in again.stdout  # its own folder: run again in place


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("attn")
    data = prepare_reverse_task(root, n_train=300, n_valid=20)
    cli(
        "train",
        str(data),
        "--out",
        str(root / "run"),
        "--max-steps",
        "3",
        "--preset",
        "tiny",
        "--quiet",
        "--set",
        "encoder_layers=2",
        "--set",
        "decoder_layers=3",
        "--set",
        "n_heads=4",
        "--precision",
        "fp32",
    )
    return root / "run"


def test_attention_png_size_matches_the_layer_by_head_grid(small_run, tmp_path):
    out = tmp_path / "att.png"
    cli(
        "attention",
        str(small_run),
        "--src",
        "the cat sat",
        "--tgt",
        "sat cat the",
        "--out",
        str(out),
    )
    width, height = Image.open(out).size
    rows = 2 + 3 + 3  # encoder layers + decoder self + cross
    # worked out by hand: 4 tokens at most, so each panel is its 2-inch minimum; 4 heads wide plus a
    # 1.6-inch margin, 8 rows high plus 1 inch
    w, h = 2.0 * 4 + 1.6, 2.0 * rows + 1.0
    assert (width, height) == (round(w * DPI), round(h * DPI))
    cross = tmp_path / "cross.png"
    cli(
        "attention",
        str(small_run),
        "--src",
        "the cat sat",
        "--tgt",
        "sat cat the",
        "--out",
        str(cross),
        "--kinds",
        "cross",
    )
    assert Image.open(cross).size == (round(w * DPI), round((2.0 * 3 + 1.0) * DPI))  # 3 rows, not 8
    # without --tgt the target is the model's own beam-search translation
    own = cli(
        "attention", str(small_run), "--src", "the cat sat", "--out", str(tmp_path / "own.png")
    )
    assert "target:" in own.stdout and (tmp_path / "own.png").is_file()


def test_plots(small_run, tmp_path):
    cli("plot", str(small_run), "--out", str(tmp_path / "curves.png"))
    cli("plot-pe", "--d-model", "512", "--out", str(tmp_path / "pe.png"))
    assert (
        Image.open(tmp_path / "curves.png").size[0] > 500
        and Image.open(tmp_path / "pe.png").size[0] > 500
    )


def test_plot_draws_several_runs_over_each_other(small_run, tmp_path):


    import numpy as np

    records = [
        json.loads(line)
        for line in (small_run / "metrics.jsonl").read_text().splitlines()
        if line.strip()
    ]
    assert any(r.get("type") == "valid" for r in records)
    pictures = []
    # a second run: the same records with BLEU higher, in a folder of the same name
    for shift in (10, 20):
        other = tmp_path / f"shift{shift}" / "other-seed"
        other.mkdir(parents=True)
        (other / "metrics.jsonl").write_text(
            "".join(
                json.dumps({**r, "bleu": r["bleu"] + shift} if r.get("type") == "valid" else r)
                + "\n"
                for r in records
            )
        )
        cli("plot", str(small_run), str(other), "--out", str(tmp_path / f"two{shift}.png"))
        pictures.append(np.asarray(Image.open(tmp_path / f"two{shift}.png").convert("RGB")))
    # the second run is drawn
    assert pictures[0].shape != pictures[1].shape or (pictures[0] != pictures[1]).any()
    # several runs: where does the picture go?
    missing = cli("plot", str(small_run), str(other), check=False)
    assert (
        missing.returncode == 2
        and "--out FILE.png" in missing.stderr
        and not list(other.glob("*.png"))
    )
    # a language model's perplexity and a translation model's BLEU do not share a picture
    lm = tmp_path / "lm"
    lm.mkdir()
    (lm / "metrics.jsonl").write_text(
        json.dumps({"type": "valid", "step": 1, "loss": 2.0, "ppl": 7.4}) + "\n"
    )
    mixed = cli("plot", str(small_run), str(lm), "--out", str(tmp_path / "mixed.png"), check=False)
    assert (
        mixed.returncode == 2
        and "cannot share a picture" in mixed.stderr
        and not (tmp_path / "mixed.png").exists()
    )


@pytest.fixture
def server(tmp_path):
    """A loopback HTTP server of the test's own, serving a folder."""
    root = tmp_path / "served"
    root.mkdir()
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()


def fill(root: Path, monkeypatch) -> None:
    """Serve the published files (or, without the shared copy, generated ones whose checksums the
    test pins in place of the published ones)."""
    from transduce.cli.download import DATASETS, sha256

    files = dict(DATASETS["multi30k"]["files"])
    for name, (lines, digest) in files.items():
        source = MULTI30K / name
        if source.is_file():
            shutil.copyfile(source, root / name)
        else:
            (root / name).write_bytes(gzip.compress(b"line\n" * lines))
            files[name] = (lines, sha256(root / name))
    monkeypatch.setitem(DATASETS["multi30k"], "files", files)


def test_download_from_a_loopback_server(server, tmp_path, monkeypatch):
    root, url = server
    fill(root, monkeypatch)
    out = tmp_path / "m30k"
    result = cli("download", "multi30k", str(out), "--base-url", url, "--tgt", "all")
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in root.iterdir())
    assert (out / "train.en.gz").read_bytes() == (root / "train.en.gz").read_bytes()
    assert (
        "--tgt de --out data/multi30k-de" in result.stdout
        and "--tgt fr --out data/multi30k-fr" in result.stdout
    )
    again = cli("download", "multi30k", str(out), "--base-url", url, "--tgt", "all")
    assert again.stdout.count("already there") == 9  # English, German and French


def test_download_fetches_only_the_pair_asked_for(server, tmp_path, monkeypatch):
    """A mirror of the English-German files alone serves the default (--tgt de); French asks for its
    own."""
    root, url = server
    fill(root, monkeypatch)
    for path in root.glob("*.fr.gz"):
        path.unlink()
    out = tmp_path / "m30k"
    result = cli("download", "multi30k", str(out), "--base-url", url)
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == sorted(
        p.name for p in root.iterdir())
    assert "--tgt de" in result.stdout and "--tgt fr" not in result.stdout
    french = cli("download", "multi30k", str(out), "--base-url", url, "--tgt", "fr", check=False)
    assert french.returncode == 2 and "train.fr.gz" in french.stderr


def test_download_refuses_a_truncated_gzip(server, tmp_path, monkeypatch):
    root, url = server
    fill(root, monkeypatch)
    data = (root / "val.de.gz").read_bytes()
    (root / "val.de.gz").write_bytes(data[: len(data) // 2])
    out = tmp_path / "m30k"
    result = cli("download", "multi30k", str(out), "--base-url", url, check=False)
    assert result.returncode == 2
    assert "val.de.gz: the download is not a complete gzip file" in result.stderr
    assert not (out / "val.de.gz").exists() and not list(out.glob(".*"))


def test_download_refuses_a_tampered_mirror(server, tmp_path, monkeypatch):
    """A file of the right length and a valid gzip, but other content: the checksum catches it."""
    root, url = server
    fill(root, monkeypatch)
    lines = gzip.decompress((root / "val.en.gz").read_bytes()).split(b"\n")
    lines[10] = b"A tampered sentence."
    (root / "val.en.gz").write_bytes(gzip.compress(b"\n".join(lines)))
    out = tmp_path / "m30k"
    result = cli("download", "multi30k", str(out), "--base-url", url, check=False)
    assert result.returncode == 2 and "val.en.gz: its SHA-256 is" in result.stderr
    assert not (out / "val.en.gz").exists() and not list(out.glob(".*"))


def test_a_stalled_mirror_is_a_message_not_a_traceback(tmp_path):
    """A server that sends the headers and a few bytes, then nothing: the read times out
    (--timeout)."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def stall():
        connection, _ = listener.accept()
        connection.recv(65536)
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n" + b"\x1f\x8b" * 10)
        stop.wait(30)  # and nothing more, until the test ends
        connection.close()

    thread = threading.Thread(target=stall, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
    out = tmp_path / "m30k"
    try:
        result = cli(
            "download", "multi30k", str(out), "--base-url", url, "--timeout", "0.5", check=False
        )
    finally:
        stop.set()
        listener.close()
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "the server stopped answering" in result.stderr and "--timeout" in result.stderr
    assert not out.exists() or not [p for p in out.iterdir() if not p.name.startswith(".transduce")]


def test_the_runs_title_sits_above_the_panels_titles(tmp_path, monkeypatch):
    """``plot``'s title (the run) and each panel's title do not overlap, at the size it is saved."""
    import transduce.visualize as visualize

    run = tmp_path / "a-run-with-a-long-name-as-users-give-them"
    run.mkdir()
    records = [
        {"type": "train", "step": s, "loss": 5 - s / 100, "lr": 1e-3} for s in range(10, 200, 10)
    ]
    records += [{"type": "valid", "step": s, "loss": 4.0, "bleu": s / 10} for s in (100, 200)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    saved = []
    real = visualize._save
    monkeypatch.setattr(
        visualize, "_save", lambda fig, out, **kw: (saved.append(fig), real(fig, out, **kw))[1]
    )
    visualize.plot_training(run, tmp_path / "curves.png")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = saved[0]
    renderer = FigureCanvasAgg(fig).get_renderer()
    title = fig._suptitle.get_window_extent(renderer)
    for ax in fig.axes:  # (a few pixels of space between them)
        assert title.y0 >= ax.title.get_window_extent(renderer).y1 + 3, ax.title.get_text()
