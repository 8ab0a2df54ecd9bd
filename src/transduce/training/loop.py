"""The parts of the training loop around the updates: the progress bar, the window of updates
between two log lines, the log line, and the end of a run (the final validation and checkpoint,
the summary)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from ..config import TrainConfig
from ..errors import TrainingError
from . import distributed


def progress_bar(tc: TrainConfig, progress, by_time: bool, quiet: bool):
    """One bar with a total and an ETA: in steps under a step limit, else in seconds under a time
    limit."""
    from tqdm.auto import tqdm

    return tqdm(
        total=(round(tc.max_time) if by_time else tc.max_steps) or None,
        initial=round(progress.elapsed) if by_time else progress.step,
        desc="training",
        unit="s" if by_time else " step",
        disable=True if quiet else None,
        dynamic_ncols=True,
    )


@dataclass
class Window:
    """The updates since the last log line: token-weighted sums of their losses."""

    loss: float = 0.0
    nll: float = 0.0
    tokens: float = 0.0
    steps: int = 0
    time: float = field(default_factory=time.time)

    def add(self, stats: dict) -> None:
        self.loss += stats["loss"] * stats["tokens"]
        self.nll += stats["nll"] * stats["tokens"]
        self.tokens += stats["tokens"]
        self.steps += 1


def log_train(trainer, window: Window, last: dict, bar) -> None:
    """One metrics line for the window (and the bar's postfix); ``last``: the last update's
    statistics."""
    seconds = max(time.time() - window.time, 1e-9)
    # device values are read here, at log steps
    loss = float(window.loss) / max(window.tokens, 1)
    rate = round(window.tokens / seconds, 1)  # target tokens a second (a classifier's: images)
    nll = float(window.nll) / max(window.tokens, 1)
    record = {
        "type": "train",
        "step": trainer.progress.step,
        "epoch": trainer.progress.epoch + 1,
        "loss": round(loss, 4),
        "nll": round(nll, 4),
        "ppl": round(math.exp(min(nll, 50)), 2),
        "lr": float(f"{last['lr']:.4g}"),
        "grad_norm": round(float(last["grad_norm"]), 4),
        "images_per_s" if trainer.task.data_kind == "images" else "tokens_per_s": rate,
        "elapsed": round(trainer.progress.elapsed, 1),
    }
    # the last update's load-balancing loss (1: uniform routing)
    if last.get("moe_aux") is not None:
        record["moe_aux"] = round(float(last["moe_aux"]), 4)
    bar.set_postfix(step=trainer.progress.step, loss=f"{loss:.3f}", lr=f"{last['lr']:.2e}",
                    tok_s=f"{rate:.0f}")
    if bar.disable:
        trainer.log(" ".join(f"{k}={v}" for k, v in record.items() if k != "type"))
    trainer.folder.write_metrics(record)


def finish(trainer, reason, signals) -> dict[str, Any]:
    """The end of a run stopped for ``reason``: the final weights validated (for best/) and saved,
    the summary written and logged."""
    tc, p = trainer.tc, trainer.progress
    if signals.reason and reason == signals.reason:
        trainer.log(f"{reason}: saving a checkpoint before stopping")
    # (a signal now is noted, the run is stopping anyway; a second one still stops at once)
    try:
        if (
            reason
            and not reason.startswith(("interrupted", "terminated"))
            and tc.valid_every >= 0
            and p.validated_step != p.step
            and p.step > 0
        ):
            # the final weights always get their say for best/
            trainer.validation.track(trainer.state, scheduled=False)
        trainer.save()
    except KeyboardInterrupt as stop:
        trainer.close()
        raise TrainingError(f"{stop} again: stopped at once, before the last checkpoint was "
                            "written; the one before it is intact, and --resume continues from "
                            "it") from None
    finally:
        signals.restore()
    summary = {
        "stopped": reason,
        "step": p.step,
        "epochs_completed": p.epoch,
        "elapsed": round(p.elapsed, 1),
        "best_step": p.best_step,
    }
    metric = trainer.task.metric
    found = p.best_step > 0 and p.best_metric == metric.key
    summary[f"best_{metric.key}"] = p.best_value if found else None
    trainer.folder.write_metrics({"type": "end", **summary})
    best = (f"; best valid {metric.label} {metric.format(p.best_value)} at step {p.best_step}"
            if found else "")
    trainer.log(f"training stopped ({reason}) at step {p.step} after {p.elapsed / 60:.1f} "
                f"min{best}")
    distributed.teardown(trainer.dist)
    trainer.close()
    return summary
