"""The training loop (§5), read top to bottom: batch, autocast forward, loss, accumulate, clip,
step, schedule, log, validate, checkpoint. It never loses work: checkpoints are atomic and a
resumed run continues exactly where the checkpoint left it (same batches, same RNG states)."""

from __future__ import annotations

import json
import math
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from ..checkpoint import list_checkpoints
from ..config import ModelConfig, TrainConfig
from ..errors import TrainingError
from ..files import write_text
from ..model import Transformer
from ..runtime import autocast, check_fits, release_memory
from . import distributed
from .adapters import trainable_share, with_adapters
from .data_setup import TrainingData, check_lengths_against_model, check_model_against_data
from .ema import ExponentialAverage
from .loss import label_smoothed_nll, task_loss
from .recipe import apply_recipe
from .run_folder import Progress, RunFolder, StopSignals, TrainingState
from .schedule import learning_rate
from .loop import Window, finish, log_train, progress_bar
from .validation import Validation

# updates between two returns of freed memory to the system (runtime.release_memory): without them
# the resident memory of the small Multi30k recipe grows for hundreds of updates; with them it stays
# lower, at no measurable cost (python benchmarks/train_memory.py)
TRIM_EVERY = 5

__all__ = ["Progress", "RunSettings", "Trainer", "TrainingError", "check_lengths_against_model",
           "check_model_against_data"]


@dataclass
class RunSettings:
    """What a run needs beyond the two configs."""

    data_dir: str
    run_dir: str
    device: str = "cpu"
    precision: str = "fp32"
    compile: bool = False
    quiet: bool = False
    init_from: Optional[str] = None
    # on resume: train this many seconds beyond the run's elapsed time
    more_time: Optional[float] = None
    # a second validation set: PREFIX of raw PREFIX.SRC/PREFIX.TGT files
    valid_extra: Optional[str] = None
    extra: dict = field(default_factory=dict)


