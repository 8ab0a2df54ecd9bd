"""``TrainConfig``: the training recipe of §5 and a run's bookkeeping; routing of ``--set``
overrides."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from .fields import ConfigMixin, at_least, check_numbers, choice, option, unknown_key_error
from .model import ModelConfig

# sacreBLEU's tokenizers (sacrebleu.metrics.bleu._TOKENIZERS; a test keeps the two in step).
BLEU_TOKENIZERS = (
    "none",
    "zh",
    "13a",
    "intl",
    "char",
    "ja-mecab",
    "ko-mecab",
    "spm",
    "flores101",
    "flores200",
    "spBLEU-1K",
)


@dataclass(frozen=True)
class TrainConfig(ConfigMixin):
    """The training recipe (§5) and the run's bookkeeping.

    Fields:
        max_tokens: token budget of one batch on one device, padded positions counted (per side).
        update_freq: batches accumulated into one optimizer update.
        max_steps, max_epochs, max_time: stop at whichever comes first (0 = no limit; time in s).
        lr_schedule: "inverse_sqrt" (paper: factor * d_model^-0.5 * min(s^-0.5, s * w^-1.5)) or
            "inverse_sqrt_peak" (the same shape, scaled so that the peak at step ``warmup`` is
            ``peak_lr``). lr_factor: the paper's factor (1.0). warmup: 4000.
        adam_beta1, adam_beta2, adam_eps: 0.9, 0.98, 1e-9. weight_decay: 0.
        label_smoothing: 0.1. clip_norm: 0 (off, as the paper).
        seed: for weights, dropout and batch order.
        log_every: steps between metric lines. valid_every: steps between validations
            (0: at each epoch end; -1: never). valid_beam: 1 (greedy) or a beam size for validation
    BLEU.
        valid_at_start: validate once before the first update too (fine-tuning: the starting
            model's scores come first, and ``best/`` holds it until training beats it).
        valid_max_sentences: translate at most this many validation sentences for BLEU (0: all).
        valid_share: skip a scheduled validation while validation has taken more than this share
            of the training time (0: never skip), so that it costs a bounded part of any budget.
        bleu_tokenize: sacreBLEU's tokenizer for validation BLEU ("13a", its default; "char" for
            outputs without spaces, such as the demo's German number words).
        save_every: steps between checkpoints; save_minutes: minutes between checkpoints (paper:
    10).
        keep_last: checkpoints kept. patience: validations without a better BLEU before stopping
            (0: never stop early). max_bad_steps: non-finite losses in a row before giving up.
        ema: decay of an exponential moving average of the weights, written as ``RUN/ema/`` at
            each checkpoint (0: off; e.g. 0.999; see ``training.ema``).
        lora: train low-rank adapters of this rank on a frozen ``--init-from`` model instead of
            its weights (0: off; ``transduce.lora``); lora_alpha scales them by alpha / rank (0: the
            rank, a scale of 1); lora_dropout on their input; lora_targets: which layers
            ("attention", "ffn" or both, comma-separated).
        block_size: models on monolingual text (GPT, BERT, T5's pretraining) train on contiguous
            blocks of this many tokens of the text stream; a batch holds max_tokens // block_size
            blocks.
        mask_prob: encoder-only (BERT's objective): the share of tokens to predict (0.15); of those
            80% are replaced by <mask>, 10% by a random token and 10% left unchanged.
        noise_density, mean_span: an encoder-decoder on monolingual text (T5's span corruption):
            the share of each block's tokens dropped (0.15) and the mean length of the spans they
            are dropped in (3), each span one sentinel in the input.
        train_max_len: train only on the pairs whose source and target have at most this many
            tokens (0: all); validation keeps every sentence (to study extrapolation to longer
            ones).
        batch_size: images (image data: a classifier) per batch (128); text is batched by
            max_tokens.
        crop_padding, flip: image data's augmentation in training (never in validation or use):
            each image padded with crop_padding black pixels on each side and cropped back to its
            size at a random place (4; 0: off), and, with flip, mirrored left to right half of the
            time (off: it would turn digits and letters into others).
        time_masks, freq_masks, time_mask_width, freq_mask_width: speech data's SpecAugment (Park
            et al. 2019) in training: in each recording, time_masks runs of up to time_mask_width
            frames and freq_masks bands of up to freq_mask_width mel bins set to zero (0: off).
    """

    max_tokens: int = option(4096, low=1, high=10**9)
    update_freq: int = option(1, low=1, high=1_000_000)
    max_steps: int = option(0, low=0)
    max_epochs: int = option(0, low=0)
    max_time: float = 0.0
    lr_schedule: str = "inverse_sqrt"
    lr_factor: float = 1.0
    peak_lr: float = 7e-4
    warmup: int = 4000
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_eps: float = 1e-9
    weight_decay: float = 0.0
    label_smoothing: float = 0.1
    clip_norm: float = 0.0
    seed: int = option(1, low=0)
    log_every: int = 50
    valid_every: int = 0
    valid_beam: int = 1
    valid_at_start: bool = False
    valid_max_sentences: int = 0
    valid_share: float = 0.1
    bleu_tokenize: str = "13a"
    save_every: int = 0
    save_minutes: float = 10.0
    keep_last: int = 5
    patience: int = 0
    max_bad_steps: int = 5
    ema: float = option(0.0, low=0, high=0.999999)
    lora: int = option(0, low=0, high=65536)
    lora_alpha: float = option(0.0, low=0, high=1e6)
    lora_dropout: float = option(0.0, low=0, high=0.99)
    lora_targets: str = "attention,ffn"
    block_size: int = 128
    mask_prob: float = 0.15
    noise_density: float = 0.15
    mean_span: float = 3.0
    train_max_len: int = 0
    batch_size: int = option(128, low=1, high=10**7)
    crop_padding: int = option(4, low=0, high=4096)
    flip: bool = False
    time_masks: int = option(0, low=0, high=100)
    freq_masks: int = option(0, low=0, high=100)
    time_mask_width: int = option(40, low=1, high=10**6)
    freq_mask_width: int = option(30, low=1, high=10**6)

    def __post_init__(self) -> None:
        check_numbers(self)
        choice("lr_schedule", self.lr_schedule, ("inverse_sqrt", "inverse_sqrt_peak"))
        choice("bleu_tokenize", self.bleu_tokenize, BLEU_TOKENIZERS)
        at_least(
            self,
            1,
            "max_tokens",
            "update_freq",
            "warmup",
            "keep_last",
            "log_every",
            "valid_beam",
            "max_bad_steps",
            "block_size",
        )
        for name in ("mask_prob", "noise_density"):
            if not 0.0 < getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in (0, 1), got {getattr(self, name)}")
        if self.mean_span < 1:
            raise ValueError(f"mean_span must be at least 1, got {self.mean_span}")
        at_least(
            self,
            0,
            "max_steps",
            "max_epochs",
            "max_time",
            "valid_max_sentences",
            "valid_share",
            "save_every",
            "train_max_len",
            "save_minutes",
            "patience",
            "weight_decay",
            "clip_norm",
        )
        if self.valid_every < -1:
            raise ValueError("valid_every must be -1 (never), 0 (each epoch) or a number of "
                             f"steps, got {self.valid_every}")
        if not 0.0 <= self.ema < 1.0:
            raise ValueError("ema must be in [0, 1) (0: off; a decay such as 0.999), got "
                             f"{self.ema}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        for name in ("adam_beta1", "adam_beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        for name in ("lr_factor", "peak_lr", "adam_eps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


def split_overrides(pairs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Route ``key=value`` overrides to ModelConfig or TrainConfig (``model.x`` / ``train.x`` also
    work)."""
    model_keys = {f.name for f in fields(ModelConfig)}
    train_keys = {f.name for f in fields(TrainConfig)}
    model, train = {}, {}
    for key, value in pairs.items():
        section, _, name = key.rpartition(".")
        if section not in ("", "model", "train"):
            raise ValueError(f"unknown section {section!r} in {key!r}: use model.KEY or train.KEY")
        if name in model_keys and section != "train":
            model[name] = value
        elif name in train_keys and section != "model":
            train[name] = value
        else:
            raise unknown_key_error(name, sorted(model_keys | train_keys), "config")
    return model, train
