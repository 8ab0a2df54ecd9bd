"""A model grown to a vocabulary that ``prepare --tokenizer MODEL --extend-vocab N`` extended:
``train --init-from MODEL`` on that data starts from the model's weights with one more embedding
(and output) row per new piece, each the mean of the rows of the old pieces that spelled it, so a
new piece begins by meaning what its old spelling meant.

The dataset's ``meta.json`` holds the extension (``data/extend.py``): the tokenizer fingerprint it
extends (``from``), the rows the model had and, per side, each new id with the old ids that spelled
it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from ..checkpoint import CheckpointError, checkpoint_fingerprint, load_model_from
from ..errors import TrainingError

# the weights with one row per piece, and the side whose pieces they hold
ROWS = {
    "src_embed.tokens.weight": "src",
    "tgt_embed.tokens.weight": "tgt",
    "output.weight": "tgt",
    "output_bias": "tgt",
}
# the model fields an extended vocabulary changes
FIELDS = ("vocab_size", "tgt_vocab_size")


def extension_of(meta: dict, folder: Path, info: dict) -> Optional[dict]:
    """The data's extension when it extends the tokenizer of the checkpoint ``folder``, else
    None."""
    extension = meta.get("extension")
    if extension is None:
        return None
    fingerprint, _ = checkpoint_fingerprint(folder, info)
    return extension if extension.get("from") == fingerprint else None


def check_extends(meta: dict, folder: Path, info: dict, data_dir: str) -> Optional[dict]:
    """The data's extension of the checkpoint ``folder``'s tokenizer; None for data without one.

    Raises:
        TrainingError: the data extends another tokenizer.
    """
    extension = extension_of(meta, folder, info)
    if extension is None and "extension" in meta:
        fingerprint, _ = checkpoint_fingerprint(folder, info)
        raise TrainingError(f"{data_dir} extends the tokenizer of {meta['extension']['model']} "
                            f"(fingerprint {meta['extension']['from']}), not that of --init-from "
                            f"{folder} ({fingerprint}): prepare it with --tokenizer {folder} "
                            "--extend-vocab N, or start from that model")
    return extension


def grown_fields(meta: dict) -> dict:
    """The model fields for the extended data's vocabulary sizes."""
    sizes = meta["vocab_size"]
    return {"vocab_size": sizes["src"], "tgt_vocab_size": None if meta["joint"] else sizes["tgt"]}


def grow(state: dict[str, torch.Tensor], extension: dict) -> dict[str, torch.Tensor]:
    """``state`` with its per-piece weights grown by the extension's new ids: each new row the
    mean of the old pieces' rows that spelled it."""
    grown = dict(state)
    for name, side in ROWS.items():
        if name not in state:
            continue
        old = state[name]
        new = {int(i): spelled for i, spelled in extension["new"][side]}
        size = max([old.shape[0] - 1, *new]) + 1
        rows = torch.cat([old, old.new_zeros(size - old.shape[0], *old.shape[1:])])
        for i, spelled in new.items():
            rows[i] = old[torch.tensor(spelled, dtype=torch.long, device=old.device)].mean(0)
        grown[name] = rows
    return grown


def load_grown(model: torch.nn.Module, folder: Path, extension: dict,
               device: torch.device) -> None:
    """Into ``model`` (of the extended vocabulary): the weights of ``folder`` (of the old one),
    grown."""
    old, _ = load_model_from(folder)
    missing, unexpected = model.load_state_dict(
        {k: v.to(device) for k, v in grow(old.state_dict(), extension).items()}, strict=False)
    if missing or unexpected:
        raise CheckpointError(f"{folder} does not fit the grown model: missing {missing[:5]}, "
                              f"unexpected {unexpected[:5]}")
