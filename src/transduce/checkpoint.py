"""Self-describing checkpoints, written atomically: a folder per checkpoint.

    model.safetensors   the weights (tied matrices stored once)
    model.json          ModelConfig, languages, tokenizer file names, step, package version
    spm*.model          the SentencePiece model(s), so a checkpoint translates on its own
    state.pt            optimizer state and RNG states (training checkpoints only; loaded with
                        ``torch.load(weights_only=True)``, never unpickled)
    trainer.json        step, epoch, position in the epoch, best BLEU, ... (training checkpoints)

A checkpoint is written into a hidden temporary folder, every file fsynced, then renamed into
place: a kill at any moment leaves the earlier checkpoints intact and no half-written one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Optional

import torch
from safetensors.torch import load_file, load_model, save_model

from . import __version__
from .config import ModelConfig
from .errors import TransduceError

CHECKPOINT_RE = re.compile(r"^step_(\d+)$")


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(folder: Path) -> None:
    for file in folder.iterdir():
        with open(file, "rb") as handle:
            os.fsync(handle.fileno())
    _fsync_dir(folder)


def write_checkpoint(folder: str | Path, model: torch.nn.Module, info: dict[str, Any], tokenizer_files: list[Path],
                     state: Optional[dict] = None, trainer: Optional[dict] = None) -> Path:
    """Write a checkpoint folder atomically (replacing an existing one of the same name).

    ``info`` must hold ``model`` (a ModelConfig dict); tokenizer_files are copied beside the weights.
    """
    folder = Path(folder)
    tmp = folder.parent / f".{folder.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        save_model(model, str(tmp / "model.safetensors"))
        names = []
        for path in tokenizer_files:
            if path.name not in names:
                shutil.copyfile(path, tmp / path.name)
                names.append(path.name)
        meta = {**info, "transduce_version": __version__}
        (tmp / "model.json").write_text(json.dumps(meta, indent=2) + "\n")
        if state is not None:
            torch.save(state, tmp / "state.pt")
        if trainer is not None:
            (tmp / "trainer.json").write_text(json.dumps(trainer, indent=2) + "\n")
        _fsync_tree(tmp)
        if folder.exists():
            old = folder.parent / f".{folder.name}.old-{os.getpid()}"
            os.replace(folder, old)
            os.replace(tmp, folder)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, folder)
        _fsync_dir(folder.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def read_info(folder: str | Path) -> dict:
    path = Path(folder) / "model.json"
    if not path.is_file():
        raise TransduceError(f"{folder} is not a transduce checkpoint (no model.json)")
    return json.loads(path.read_text())


def is_checkpoint(path: str | Path) -> bool:
    return (Path(path) / "model.safetensors").is_file() and (Path(path) / "model.json").is_file()


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """The run's complete checkpoints, oldest first (temporary folders are ignored)."""
    folder = Path(run_dir) / "checkpoints"
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := CHECKPOINT_RE.match(p.name)) and is_checkpoint(p)]
    return [p for _, p in sorted(found)]


def resolve(path: str | Path) -> Path:
    """A checkpoint folder from a checkpoint or run directory.

    For a run directory: ``averaged`` if present, else ``best``, else the latest checkpoint.
    """
    path = Path(path)
    if is_checkpoint(path):
        return path
    if not path.exists():
        raise TransduceError(f"{path} does not exist; give a run directory or a checkpoint folder")
    for name in ("averaged", "best"):
        if is_checkpoint(path / name):
            return path / name
    found = list_checkpoints(path)
    if not found:
        raise TransduceError(f"{path} holds no checkpoint (no model.safetensors in it, its best/ or checkpoints/)")
    return found[-1]


def load_model_from(folder: str | Path, device: str | torch.device = "cpu"):
    """``(model, info)`` from a checkpoint folder; the model is in eval mode."""
    from .model import Transformer

    folder = Path(folder)
    info = read_info(folder)
    config = ModelConfig.from_dict(info["model"])
    model = Transformer(config)
    missing, unexpected = load_model(model, str(folder / "model.safetensors"), strict=False)
    if missing or unexpected:
        raise TransduceError(f"{folder}/model.safetensors does not fit its model.json: missing {missing[:5]}, "
                             f"unexpected {unexpected[:5]}")
    return model.to(device).eval(), info


def average_checkpoints(folders: list[Path], out: str | Path) -> Path:
    """Write the elementwise mean of the weights of ``folders`` (same shape) as a new checkpoint."""
    if not folders:
        raise TransduceError("no checkpoints to average")
    infos = [read_info(f) for f in folders]
    if any(i["model"] != infos[0]["model"] for i in infos):
        raise TransduceError("the checkpoints have different model configurations; they cannot be averaged")
    total: dict[str, torch.Tensor] = {}
    for folder in folders:
        for name, tensor in load_file(str(folder / "model.safetensors")).items():
            total[name] = total[name] + tensor.double() if name in total else tensor.double()
    model, _ = load_model_from(folders[-1])
    state = {name: (t / len(folders)).to(torch.float32) for name, t in total.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    info = dict(infos[-1])
    info["averaged_from"] = [f.name for f in folders]
    tokenizer_files = [folders[-1] / name for name in info["tokenizer"].values() if name]
    return write_checkpoint(out, model, info, tokenizer_files)
