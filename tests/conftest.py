"""Shared fixtures: every test starts from the same seeds, on one thread pool size."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
# the raw Multi30k files (train/val/test_2016_flickr .en.gz/.de.gz): TRANSDUCE_MULTI30K=DIR, else
# ../shared/data/multi30k beside the checkout
MULTI30K = Path(os.environ.get("TRANSDUCE_MULTI30K") or SHARED_DATA / "multi30k")
NO_MULTI30K = (f"the Multi30k corpus is not in {MULTI30K}: `transduce download multi30k DIR` "
               "fetches it, and TRANSDUCE_MULTI30K=DIR points the tests to it")


def available_devices() -> list[str]:
    """cpu, and every accelerator this machine has."""
    found = ["cpu"]
    if torch.cuda.is_available():
        found.append("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found.append("mps")
    return found


def pytest_addoption(parser):
    parser.addoption("--device", action="append", default=None, choices=["cpu", "cuda", "mps"],
                     help="run the device-parametrized tests on this device (repeatable; default: "
                          "cpu and every accelerator present)")


def pytest_generate_tests(metafunc):
    """Tests that take a ``device`` argument run once per device: the same suite checks a GPU."""
    if "device" in metafunc.fixturenames:
        chosen = metafunc.config.getoption("--device") or available_devices()
        missing = [d for d in chosen if d not in available_devices()]
        if missing:
            raise pytest.UsageError(f"--device {missing[0]}: this machine has no such device")
        metafunc.parametrize("device", chosen)


@pytest.fixture(autouse=True)
def _seed_everything():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)  # in-process CLI calls may change it


@pytest.fixture(scope="session")
def reverse_run(tmp_path_factory):
    """A folder with ``raw/`` (the word-reversal task), ``data/`` and ``run/``: a tiny model trained
    on it for 500 updates (bounded by steps), which outputs the task's words. The one trained
    translation model of the session, shared read-only by every test that needs one."""
    from .helpers import cli, prepare_reverse_task

    root = tmp_path_factory.mktemp("reverse-run")
    data = prepare_reverse_task(root, n_train=1500, n_valid=30)
    cli(
        "train",
        str(data),
        "--out",
        str(root / "run"),
        "--preset",
        "tiny",
        "--max-steps",
        "500",
        "--quiet",
        "--set",
        "warmup=100",
        "--set",
        "dropout=0.0",
        "--precision",
        "fp32",
        "--max-tokens",
        "1500",
    )
    return root


def tiny_config(**overrides):
    from transduce import ModelConfig

    base = dict(vocab_size=40, dropout=0.0, max_positions=64)
    base.update(overrides)
    return ModelConfig.preset("tiny", **base)


def random_batch(
    batch: int,
    length: int,
    vocab: int,
    pad_id: int = 0,
    min_len: int = 1,
    generator=None,
    device="cpu",
):
    """Token ids ``(batch, length)`` in [4, vocab) with right padding of random lengths, on
    ``device`` (drawn on the CPU, so every device gets the same ids)."""
    g = generator or torch.Generator().manual_seed(1)
    ids = torch.randint(4, vocab, (batch, length), generator=g)
    lengths = torch.randint(min_len, length + 1, (batch,), generator=g)
    lengths[0] = length
    for b, n in enumerate(lengths.tolist()):
        ids[b, n:] = pad_id
    return ids.to(device), lengths.to(device)


@pytest.fixture(scope="session")
def reverser(reverse_run):
    """The model of ``reverse_run`` (trained once for the whole session) as a ``Transformer`` in
    eval mode, with the ids of 60 of its training sources ``(60, S)`` padded and ending in eos:
    confident outputs, as a trained model's, for the tests that decode on token ids."""
    from transduce import load
    from transduce.data.dataset import pad_sequences

    translator = load(reverse_run / "run")
    config = translator.model.config
    lines = (reverse_run / "raw" / "train.en").read_text().splitlines()[:60]
    return translator.model, pad_sequences(
        translator.encode(lines), config.pad_id, suffix=config.eos_id
    )
