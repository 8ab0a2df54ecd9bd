"""Training paths beside the default one: bf16 autocast (the default on CPUs with native bf16),
torch.compile, --init-from, early stopping, pruning, accumulation with resume, separate
vocabularies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from transduce import ModelConfig, TrainConfig
from transduce.checkpoint import list_checkpoints
from transduce.training import RunSettings, Trainer, TrainingError

from ..helpers import cli, prepare_reverse_task

COMMON = [
    "--preset",
    "tiny",
    "--set",
    "dropout=0.1",
    "--set",
    "warmup=20",
    "--max-tokens",
    "1500",
    "--threads",
    "1",
    "--quiet",
    "--set",
    "log_every=1",
]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return prepare_reverse_task(tmp_path_factory.mktemp("paths"), n_train=600, n_valid=20)


def last_weights(run: Path) -> dict:
    return load_file(str(list_checkpoints(run)[-1] / "model.safetensors"))


def train_losses(run: Path) -> list[float]:
    return [
        r["loss"]
        for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
        if r["type"] == "train"
    ]


def test_bf16_autocast_learns_and_resumes_exactly(data, tmp_path, device):
    args = [
        *COMMON,
        "--precision",
        "bf16",
        "--device",
        device,
        "--set",
        "valid_every=-1",
        "--set",
        "warmup=8",
    ]
    cli("train", str(data), "--out", str(tmp_path / "full"), "--max-steps", "16", *args)
    losses = train_losses(tmp_path / "full")
    late = sum(losses[-5:]) / 5
    # it learns in bf16 (from ~4.6 nats)
    assert late < 0.9 * sum(losses[:5]) / 5 and late < losses[0] - 1.0
    if device != "cpu":
        return  # bitwise resume is a CPU guarantee (GPU kernels may not be deterministic)
    cli("train", str(data), "--out", str(tmp_path / "part"), "--max-steps", "6", *args)
    cli("train", str(data), "--out", str(tmp_path / "part"), "--max-steps", "16", "--resume", *args)
    a, b = last_weights(tmp_path / "full"), last_weights(tmp_path / "part")
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_compiled_training_equals_eager(data, tmp_path):
    """One update through torch.compile gives the eager update (SGD, so the update is the gradient);
    the CLI's --compile trains with the same losses."""
    from transduce.data import ParallelDataset, collate

    ds = ParallelDataset(data, "train")
    micro = [collate(ds, list(range(0, 30))), collate(ds, list(range(30, 70)))]
    params = []
    for compiled in (False, True):
        trainer = Trainer(
            _config(data, dropout=0.0),
            TrainConfig(max_steps=1, max_tokens=1500, warmup=10),
            RunSettings(
                str(data), str(tmp_path / f"r{int(compiled)}"), quiet=True, compile=compiled
            ),
            log=lambda *a: None,
        )
        trainer.state.optimizer = torch.optim.SGD(trainer.model.parameters(), lr=1.0)
        stats = trainer.update(micro)
        params.append(
            ([p.detach().clone() for p in trainer.model.parameters()], float(stats["loss"]))
        )
        trainer.close()
    (eager, eager_loss), (comp, comp_loss) = params
    assert comp_loss == pytest.approx(eager_loss, abs=1e-5)
    for p, q in zip(eager, comp):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-4)
    args = [
        *COMMON,
        "--precision",
        "fp32",
        "--set",
        "dropout=0.0",
        "--set",
        "valid_every=-1",
        "--max-steps",
        "2",
    ]
    cli("train", str(data), "--out", str(tmp_path / "eager"), *args)
    done = cli("train", str(data), "--out", str(tmp_path / "compiled"), "--compile", *args)
    losses = train_losses(tmp_path / "compiled")
    # (on an H200 this once found no training record at all; the details, for the next look)
    assert losses, (
        f"no training record:\n{(tmp_path / 'compiled' / 'metrics.jsonl').read_text()}\n"
        f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    )
    assert losses[0] == pytest.approx(train_losses(tmp_path / "eager")[0], abs=1e-4)


def _config(data: Path, **kw) -> ModelConfig:
    meta = json.loads((data / "meta.json").read_text())
    return ModelConfig.preset("tiny", vocab_size=meta["vocab_size"]["src"], **kw)


def test_init_from_loads_the_weights_and_refuses_another_model(data, tmp_path):
    from transduce.choice import resolve

    cli(
        "train",
        str(data),
        "--out",
        str(tmp_path / "a"),
        "--max-steps",
        "4",
        *COMMON,
        "--precision",
        "fp32",
    )
    source = load_file(str(resolve(tmp_path / "a") / "model.safetensors"))  # a run: its best/ here
    tc = TrainConfig(max_steps=1, max_tokens=1500)
    trainer = Trainer(
        _config(data, dropout=0.1),
        tc,
        RunSettings(str(data), str(tmp_path / "b"), quiet=True, init_from=str(tmp_path / "a")),
        log=lambda *a: None,
    )
    mine = trainer.model.state_dict()
    assert all(torch.equal(mine[k], source[k]) for k in source)
    trainer.close()
    with pytest.raises(TrainingError, match="d_model"):
        Trainer(
            _config(data, d_model=32),
            tc,
            RunSettings(str(data), str(tmp_path / "c"), quiet=True, init_from=str(tmp_path / "a")),
            log=lambda *a: None,
        )


