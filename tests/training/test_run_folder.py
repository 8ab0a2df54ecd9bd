"""The run folder: a graceful stop (SIGTERM, Ctrl-C) at any moment saves a checkpoint from which
``--resume`` continues exactly as the uninterrupted run, as after a kill -9."""

from __future__ import annotations

import os
import random
import signal

import pytest
import torch
from safetensors.torch import load_file

import transduce.training.run_folder as run_folder
from transduce import ModelConfig
from transduce.checkpoint import list_checkpoints
from transduce.config import TrainConfig
from transduce.training import RunSettings, Trainer, TrainingError
from transduce.training.validation import Validation

from ..helpers import prepare_reverse_task

STEPS = 12


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return prepare_reverse_task(tmp_path_factory.mktemp("stops"), n_train=300, n_valid=10)


def _trainer(data, out, resume=False) -> Trainer:
    import json

    vocab = json.loads((data / "meta.json").read_text())["vocab_size"]["src"]
    config = ModelConfig.preset("tiny", vocab_size=vocab)  # dropout 0.1: the RNG states matter
    recipe = TrainConfig(
        max_tokens=400,
        warmup=5,
        max_steps=STEPS,
        valid_every=4,
        valid_share=0,
        save_minutes=0,
        save_every=5,
        log_every=100,
    )
    return Trainer(
        config,
        recipe,
        RunSettings(str(data), str(out), quiet=True),
        resume=resume,
        log=lambda *a: None,
    )


def _weights(run) -> dict:
    return load_file(str(list_checkpoints(run)[-1] / "model.safetensors"))


def _signal_at(monkeypatch, moment: str, call: int, number=signal.SIGTERM, times: int = 1) -> None:
    """Send ``number`` to this process (``times`` times) the ``call``-th time training reaches
    ``moment``."""
    seen = {"n": 0}

    def fire():
        seen["n"] += 1
        if seen["n"] == call:
            for _ in range(times):
                os.kill(os.getpid(), number)

    def around(owner, name, before: bool):
        real = getattr(owner, name)

        def wrapped(*args, **kwargs):
            if before:
                fire()
            out = real(*args, **kwargs)
            if not before:
                fire()
            return out
        monkeypatch.setattr(owner, name, wrapped)

    if moment == "after the optimizer update, before the step counter":
        around(torch.optim.Adam, "step", before=False)
    elif moment == "in the forward pass":  # after dropout drew its masks, before the update
        from transduce import Transformer
        around(Transformer, "forward", before=False)
    elif moment == "while a batch is collated":
        import transduce.training.data_setup as data_setup
        around(data_setup, "collate", before=True)
    elif moment == "during validation":
        around(Validation, "validate", before=True)
    elif moment == "while a checkpoint is written":
        around(run_folder, "write_checkpoint", before=True)
    else:
        raise ValueError(moment)


MOMENTS = ["after the optimizer update, before the step "
           "counter", "in the forward pass", "while a batch is collated",
           "during validation", "while a checkpoint is written"]


@pytest.fixture(scope="module")
def uninterrupted(data, tmp_path_factory):
    run = tmp_path_factory.mktemp("full") / "run"
    _trainer(data, run).train()
    return _weights(run)


def _draws(seed: int) -> list[tuple[str, int]]:
    """The moments of the test, each at a call drawn with ``seed`` (every moment once, then
    more)."""
    rng = random.Random(seed)
    # the times each moment comes before the end
    calls = {"during validation": 2, "while a checkpoint is written": 2}
    draws = [(m, rng.randint(1, calls.get(m, 10))) for m in MOMENTS]
    for _ in range(2):
        moment = rng.choice(MOMENTS)
        draws.append((moment, rng.randint(1, calls.get(moment, 10))))
    return draws


@pytest.mark.parametrize("moment, call", _draws(seed=29), ids=lambda x: str(x))
def test_a_graceful_stop_at_any_moment_resumes_exactly(
    data, uninterrupted, tmp_path, monkeypatch, moment, call
):
    run = tmp_path / "run"
    with monkeypatch.context() as patch:
        _signal_at(patch, moment, call)
        summary = _trainer(data, run).train()
    assert summary["stopped"] == "terminated (SIGTERM)" and summary["step"] <= STEPS
    stopped = list_checkpoints(run)[-1]
    # the checkpoint is labelled with the step it holds
    assert int(stopped.name[5:]) == summary["step"]
    _trainer(data, run, resume=True).train()
    resumed = _weights(run)
    assert all(torch.equal(uninterrupted[k], resumed[k]) for k in uninterrupted), (
        f"{moment}: the resumed run differs"
    )


def test_a_second_signal_stops_at_once_and_the_last_checkpoint_stands(
    data, uninterrupted, tmp_path, monkeypatch
):
    run = tmp_path / "run"
    trainer = _trainer(data, run)
    # (saves do not change the weights)
    trainer.tc = TrainConfig(**{**trainer.tc.to_dict(), "save_every": 3})
    with monkeypatch.context() as patch:
        _signal_at(patch, "in the forward pass", 8, signal.SIGINT, times=2)
        with pytest.raises(TrainingError, match=r"interrupted \(Ctrl-C\) again: stopped at once "
                                                r"without saving"):
            trainer.train()
    assert [int(p.name[5:]) for p in list_checkpoints(run)] == [3, 6]  # nothing written at the stop
    _trainer(data, run, resume=True).train()
    resumed = _weights(run)
    assert all(torch.equal(uninterrupted[k], resumed[k]) for k in uninterrupted)


