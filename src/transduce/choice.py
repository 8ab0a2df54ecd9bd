"""Which checkpoint a command uses, in one place: ``choose`` (the rule), ``resolve`` (its folder)
and ``describe_checkpoint`` (what a checkpoint is, for the line every command prints).

A run directory holds several checkpoints: the training checkpoints, ``best/`` (chosen by the run's
own validation), and derived ones, ``averaged/`` (``transduce average``) and ``ema/`` (the moving
average of the weights). A derived checkpoint is as good as the run it was made from, so one made
before the run went on is never used in silence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .checkpoint import CHECKPOINT_RE, candidates, is_checkpoint, list_checkpoints, read_info
from .errors import TransduceError
from .files import recover
from .reading import read_json
from .tasks import best_of


@dataclass
class Choice:
    """The checkpoint a command uses (``folder``), what it is (``what``: its update and why it was
    chosen, for the line every command prints) and ``warnings`` (a derived checkpoint passed over
    or older than the run's newest checkpoint, each with the command that refreshes it)."""

    folder: Path
    what: str
    warnings: list[str] = field(default_factory=list)

    def line(self) -> str:
        return f"{self.folder}: {self.what}"


def _run_of(folder: Path) -> Optional[Path]:
    """The run directory ``folder`` belongs to (``RUN/best``, ``RUN/checkpoints/step_N``), or
    None."""
    for run in (folder.parent, folder.parent.parent):
        if (run / "config.json").is_file() and (run / "checkpoints").is_dir():
            return run
    return None


def _best_record(run: Path) -> tuple[Optional[int], Optional[str]]:
    """``(best_step, the best score in words)`` of the run's validation record (its newest
    checkpoint's), e.g. ``(3000, "BLEU (31.20)")``."""
    for folder in list_checkpoints(run)[::-1]:
        try:
            progress = read_json(folder / "trainer.json").get("progress", {})
        except TransduceError:
            continue
        best = best_of(progress)
        if best is None:
            return None, None
        metric, value, step = best
        return step, f"{metric.label} ({metric.format(value)})"
    return None, None


def describe_checkpoint(folder: str | Path) -> str:
    """What a checkpoint is, in a few words: its update, and what made it (an average, the EMA, the
    best validation score, an import)."""
    folder = Path(folder)
    try:
        info = read_info(folder)
    except TransduceError:
        return "a checkpoint"
    step = info.get("step")
    sources = info.get("averaged_from")
    if isinstance(sources, list) and sources:
        steps = [int(m.group(1)) for name in sources if (m := CHECKPOINT_RE.match(str(name)))]
        span = (
            f"updates {steps[0]:,}-{steps[-1]:,}"
            if len(steps) > 1
            else f"update {steps[0]:,}"
            if steps
            else ""
        )
        return f"the average of {len(sources)} checkpoint{'s' if len(sources) > 1 else ''}" + (
            f" ({span})" if span else ""
        )
    if info.get("imported_from"):
        return f"imported from {info['imported_from']}"
    if not isinstance(step, int):
        return "a checkpoint"
    if "ema" in info:
        decay = info["ema"]
        return f"the exponential moving average of the weights (decay {decay}) at update {step:,}"
    run = _run_of(folder)
    if run is not None and folder.name == "best":
        best_step, score = _best_record(run)
        if score is not None and best_step == step:
            return f"update {step:,}, the best validation {score}"
        return f"update {step:,}, the best validation score"
    return f"update {step:,}"


def choose(path: str | Path) -> Choice:
    """The checkpoint a command uses, from a checkpoint folder or a run directory; the one rule.

    For a run directory: ``averaged/`` while it is up to date (made from the run's newest
    checkpoint), else ``best/`` (the best by the run's own validation), else the newest checkpoint.
    A derived checkpoint (``averaged/``, ``ema/``) older than the run's newest checkpoint is never
    used silently: passed over, or used because it was named, with a warning and the command that
    refreshes it.
    """
    path = Path(path)
    recover(path)
    if is_checkpoint(path):
        return Choice(path, describe_checkpoint(path), _stale_warnings(path, named=True))
    if not path.exists():
        raise TransduceError(f"{path} does not exist; give a run directory or a checkpoint folder")
    found = candidates(path)
    if not found:
        raise TransduceError(
            f"{path} holds no checkpoint (no model.safetensors in it, its averaged/, best/ or "
            "checkpoints/)"
        )
    warnings = []
    for folder in found:  # (the run's checkpoints come last, and a checkpoint is never stale)
        stale = _stale_warnings(folder, named=False)
        warnings += stale
        if not stale:
            break
    what = describe_checkpoint(folder)
    if folder.parent.name == "checkpoints":
        what += ", the newest checkpoint" + (
            "" if (path / "best").is_dir() else " (no best/: not validated)"
        )
    return Choice(folder, what, warnings)


def _stale_warnings(folder: Path, named: bool) -> list[str]:
    """A warning when ``folder`` is a derived checkpoint (average, EMA) older than its run's newest
    checkpoint, saying what is used and how to refresh it."""
    run = _run_of(folder)
    if run is None or folder.parent.name == "checkpoints" or folder.name == "best":
        return []
    newest = list_checkpoints(run)
    info = read_info(folder) if is_checkpoint(folder) else {}
    if not newest or not isinstance(info.get("step"), int):
        return []
    latest = int(CHECKPOINT_RE.match(newest[-1].name).group(1))
    if info["step"] >= latest:
        return []
    if "ema" in info:
        refresh = (
            "the EMA is written with each checkpoint of a run trained with --ema; `transduce "
            f"train ... --out {run} --resume --ema {info['ema']}` continues it"
        )
    else:
        count = len(info.get("averaged_from") or []) or 5
        refresh = (
            f"`transduce average {run} --last {count}"
            + ("" if folder.name == "averaged" else f" --out {folder}")
            + "` refreshes it"
        )
    what = "used as named" if named else "not used"
    return [
        f"warning: {folder} was made at update {info['step']:,}, before the run's newest "
        f"checkpoint (update {latest:,}): {what}; {refresh}"
    ]


def resolve(path: str | Path) -> Path:
    """A checkpoint folder from a checkpoint or run directory (``choose``'s rule)."""
    return choose(path).folder
