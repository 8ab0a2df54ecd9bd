"""Checkpoint averaging: the elementwise mean of several checkpoints' weights (paper: the last 5
for base, 20 for big), of full models or of adapters trained on one base."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from .checkpoint import (CheckpointError, check_weights, checkpoint_file, load_adapted,
                         load_model_from, read_info, tokenizer_paths, upgrade_names,
                         write_checkpoint)
from .config import ModelConfig
from .errors import TransduceError
from .files import member
from .model import Transformer


def average_checkpoints(folders: list[Path], out: str | Path) -> Path:
    """Write the elementwise mean of the weights of ``folders`` (same shape) as a new checkpoint."""
    if not folders:
        raise TransduceError("no checkpoints to average")
    infos = [read_info(f) for f in folders]
    # (as configs, not dicts: one written before a field existed holds its default)
    configs = [ModelConfig.from_dict(i["model"]) for i in infos]
    if any(c != configs[0] for c in configs):
        raise TransduceError("the checkpoints have different model configurations; they cannot be "
                             "averaged")
    adapters = [i.get("adapter", {}).get("base_fingerprint") for i in infos]
    if len(set(adapters)) > 1:
        raise TransduceError("the checkpoints are not all adapters of one base (or all full "
                             "models); they cannot be averaged")
    if adapters[0]:  # the adapters are averaged; the base stays as it is
        model = Transformer(configs[0]).eval()
        load_adapted(model, folders[-1], infos[-1])
    else:  # (the shapes every checkpoint's weights must have)
        model, _ = load_model_from(folders[-1])
    total: dict[str, torch.Tensor] = {}
    for folder in folders:
        path = checkpoint_file(folder, "model.safetensors")
        try:
            weights = upgrade_names(load_file(str(path)))
        except Exception as error:
            raise CheckpointError(f"{path} is damaged ({error}); leave it out") from None
        check_weights(weights, model, path)
        for name, tensor in weights.items():
            total[name] = total[name] + tensor.double() if name in total else tensor.double()
    state = {name: (t / len(folders)).to(torch.float32) for name, t in total.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    current = model.state_dict()
    stored = {current[k].data_ptr() for k in state if k in current}
    # tied weights are stored once
    missing = [k for k in missing if current[k].data_ptr() not in stored and not adapters[0]]
    if missing or unexpected:
        raise CheckpointError("the checkpoints' weights do not fit their model: missing "
                              f"{missing[:5]}, unexpected {unexpected[:5]}")
    info = dict(infos[-1])
    info["averaged_from"] = [f.name for f in folders]
    # (an imported language model or an image classifier has no tokenizer)
    paths = tokenizer_paths(folders[-1], info) if info["tokenizer"].get("src") else {}
    if info.get("pieces"):  # a speech model's SentencePiece targets
        paths["pieces"] = member(folders[-1], info["pieces"], "the target pieces' model")
    return write_checkpoint(out, model, info, list(dict.fromkeys(paths.values())), inputs=folders)
