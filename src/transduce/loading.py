"""The one way a facade loads a model: a run or checkpoint resolved once (``choice.resolve``), the
device and precision decided once (``runtime``), the weights read once, and the checkpoint's task
(``tasks.task_of``) checked against what the facade runs. ``transduce.load`` asks ``task_of``
which facade to return."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from .checkpoint import load_model_from, read_info
from .choice import resolve
from .config import ModelConfig
from .errors import TransduceError
from .runtime import Engine, engine
from .tasks import Task, task_of


@dataclass
class Loaded:
    """A model as a facade receives it: its checkpoint ``folder``, the ``model`` on its engine's
    device, the checkpoint's ``info``, its ``task``, and the ``engine`` it runs on."""

    folder: Path
    model: Any
    info: dict
    task: Task
    engine: Engine

    @property
    def device(self):
        return self.engine.device

    @property
    def precision(self) -> str:
        return self.engine.precision


def checkpoint_task(path) -> tuple[Path, Task]:
    """The checkpoint a run or checkpoint folder stands for, and its task, from model.json alone
    (no weights read)."""
    folder = resolve(path)
    info = read_info(folder)
    return folder, task_of(ModelConfig.from_dict(info["model"]), info)


def load_checked(path, runs: tuple[str, ...], doing: str, device: str = "auto",
                 precision: str = "fp32", inference: bool = True,
                 before: Optional[Callable[[Any, str], None]] = None,
                 compile: str | bool = "off") -> Loaded:
    """Load ``path`` for a facade that runs the tasks named ``runs``; ``doing`` says what it does
    ("translate", ...) in the error for a model of another task. The device, precision and
    compile flags become the model's ``Engine`` first; ``before(device, precision)`` refuses
    settings before any weight is read."""
    folder = resolve(path)
    runs_on = engine(device, precision, compile, inference)
    if before is not None:
        before(runs_on.device, runs_on.precision)
    model, info = load_model_from(folder, runs_on.device)
    task = task_of(model.config, info)
    if task.name not in runs:
        raise wrong_task(path, task, doing)
    return Loaded(folder, model, info, task, runs_on)


def wrong_task(path, task: Task, doing: str) -> TransduceError:
    """The error for a model given to a command or facade of another task: what it is, and the
    command and facade that run it."""
    return TransduceError(f"{path} is {task.what}, which does not {doing}; use "
                          f"`transduce {task.verb}` with it (in Python: transduce.{task.facade}, "
                          "or transduce.load)")