class Trainer:
    """Trains ``model_config`` on ``settings.data_dir``, writing everything into
    ``settings.run_dir``.

    Composed of: the data (``self.data``, a ``TrainingData``), what training changes and saves
    (``self.state``, a ``TrainingState``: model, optimizer, scaler, EMA, progress), the run folder
    (``self.folder``: lock, resume, checkpoints, metrics) and validation (``self.validation``);
    this file holds the update and the loop."""

    def __init__(
        self,
        model_config: ModelConfig,
        train_config: TrainConfig,
        settings: RunSettings,
        resume: bool = False,
        log=print,
        on_validate: Optional[Callable[[dict], Optional[str]]] = None,
        recipe: Optional[str] = None,
    ) -> None:
        """``on_validate`` (a plain callable) sees each validation's result and may return a reason
        to stop training (the demo stops when its exact-match target is reached). ``recipe``:
        ``"auto"``, ``"paper"`` or ``"finetune"`` fills in what ``train_config`` leaves at its
        defaults for a new run, as ``transduce train --recipe`` does (``training.recipe``); None
        trains with ``train_config`` as it is (the command line resolves the recipe itself)."""
        if recipe is not None and not resume:
            train_config, _ = apply_recipe(train_config, model_config, settings.data_dir, recipe)
        self.cfg, self.tc, self.settings = model_config, train_config, settings
        # while train() runs: SIGTERM/SIGINT noted for the loop
        self._signals: Optional[StopSignals] = None
        self.run_dir = Path(settings.run_dir)
        self.device = torch.device(settings.device)
        self.dist = distributed.setup(self.device)
        if self.dist.enabled and self.device.type == "cuda":
            self.device = torch.device("cuda", self.dist.local_rank)
            torch.cuda.set_device(self.device)
        self.log = log if self.dist.is_main else (lambda *a, **k: None)
        # warnings go where errors go (stderr), unless the caller collects the log itself
        self.warn = (lambda message: print(message, file=sys.stderr)) if log is print else self.log
        if not (
            train_config.max_steps
            or train_config.max_epochs
            or train_config.max_time
            or settings.more_time
        ):
            raise TrainingError("no stopping rule: give --max-steps, --max-epochs or --max-time")
        # where the model comes from, for a refusal of the data to carry its fix
        origin = ("--resume", settings.run_dir) if resume else \
            ("--init-from", settings.init_from) if settings.init_from else None
        data = TrainingData(
            model_config,
            train_config,
            settings.data_dir,
            self.dist.world_size,
            self.dist.rank,
            self.log,
            settings.valid_extra,
            origin,
        )
        self.data, self.meta, self.task, self.collate = data, data.meta, data.task, data.collate
        self.train_set, self.valid_set, self.sampler = data.train_set, data.valid_set, data.sampler
        self.train_indices, self.tokenizer = data.train_indices, data.tokenizer
        self.tokenizer_files = data.tokenizer_files
        check_fits(model_config, self.device, training=True, source="the model to train")
        torch.manual_seed(train_config.seed)
        model = with_adapters(Transformer(model_config), train_config, settings.init_from)
        model = model.to(self.device)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.0, betas=(train_config.adam_beta1,
                                     train_config.adam_beta2), eps=train_config.adam_eps,
                                     weight_decay=train_config.weight_decay)
        self.state = TrainingState(
            model, optimizer,
            # fp16 (CUDA) scales the loss
            torch.amp.GradScaler("cuda") if settings.precision == "fp16" else None,
            ExponentialAverage(model, train_config.ema) if train_config.ema > 0 else None)
        self.folder = RunFolder(self.run_dir, settings, self.device, self.dist, self.log, self.warn)
        source = self.folder.init_source(settings.init_from, model_config, data) \
            if settings.init_from and not resume else None
        self.folder.prepare(model_config, train_config, resume)
        # Dropout differs per rank (seed + rank), as with any data-parallel run.
        torch.manual_seed(train_config.seed + self.dist.rank)
        if resume:
            self.folder.resume(self.state, data, train_config)
            if settings.more_time is not None:
                self.tc = replace(self.tc, max_time=self.progress.elapsed + settings.more_time)
                self.log(f"--more-time: training until {self.tc.max_time / 60:.1f} min of training "
                         f"in all (now {self.progress.elapsed / 60:.1f} min)")
        elif source is not None:
            self.folder.load_weights(model, source)
            self.log(f"initialized the weights from {source}" + (
                f"; LoRA adapters train {trainable_share(model)}" if train_config.lora else ""))
        # (its log reads the trainer's: the loop sends lines above its progress bar)
        self.validation = Validation(model_config, self.tc, data, self.device, settings.precision,
                                     self.dist, self.folder, self.checkpoint_info,
                                     lambda *a, **k: self.log(*a, **k),
                                     on_validate)
        if self.dist.is_main:
            resolved = {
                "model": self.cfg.to_dict(),
                "train": self.tc.to_dict(),
                "settings": {k: v for k, v in asdict(self.settings).items() if k != "run_dir"},
            }
            write_text(
                self.run_dir / "config.json", json.dumps(resolved, indent=2) + "\n", what="config"
            )
        self.ddp = None
        self.forward_model = self.model
        if self.dist.enabled:
            self.ddp = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
            self.forward_model = self.ddp
        if settings.compile:
            self.forward_model = torch.compile(self.forward_model)

    # what the loop reads most, by name (all of them the state's)
    model = property(lambda self: self.state.model)
    optimizer = property(lambda self: self.state.optimizer)
    scaler = property(lambda self: self.state.scaler)
    ema = property(lambda self: self.state.ema)
    progress = property(lambda self: self.state.progress)

    def checkpoint_info(self) -> dict:
        """What a checkpoint says of its run: model, languages, tokenizer, classes, trees..."""
        keys = ("src", "tgt", "task_prefix", "classes", "chars", "pieces", "trees", "tags")
        return {"model": self.cfg.to_dict(), **{k: self.meta[k] for k in keys if k in self.meta},
                "tokenizer": self.data.tokenizer_info}

    def save(self) -> None:
        """A checkpoint of the run as it stands (atomic; the last ``keep_last`` are kept)."""
        self.folder.save(self.state, self.checkpoint_info(), self.tokenizer_files, self.tc)

    # --- one update -----------------------------------------------------------------------

    def update(self, micro_batches: list) -> dict[str, Any]:
        """Forward, backward and (unless the loss is not finite) one optimizer step.

        One host sync per update, to skip a non-finite update exactly; the loss values stay on the
        device (``loss``/``nll`` are tensors) until a log step reads them.
        """
        tc, world = self.tc, self.dist.world_size
        self.model.train()
        # Normalize by the target tokens of the whole update (all micro-batches, all ranks), so that
        # accumulation and data parallelism give the gradient of one big batch.
        # counted on the host
        tokens = torch.tensor(float(sum(b.target_tokens for b in micro_batches)))
        total_tokens = float(distributed.all_reduce_sum(tokens, self.dist))
        cuda = self.device.type == "cuda"
        loss_sum = torch.zeros((), device=self.device)
        nll_sum = torch.zeros((), device=self.device)
        moe_sum = torch.zeros((), device=self.device)
        for i, batch in enumerate(micro_batches):
            # (B*T,) on the host: no device sync
            real = (batch.tgt_out != batch.pad_id).flatten()
            # Under torch.compile the whole (B, T) is projected: a varying number of real positions
            # would recompile; the loss masks the padding either way.
            select = None if self.settings.compile else real.nonzero().squeeze(1)
            target = batch.tgt_out.flatten() if select is None else batch.tgt_out.flatten()[select]
            if cuda:
                batch = batch.pin_memory()
            batch = batch.to(self.device, non_blocking=cuda)
            target = target.to(self.device, non_blocking=cuda)
            select = None if select is None else select.to(self.device, non_blocking=cuda)
            sync = self.ddp is None or i == len(micro_batches) - 1
            with (
                nullcontext() if sync else self.ddp.no_sync(),
                autocast(self.device, self.settings.precision),
            ):
                logits = self.forward_model(*batch.inputs, select=select)  # (N, V)
                loss, nll = label_smoothed_nll(
                    logits.flatten(0, -2), target, tc.label_smoothing, batch.pad_id
                )
                loss = task_loss(self.task, self.model, loss, batch)
                balance = self.model.moe_loss()  # the experts' load balance (None: dense)
            scaled = loss * world / total_tokens
            if balance is not None:
                scaled = scaled + self.cfg.moe_aux_weight * balance / len(micro_batches)
                moe_sum = moe_sum + balance.detach() / len(micro_batches)
            (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            loss_sum += loss.detach()
            nll_sum += nll.detach()
        sums = distributed.all_reduce_sum(torch.stack([loss_sum, nll_sum]), self.dist)
        step = self.progress.step + 1
        lr = learning_rate(
            step, tc.lr_schedule, self.cfg.d_model, tc.warmup, tc.lr_factor, tc.peak_lr
        )
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), tc.clip_norm if tc.clip_norm > 0 else math.inf
        )
        if self.scaler is not None:
            # fp16: an overflow is the scaler's business (it lowers the scale and skips the step),
            # not a divergence; only a non-finite loss counts as a bad step.
            finite = bool(torch.isfinite(sums[0]))  # the one sync (the scaler has its own)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.scaler.step(self.optimizer)
            self.scaler.update()
        elif finite := bool(
            torch.isfinite(torch.stack([sums[0], grad_norm.to(sums.device)])).all()
        ):  # the one sync
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema is not None and finite:
            self.ema.update(self.model)
        return {
            "loss": sums[0] / total_tokens,
            "nll": sums[1] / total_tokens,
            "lr": lr,
            "grad_norm": grad_norm,
            "tokens": total_tokens,
            "finite": finite,
            "moe_aux": moe_sum if self.cfg.ffn == "moe" else None,
        }

    # --- the loop -------------------------------------------------------------------------

    def train(self) -> dict[str, Any]:
        """Train until a limit (steps, epochs, time) or early stopping; returns a summary."""
        tc, p = self.tc, self.progress
        signals = self._signals = StopSignals().install()
        by_time = not tc.max_steps and bool(tc.max_time)
        bar = progress_bar(tc, p, by_time, quiet=self.settings.quiet or not self.dist.is_main)
        log = self.log
        if not bar.disable and log is print:
            # lines above the bar, not over it
            self.log = lambda *a, **k: bar.write(" ".join(str(x) for x in a))
        process_start = time.time()
        start_elapsed = p.elapsed
        last_save = time.time()
        window = Window()
        bad_in_a_row = 0
        reason = self._limit_reached()  # a resumed run may have nothing left to do
        if reason:
            self.log(f"nothing to do: {reason} already reached")
        if reason is None and tc.valid_at_start and p.step == 0:
            self.validation.track(self.state, scheduled=False)  # the starting point's scores first
        try:
            while reason is None:
                batches = self.sampler.batches(p.epoch, start=p.batch_in_epoch)
                for start in range(0, len(batches), tc.update_freq):
                    group = batches[start : start + tc.update_freq]
                    micro = [
                        self.collate(b, p.epoch, p.batch_in_epoch + j) for j, b in enumerate(group)
                    ]
                    stats = self.update(micro)
                    p.batch_in_epoch += len(group)
                    p.elapsed = start_elapsed + time.time() - process_start
                    if not stats["finite"]:
                        bad_in_a_row += 1
                        p.skipped_updates += 1
                        self.log(f"step {p.step + 1}: the loss or gradient is not finite; update "
                                 f"skipped ({bad_in_a_row} in a row)")
                        if bad_in_a_row >= tc.max_bad_steps:
                            raise TrainingError(f"{bad_in_a_row} non-finite losses in a row: "
                                                "training diverged. Lower the learning rate "
                                                "(--set lr_factor=...), raise warmup, or set "
                                                "clip_norm; the last checkpoint is intact")
                        continue
                    bad_in_a_row = 0
                    p.step += 1
                    p.target_tokens += int(stats["tokens"])
                    window.add(stats)
                    if by_time:
                        bar.update(round(p.elapsed) - bar.n)
                        bar.set_postfix(step=p.step, refresh=False)
                    else:
                        bar.update(1)
                    if p.step % TRIM_EVERY == 0:
                        release_memory()
                    if p.step % tc.log_every == 0 or p.step in (1, 10):  # a first loss at once
                        log_train(self, window, stats, bar)
                        window = Window()
                    if tc.valid_every > 0 and p.step % tc.valid_every == 0:
                        self.validation.track(self.state)
                    due = (tc.save_every and p.step % tc.save_every == 0) or \
                        (tc.save_minutes and time.time() - last_save >= 60 * tc.save_minutes)
                    reason = self._limit_reached()
                    due, stop = self._agree(bool(due), reason is not None)  # ranks decide together
                    reason = (reason or "another rank stopped") if stop else None
                    if due and not stop:
                        self.save()
                        last_save = time.time()
                    if reason:
                        break
                else:
                    p.epoch += 1
                    p.batch_in_epoch = 0
                    if tc.valid_every == 0:
                        self.validation.track(self.state)
                    reason = self._limit_reached()
                    _, stop = self._agree(False, reason is not None)
                    reason = (reason or "another rank stopped") if stop else None
        except KeyboardInterrupt as stop:
            reason = str(stop) or "interrupted"
            # a second signal: at once, as a kill (a save now would mix two moments)
            if signals.installed:
                bar.close()
                signals.restore()
                self.close()
                saved = list_checkpoints(self.run_dir)
                raise TrainingError(f"{reason} again: stopped at once without saving; the last "
                                    f"checkpoint ({saved[-1] if saved else 'none yet'}) is intact, "
                                    "and --resume continues from it") from None
            # (signals left to Python: no handler)
            self.log(f"{reason}: saving a checkpoint before stopping")
        finally:
            bar.close()
            self.log = log
        return finish(self, reason, signals)

    def close(self) -> None:
        """Release the run lock (also released by the OS when the process ends)."""
        self.folder.release()

    def _agree(self, save: bool, stop: bool) -> tuple[bool, bool]:
        """Rank 0's clock and validation decide for every rank, so that no rank waits alone."""
        if not self.dist.enabled:
            return save, stop
        flags = torch.tensor([float(save), float(stop)]) if self.dist.is_main else torch.zeros(2)
        flags = distributed.all_reduce_sum(flags, self.dist).cpu()
        return bool(flags[0]), bool(flags[1])

    def _limit_reached(self) -> Optional[str]:
        tc, p = self.tc, self.progress
        signals = self._signals
        # checked at update boundaries only: see StopSignals
        if signals is not None and signals.reason:
            return signals.reason
        if tc.max_steps and p.step >= tc.max_steps:
            return f"max_steps {tc.max_steps}"
        if tc.max_epochs and p.epoch >= tc.max_epochs:
            return f"max_epochs {tc.max_epochs}"
        if tc.max_time and p.elapsed >= tc.max_time:
            return f"max_time {tc.max_time:.0f}s"
        if tc.patience and p.validations_since_best >= tc.patience:
            return f"no better validation {self.task.metric.label} in {tc.patience} validations"
        return self.validation.stop_reason