@pytest.mark.parametrize("damage", ["weights of another "
                                    "shape", "a progress field of the wrong type",
                                    "weights linking out of the "
                                    "folder", "an rng state of the wrong kind"])
def test_resume_falls_back_from_a_damaged_newest_checkpoint(data, tmp_path, damage):
    import json

    from safetensors.torch import save_file

    run = tmp_path / "run"
    _trainer(data, run).train()
    newest = list_checkpoints(run)[-1]
    assert newest.name == f"step_{STEPS:08d}"
    if damage == "weights of another shape":
        state = load_file(str(newest / "model.safetensors"))
        state["decoder.0.ffn.w1.weight"] = state["decoder.0.ffn.w1.weight"][:-1].contiguous()
        save_file(state, str(newest / "model.safetensors"))
    elif damage == "a progress field of the wrong type":
        trainer = json.loads((newest / "trainer.json").read_text())
        trainer["progress"]["step"] = str(trainer["progress"]["step"])
        (newest / "trainer.json").write_text(json.dumps(trainer))
    elif damage == "weights linking out of the folder":
        (newest / "model.safetensors").rename(tmp_path / "outside.safetensors")
        (newest / "model.safetensors").symlink_to(tmp_path / "outside.safetensors")
    else:
        state = torch.load(newest / "state.pt", weights_only=True)
        state["rng"] = [torch.zeros(3, dtype=torch.float32)]
        torch.save(state, newest / "state.pt")
    lines: list[str] = []
    trainer = _trainer(data, run, resume=True)
    assert trainer.progress.step == 10  # the checkpoint before it
    trainer.log = lines.append
    assert trainer.train()["step"] == STEPS


def test_init_from_a_missing_or_different_model_is_refused_before_the_run_folder_exists(
    data, tmp_path
):
    import json

    vocab = json.loads((data / "meta.json").read_text())["vocab_size"]["src"]
    recipe = TrainConfig(max_tokens=400, warmup=5, max_steps=2)
    small = tmp_path / "small"
    Trainer(
        ModelConfig.preset("tiny", vocab_size=vocab, d_ff=128),
        recipe,
        RunSettings(str(data), str(small), quiet=True),
        log=lambda *a: None,
    ).train()
    for source, words in ((tmp_path / "nowhere", "does not exist"), (small, "its model differs in "
                                                                            "d_ff")):
        settings = RunSettings(str(data), str(tmp_path / "run"), quiet=True, init_from=str(source))
        with pytest.raises(TrainingError, match=f"--init-from {source}: .*{words}"):
            Trainer(
                ModelConfig.preset("tiny", vocab_size=vocab), recipe, settings, log=lambda *a: None
            )
        assert not (tmp_path / "run").exists()


def test_training_returns_freed_memory_to_the_system_as_it_goes(data, tmp_path, monkeypatch):
    """Batches of changing shapes leave the allocator's heap fragmented and the resident memory
    growing: the loop hands freed memory back every TRIM_EVERY updates."""
    import transduce.training.trainer as trainer_module
    from transduce.runtime import release_memory

    calls = []
    monkeypatch.setattr(trainer_module, "release_memory", lambda: calls.append(1) or True)
    _trainer(data, tmp_path / "run").train()
    assert len(calls) == STEPS // trainer_module.TRIM_EVERY
    assert isinstance(release_memory(), bool)  # (True with glibc; elsewhere nothing to do)


def test_a_finished_run_resumed_does_not_validate_its_last_step_again(data, tmp_path, monkeypatch):
    """Running a recipe again resumes its finished runs: their last step was validated (and saved)
    already; a run stopped by a signal before its final validation still gets it."""
    calls = []
    real = Validation.validate

    def counting(self, state):
        calls.append(state.progress.step)
        return real(self, state)

    monkeypatch.setattr(Validation, "validate", counting)
    _trainer(data, tmp_path / "run").train()
    assert calls[-1] == STEPS
    calls.clear()
    _trainer(data, tmp_path / "run", resume=True).train()
    assert calls == []


def test_every_rank_checks_the_run_folder_before_rank_0_writes_into_it(data, tmp_path,
                                                                       monkeypatch):
    # a rank that checked --out after rank 0's lock file appeared, and before its marker, found
    # "files transduce did not write" in its own run folder: the ranks meet once all have checked
    out = tmp_path / "run"
    seen = []
    monkeypatch.setattr(run_folder, "barrier", lambda dist: seen.append(out.exists()))
    _trainer(data, out)
    assert seen == [False]
    assert (out / "config.json").is_file()


def test_an_update_that_writes_nothing_never_replaces_one_that_writes():
    """best/ by the score, except between an update whose validation outputs are all empty and one
    that writes: an empty transcript's CER (100%) is lower than that of one inserting words."""
    from transduce.training.run_folder import Progress
    from transduce.training.validation import empty_share, replaces_best

    first = Progress(step=100)
    assert replaces_best(True, True, first)  # the first validation is best/, whatever it writes
    silent_best = Progress(step=300, best_step=100, best_silent=1)
    assert replaces_best(False, False, silent_best)  # a worse CER, but it writes
    writing_best = Progress(step=300, best_step=200, best_silent=0)
    assert not replaces_best(True, True, writing_best)  # a better CER by writing nothing
    assert replaces_best(True, False, writing_best)
    assert not replaces_best(False, False, writing_best)
    assert (empty_share(["", " ", "a"]), empty_share(["", ""])) == (0.6667, 1.0)