def test_patience_stops_when_validation_no_longer_improves(data, tmp_path):
    # A learning rate too small to change the translations: every validation after the first is no
    # better.
    out = cli(
        "train",
        str(data),
        "--out",
        str(tmp_path / "run"),
        "--max-steps",
        "50",
        *COMMON,
        "--precision",
        "fp32",
        "--set",
        "valid_every=1",
        "--set",
        "patience=2",
        "--set",
        "valid_share=0",
        "--set",
        "lr_schedule=inverse_sqrt_peak",
        "--set",
        "peak_lr=1e-12",
        "--set",
        "valid_max_sentences=5",
    )
    assert "no better validation BLEU in 2 validations" in out.stdout
    records = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in records if r["type"] == "valid"] == [1, 2, 3]


def test_keep_last_prunes_old_checkpoints(data, tmp_path):
    cli(
        "train",
        str(data),
        "--out",
        str(tmp_path / "run"),
        "--max-steps",
        "5",
        *COMMON,
        "--precision",
        "fp32",
        "--set",
        "save_every=1",
        "--set",
        "keep_last=2",
        "--set",
        "valid_every=-1",
    )
    assert [p.name for p in list_checkpoints(tmp_path / "run")] == [
        "step_00000004",
        "step_00000005",
    ]


def test_exact_resume_with_gradient_accumulation(data, tmp_path):
    args = [
        *COMMON,
        "--precision",
        "fp32",
        "--update-freq",
        "3",
        "--max-tokens",
        "500",
        "--set",
        "valid_every=-1",
    ]
    cli("train", str(data), "--out", str(tmp_path / "full"), "--max-steps", "8", *args)
    cli("train", str(data), "--out", str(tmp_path / "part"), "--max-steps", "3", *args)
    cli("train", str(data), "--out", str(tmp_path / "part"), "--max-steps", "8", "--resume", *args)
    a, b = last_weights(tmp_path / "full"), last_weights(tmp_path / "part")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_separate_vocabularies_end_to_end(tmp_path):
    from transduce.data.dataset import load_meta

    raw_root = tmp_path / "task"
    # writes raw/ (and a joint dataset we do not use)
    prepare_reverse_task(raw_root, n_train=600, n_valid=20)
    raw = raw_root / "raw"
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
        "--separate",
        "--vocab-size",
        "40",
        "--threads",
        "1",
    )
    meta = load_meta(tmp_path / "data")
    assert not meta["joint"] and meta["spm"] == {"src": "spm.en.model", "tgt": "spm.de.model"}
    cli(
        "train",
        str(tmp_path / "data"),
        "--out",
        str(tmp_path / "run"),
        "--max-steps",
        "40",
        *COMMON,
        "--precision",
        "fp32",
        "--set",
        "valid_every=20",
    )
    config = json.loads((tmp_path / "run" / "config.json").read_text())["model"]
    assert config["tying"] == "decoder" and config["tgt_vocab_size"] == meta["vocab_size"]["tgt"]
    out = cli("translate", str(tmp_path / "run"), "--beam", "2", input="the cat sat\nred dog\n")
    assert out.stdout.count("\n") == 2
    scored = cli(
        "evaluate",
        str(tmp_path / "run"),
        "--src",
        str(raw / "valid.en"),
        "--ref",
        str(raw / "valid.de"),
        "--json",
    )
    assert json.loads(scored.stdout)["checkpoint"].endswith("best")


def test_on_validate_can_stop_training_and_validation_time_is_bounded(data, tmp_path):
    seen = []

    def stop_at_second(result: dict):
        seen.append(result)
        return "enough" if len(seen) == 2 else None

    tc = TrainConfig(
        max_tokens=1500,
        max_steps=100,
        valid_every=2,
        valid_share=0.0,
        valid_max_sentences=5,
        log_every=100,
        save_minutes=0,
    )
    trainer = Trainer(_config(data), tc, RunSettings(str(data), str(tmp_path / "run"), quiet=True),
                      log=lambda *a: None, on_validate=stop_at_second)
    summary = trainer.train()
    assert summary["stopped"] == "enough" and summary["step"] == 4
    assert {"exact", "seconds", "sentences"} <= set(seen[0]) and seen[0]["sentences"] == 5
    # with a share of 1e-9 every scheduled validation after the first is skipped (it already took
    # more), and the final weights are validated once more at the end, for best/
    tc = TrainConfig(
        max_tokens=1500, max_steps=8, valid_every=2, valid_share=1e-9, log_every=100, save_minutes=0
    )
    Trainer(_config(data), tc, RunSettings(str(data), str(tmp_path / "run2"), quiet=True),
            log=lambda *a: None).train()
    records = [
        json.loads(line) for line in (tmp_path / "run2" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in records if r["type"] == "valid"] == [2, 8]
