"""The training loop (§5), read top to bottom: batch, autocast forward, loss, accumulate, clip,
step, schedule, log, validate, checkpoint. It never loses work: checkpoints are atomic and a
resumed run continues exactly where the checkpoint left it (same batches, same RNG states)."""

from __future__ import annotations

import json
import math
import os
import signal
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch

from ..checkpoint import (CheckpointError, list_checkpoints, load_weights, read_info, read_training_state,
                          upgrade_names, write_checkpoint)
from ..config import ModelConfig, TrainConfig
from ..data import (BlockSampler, ParallelDataset, TokenBatchSampler, TokenStream, collate, collate_masked,
                    collate_next_token, load_meta, load_tokenizer)
from ..errors import TrainingError
from ..files import check_output_dir, read_json, remove_output, write_marker, write_text
from ..evaluate import score
from ..model import Transformer
from ..translator import DecodeConfig, autocast, translate_ids
from . import distributed
from .ema import EMA_FILE, ExponentialAverage
from .loss import label_smoothed_nll
from .schedule import learning_rate


@dataclass
class Progress:
    """Everything that says where training stands; saved in each checkpoint's trainer.json."""

    step: int = 0  # optimizer updates done
    epoch: int = 0
    batch_in_epoch: int = 0  # this rank's batches of the epoch already consumed
    elapsed: float = 0.0  # training seconds, over all sessions of the run
    target_tokens: int = 0
    best_bleu: float = -1.0
    best_chrf: float = -1.0
    best_ppl: float = 0.0  # language models: the lowest validation perplexity (0: none yet)
    best_step: int = 0
    validations_since_best: int = 0
    skipped_updates: int = 0
    valid_seconds: float = 0.0  # time spent validating, over all sessions


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
    more_time: Optional[float] = None  # on resume: train this many seconds beyond the run's elapsed time
    extra: dict = field(default_factory=dict)


def check_lengths_against_model(config: ModelConfig, datasets: dict, data_dir: str) -> None:
    """Every pair fits the model's positions (source + eos, start + target), found before step 1."""
    for split, ds in datasets.items():
        if ds is None or not len(ds):
            continue
        for side, lengths in (("source", ds.src_lengths), ("target", ds.tgt_lengths)):
            longest = int(lengths.max())
            if longest + 1 > config.max_positions:
                line = int(lengths.argmax())
                raise TrainingError(
                    f"{data_dir}: the {split} split has a {side} sentence of {longest} tokens (pair {line + 1} "
                    f"of the prepared split) but the model holds {config.max_positions} positions, one of them for "
                    f"eos/start; prepare the data with --max-len {config.max_positions - 1} or less, or set "
                    f"max_positions={longest + 1} or more")


def check_model_against_data(config: ModelConfig, meta: dict, data_dir: str) -> None:
    """A model and a prepared dataset fit: the kind of text, vocabulary sizes and special ids agree."""
    kind = meta.get("kind", "parallel")
    if config.architecture == "encoder-decoder" and kind != "parallel":
        raise TrainingError(f"{data_dir} holds monolingual text, which an encoder-decoder cannot learn to "
                            "translate: prepare parallel text, or train a language model on it (--preset gpt-small "
                            "or bert-small)")
    if config.architecture != "encoder-decoder" and kind != "monolingual":
        raise TrainingError(f"an {config.architecture} model is a language model and trains on monolingual text: "
                            f"{data_dir} holds parallel text; prepare one with `transduce prepare --monolingual "
                            "--train FILE --out DIR`")
    if config.architecture == "encoder-only" and meta["special_ids"].get("mask_id") is None:
        raise TrainingError(f"{data_dir} has no <mask> token; prepare it again with this version of transduce")
    vocab = meta["vocab_size"]
    if config.vocab_size != vocab["src"] or config.target_vocab_size != vocab["tgt"]:
        raise TrainingError(f"{data_dir} has vocabularies of {vocab['src']}/{vocab['tgt']} but the model expects "
                            f"{config.vocab_size}/{config.target_vocab_size}; use the data the run was made with")
    for name, value in meta["special_ids"].items():
        if getattr(config, name) != value and not (name == "mask_id" and config.architecture != "encoder-only"):
            raise TrainingError(f"{data_dir} uses {name}={value} but the model has {getattr(config, name)}")


