"""Training recipes: the schedule (and, for fine-tuning, the validation and stopping) a new run gets
when its configuration does not give them, decided in one place for the command line and for Python
alike.

- ``auto`` (the default): a warmup of about 4 epochs (100 to 4,000 updates, the paper's 4,000
  reached on WMT-sized data) to a peak learning rate of 1e-3 (7e-4, the paper's base peak, above
  d_model 256), then the paper's inverse square root decay: a model learns on a few thousand pairs
  in minutes.
- ``paper``: the configuration as given (its defaults are §5.3's schedule: warmup 4,000,
  lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)).
- ``finetune``: for a trained model continued on new data (``--init-from``): a warmup of one epoch
  (50 to 1,000 updates) to a tenth of ``auto``'s peak (``auto``'s own with ``--lora``), the same
  decay, validation before the first
  update and a stop after 5 validations without a better BLEU.

A schedule field given by the user (``given``) is kept: a schedule given in full is not the
recipe's, and ``finetune`` keeps the parts of it that are given.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Optional

from ..config import ModelConfig, TrainConfig
from ..tasks import data_layout

RECIPES = ("auto", "paper", "finetune")
SCHEDULE_KEYS = frozenset({"lr_schedule", "warmup", "peak_lr", "lr_factor"})
# what finetune sets besides the schedule (unless given): the starting model's scores first, and a
# stop once five validations in a row have not beaten the best
FINETUNE = {"valid_at_start": True, "patience": 5}


def given_fields(train: TrainConfig) -> set[str]:
    """The fields of ``train`` that differ from ``TrainConfig``'s defaults: what a Python caller
    gave."""
    default = TrainConfig()
    return {
        f.name
        for f in dataclasses.fields(TrainConfig)
        if getattr(train, f.name) != getattr(default, f.name)
    }


def apply_recipe(
    train: TrainConfig,
    model: ModelConfig,
    data_dir: str,
    recipe: Optional[str] = None,
    given: Optional[Iterable[str]] = None,
    new_run: bool = True,
) -> tuple[TrainConfig, bool]:
    """``(train config, from_recipe)``: ``train`` with ``recipe``'s schedule (None: ``auto``) where
    ``given`` (default: the fields that differ from the defaults) leaves it open, and whether the
    schedule is the recipe's (False: the user's own). A resumed run (``new_run=False``) keeps its
    schedule; only a peak given alone still implies the peak schedule."""
    recipe = recipe or "auto"
    if recipe not in RECIPES:
        raise ValueError(f"recipe={recipe!r}: choose one of {', '.join(RECIPES)}")
    given = set(given_fields(train) if given is None else given)
    if "peak_lr" in given and "lr_schedule" not in given:
        train = dataclasses.replace(
            train, lr_schedule="inverse_sqrt_peak"
        )  # a peak is only the peak schedule's
    if not new_run:
        return train, False
    from_recipe = "lr_schedule" not in given if recipe == "finetune" else not given & SCHEDULE_KEYS
    if recipe == "auto" and from_recipe:
        train = auto_schedule(train, model, data_dir)
    if recipe == "finetune":
        if "lr_schedule" not in given:  # the recipe's schedule, with the parts of it given kept
            chosen = {key: getattr(train, key) for key in given & SCHEDULE_KEYS}
            train = dataclasses.replace(
                auto_schedule(train, model, data_dir, finetune=True), **chosen
            )
        train = dataclasses.replace(train, **{k: v for k, v in FINETUNE.items() if k not in given})
    return train, from_recipe


def auto_schedule(
    train: TrainConfig, model: ModelConfig, data_dir: str, finetune: bool = False
) -> TrainConfig:
    """``auto``'s schedule scaled to the data in ``data_dir`` (``finetune``: ``finetune``'s)."""
    from ..data import ParallelDataset, TokenBatchSampler, TokenStream, load_meta

    meta = load_meta(data_dir)
    layout = data_layout(meta)
    if layout == "images":  # shuffled batches of batch_size images
        per_epoch = meta["splits"]["train"]["images"] / train.batch_size / train.update_freq
    elif layout == "stream":  # blocks of a token stream
        blocks = TokenStream(data_dir, "train").num_blocks(
            train.block_size, model.architecture == "decoder-only"
        )
        per_epoch = blocks / max(1, train.max_tokens // train.block_size) / train.update_freq
    elif layout == "recordings":  # batches of max_tokens encoder positions
        from ..data.speech import SpeechSet

        ds = SpeechSet(data_dir, "train")
        per_epoch = len(TokenBatchSampler(-(-ds.src_lengths // model.subsample),
                                          ds.tgt_lengths + 1, train.max_tokens)) / train.update_freq
    else:
        ds = ParallelDataset(data_dir, "train")
        per_epoch = (
            len(TokenBatchSampler(ds.src_lengths, ds.tgt_lengths, train.max_tokens))
            / train.update_freq
        )
    warmup = int(min(4000, max(100, round(4 * per_epoch))))
    peak = 1e-3 if model.d_model <= 256 else 7e-4
    if finetune:  # (LoRA adapters start at zero and take auto's peak: docs/finetuning.md)
        warmup, peak = int(min(1000, max(50, round(per_epoch)))), peak if train.lora else peak / 10
    return dataclasses.replace(train, lr_schedule="inverse_sqrt_peak", warmup=warmup, peak_lr=peak)


def describe_schedule(train: TrainConfig, model: ModelConfig) -> str:
    from .schedule import learning_rate

    peak = learning_rate(
        train.warmup, train.lr_schedule, model.d_model, train.warmup, train.lr_factor, train.peak_lr
    )
    return (
        f"schedule: {train.lr_schedule}, warmup {train.warmup:,} updates to a peak learning rate "
        f"of {peak:.2e}, then inverse square root decay"
    )
