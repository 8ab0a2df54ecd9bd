"""Around the updates: the log window's token-weighted losses, the log line, the end of a run."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from transduce.config import TrainConfig
from transduce.errors import TrainingError
from transduce.tasks import TASKS
from transduce.training.loop import Window, finish, log_train, progress_bar
from transduce.training.progress import Progress


class Trainer:
    """What the loop's functions read of a trainer."""

    def __init__(self, task="translation", tc=None, **progress):
        self.task, self.tc = TASKS[task], tc or TrainConfig(valid_every=0)
        self.progress = Progress(**progress)
        self.lines, self.records, self.events = [], [], []
        self.folder = SimpleNamespace(write_metrics=self.records.append)
        self.dist = SimpleNamespace(enabled=False)
        self.state = SimpleNamespace(progress=self.progress)
        self.validation = SimpleNamespace(
            track=lambda state, scheduled: self.events.append(("validate", scheduled)))

    def log(self, line):
        self.lines.append(line)

    def save(self):
        self.events.append("save")

    def close(self):
        self.events.append("close")


class Signals:
    def __init__(self, reason=None):
        self.reason, self.restored = reason, False

    def restore(self):
        self.restored = True


class Bar:
    disable = True

    def set_postfix(self, **kw):
        self.postfix = kw


def test_the_window_weights_each_update_s_loss_by_its_tokens():
    window = Window()
    window.add({"loss": 1.0, "nll": 0.5, "tokens": 100})
    window.add({"loss": 4.0, "nll": 2.0, "tokens": 300})
    assert (window.loss / window.tokens, window.nll / window.tokens) == (3.25, 1.625)
    assert window.steps == 2


@pytest.mark.parametrize("task, rate", [("translation", "tokens_per_s"),
                                        ("image-classification", "images_per_s")])
def test_the_log_line_holds_the_window_s_means_and_the_task_s_rate(task, rate):
    trainer = Trainer(task, step=40, epoch=1, elapsed=12.34)
    window = Window()
    window.add({"loss": 2.0, "nll": 1.5, "tokens": 10})
    log_train(trainer, window, {"lr": 0.000123456, "grad_norm": 0.5}, Bar())
    record = trainer.records[0]
    assert (record["step"], record["epoch"], record["loss"]) == (40, 2, 2.0)
    assert record["lr"] == 0.0001235
    assert record["ppl"] == round(math.exp(1.5), 2) and rate in record and "moe_aux" not in record
    assert trainer.lines[0].startswith("step=40 epoch=2 loss=2.0 nll=1.5")


def test_the_end_validates_the_last_weights_saves_and_names_the_task_s_metric():
    trainer = Trainer("parsing", step=90, best_step=80, best_metric="f1", best_value=71.234,
                      validated_step=80, elapsed=120.0)
    summary = finish(trainer, "max_steps", Signals())
    assert trainer.events == [("validate", False), "save", "close"]
    assert summary["best_f1"] == 71.234 and summary["best_step"] == 80
    assert trainer.records[-1]["type"] == "end"
    assert trainer.lines[-1] == ("training stopped (max_steps) at step 90 after 2.0 min; best "
                                 "valid F1 71.23 at step 80")


def test_a_signal_saves_without_validating_and_a_second_one_is_a_message():
    trainer = Trainer(step=5, validated_step=2)
    signals = Signals("terminated (SIGTERM)")
    finish(trainer, "terminated (SIGTERM)", signals)
    assert trainer.events == ["save", "close"] and signals.restored
    assert trainer.lines[0] == "terminated (SIGTERM): saving a checkpoint before stopping"

    def interrupted():
        raise KeyboardInterrupt("interrupted")

    again = Trainer(step=5)
    again.save = interrupted
    with pytest.raises(TrainingError, match="the one before it is intact, and --resume continues"):
        finish(again, "interrupted", Signals("interrupted"))


def test_the_bar_counts_steps_or_seconds():
    by_steps = progress_bar(TrainConfig(max_steps=50), Progress(step=10), False, quiet=True)
    by_time = progress_bar(TrainConfig(max_time=90.0), Progress(elapsed=30.4), True, quiet=True)
    assert (by_steps.total, by_steps.n) == (50, 10) and (by_time.total, by_time.n) == (90, 30)
