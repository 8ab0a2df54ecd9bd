"""Configuration: frozen dataclasses with named presets, JSON round trips and checked overrides (no
I/O).

``ModelConfig`` (§3) and its presets, ``TrainConfig`` (§5), ``DecodeConfig`` (§6.1); every
field is checked when a config is made, and errors name the field.
"""

from .decode import DecodeConfig, LENGTH_PENALTIES, STOPS
from .fields import at_least, check_type, parse_value
from .model import (
    ACTIVATIONS,
    ARCHITECTURES,
    ATTENTION_SCALES,
    NORM_POSITIONS,
    NORM_TYPES,
    POSITIONALS,
    PRECISIONS,
    TYINGS,
    ModelConfig,
)
from .train import BLEU_TOKENIZERS, TrainConfig, split_overrides

__all__ = [
    "ACTIVATIONS",
    "ARCHITECTURES",
    "ATTENTION_SCALES",
    "BLEU_TOKENIZERS",
    "LENGTH_PENALTIES",
    "NORM_POSITIONS",
    "NORM_TYPES",
    "POSITIONALS",
    "PRECISIONS",
    "STOPS",
    "TYINGS",
    "DecodeConfig",
    "ModelConfig",
    "TrainConfig",
    "at_least",
    "check_type",
    "parse_value",
    "split_overrides",
]
