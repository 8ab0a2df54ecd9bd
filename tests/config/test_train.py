"""The training recipe's options: defaults from the paper, each rule a message, overrides routed."""

from __future__ import annotations

import re

import pytest

from transduce import TrainConfig
from transduce.config import split_overrides


def test_defaults_follow_the_paper():
    cfg = TrainConfig()
    assert (cfg.warmup, cfg.label_smoothing, cfg.adam_beta1, cfg.adam_beta2) == (
        4000, 0.1, 0.9, 0.98)
    assert cfg.lr_schedule == "inverse_sqrt"


@pytest.mark.parametrize("kwargs, words", [
    (dict(lr_schedule="cosine"), "lr_schedule='cosine' is not supported"),
    (dict(mask_prob=0.0), "mask_prob must be in (0, 1)"),
    (dict(ema=1.0), "ema must be at most 0.999999"),
    (dict(label_smoothing=1.0), "label_smoothing must be in [0, 1)"),
    (dict(adam_beta2=1.0), "adam_beta2 must be in [0, 1)"),
    (dict(peak_lr=0.0), "peak_lr must be positive"),
    (dict(valid_every=-2), "valid_every must be -1 (never), 0 (each epoch)"),
    (dict(update_freq=0), "update_freq must be at least 1"),
    (dict(mean_span=0.5), "mean_span must be at least 1"),
])
def test_each_rule_is_a_message_naming_the_option(kwargs, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        TrainConfig(**kwargs)


def test_overrides_go_to_the_model_or_the_training_by_name_or_section():
    model, train = split_overrides({"d_model": 1, "warmup": 2, "train.seed": 3,
                                    "model.dropout": 0.0})
    assert model == {"d_model": 1, "dropout": 0.0} and train == {"warmup": 2, "seed": 3}
    with pytest.raises(ValueError, match="unknown section 'optim'"):
        split_overrides({"optim.lr": 1})
    with pytest.raises(ValueError, match="did you mean 'warmup'"):
        split_overrides({"model.warmup": 1})  # a training option named as the model's
