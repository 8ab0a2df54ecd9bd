"""The run folder of a training run: its lock, ``config.json``, the metrics log, checkpoints written
atomically and resumed from exactly, and the signals that stop a run with a checkpoint.

``RunFolder`` is the part of a ``Trainer`` that deals with the disk: it saves and restores a
``TrainingState`` (the weights, the optimizer, the EMA, the progress) and never runs a step.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from ..checkpoint import (
    CheckpointError,
    checkpoint_file,
    list_checkpoints,
    load_adapted,
    load_weights,
    read_info,
    read_training_state,
    upgrade_names,
    write_checkpoint,
)
from ..choice import resolve
from ..config import ModelConfig
from ..errors import TrainingError, TransduceError
from ..files import check_output_dir, remove_output, write_marker
from ..lora import is_adapter
from ..reading import read_json
from .data_setup import check_same_tokenizer
from .distributed import barrier
from .ema import EMA_FILE, ExponentialAverage
from .progress import Progress
from .vocabulary import FIELDS, extension_of, load_grown

# the model options a run started --init-from a checkpoint may change: they shape training, not
# weights
REGULARIZATION = ("dropout", "attention_dropout", "activation_dropout")


@dataclass
class TrainingState:
    """What an update changes and a checkpoint saves."""

    model: Any  # the Transformer being trained
    optimizer: torch.optim.Optimizer
    scaler: Optional[Any]  # torch.amp.GradScaler (fp16 only)
    ema: Optional[ExponentialAverage]
    progress: Progress = field(default_factory=Progress)


class RunFolder:
    """Everything a run writes to or reads from its folder ``path``: the lock, config.json's
    checks, checkpoints (saved and resumed), ``best/`` and ``ema/``, the metrics log.

    ``settings``: the run's ``RunSettings``; ``dist``: its ``distributed`` setup (only rank 0
    writes); ``log`` and ``warn``: where its lines go."""

    def __init__(self, path: Path, settings, device: torch.device, dist, log: Callable[..., None],
                 warn: Callable[[str], None]) -> None:
        self.path = Path(path)
        self.settings, self.device, self.dist = settings, device, dist
        self.log, self.warn = log, warn
        self.lock: Optional[RunLock] = None  # held from prepare() until release()
        # a SummaryWriter once metrics are written (False: TensorBoard is not installed)
        self.tensorboard: Any = None
        # the extension of the model's vocabulary the data holds (``init_source``), or None
        self.extension: Optional[dict] = None

    def prepare(self, model_config: ModelConfig, train_config, resume: bool) -> None:
        """Check the run directory and take its lock.

        A new run goes into a new or empty folder (or a run folder without checkpoints); a resumed
        run must keep its model. Changes to the training recipe on resume are logged field by field.
        """
        config_path = self.path / "config.json"
        resolved = {"model": model_config.to_dict(), "train": train_config.to_dict()}
        check_output_dir(self.path, "run", [self.settings.data_dir], what="--out")
        if resume:
            if not config_path.is_file():
                raise TrainingError(f"--resume: {self.path} is not a run directory (no "
                                    "config.json); start a new run without --resume")
            saved = read_json(config_path)
            changed = [
                k for k, v in saved.get("model", {}).items() if resolved["model"].get(k) != v
            ]
            if changed:
                details = ", ".join(f"{k}: {saved['model'][k]} -> "
                                    f"{resolved['model'][k]}" for k in changed)
                raise TrainingError(f"--resume: the model differs from the one {self.path} was "
                                    f"trained with ({details}); resume with the same model options "
                                    "or start a new run")
            for key, old in saved.get("train", {}).items():
                if resolved["train"].get(key) != old:
                    self.log(f"--resume: {key} changed: {old} -> {resolved['train'][key]}")
            now = asdict(self.settings)
            # how it runs: allowed to change, and said
            for key in ("device", "precision", "compile"):
                old = saved.get("settings", {}).get(key)
                if old is not None and old != now[key]:
                    self.log(f"--resume: {key} changed: {old} -> {now[key]}")
        elif list_checkpoints(self.path):
            raise TrainingError(f"{self.path} already holds checkpoints; pass --resume to continue "
                                "that run, or choose another --out")
        # every rank checks the folder before rank 0 writes into it: a rank that checked after
        # rank 0's first file would find a folder transduce had not (yet) marked as its own
        barrier(self.dist)
        if self.dist.is_main:
            self.path.mkdir(parents=True, exist_ok=True)
            self.lock = RunLock(self.path)
            write_marker(self.path, "run")

    def release(self) -> None:
        """Release the run lock (also released by the OS when the process ends)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def resume(self, state: TrainingState, data, train_config) -> None:
        """Continue ``state`` from the newest complete checkpoint, skipping damaged ones with a
        warning (the weights, optimizer, scaler, EMA, RNG states and progress all from the same
        one)."""
        found = list_checkpoints(self.path)
        if not found:
            self.log(f"--resume: {self.path} has no checkpoint yet; starting from the beginning")
            return
        for folder in reversed(found):
            try:
                info = read_info(folder)
            except CheckpointError as error:
                self.warn(f"warning: cannot resume from {folder}: {error}; trying the checkpoint "
                          "before it")
                continue
            # a run goes on only on the ids it was trained on (not on data prepared again since)
            check_same_tokenizer(data, folder, info, "--resume", self.warn)
            # reading the state and loading the weights are the checks: a damaged file fails them
            try:
                saved, trainer = read_training_state(folder)
                self.load_weights(state.model, folder)
                state.optimizer.load_state_dict(saved["optimizer"])
                if state.scaler is not None and saved.get("scaler"):
                    state.scaler.load_state_dict(saved["scaler"])
                progress = Progress.from_dict(trainer["progress"])
                self._resume_ema(state, folder, train_config)
                rng = saved["rng"]
                torch.set_rng_state(rng[self.dist.rank] if self.dist.rank < len(rng) else rng[0])
            except (CheckpointError, KeyError, TypeError, ValueError, RuntimeError) as error:
                self.warn(f"warning: cannot resume from {folder}: {error}; trying the checkpoint "
                          "before it")
                continue
            break
        else:
            raise TrainingError(f"--resume: none of the checkpoints in {self.path / 'checkpoints'} "
                                "is complete (see the warnings above); start a new run in another "
                                "--out")
        rank = self.dist.rank
        cuda_rng = saved.get("cuda_rng")
        if self.device.type == "cuda" and cuda_rng:
            torch.cuda.set_rng_state(
                cuda_rng[rank] if rank < len(cuda_rng) else cuda_rng[0], self.device
            )
        state.progress = progress
        self.log(f"resumed from {folder} (step {progress.step}, epoch {progress.epoch + 1}, "
                 f"batch {progress.batch_in_epoch})")

    def _resume_ema(self, state: TrainingState, folder: Path, train_config) -> None:
        """The EMA's averages from ``folder`` (started afresh from the resumed weights if the run
        had none: ``--set ema=...`` added on resume)."""
        if state.ema is None:
            return
        path = folder / EMA_FILE
        if path.is_file() or path.is_symlink():
            path = checkpoint_file(folder, EMA_FILE)
        if not path.is_file():
            state.ema = ExponentialAverage(state.model, train_config.ema)
            self.log(f"--resume: {folder} has no EMA; the EMA starts from the resumed weights")
            return
        from safetensors.torch import load_file

        try:
            state.ema.load_state_dict(upgrade_names(load_file(str(path), device=str(self.device))))
        except Exception as error:  # safetensors raises its own types for a damaged file
            raise CheckpointError(f"{path} is damaged ({error})") from None

    def load_weights(self, model, folder: Path) -> None:
        """Load ``folder``'s weights into ``model``; a partial load is an error naming the keys.
        A checkpoint of adapters loads its base, then them; a base lacks its new adapters. Grown
        to the data's vocabulary where ``init_source`` found it extended."""
        if self.extension is not None:
            load_grown(model, folder, self.extension, self.device)
            return
        info = read_info(folder)
        if "adapter" in info:
            load_adapted(model, folder, info, self.device)
            return
        missing, unexpected = load_weights(model, checkpoint_file(folder, "model.safetensors"),
                                           self.device)
        missing = [k for k in missing if not is_adapter(k)]
        if missing or unexpected:
            raise CheckpointError(f"{folder / 'model.safetensors'} does not fit the model: missing "
                                  f"keys {missing[:5]}, unexpected keys {unexpected[:5]}")

    def init_source(self, path: str, model_config: ModelConfig, data) -> Path:
        """The checkpoint ``--init-from`` names, checked before the run folder is made: it exists
        and holds the same model (``data``: the run's ``TrainingData``, whose tokenizer it must
        share)."""
        try:
            folder = resolve(path)
            info = read_info(folder)
            # (through ModelConfig: a checkpoint written before a field existed has its default)
            theirs = ModelConfig.from_dict(info["model"]).to_dict()
        except (TransduceError, TypeError, ValueError) as error:
            raise TrainingError(f"--init-from {path}: {error}") from None
        mine = model_config.to_dict()
        self.extension = extension_of(data.meta, folder, info)
        grown = set(FIELDS) if self.extension else set()
        diff = sorted(
            k
            for k in set(theirs) | set(mine)
            if theirs.get(k) != mine.get(k) and k not in REGULARIZATION and k not in grown
        )
        if diff:
            raise TrainingError(f"--init-from {path}: its model differs in {', '.join(diff)}; use "
                                "the same options")
        check_same_tokenizer(data, folder, info, "--init-from", self.warn, grows=True)
        if self.extension:
            self.log(f"{data.data_dir} extends the tokenizer of {folder}: "
                     + ", ".join(f"{len(self.extension['new'][side]):,} new {name} rows"
                                 for side, name in (("src", "source"), ("tgt", "target")))
                     + ", each the mean of the rows of the pieces that spelled it")
        return folder

    def write_metrics(self, record: dict) -> None:
        """One line of metrics.jsonl (and TensorBoard's scalars, where it is installed)."""
        if not self.dist.is_main:
            return
        with open(self.path / "metrics.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        if self.tensorboard is None:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tensorboard = SummaryWriter(str(self.path / "tensorboard"))
            except Exception:  # TensorBoard is optional
                self.tensorboard = False
        if self.tensorboard and "step" in record:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key != "step":
                    self.tensorboard.add_scalar(f"{record['type']}/{key}", value, record["step"])

    def save(self, state: TrainingState, info: dict, tokenizer_files: list, train_config,
             best: bool = False) -> None:
        """Write a checkpoint of ``state`` (atomic), keep the last K; with ``best``, (re)write
        ``best/`` only. ``info``: the checkpoint's description (model, languages, tokenizer)."""
        info = {**info, "step": state.progress.step}
        if best:  # only rank 0 validates, so only rank 0 comes here
            write_checkpoint(self.path / "best", state.model, info, tokenizer_files)
            return
        # Every rank's RNG states (CPU and, on CUDA, the device's): each rank's dropout masks
        # continue exactly on resume.
        rngs = [torch.get_rng_state()]
        cuda_rngs = [torch.cuda.get_rng_state(self.device)] if self.device.type == "cuda" else None
        if self.dist.enabled:
            gathered: list = [None] * self.dist.world_size
            torch.distributed.all_gather_object(
                gathered, (rngs[0], cuda_rngs[0] if cuda_rngs else None)
            )
            rngs = [cpu for cpu, _ in gathered]
            cuda_rngs = [cuda for _, cuda in gathered] if cuda_rngs else None
        if not self.dist.is_main:
            return
        saved = {"optimizer": state.optimizer.state_dict(), "rng": rngs, "cuda_rng": cuda_rngs,
                 "scaler": state.scaler.state_dict() if state.scaler is not None else None}
        folder = self.path / "checkpoints" / f"step_{state.progress.step:08d}"
        ema = state.ema
        write_checkpoint(folder, state.model, info, tokenizer_files, saved,
                         {"progress": asdict(state.progress), "train": train_config.to_dict()},
                         tensors={EMA_FILE: ema.state_dict()} if ema is not None else None,
                         run=self.path)
        if ema is not None:  # the averaged weights as a checkpoint of their own
            with ema.applied(state.model):
                write_checkpoint(self.path / "ema", state.model, {**info, "ema": train_config.ema},
                                 tokenizer_files)
        for old in list_checkpoints(self.path)[: -train_config.keep_last]:
            remove_output(old, "checkpoint")  # pruning keeps the last K



class StopSignals:
    """SIGTERM (what cluster schedulers send) and SIGINT (Ctrl-C) ask a run to stop.

    The first one is only remembered (``reason``): the loop stops at the next update boundary,
    where everything it saves belongs to the same moment (the weights, the optimizer, the step
    counter and the RNG states all after the same update), so the resumed run continues exactly
    as after a kill -9, never applying a batch twice nor drawing other dropout masks. A second
    signal stops at once, without saving (``KeyboardInterrupt``): the last checkpoint stands.
    Installed only from the main thread (elsewhere Python's own handling stays).
    """

    NAMES = {signal.SIGTERM: "terminated (SIGTERM)", signal.SIGINT: "interrupted (Ctrl-C)"}

    def __init__(self) -> None:
        self.reason: str | None = None
        self.installed = False
        self._previous: dict = {}

    def install(self) -> "StopSignals":
        try:
            for number in self.NAMES:
                self._previous[number] = signal.signal(number, self._handle)
            self.installed = True
        except ValueError:  # not the main thread: leave signals alone
            self.restore()
        return self

    def _handle(self, number, frame) -> None:
        # (nothing is printed here: a handler that writes to a stream the loop is writing to fails)
        if self.reason is not None:
            raise KeyboardInterrupt(self.NAMES[number])
        self.reason = self.NAMES[number]

    def restore(self) -> None:
        for number, previous in self._previous.items():
            signal.signal(number, previous)
        self._previous = {}


class RunLock:
    """An OS file lock on ``RUN_DIR/.lock``: one training process writes into a run at a time.

    The lock is the kernel's (``fcntl.flock``), so a killed process never leaves it held.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / ".lock"
        self.handle = open(self.path, "a+", encoding="utf-8")
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no lock, as before
            return
        try:
            fcntl.flock(self.handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.handle.seek(0)
            other = self.handle.read().strip() or "unknown"
            self.handle.close()
            raise TrainingError(f"{run_dir} is in use by another training process (pid {other}); "
                                "wait for it to finish or stop it, or choose another "
                                "--out") from None
        self.handle.seek(0)
        self.handle.truncate()
        self.handle.write(f"{os.getpid()}\n")
        self.handle.flush()

    def release(self) -> None:
        if not self.handle.closed:
            self.handle.close()