class Trainer:
    """Trains ``model_config`` on ``settings.data_dir``, writing everything into ``settings.run_dir``."""

    def __init__(self, model_config: ModelConfig, train_config: TrainConfig, settings: RunSettings,
                 resume: bool = False, log=print, on_validate: Optional[Callable[[dict], Optional[str]]] = None) -> None:
        """``on_validate`` (a plain callable) sees each validation's result and may return a reason
        to stop training (the demo stops when its exact-match target is reached)."""
        self.cfg, self.tc, self.settings = model_config, train_config, settings
        self.on_validate = on_validate
        self._stop_reason: Optional[str] = None
        self._validated_at = -1  # the step of the last validation
        self.run_dir = Path(settings.run_dir)
        self.device = torch.device(settings.device)
        self.dist = distributed.setup(self.device)
        if self.dist.enabled and self.device.type == "cuda":
            self.device = torch.device("cuda", self.dist.local_rank)
            torch.cuda.set_device(self.device)
        self.log = log if self.dist.is_main else (lambda *a, **k: None)
        if not (train_config.max_steps or train_config.max_epochs or train_config.max_time or settings.more_time):
            raise TrainingError("no stopping rule: give --max-steps, --max-epochs or --max-time")
        self.meta = load_meta(settings.data_dir)
        check_model_against_data(model_config, self.meta, settings.data_dir)
        self.lm = model_config.architecture != "encoder-decoder"  # a language model on a token stream
        self.train_indices = None  # with train_max_len: the training pairs used
        if self.lm:
            self.train_set, self.valid_set, self.sampler = self._language_data()
        else:
            self.train_set = ParallelDataset(settings.data_dir, "train")
            self.valid_set = ParallelDataset(settings.data_dir, "valid") if "valid" in self.meta["splits"] else None
            check_lengths_against_model(model_config, {"train": self.train_set, "valid": self.valid_set},
                                        settings.data_dir)
            self.train_indices = self._short_pairs() if train_config.train_max_len else None
            chosen = self.train_indices if self.train_indices is not None else slice(None)
            self.sampler = TokenBatchSampler(self.train_set.src_lengths[chosen], self.train_set.tgt_lengths[chosen],
                                             train_config.max_tokens, seed=train_config.seed,
                                             world_size=self.dist.world_size, rank=self.dist.rank)
        self.tokenizer_files = [Path(settings.data_dir) / self.meta["spm"]["src"],
                                Path(settings.data_dir) / self.meta["spm"]["tgt"]]
        self.tokenizer = load_tokenizer(settings.data_dir, self.meta)  # for validation BLEU, loaded once
        torch.manual_seed(train_config.seed)
        self.model = Transformer(model_config).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.0, betas=(train_config.adam_beta1,
                                          train_config.adam_beta2), eps=train_config.adam_eps,
                                          weight_decay=train_config.weight_decay)
        # fp16 (CUDA only) needs loss scaling; bf16 and fp32 do not.
        self.scaler = torch.amp.GradScaler("cuda") if settings.precision == "fp16" else None
        self.ema = ExponentialAverage(self.model, train_config.ema) if train_config.ema > 0 else None
        self.progress = Progress()
        self._lock = None
        self._prepare_run_dir(resume)
        # Dropout differs per rank (seed + rank), as with any data-parallel run.
        torch.manual_seed(train_config.seed + self.dist.rank)
        if resume:
            self._resume()
            if settings.more_time is not None:
                self.tc = replace(self.tc, max_time=self.progress.elapsed + settings.more_time)
                self.log(f"--more-time: training until {self.tc.max_time / 60:.1f} min of training in all "
                         f"(now {self.progress.elapsed / 60:.1f} min)")
        elif settings.init_from:
            self._init_from(settings.init_from)
        if self.dist.is_main:
            resolved = {"model": self.cfg.to_dict(), "train": self.tc.to_dict(),
                        "settings": {k: v for k, v in asdict(self.settings).items() if k != "run_dir"}}
            write_text(self.run_dir / "config.json", json.dumps(resolved, indent=2) + "\n", what="config")
        self.ddp = None
        self.forward_model = self.model
        if self.dist.enabled:
            self.ddp = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
            self.forward_model = self.ddp
        if settings.compile:
            self.forward_model = torch.compile(self.forward_model)

    def _language_data(self):
        """The token streams of a language model and the sampler of the training blocks."""
        cfg, tc, data_dir = self.cfg, self.tc, self.settings.data_dir
        if tc.block_size > cfg.max_positions:
            raise TrainingError(f"block_size={tc.block_size} is longer than the model's max_positions="
                                f"{cfg.max_positions}; lower block_size (--set block_size=...)")
        shifted = cfg.architecture == "decoder-only"
        train = TokenStream(data_dir, "train")
        valid = TokenStream(data_dir, "valid") if "valid" in self.meta["splits"] else None
        for name, stream in (("train", train), ("valid", valid)):
            if stream is not None and stream.num_blocks(tc.block_size, shifted) < (self.dist.world_size if
                                                                                    name == "train" else 1):
                raise TrainingError(f"{data_dir}: the {name} split has {len(stream):,} tokens, not one block of "
                                    f"block_size={tc.block_size} (+1 for the last target); lower block_size "
                                    "or give more text")
        per_batch = max(1, tc.max_tokens // tc.block_size)
        sampler = BlockSampler(train.num_blocks(tc.block_size, shifted), per_batch, seed=tc.seed,
                               world_size=self.dist.world_size, rank=self.dist.rank)
        return train, valid, sampler

    def _short_pairs(self) -> np.ndarray:
        """The training pairs within ``train_max_len`` tokens on both sides."""
        L, ds = self.tc.train_max_len, self.train_set
        keep = np.flatnonzero((ds.src_lengths <= L) & (ds.tgt_lengths <= L))
        if len(keep) < self.dist.world_size:
            raise TrainingError(f"train_max_len={L}: no training pair is that short; raise it")
        self.log(f"train_max_len={L}: training on {len(keep):,} of {len(ds):,} pairs")
        return keep

    def collate(self, indices, epoch: int, number: int, split=None):
        """The batch of the examples (or blocks) ``indices``, the ``number``-th of ``epoch``."""
        cfg, tc = self.cfg, self.tc
        data = split if split is not None else self.train_set
        if cfg.architecture == "decoder-only":
            return collate_next_token(data, indices, tc.block_size, cfg.pad_id)
        if cfg.architecture == "encoder-only":  # the masks depend on (seed, epoch, batch): resume is exact
            rng = np.random.default_rng([tc.seed, epoch, number, int(split is not None)])
            return collate_masked(data, indices, tc.block_size, cfg, tc.mask_prob, rng)
        if split is None and self.train_indices is not None:
            indices = self.train_indices[indices]  # positions among the short pairs -> in the split
        return collate(data, indices, cfg.pad_id, cfg.start_id, cfg.eos_id)

    # --- the run directory ----------------------------------------------------------------

    def _prepare_run_dir(self, resume: bool) -> None:
        """Check the run directory and take its lock.

        A new run goes into a new or empty folder (or a run folder without checkpoints); a resumed
        run must keep its model. Changes to the training recipe on resume are logged field by field.
        """
        config_path = self.run_dir / "config.json"
        resolved = {"model": self.cfg.to_dict(), "train": self.tc.to_dict()}
        check_output_dir(self.run_dir, "run", [self.settings.data_dir], what="--out")
        if resume:
            if not config_path.is_file():
                raise TrainingError(f"--resume: {self.run_dir} is not a run directory (no config.json); "
                                    "start a new run without --resume")
            saved = read_json(config_path)
            changed = [k for k, v in saved.get("model", {}).items() if resolved["model"].get(k) != v]
            if changed:
                details = ", ".join(f"{k}: {saved['model'][k]} -> {resolved['model'][k]}" for k in changed)
                raise TrainingError(f"--resume: the model differs from the one {self.run_dir} was trained with "
                                    f"({details}); resume with the same model options or start a new run")
            for key, old in saved.get("train", {}).items():
                if resolved["train"].get(key) != old:
                    self.log(f"--resume: {key} changed: {old} -> {resolved['train'][key]}")
        elif list_checkpoints(self.run_dir):
            raise TrainingError(f"{self.run_dir} already holds checkpoints; pass --resume to continue that run, "
                                "or choose another --out")
        if self.dist.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._lock = RunLock(self.run_dir)
            write_marker(self.run_dir, "run")

    def _resume(self) -> None:
        """Continue from the newest complete checkpoint, skipping damaged ones with a warning."""
        found = list_checkpoints(self.run_dir)
        if not found:
            self.log(f"--resume: {self.run_dir} has no checkpoint yet; starting from the beginning")
            return
        for folder in reversed(found):
            try:  # reading the state and loading the weights are the checks: a damaged file fails them
                state, trainer = read_training_state(folder)
                self._load_weights(folder)
                self.optimizer.load_state_dict(state["optimizer"])
                if self.scaler is not None and state.get("scaler"):
                    self.scaler.load_state_dict(state["scaler"])
                progress = Progress(**trainer["progress"])
                self._resume_ema(folder)
            except (CheckpointError, KeyError, TypeError, ValueError) as error:
                self.log(f"warning: cannot resume from {folder}: {error}; trying the checkpoint before it")
                continue
            break
        else:
            raise TrainingError(f"--resume: none of the checkpoints in {self.run_dir / 'checkpoints'} is complete "
                                "(see the warnings above); start a new run in another --out")
        rank = self.dist.rank
        rng = state["rng"]
        torch.set_rng_state(rng[rank] if rank < len(rng) else rng[0])
        cuda_rng = state.get("cuda_rng")
        if self.device.type == "cuda" and cuda_rng:
            torch.cuda.set_rng_state(cuda_rng[rank] if rank < len(cuda_rng) else cuda_rng[0], self.device)
        self.progress = progress
        self.log(f"resumed from {folder} (step {self.progress.step}, epoch {self.progress.epoch + 1}, "
                 f"batch {self.progress.batch_in_epoch})")

    def _resume_ema(self, folder: Path) -> None:
        """The EMA's averages from ``folder`` (started afresh from the resumed weights if the run had
        none: ``--set ema=...`` added on resume)."""
        if self.ema is None:
            return
        path = folder / EMA_FILE
        if not path.is_file():
            self.ema = ExponentialAverage(self.model, self.tc.ema)
            self.log(f"--resume: {folder} has no EMA; the EMA starts from the resumed weights")
            return
        from safetensors.torch import load_file

        try:
            self.ema.load_state_dict(upgrade_names(load_file(str(path), device=str(self.device))))
        except Exception as error:  # safetensors raises its own types for a damaged file
            raise CheckpointError(f"{path} is damaged ({error})") from None

    def _load_weights(self, folder: Path) -> None:
        """Load ``folder``'s weights into the model; a partial load is an error naming the keys."""
        missing, unexpected = load_weights(self.model, folder / "model.safetensors", self.device)
        if missing or unexpected:
            raise CheckpointError(f"{folder / 'model.safetensors'} does not fit the model: missing keys "
                                  f"{missing[:5]}, unexpected keys {unexpected[:5]}")

    def _init_from(self, path: str) -> None:
        from ..checkpoint import resolve

        folder = resolve(path)
        info = read_info(folder)
        if info["model"] != self.cfg.to_dict():
            diff = [k for k, v in info["model"].items() if self.cfg.to_dict().get(k) != v]
            raise TrainingError(f"--init-from {path}: its model differs in {', '.join(diff)}; use the same options")
        self._load_weights(folder)
        self.log(f"initialized the weights from {folder}")

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
        tokens = torch.tensor(float(sum(b.target_tokens for b in micro_batches)))  # counted on the host
        total_tokens = float(distributed.all_reduce_sum(tokens, self.dist))
        cuda = self.device.type == "cuda"
        loss_sum = torch.zeros((), device=self.device)
        nll_sum = torch.zeros((), device=self.device)
        for i, batch in enumerate(micro_batches):
            real = (batch.tgt_out != self.cfg.pad_id).flatten()  # (B*T,) on the host: no device sync
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
            with (nullcontext() if sync else self.ddp.no_sync()), autocast(self.device, self.settings.precision):
                logits = self.forward_model(*batch.inputs, select=select)  # (N, V)
                loss, nll = label_smoothed_nll(logits.flatten(0, -2), target, tc.label_smoothing, self.cfg.pad_id)
            scaled = loss * world / total_tokens
            (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            loss_sum += loss.detach()
            nll_sum += nll.detach()
        sums = distributed.all_reduce_sum(torch.stack([loss_sum, nll_sum]), self.dist)
        step = self.progress.step + 1
        lr = learning_rate(step, tc.lr_schedule, self.cfg.d_model, tc.warmup, tc.lr_factor, tc.peak_lr)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), tc.clip_norm if tc.clip_norm > 0 else math.inf)
        if self.scaler is not None:
            # fp16: an overflow is the scaler's business (it lowers the scale and skips the step),
            # not a divergence; only a non-finite loss counts as a bad step.
            finite = bool(torch.isfinite(sums[0]))  # the one sync (the scaler has its own)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.scaler.step(self.optimizer)
            self.scaler.update()
        elif finite := bool(torch.isfinite(torch.stack([sums[0], grad_norm.to(sums.device)])).all()):  # the one sync
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema is not None and finite:
            self.ema.update(self.model)
        return {"loss": sums[0] / total_tokens, "nll": sums[1] / total_tokens, "lr": lr, "grad_norm": grad_norm,
                "tokens": total_tokens, "finite": finite}

    # --- the loop -------------------------------------------------------------------------

    def train(self) -> dict[str, Any]:
        """Train until a limit (steps, epochs, time) or early stopping; returns a summary."""
        from tqdm.auto import tqdm

        tc, p = self.tc, self.progress
        previous_sigterm = _sigterm_as_interrupt()
        # One bar with a total and an ETA: in steps under a step limit, else in seconds under a time limit.
        by_time = not tc.max_steps and bool(tc.max_time)
        bar = tqdm(total=(round(tc.max_time) if by_time else tc.max_steps) or None,
                   initial=round(p.elapsed) if by_time else p.step, desc="training",
                   unit="s" if by_time else " step", disable=True if (self.settings.quiet or not self.dist.is_main)
                   else None, dynamic_ncols=True)
        log = self.log
        if not bar.disable and log is print:
            self.log = lambda *a, **k: bar.write(" ".join(str(x) for x in a))  # lines above the bar, not over it
        session_start = time.time()
        start_elapsed = p.elapsed
        last_save = time.time()
        window = {"loss": 0.0, "nll": 0.0, "tokens": 0.0, "steps": 0, "time": time.time()}
        bad_in_a_row = 0
        reason = self._limit_reached()  # a resumed run may have nothing left to do
        if reason:
            self.log(f"nothing to do: {reason} already reached")
        try:
            while reason is None:
                batches = self.sampler.batches(p.epoch, start=p.batch_in_epoch)
                for start in range(0, len(batches), tc.update_freq):
                    group = batches[start : start + tc.update_freq]
                    micro = [self.collate(b, p.epoch, p.batch_in_epoch + j) for j, b in enumerate(group)]
                    stats = self.update(micro)
                    p.batch_in_epoch += len(group)
                    p.elapsed = start_elapsed + time.time() - session_start
                    if not stats["finite"]:
                        bad_in_a_row += 1
                        p.skipped_updates += 1
                        self.log(f"step {p.step + 1}: the loss or gradient is not finite; update skipped "
                                 f"({bad_in_a_row} in a row)")
                        if bad_in_a_row >= tc.max_bad_steps:
                            raise TrainingError(f"{bad_in_a_row} non-finite losses in a row: training diverged. "
                                                "Lower the learning rate (--set lr_factor=...), raise warmup, or "
                                                "set clip_norm; the last checkpoint is intact")
                        continue
                    bad_in_a_row = 0
                    p.step += 1
                    p.target_tokens += int(stats["tokens"])
                    for key in ("loss", "nll", "tokens"):
                        window[key] += stats[key] * (1 if key == "tokens" else stats["tokens"])
                    window["steps"] += 1
                    if by_time:
                        bar.update(round(p.elapsed) - bar.n)
                        bar.set_postfix(step=p.step, refresh=False)
                    else:
                        bar.update(1)
                    if p.step % tc.log_every == 0 or p.step in (1, 10):  # a first loss at once
                        self._log_train(window, stats, bar)
                        window = {"loss": 0.0, "nll": 0.0, "tokens": 0.0, "steps": 0, "time": time.time()}
                    if tc.valid_every > 0 and p.step % tc.valid_every == 0:
                        self._validate_and_track()
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
                        self._validate_and_track()
                    reason = self._limit_reached()
                    _, stop = self._agree(False, reason is not None)
                    reason = (reason or "another rank stopped") if stop else None
        except KeyboardInterrupt as stop:
            reason = str(stop) or "interrupted"
            self.log(f"{reason}: saving a checkpoint before stopping")
        finally:
            bar.close()
            self.log = log
            _restore_sigterm(previous_sigterm)
        if reason and not reason.startswith(("interrupted", "terminated")) and tc.valid_every >= 0 and \
                self._validated_at != p.step and p.step > 0:
            self._validate_and_track(scheduled=False)  # the final weights always get their say for best/
        self.save()
        summary = {"stopped": reason, "step": p.step, "epochs_completed": p.epoch, "elapsed": round(p.elapsed, 1),
                   "best_bleu": p.best_bleu, "best_step": p.best_step}
        if self.lm:
            summary = {**{k: v for k, v in summary.items() if k != "best_bleu"}, "best_ppl": p.best_ppl}
        self._write_metrics({"type": "end", **summary})
        best = (f"; best valid perplexity {p.best_ppl:.2f} at step {p.best_step}" if self.lm and p.best_ppl else
                f"; best valid BLEU {p.best_bleu:.2f} at step {p.best_step}" if not self.lm and p.best_bleu >= 0 else "")
        self.log(f"training stopped ({reason}) at step {p.step} after {p.elapsed / 60:.1f} min{best}")
        distributed.teardown(self.dist)
        self.close()
        return summary

    def close(self) -> None:
        """Release the run lock (also released by the OS when the process ends)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _agree(self, save: bool, stop: bool) -> tuple[bool, bool]:
        """Rank 0's clock and validation decide for every rank, so that no rank waits alone."""
        if not self.dist.enabled:
            return save, stop
        flags = torch.tensor([float(save), float(stop)]) if self.dist.is_main else torch.zeros(2)
        flags = distributed.all_reduce_sum(flags, self.dist).cpu()
        return bool(flags[0]), bool(flags[1])

    def _limit_reached(self) -> Optional[str]:
        tc, p = self.tc, self.progress
        if tc.max_steps and p.step >= tc.max_steps:
            return f"max_steps {tc.max_steps}"
        if tc.max_epochs and p.epoch >= tc.max_epochs:
            return f"max_epochs {tc.max_epochs}"
        if tc.max_time and p.elapsed >= tc.max_time:
            return f"max_time {tc.max_time:.0f}s"
        if tc.patience and p.validations_since_best >= tc.patience:
            return f"no better validation BLEU in {tc.patience} validations"
        return self._stop_reason

    def _log_train(self, window: dict, last: dict, bar) -> None:
        seconds = max(time.time() - window["time"], 1e-9)
        loss = float(window["loss"]) / max(window["tokens"], 1)  # device values are read here, at log steps
        nll = float(window["nll"]) / max(window["tokens"], 1)
        record = {"type": "train", "step": self.progress.step, "epoch": self.progress.epoch + 1, "loss": round(loss, 4),
                  "nll": round(nll, 4), "ppl": round(math.exp(min(nll, 50)), 2), "lr": last["lr"],
                  "grad_norm": round(float(last["grad_norm"]), 4),
                  "tokens_per_s": round(window["tokens"] / seconds, 1),
                  "elapsed": round(self.progress.elapsed, 1)}
        bar.set_postfix(step=self.progress.step, loss=f"{loss:.3f}", lr=f"{last['lr']:.2e}",
                        tok_s=f"{record['tokens_per_s']:.0f}")
        if bar.disable:
            self.log(" ".join(f"{k}={v}" for k, v in record.items() if k != "type"))
        self._write_metrics(record)

    def _write_metrics(self, record: dict) -> None:
        if not self.dist.is_main:
            return
        with open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        if not hasattr(self, "_tb"):
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(self.run_dir / "tensorboard"))
            except Exception:  # TensorBoard is optional
                self._tb = None
        if self._tb is not None and "step" in record:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key != "step":
                    self._tb.add_scalar(f"{record['type']}/{key}", value, record["step"])

    # --- validation -----------------------------------------------------------------------

    def _validate_and_track(self, scheduled: bool = True) -> None:
        """Validate (rank 0), keep ``best/``, and let ``on_validate`` stop the run.

        A scheduled validation is skipped while validation has already taken more than
        ``valid_share`` of the training time, so that it costs a bounded share of any budget.
        """
        p, tc = self.progress, self.tc
        if self.valid_set is None:
            return
        if scheduled and tc.valid_share and p.best_step > 0 and p.valid_seconds > tc.valid_share * p.elapsed:
            return
        self._validated_at = p.step
        result = self.validate() if self.dist.is_main else None
        distributed.barrier(self.dist)
        if not self.dist.is_main:
            return
        p = self.progress
        if self.lm:
            better = p.best_ppl == 0 or result["ppl"] < p.best_ppl
            if better:
                p.best_ppl = result["ppl"]
        else:
            better = (result["bleu"], result["chrf"]) > (p.best_bleu, p.best_chrf)  # chrF breaks ties
            if better:
                p.best_bleu, p.best_chrf = result["bleu"], result["chrf"]
        if better:
            p.best_step, p.validations_since_best = p.step, 0
            self.save(best=True)
        else:
            p.validations_since_best += 1
        if self.lm:
            self.log(f"valid at step {p.step}: loss {result['loss']:.3f}, ppl {result['ppl']:.2f} "
                     f"({result['tokens']:,} tokens{' masked' if self.cfg.architecture == 'encoder-only' else ''}, "
                     f"{result['seconds']:.1f} s)")
        else:
            self.log(f"valid at step {p.step}: loss {result['loss']:.3f}, ppl {result['ppl']:.2f}, "
                     f"BLEU {result['bleu']:.2f}, chrF {result['chrf']:.2f} ({result['sentences']} sentences, "
                     f"{result['seconds']:.1f} s)")
        if self.on_validate is not None:
            self._stop_reason = self.on_validate(result) or self._stop_reason

    @torch.no_grad()
    def validate(self) -> dict:
        """Validation loss/perplexity and BLEU/chrF of translations of the validation set (for a
        language model: loss and perplexity of its objective on every validation block)."""
        model, tc, cfg = self.model, self.tc, self.cfg
        start = time.time()
        model.eval()
        ds = self.valid_set
        if self.lm:
            return self._validate_language_model(start)
        sampler = TokenBatchSampler(ds.src_lengths, ds.tgt_lengths, tc.max_tokens, shuffle=False)
        loss_sum = nll_sum = tokens = 0.0
        for indices in sampler.batches(0):
            batch = collate(ds, indices, cfg.pad_id, cfg.start_id, cfg.eos_id).to(self.device)
            with autocast(self.device, self.settings.precision):
                logits = model(batch.src, batch.tgt_in)
            loss, nll = label_smoothed_nll(logits.flatten(0, 1), batch.tgt_out.flatten(), tc.label_smoothing, cfg.pad_id)
            loss_sum, nll_sum, tokens = loss_sum + float(loss), nll_sum + float(nll), tokens + batch.target_tokens
        n = len(ds) if not tc.valid_max_sentences else min(len(ds), tc.valid_max_sentences)
        sources = [ds[i][0].tolist() for i in range(n)]
        decode = DecodeConfig(beam=tc.valid_beam, max_tokens=max(tc.max_tokens, 2048))
        hyps = translate_ids(model, sources, decode, precision=self.settings.precision)
        texts = [self.tokenizer.decode_tgt(h[0].tokens) for h in hyps]
        references = ds.raw_text("tgt")[:n]
        scores = score(texts, references, tokenize=tc.bleu_tokenize)
        exact = sum(h == r for h, r in zip(texts, references)) / max(n, 1)
        seconds = time.time() - start
        self.progress.valid_seconds += seconds
        result = {"type": "valid", "step": self.progress.step, "epoch": self.progress.epoch + 1,
                  "loss": round(loss_sum / tokens, 4), "nll": round(nll_sum / tokens, 4),
                  "ppl": round(math.exp(min(nll_sum / tokens, 50)), 2), "bleu": scores["bleu"], "chrf": scores["chrf"],
                  "exact": round(exact, 4), "sentences": n, "seconds": round(seconds, 2),
                  "elapsed": round(self.progress.elapsed, 1)}
        self._write_metrics(result)
        return result

    def _validate_language_model(self, start: float) -> dict:
        tc, cfg, ds = self.tc, self.cfg, self.valid_set
        blocks = BlockSampler(ds.num_blocks(tc.block_size, cfg.architecture == "decoder-only"),
                              max(1, tc.max_tokens // tc.block_size), shuffle=False)
        loss_sum = nll_sum = tokens = 0.0
        for number, indices in enumerate(blocks.batches(0)):
            batch = self.collate(indices, 0, number, split=ds).to(self.device)  # the same masks every time
            with autocast(self.device, self.settings.precision):
                logits = self.model(*batch.inputs)
            loss, nll = label_smoothed_nll(logits.flatten(0, 1), batch.tgt_out.flatten(), tc.label_smoothing,
                                           cfg.pad_id)
            loss_sum, nll_sum, tokens = loss_sum + float(loss), nll_sum + float(nll), tokens + batch.target_tokens
        seconds = time.time() - start
        self.progress.valid_seconds += seconds
        result = {"type": "valid", "step": self.progress.step, "epoch": self.progress.epoch + 1,
                  "loss": round(loss_sum / tokens, 4), "nll": round(nll_sum / tokens, 4),
                  "ppl": round(math.exp(min(nll_sum / tokens, 50)), 2), "tokens": int(tokens),
                  "seconds": round(seconds, 2), "elapsed": round(self.progress.elapsed, 1)}
        self._write_metrics(result)
        return result

    # --- checkpoints ----------------------------------------------------------------------

    def checkpoint_info(self) -> dict:
        return {"model": self.cfg.to_dict(), "src": self.meta["src"], "tgt": self.meta["tgt"],
                "tokenizer": {"src": Path(self.meta["spm"]["src"]).name, "tgt": Path(self.meta["spm"]["tgt"]).name},
                "step": self.progress.step}

    def save(self, best: bool = False) -> None:
        """Write a checkpoint (atomic), keep the last K; with ``best``, (re)write ``best/`` only."""
        if best:  # only rank 0 validates, so only rank 0 comes here
            write_checkpoint(self.run_dir / "best", self.model, self.checkpoint_info(), self.tokenizer_files)
            return
        # Every rank's RNG states (CPU and, on CUDA, the device's): each rank's dropout masks
        # continue exactly on resume.
        rngs = [torch.get_rng_state()]
        cuda_rngs = [torch.cuda.get_rng_state(self.device)] if self.device.type == "cuda" else None
        if self.dist.enabled:
            gathered: list = [None] * self.dist.world_size
            torch.distributed.all_gather_object(gathered, (rngs[0], cuda_rngs[0] if cuda_rngs else None))
            rngs = [cpu for cpu, _ in gathered]
            cuda_rngs = [cuda for _, cuda in gathered] if cuda_rngs else None
        if not self.dist.is_main:
            return
        state = {"optimizer": self.optimizer.state_dict(), "rng": rngs, "cuda_rng": cuda_rngs,
                 "scaler": self.scaler.state_dict() if self.scaler is not None else None}
        folder = self.run_dir / "checkpoints" / f"step_{self.progress.step:08d}"
        write_checkpoint(folder, self.model, self.checkpoint_info(), self.tokenizer_files, state,
                         {"progress": asdict(self.progress), "train": self.tc.to_dict()},
                         tensors={EMA_FILE: self.ema.state_dict()} if self.ema is not None else None)
        if self.ema is not None:  # the averaged weights as a checkpoint of their own
            with self.ema.applied(self.model):
                write_checkpoint(self.run_dir / "ema", self.model, {**self.checkpoint_info(), "ema": self.tc.ema},
                                 self.tokenizer_files)
        for old in list_checkpoints(self.run_dir)[: -self.tc.keep_last]:
            remove_output(old, "checkpoint")  # pruning keeps the last K


def _sigterm_as_interrupt():
    """Make SIGTERM (what cluster schedulers send) stop training like Ctrl-C: with a checkpoint."""
    def handler(signum, frame):
        raise KeyboardInterrupt("terminated (SIGTERM)")

    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        return None


def _restore_sigterm(previous) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


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
            raise TrainingError(f"{run_dir} is in use by another training process (pid {other}); wait for it to "
                                "finish or stop it, or choose another --out") from None
        self.handle.seek(0)
        self.handle.truncate()
        self.handle.write(f"{os.getpid()}\n")
        self.handle.flush()

    def release(self) -> None:
        if not self.handle.closed:
            self.handle.close()
