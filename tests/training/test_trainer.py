"""The trainer's update, one call at a time: accumulation is one big batch, a non-finite loss
changes nothing, the learning rate is the schedule's, the EMA follows only applied updates."""

from __future__ import annotations

import json

import pytest
import torch

import transduce.training.trainer as trainer_module
from transduce import ModelConfig
from transduce.config import TrainConfig
from transduce.training import RunSettings, Trainer
from transduce.training.schedule import learning_rate

from ..helpers import prepare_reverse_task


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return prepare_reverse_task(tmp_path_factory.mktemp("update"), n_train=200, n_valid=10)


def make(data, out, **train) -> Trainer:
    vocab = json.loads((data / "meta.json").read_text())["vocab_size"]["src"]
    config = ModelConfig.preset(
        "tiny", vocab_size=vocab, dropout=0.0
    )  # (no dropout: updates comparable)
    recipe = TrainConfig(
        **{"max_tokens": 300, "warmup": 4, "max_steps": 10, "log_every": 100, **train}
    )
    return Trainer(
        config, recipe, RunSettings(str(data), str(out), quiet=True), log=lambda *a: None
    )


def weights(trainer) -> dict:
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def gradients_at_the_step(trainer) -> dict:
    """The gradients the optimizer's next step applies, recorded when it is called."""
    seen, real = {}, trainer.optimizer.step

    def step(*args, **kwargs):
        seen.update(
            {
                name: p.grad.clone()
                for name, p in trainer.model.named_parameters()
                if p.grad is not None
            }
        )
        return real(*args, **kwargs)

    trainer.optimizer.step = step
    return seen


def test_accumulated_micro_batches_give_the_gradient_of_one_big_batch(data, tmp_path):
    """Each micro-batch's loss is normalized by the target tokens of the whole update, so two
    micro-batches give exactly the gradient of the one batch that holds both."""
    split, joined = make(data, tmp_path / "a"), make(data, tmp_path / "b")
    first, second = split.sampler.batches(0)[:2]
    split_grads, joined_grads = gradients_at_the_step(split), gradients_at_the_step(joined)
    a = split.update([split.collate(first, 0, 0), split.collate(second, 0, 1)])
    b = joined.update([joined.collate(list(first) + list(second), 0, 0)])
    assert a["tokens"] == b["tokens"] and float(a["loss"]) == pytest.approx(
        float(b["loss"]), rel=1e-5
    )
    assert split_grads.keys() == joined_grads.keys() and split_grads
    for name, grad in split_grads.items():
        torch.testing.assert_close(grad, joined_grads[name], atol=1e-7, rtol=1e-4, msg=name)
    assert any(grad.abs().max() > 1e-4 for grad in split_grads.values())


def test_the_learning_rate_of_an_update_is_the_schedules(data, tmp_path):
    trainer = make(data, tmp_path / "run", ema=0.9)
    batch = trainer.sampler.batches(0)[0]
    before = weights(trainer)
    for n in range(1, 4):
        stats = trainer.update([trainer.collate(batch, 0, 0)])
        trainer.progress.step += 1  # (the loop counts applied updates)
        tc = trainer.tc
        expected = learning_rate(
            n, tc.lr_schedule, trainer.cfg.d_model, tc.warmup, tc.lr_factor, tc.peak_lr
        )
        assert stats["finite"] and stats["lr"] == expected
        assert all(group["lr"] == expected for group in trainer.optimizer.param_groups)
    shadow = trainer.ema.state_dict()
    assert any(
        not torch.equal(shadow[k].to(before[k].dtype), before[k]) for k in before if k in shadow
    )


def test_a_non_finite_loss_changes_nothing(data, tmp_path, monkeypatch):
    """Neither the weights, nor the optimizer's moments, nor the EMA move; the update says so."""
    trainer = make(data, tmp_path / "run", ema=0.9)
    batch = trainer.collate(trainer.sampler.batches(0)[0], 0, 0)
    trainer.update([batch])  # one good update first: the optimizer has moments to keep
    before, moments = (
        weights(trainer),
        {k: v.clone() for k, v in trainer.optimizer.state_dict()["state"][0].items()},
    )
    shadow = {k: v.clone() for k, v in trainer.ema.state_dict().items()}
    real = trainer_module.label_smoothed_nll

    def poisoned(*args, **kwargs):
        loss, nll = real(*args, **kwargs)
        return loss * float("nan"), nll

    monkeypatch.setattr(trainer_module, "label_smoothed_nll", poisoned)
    stats = trainer.update([batch])
    assert not stats["finite"]
    assert all(torch.equal(before[k], v) for k, v in weights(trainer).items())
    assert all(
        torch.equal(moments[k], v) for k, v in trainer.optimizer.state_dict()["state"][0].items()
    )
    assert all(torch.equal(shadow[k], v) for k, v in trainer.ema.state_dict().items())
    assert all(
        p.grad is None for p in trainer.model.parameters()
    )  # nothing left for the next update
