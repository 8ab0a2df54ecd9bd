"""The training loop end to end: learning, exact resume (even after SIGKILL), accumulation,
torchrun, averaging, and the errors a user can run into."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from transduce import ModelConfig, TrainConfig, load
from transduce.checkpoint import list_checkpoints, load_model_from
from transduce.data import ParallelDataset, collate
from transduce.training import RunSettings, Trainer, TrainingError

from ..helpers import cli, killed_at_save, prepare_reverse_task, transduce_command

TINY = [
    "--preset",
    "tiny",
    "--set",
    "dropout=0.1",
    "--set",
    "warmup=100",
    "--max-tokens",
    "1500",
    "--threads",
    "2",  # (both of a quiet 2-core machine: the tests run one at a time)
    "--quiet",
    "--precision",
    "fp32",
    "--set",
    "log_every=10",
]


@pytest.fixture(scope="module")
def reverse_data(tmp_path_factory):
    return prepare_reverse_task(tmp_path_factory.mktemp("reverse"))


@pytest.fixture(scope="module")
def reverse_data_no_valid(tmp_path_factory):
    return prepare_reverse_task(tmp_path_factory.mktemp("reverse_nv"), valid=False, n_train=600)


def weights(run: Path) -> dict:
    return load_file(str(list_checkpoints(run)[-1] / "model.safetensors"))


def model_config(data: Path, **kw) -> ModelConfig:
    meta = json.loads((data / "meta.json").read_text())
    return ModelConfig.preset("tiny", vocab_size=meta["vocab_size"]["src"], **kw)


def token_accuracy(folder: Path, data: Path) -> float:
    model, _ = load_model_from(folder)
    ds = ParallelDataset(data, "valid")
    batch = collate(ds, list(range(len(ds))))
    with torch.no_grad():
        pred = model(batch.src, batch.tgt_in).argmax(-1)
    real = batch.tgt_out != 0
    return float((pred == batch.tgt_out)[real].float().mean())


def test_tiny_model_learns_the_reverse_task(reverse_data, tmp_path, device):
    # Bounded by steps, never by seconds: a busy machine takes longer, not fewer steps.
    cfg = model_config(reverse_data, dropout=0.0)
    tc = TrainConfig(
        max_tokens=1500,
        max_steps=400,
        lr_schedule="inverse_sqrt_peak",
        peak_lr=3e-3,
        warmup=60,
        log_every=100,
        valid_every=150,
        save_minutes=0,
    )
    settings = RunSettings(str(reverse_data), str(tmp_path / "run"), device=device, quiet=True)
    summary = Trainer(cfg, tc, settings, log=lambda *a: None).train()
    accuracy = token_accuracy(list_checkpoints(tmp_path / "run")[-1], reverse_data)
    print(f"reverse task: token accuracy {accuracy:.3f} after {summary['step']} steps, "
          f"{summary['elapsed']} s")
    assert accuracy > 0.95
    records = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    assert {"train", "valid", "end"} <= {r["type"] for r in records}
    train = [r for r in records if r["type"] == "train"][0]
    assert {"loss", "ppl", "lr", "grad_norm", "tokens_per_s"} <= set(train)
    assert (tmp_path / "run" / "best" / "model.safetensors").is_file()


def test_exact_resume_after_a_clean_stop(reverse_data_no_valid, tmp_path):
    """... with an EMA of the weights, whose averages resume exactly too."""
    data = str(reverse_data_no_valid)
    cli("train", data, "--out", str(tmp_path / "full"), "--max-steps", "30", "--ema", "0.9", *TINY)
    cli("train", data, "--out", str(tmp_path / "part"), "--max-steps", "12", "--ema", "0.9", *TINY)
    cli("train", data, "--out", str(tmp_path / "part"), "--max-steps", "30", "--resume", *TINY)
    a, b = weights(tmp_path / "full"), weights(tmp_path / "part")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # bitwise
    ema_a = load_file(str(tmp_path / "full" / "ema" / "model.safetensors"))
    ema_b = load_file(str(tmp_path / "part" / "ema" / "model.safetensors"))
    assert ema_a.keys() == a.keys() and all(torch.equal(ema_a[k], ema_b[k]) for k in a)
    assert not all(torch.equal(ema_a[k], a[k]) for k in a)  # an average, not the last weights
    state = load_file(str(list_checkpoints(tmp_path / "part")[-1] / "ema.safetensors"))
    assert int(state["__updates__"][0]) == 30
    assert load(tmp_path / "part" / "ema").translate(["the cat"], beam=2)[0] is not None


def test_exact_resume_after_sigkill(reverse_data_no_valid, tmp_path):
    data = str(reverse_data_no_valid)
    args = ["train", data, "--out", str(tmp_path / "killed"), "--max-steps", "60",
            "--set", "save_every=5", *TINY]
    # killed right after the checkpoint of update 15 is saved, as a power cut would be
    process = subprocess.run(transduce_command(*args, prelude=killed_at_save(15)),
                             capture_output=True, text=True, timeout=600)
    assert process.returncode == -signal.SIGKILL, process.stderr[-2000:]
    assert int(list_checkpoints(tmp_path / "killed")[-1].name[5:]) == 15
    cli(
        "train",
        data,
        "--out",
        str(tmp_path / "killed"),
        "--max-steps",
        "60",
        "--resume",
        "--set",
        "save_every=5",
        *TINY,
    )
    cli(
        "train",
        data,
        "--out",
        str(tmp_path / "full"),
        "--max-steps",
        "60",
        "--set",
        "save_every=5",
        *TINY,
    )
    a, b = weights(tmp_path / "full"), weights(tmp_path / "killed")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not [
        p for p in (tmp_path / "killed" / "checkpoints").iterdir() if p.name.startswith(".")
    ]


def test_gradient_accumulation_equals_one_big_batch(reverse_data, tmp_path):
    cfg = model_config(reverse_data, dropout=0.0)
    tc = TrainConfig(max_tokens=2000, warmup=10, max_steps=1)
    ds = ParallelDataset(reverse_data, "train")
    b0, b1 = list(range(0, 20)), list(range(20, 50))
    params = []
    for i, micro in enumerate(([b0, b1], [b0 + b1])):
        trainer = Trainer(
            cfg,
            tc,
            RunSettings(str(reverse_data), str(tmp_path / f"r{i}"), quiet=True),
            log=lambda *a: None,
        )
        # SGD makes the update proportional to the gradient (Adam's first step is ~lr * sign(grad),
        # which turns rounding noise in near-zero gradients into full-size differences).
        trainer.state.optimizer = torch.optim.SGD(trainer.model.parameters(), lr=1.0)
        stats = trainer.update([collate(ds, b) for b in micro])
        params.append([p.detach().clone() for p in trainer.model.parameters()])
        assert stats["tokens"] == sum(int(ds.tgt_lengths[j]) + 1 for j in b0 + b1)
    for p, q in zip(*params):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)


def test_torchrun_two_processes_equal_one_process_over_the_same_batches(
    reverse_data_no_valid, tmp_path
):
    from transduce.data import TokenBatchSampler

    ds = ParallelDataset(reverse_data_no_valid, "train")
    # a budget whose batch count is even in every epoch used, so that no batch is split for 2 ranks
    budget = next(
        b
        for b in range(300, 600, 10)
        if all(
            len(TokenBatchSampler(ds.src_lengths, ds.tgt_lengths, b).all_batches(e)) % 2 == 0
            for e in range(2)
        )
    )
    common = [
        "--max-steps",
        "6",
        "--preset",
        "tiny",
        "--set",
        "dropout=0.0",
        "--set",
        "warmup=10",
        "--max-tokens",
        str(budget),
        "--quiet",
        "--precision",
        "fp32",
        "--threads",
        "1",
        "--device",
        "cpu",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "transduce",
            "train",
            str(reverse_data_no_valid),
            "--out",
            str(tmp_path / "ddp"),
            *common,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    cli(
        "train",
        str(reverse_data_no_valid),
        "--out",
        str(tmp_path / "single"),
        "--update-freq",
        "2",
        *common,
    )
    a, b = weights(tmp_path / "ddp"), weights(tmp_path / "single")
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-5, rtol=1e-4)
    assert len(list_checkpoints(tmp_path / "ddp")) == 1  # only rank 0 wrote


def test_average_is_the_elementwise_mean(reverse_data_no_valid, tmp_path):
    run = tmp_path / "run"
    cli(
        "train",
        str(reverse_data_no_valid),
        "--out",
        str(run),
        "--max-steps",
        "9",
        "--set",
        "save_every=3",
        *TINY,
    )
    found = list_checkpoints(run)
    assert [p.name for p in found] == ["step_00000003", "step_00000006", "step_00000009"]
    cli("average", str(run), "--last", "2", "--out", str(tmp_path / "avg"))
    avg = load_file(str(tmp_path / "avg" / "model.safetensors"))
    w6, w9 = (load_file(str(p / "model.safetensors")) for p in found[1:])
    for k in avg:
        torch.testing.assert_close(
            avg[k], (w6[k].double() + w9[k].double()).div(2).float(), atol=1e-7, rtol=0
        )
    out = cli("translate", str(tmp_path / "avg"), "--beam", "2", input="the cat sat\n")
    assert out.stdout.count("\n") == 1
    early = cli(
        "average", str(run), "--last", "2", "--up-to-step", "7", "--out", str(tmp_path / "avg-7")
    )
    # a budget's mark of a run that went on
    assert "averaged step_00000003, step_00000006 into" in early.stdout
    none = cli(
        "average", str(run), "--up-to-step", "2", "--out", str(tmp_path / "avg-2"), check=False
    )
    assert none.returncode == 2 and "no checkpoints to average at or before step 2" in none.stderr


def test_bad_inputs_give_clear_messages(reverse_data_no_valid, reverse_data, tmp_path):
    missing = cli(
        "train",
        str(tmp_path / "nowhere"),
        "--out",
        str(tmp_path / "r"),
        "--max-steps",
        "1",
        check=False,
    )
    assert missing.returncode == 2 and f"{tmp_path / 'nowhere'} does not exist" in missing.stderr
    empty = cli(
        "train", str(tmp_path), "--out", str(tmp_path / "r"), "--max-steps", "1", check=False
    )
    assert empty.returncode == 2 and "is not a prepared dataset (no meta.json)" in empty.stderr
    typo = cli(
        "train", str(reverse_data), "--out", str(tmp_path / "r"), "--set", "warmpu=3", check=False
    )
    assert typo.returncode == 2 and "did you mean 'warmup'" in typo.stderr
    run = tmp_path / "run"
    cli("train", str(reverse_data_no_valid), "--out", str(run), "--max-steps", "2", *TINY)
    again = cli(
        "train",
        str(reverse_data_no_valid),
        "--out",
        str(run),
        "--max-steps",
        "2",
        *TINY,
        check=False,
    )
    assert again.returncode == 2 and "pass --resume" in again.stderr
    shape = cli(
        "train",
        str(reverse_data_no_valid),
        "--out",
        str(run),
        "--max-steps",
        "4",
        "--resume",
        *TINY,
        "--set",
        "d_model=32",
        check=False,
    )
    assert shape.returncode == 2 and "d_model: 64 -> 32" in shape.stderr
    none = cli(
        "train",
        str(reverse_data_no_valid),
        "--out",
        str(tmp_path / "r2"),
        "--preset",
        "tiny",
        check=False,
    )
    assert none.returncode == 2 and "no stopping rule" in none.stderr


def test_non_finite_losses_are_skipped_then_stop_without_damage(reverse_data_no_valid, tmp_path):
    cfg = model_config(reverse_data_no_valid)
    tc = TrainConfig(max_tokens=1500, max_steps=50, max_bad_steps=3, log_every=1000, save_minutes=0)
    trainer = Trainer(
        cfg,
        tc,
        RunSettings(str(reverse_data_no_valid), str(tmp_path / "run"), quiet=True),
        log=lambda *a: None,
    )
    trainer.save()
    before = (list_checkpoints(tmp_path / "run")[-1] / "model.safetensors").read_bytes()
    real_forward = trainer.forward_model
    calls = {"n": 0}

    def poisoned(src, tgt_in, **kwargs):
        calls["n"] += 1
        out = real_forward(src, tgt_in, **kwargs)
        return out * float("nan") if calls["n"] > 2 else out

    trainer.forward_model = poisoned
    with pytest.raises(TrainingError, match="3 non-finite losses in a row"):
        trainer.train()
    assert trainer.progress.step == 2 and trainer.progress.skipped_updates == 3
    assert (list_checkpoints(tmp_path / "run")[0] / "model.safetensors").read_bytes() == before


def test_the_ema_at_a_checkpoint_becomes_a_checkpoint(reverse_data_no_valid, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    run = tmp_path / "run"
    cli(
        "train",
        str(reverse_data_no_valid),
        "--out",
        str(run),
        "--max-steps",
        "6",
        "--ema",
        "0.9",
        "--set",
        "save_every=3",
        *TINY,
    )
    first = list_checkpoints(run)[0]
    script = Path(__file__).resolve().parents[2] / "recipes" / "multi30k" / "ema_at.py"
    done = subprocess.run(
        [sys.executable, str(script), str(first), str(tmp_path / "ema-3")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    written = load_file(str(tmp_path / "ema-3" / "model.safetensors"))
    state = load_file(str(first / "ema.safetensors"))
    assert int(state["__updates__"][0]) == 3
    common = written.keys() & state.keys()  # (a tied weight is stored under one of its names)
    assert len(common) >= len(written) - 1 and all(
        torch.equal(written[k], state[k]) for k in common
    )
    latest = load_file(str(run / "ema" / "model.safetensors"))
    # the average at step 3, not at 6
    assert not all(torch.equal(written[k], latest[k]) for k in common)


def test_mark_scores_the_last_checkpoint_the_average_and_the_ema_at_a_step(
    reverse_data_no_valid, tmp_path
):
    """recipes/multi30k/mark.sh: the Multi30k figures of docs/experiments.md at a budget's mark,
    from one command."""
    import gzip
    import os
    import subprocess
    import sys
    from pathlib import Path

    from ..helpers import write_reverse_task

    run = tmp_path / "run"
    cli(
        "train",
        str(reverse_data_no_valid),
        "--out",
        str(run),
        "--max-steps",
        "30",
        "--ema",
        "0.9",
        "--set",
        "save_every=10",
        *TINY,
    )
    write_reverse_task(tmp_path / "text", n_train=1, n_valid=12, seed=5)
    raw = tmp_path / "raw"
    raw.mkdir()
    for split in ("val", "test_2016_flickr"):
        for lang in ("en", "de"):
            (raw / f"{split}.{lang}.gz").write_bytes(
                gzip.compress((tmp_path / "text" / f"valid.{lang}").read_bytes())
            )
    script = Path(__file__).resolve().parents[2] / "recipes" / "multi30k" / "mark.sh"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", str(script), str(run), "30", str(raw), "1"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split("\t") for line in (run / "mark-30.tsv").read_text().splitlines()]
    assert rows[0] == ["candidate", "valid_bleu", "valid_chrf", "test_bleu", "test_chrf"]
    assert [r[0] for r in rows[1:]] == ["last", "avg3", "ema"]
    # the average of the last 3 checkpoints up to update 30, not of the last three of the run
    assert json.loads((run / "avg3-at-30" / "model.json").read_text())["averaged_from"] == [
        "step_00000010", "step_00000020", "step_00000030"]
    for name, candidate in (
        ("last", run / "checkpoints" / "step_00000030"),
        ("ema", run / "ema-at-30"),
    ):
        own = json.loads(cli("evaluate", str(candidate), "--src", str(raw / "val.en.gz"), "--ref",
                             str(raw / "val.de.gz"), "--beam", "1", "--json").stdout)
        assert next(r for r in rows if r[0] == name)[1:3] == [
            f"{own['bleu']:.2f}",
            f"{own['chrf']:.2f}",
        ]
    # three different models, three different scores
    assert len({tuple(r[1:]) for r in rows[1:]}) == 3
    missing = subprocess.run(
        ["bash", str(script), str(run), "25", str(raw)], capture_output=True, text=True, env=env
    )
    assert missing.returncode == 2 and "no checkpoint at update 25" in missing.stderr
