"""What every import reads from a Hugging Face folder, checked in one place: its files confined to
the folder, ``config.json``'s numbers type- and range-checked before anything is allocated, and its
weights read by name so that a tensor no converter used (a layer beyond the config's count, a head
transduce does not compute) is refused by name instead of dropped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Iterable, Iterator

import torch

from ..errors import TransduceError
from ..files import member


def hf_file(folder: Path, name: str) -> Path:
    """``folder / name`` confined to the folder: a file that links out of it is refused (an import
    must not read, then copy into the run and republish with the next export, a file from
    elsewhere)."""
    return member(folder, name, "file")


def check_numbers(hf: dict, source: str, at_least: dict[str, int] = {},
                  fractions: Iterable[str] = (), positive: Iterable[str] = ()) -> None:
    """The numbers of ``config.json`` (``hf``) that are present, checked before any is used:
    ``at_least``: integers with their smallest value; ``fractions``: numbers in [0, 1) (dropout
    rates); ``positive``: numbers above 0 (epsilons). A value of the wrong type or out of range is
    a TransduceError naming the file and the key."""
    for key, least in at_least.items():
        if key not in hf or hf[key] is None:
            continue
        value = hf[key]
        if not isinstance(value, int) or isinstance(value, bool):
            raise TransduceError(f"{source}: {key} = {value!r} should be an integer")
        if value < least:
            raise TransduceError(f"{source}: {key} = {value} is out of range (at least {least})")
    ranges = [(key, lambda v: 0 <= v < 1, "from 0 up to 1") for key in fractions]
    ranges += [(key, lambda v: 0 < v < float("inf"), "above 0") for key in positive]
    for key, inside, span in ranges:
        if key not in hf or hf[key] is None:
            continue
        value = hf[key]
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise TransduceError(f"{source}: {key} = {value!r} should be a number")
        if not inside(value):
            raise TransduceError(f"{source}: {key} = {value} is out of range ({span})")


class Tensors(Mapping):
    """A folder's weights by name, remembering the names a converter read (``unread``)."""

    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        self._tensors = tensors
        self.read: set[str] = set()

    def __getitem__(self, name: str) -> torch.Tensor:
        tensor = self._tensors[name]
        self.read.add(name)
        return tensor

    def __contains__(self, name: object) -> bool:  # (asking is not reading)
        return name in self._tensors

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def refuse_unread(self, folder: Path, ignored: Iterable[str] = ()) -> None:
        """A TransduceError naming the tensors no converter read, except those matching one of the
        ``ignored`` patterns (copies of a tied weight, buffers, heads a checkpoint may carry that
        the imported model has no use for)."""
        patterns = [re.compile(p) for p in ignored]
        unread = sorted(name for name in self._tensors
                        if name not in self.read and not any(p.fullmatch(name) for p in patterns))
        if unread:
            raise TransduceError(
                f"{folder}: the weights hold {len(unread)} tensor(s) that config.json does not "
                f"account for ({', '.join(unread[:4])}{', ...' if len(unread) > 4 else ''}); "
                "an import that dropped them would not be this model: is config.json the one of "
                "these weights (its layer counts, its kind of model)?")


def _sizes(*keys: str) -> dict[str, int]:
    return {key: 1 for key in keys}


def _ids(*keys: str) -> dict[str, int]:
    return {key: 0 for key in keys}


# every number of each family's config.json that an import reads: integers with their least value,
# dropout rates, epsilons
NUMBERS: dict[str, dict] = {
    "marian": dict(at_least={**_sizes("d_model", "encoder_layers", "decoder_layers",
                                      "encoder_attention_heads", "decoder_attention_heads",
                                      "encoder_ffn_dim", "decoder_ffn_dim", "vocab_size",
                                      "decoder_vocab_size", "max_position_embeddings"),
                             **_ids("pad_token_id", "eos_token_id", "unk_token_id",
                                    "decoder_start_token_id")},
                   fractions=("dropout", "attention_dropout", "activation_dropout")),
    "t5": dict(at_least={**_sizes("d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers",
                                  "num_heads", "vocab_size", "relative_attention_num_buckets",
                                  "relative_attention_max_distance", "n_positions"),
                         **_ids("pad_token_id", "eos_token_id", "decoder_start_token_id")},
               fractions=("dropout_rate",), positive=("layer_norm_epsilon",)),
    "vit": dict(at_least=_sizes("hidden_size", "num_hidden_layers", "num_attention_heads",
                                "intermediate_size", "image_size", "patch_size", "num_channels",
                                "num_labels"),
                fractions=("hidden_dropout_prob", "attention_probs_dropout_prob"),
                positive=("layer_norm_eps",)),
    "whisper": dict(at_least={**_sizes("d_model", "encoder_layers", "decoder_layers",
                                       "encoder_attention_heads", "decoder_attention_heads",
                                       "encoder_ffn_dim", "decoder_ffn_dim", "vocab_size",
                                       "num_mel_bins", "max_source_positions",
                                       "max_target_positions"),
                              **_ids("pad_token_id", "bos_token_id", "eos_token_id",
                                     "decoder_start_token_id")},
                    fractions=("dropout", "attention_dropout", "activation_dropout")),
    "gpt2": dict(at_least={**_sizes("n_layer", "n_embd", "n_head", "n_inner", "vocab_size",
                                    "n_positions"), **_ids("bos_token_id", "eos_token_id")},
                 fractions=("resid_pdrop", "attn_pdrop", "embd_pdrop"),
                 positive=("layer_norm_epsilon",)),
    "bert": dict(at_least={**_sizes("hidden_size", "num_hidden_layers", "num_attention_heads",
                                    "intermediate_size", "vocab_size", "max_position_embeddings",
                                    "type_vocab_size"), **_ids("pad_token_id")},
                 fractions=("hidden_dropout_prob", "attention_probs_dropout_prob"),
                 positive=("layer_norm_eps",)),
}

# tensors a family's checkpoints may hold that its import has no use for, and why
IGNORED: dict[str, tuple[str, ...]] = {
    # the shared embedding beside its per-stack copies; the fixed sinusoids older versions saved
    "marian": (r"model\.shared\.weight", r"model\.(en|de)coder\.embed_positions\.weight"),
    # the per-stack copies of the shared embedding
    "t5": (r"(en|de)coder\.embed_tokens\.weight",),
    # the pooler of a ViTModel checkpoint, which ViTForImageClassification does not use either
    "vit": (r"vit\.pooler\..*",),
    "whisper": (),
    # the causal-mask buffers older versions saved
    "gpt2": (r"(transformer\.)?h\.\d+\.attn\.(masked_)?bias",),
    # the position ids buffer, the decoder tied to the embedding, and the heads of
    # BertForPreTraining a masked language model does not use (pooler, next-sentence head)
    "bert": (r"bert\.embeddings\.position_ids", r"cls\.predictions\.decoder\.(weight|bias)",
             r"bert\.pooler\..*", r"cls\.seq_relationship\..*"),
}


def check_config(hf: dict, source: str, family: str) -> None:
    """The numbers of a ``family``'s config.json (``NUMBERS``), or a TransduceError naming one."""
    check_numbers(hf, source, **NUMBERS[family])
