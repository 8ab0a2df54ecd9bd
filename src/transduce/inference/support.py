"""What the fast passes decode: an allow-list over every ``ModelConfig`` field.

Each field names the values the fast encoder pass and decode step compute exactly as
``Transformer.encode``/``decode`` do: ``ANY`` (every value the config accepts), a tuple of values,
or a check over the whole config. A field missing here is refused, so that an option added to
``ModelConfig`` later is decoded by the model's own pass until someone proves the fast path handles
it (``tests/inference/test_support.py`` builds a model for every choice of every field and checks
both the equality and the refusals).
"""

from __future__ import annotations

import functools
from dataclasses import fields
from typing import Callable, Optional, Union

ANY = "any"


def _every_key_head(config) -> bool:  # the step's cache holds one key and value per query head
    return config.kv_heads == config.n_heads


Rule = Union[str, tuple, Callable[[object], bool]]

SUPPORTED: dict[str, Rule] = {
    "architecture": ("encoder-decoder",),  # the language models decode with their own cache
    "encoder_layers": ANY,
    "decoder_layers": ANY,
    "d_model": ANY,
    "n_heads": ANY,
    "head_dim": ANY,
    "n_kv_heads": _every_key_head,
    "attention_window": (0,),
    "attention_scale": ("sqrt_dk", "none"),
    "d_ff": ANY,
    "dropout": ANY,  # (inference: no dropout)
    "attention_dropout": ANY,
    "activation_dropout": ANY,
    "activation": ("relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu"),
    "linear_bias": ANY,
    "norm_position": ("post", "pre"),
    "norm_type": ("layernorm", "rmsnorm"),
    "norm_eps": ANY,
    "positional": ANY,
    "relative_buckets": ANY,
    "relative_max_distance": ANY,
    "scale_embedding": ANY,
    "tying": ANY,
    "scale_output": ANY,
    "init": ANY,
    "vocab_size": ANY,
    "tgt_vocab_size": ANY,
    "pad_id": ANY,
    "bos_id": ANY,
    "eos_id": ANY,
    "unk_id": ANY,
    "decoder_start_id": ANY,
    "max_positions": ANY,
    "output_bias": ANY,
    "embed_norm": (False,),  # BERT's: the step embeds without a norm
    "output_transform": (False,),  # BERT's: the step projects the decoder's output directly
    "mask_id": ANY,
    "ffn": ("dense",),  # a mixture of experts decodes with the model's own pass
    "moe_experts": ANY,  # (read only by ffn="moe")
    "moe_top_k": ANY,
    "moe_aux_weight": ANY,
    "input": ("tokens", "audio"),  # the passes ask the model's front end (an image is classified)
    "image_size": ANY,  # (read only by input="image")
    "patch_size": ANY,
    "channels": ANY,
    "image_mean": ANY,
    "image_std": ANY,
    "classes": (0,),  # a classifier does not decode
    "pooling": ANY,  # (read only by a classifier)
    "subsample": ANY,  # (read only by input="audio": its front end)
    "audio_conv": ANY,
    "conv_channels": ANY,
    "source_positions": ANY,
    "ctc_weight": ANY,  # (the CTC head is trained, not decoded with)
    "tag_weight": ANY,  # (nor the tagging head)
}
# what the model reads and predicts are named first: an image classifier is refused as one
FIRST = ("input", "classes")


@functools.lru_cache(maxsize=64)
def unsupported(config) -> Optional[str]:
    """Why the fast passes cannot compute a model of ``config``, as ``field=value`` (None: they
    can)."""
    for field in sorted(fields(config), key=lambda f: f.name not in FIRST):
        value = getattr(config, field.name)
        rule = SUPPORTED.get(field.name)
        if rule is None:
            return f"{field.name}={value!r} (an option the fast path does not declare)"
        if rule is ANY:
            continue
        if not (rule(config) if callable(rule) else value in rule):
            return f"{field.name}={value!r}"
    return None


def require_supported(model, what: str, instead: str) -> None:
    """Refuse, naming the option, a model the fast passes do not compute exactly, or one in training
    mode (they have no dropout); ``what`` and ``instead`` name the pass and the model's own."""
    if model.training:
        raise ValueError(f"{what} is for inference: call model.eval() first")
    reason = unsupported(model.config)
    if reason:
        raise ValueError(f"{what} does not support {reason}; use {instead}")
