"""Self-describing checkpoints, written atomically: a folder per checkpoint.

    model.safetensors   the weights (tied matrices stored once)
    model.json          ModelConfig, languages, tokenizer file names, step, package version
    spm*.model          the SentencePiece model(s), so a checkpoint translates on its own
    state.pt optimizer state and RNG states (training checkpoints only; loaded with
                        ``torch.load(weights_only=True)``, never unpickled)
    trainer.json        step, epoch, position in the epoch, best BLEU, ... (training checkpoints)

A checkpoint is written into a hidden temporary folder, every file fsynced, then renamed into
place (``files.output_dir``): a kill at any moment leaves the earlier checkpoints intact and no
half-written one. File names read from ``model.json`` are confined to the checkpoint's folder,
and a damaged checkpoint is reported by name, with the ones that can be used instead.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any, Optional

import torch
from safetensors.torch import load_file, save_file, save_model

from .version import __version__
from .config import ModelConfig
from .errors import TransduceError
from .files import member, output_dir, recover, recover_all
from .lora import adapter_of, adapter_state, attach, is_adapter, merge
from .reading import load_torch, read_json
from .runtime import check_fits

CHECKPOINT_RE = re.compile(r"^step_(\d+)$")
# (added: pieces beyond the SentencePiece model, such as T5's sentinels, in an added_tokens.json)
TOKENIZER_KEYS = ("src", "tgt", "vocab", "tgt_vocab", "added")


class CheckpointError(TransduceError):
    """A checkpoint folder is damaged or incomplete (the message names the file)."""


def write_checkpoint(
    folder: str | Path,
    model: torch.nn.Module,
    info: dict[str, Any],
    tokenizer_files: list[Path],
    state: Optional[dict] = None,
    trainer: Optional[dict] = None,
    inputs: list[Path] = (),
    tensors: Optional[dict[str, dict[str, torch.Tensor]]] = None,
    run: Optional[Path] = None,
) -> Path:
    """Write a checkpoint folder atomically, replacing an earlier checkpoint of the same name
    (never a folder transduce did not write as a checkpoint).

    ``info`` must hold ``model`` (a ModelConfig dict); tokenizer_files are copied beside the
    weights. ``tensors`` maps file names to more tensors to write in safetensors (the EMA's
    averages). ``run``: the training run writing into its own ``checkpoints/`` (no other writer
    may).
    """
    adapter = adapter_of(model)
    if adapter is not None:  # the adapters alone: model.json names the base they adapt
        info = {**info, "adapter": adapter}
    with output_dir(folder, "checkpoint", inputs, what="checkpoint", run=run) as tmp:
        if adapter is not None:
            save_file({k: v.detach().cpu().contiguous() for k, v in adapter_state(model).items()},
                      str(tmp / "model.safetensors"))
        else:
            save_model(model, str(tmp / "model.safetensors"))
        names = []
        for path in tokenizer_files:
            if path.name not in names:
                shutil.copyfile(path, tmp / path.name)
                names.append(path.name)
        meta = {**info, "transduce_version": __version__}
        if info["tokenizer"].get("src"):  # the files as written are what the weights' ids mean
            meta["tokenizer"] = {**info["tokenizer"],
                                 "fingerprint": tokenizer_fingerprint(tokenizer_paths(tmp, info))}
        (tmp / "model.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        if state is not None:
            torch.save(state, tmp / "state.pt")
        if trainer is not None:
            (tmp / "trainer.json").write_text(
                json.dumps(trainer, indent=2) + "\n", encoding="utf-8"
            )
        for name, named in (tensors or {}).items():
            save_file({k: v.detach().cpu().contiguous() for k, v in named.items()}, str(tmp / name))
    return Path(folder)


def checkpoint_file(folder: str | Path, name: str) -> Path:
    """``folder / name``, a file of a checkpoint, confined to the folder (a link leading out of it
    is refused: a checkpoint from elsewhere must not make transduce read, or republish, other
    files)."""
    try:
        return member(folder, name, "file")
    except TransduceError as error:
        raise CheckpointError(str(error)) from None


def check_weights(
    state: dict[str, torch.Tensor], model: torch.nn.Module, source: str | Path
) -> None:
    """Every tensor of ``state`` floating point and of the shape ``model`` expects, or a message
    that names the tensor (an int8 or bool tensor would load silently and translate garbage)."""
    expected = model.state_dict()
    for name, tensor in state.items():
        if not tensor.is_floating_point():
            raise CheckpointError(f"{source}: {name} holds "
                                  f"{str(tensor.dtype).removeprefix('torch.')} values, not "
                                  "floating-point weights; the file is damaged or was not written "
                                  "for this model")
        if name in expected and tuple(tensor.shape) != tuple(expected[name].shape):
            raise CheckpointError(f"{source}: {name} has the shape {tuple(tensor.shape)} where the "
                                  f"model's configuration implies {tuple(expected[name].shape)}: "
                                  "the weights do not fit this configuration (is it the one they "
                                  "were saved with?)")


def read_info(folder: str | Path) -> dict:
    """``model.json`` of a checkpoint, checked for the keys transduce needs."""
    path = Path(folder) / "model.json"
    if not path.is_file():
        raise CheckpointError(f"{folder} is not a transduce checkpoint (no model.json)")
    path = checkpoint_file(folder, "model.json")
    try:
        info = read_json(path)
    except TransduceError as error:
        raise CheckpointError(str(error)) from None
    if not isinstance(info.get("model"), dict) or not isinstance(info.get("tokenizer"), dict):
        raise CheckpointError(f"{path} is damaged: it lacks the 'model' or 'tokenizer' section")
    return info


def tokenizer_paths(folder: str | Path, info: dict) -> dict[str, Path]:
    """The tokenizer files ``model.json`` names, each confined to ``folder`` (see
    ``files.member``)."""
    folder = Path(folder)
    tok = info["tokenizer"]
    paths = {key: member(folder, tok[key], "tokenizer file "
                                           f"({key})") for key in TOKENIZER_KEYS if tok.get(key)}
    for key in ("src", "tgt"):
        if key not in paths:
            raise CheckpointError(f"{folder}/model.json is damaged: no tokenizer file for {key!r}")
    for key, path in paths.items():
        if not path.is_file():
            raise CheckpointError(f"{path} is missing: {folder} is incomplete")
    return paths


def tokenizer_fingerprint(paths: dict[str, Path]) -> str:
    """What identifies a mapping from text to ids: a SHA-256 over the bytes of the files that define
    it, each under its role (``TOKENIZER_KEYS``: the SentencePiece models of each side and, for
    imported Marian models, the ``vocab.json`` files that map pieces to ids, for T5 its
    sentinels). A vocabulary trained again differs in its bytes even at the same size, so two
    datasets or checkpoints encode text to the same ids when their fingerprints agree."""
    digest = hashlib.sha256()
    roles = {**paths, "tgt_vocab": paths.get("tgt_vocab", paths.get("vocab"))}
    for role in TOKENIZER_KEYS:
        if role == "added" and roles.get(role) is None:
            continue  # (a role added later counts only where it is used: older digests hold)
        data = Path(roles[role]).read_bytes() if roles.get(role) is not None else b""
        digest.update(f"{role}:{len(data)}:".encode() + data)
    return digest.hexdigest()[:16]


def weights_fingerprint(folder: str | Path) -> str:
    """A SHA-256 over the bytes of a checkpoint's ``model.safetensors``: which weights adapters
    were trained on (the same model trained further, or averaged, differs)."""
    digest = hashlib.sha256()
    with open(checkpoint_file(folder, "model.safetensors"), "rb") as handle:
        for block in iter(lambda: handle.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def load_adapted(model: torch.nn.Module, folder: str | Path, info: dict,
                 device: str | torch.device = "cpu") -> None:
    """Into ``model`` (built from ``info``'s config, with or without adapters yet): the weights of
    the base an adapter checkpoint names, checked against the fingerprint it was trained on, then
    the adapters from ``folder``."""
    settings = info["adapter"]
    base = Path(settings["base"])
    if not is_checkpoint(base):
        raise CheckpointError(f"{folder} holds LoRA adapters of {base}, which is no longer a "
                              "checkpoint (moved or deleted?); put the base back there")
    if weights_fingerprint(base) != settings["base_fingerprint"]:
        raise CheckpointError(f"{folder} holds LoRA adapters trained on other weights than {base} "
                              "holds now (trained further, averaged or replaced since): adapters "
                              "fit only the weights they were trained on")
    missing, unexpected = load_weights(model, checkpoint_file(base, "model.safetensors"), device)
    if unexpected or [k for k in missing if not is_adapter(k)]:
        raise CheckpointError(f"{base}/model.safetensors does not fit {folder}/model.json")
    if adapter_of(model) is None:
        attach(model, settings)
    path = checkpoint_file(folder, "model.safetensors")
    missing, unexpected = load_weights(model, path, device)
    if unexpected or [k for k in missing if is_adapter(k)]:
        raise CheckpointError(f"{path} holds other adapters than {folder}/model.json describes")


def checkpoint_fingerprint(folder: str | Path, info: dict) -> tuple[Optional[str], bool]:
    """``(fingerprint, recorded)``: the tokenizer fingerprint ``model.json`` records, or for a
    checkpoint written before fingerprints one computed from its tokenizer files (``recorded``
    False); ``(None, False)`` for a model without a tokenizer (an imported GPT-2 or BERT)."""
    tok = info["tokenizer"]
    if isinstance(tok.get("fingerprint"), str):
        return tok["fingerprint"], True
    if not tok.get("src"):
        return None, False
    return tokenizer_fingerprint(tokenizer_paths(folder, info)), False


def is_checkpoint(path: str | Path) -> bool:
    return (Path(path) / "model.safetensors").is_file() and (Path(path) / "model.json").is_file()


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """The run's checkpoints that have their files, oldest first (temporary folders are ignored)."""
    folder = Path(run_dir) / "checkpoints"
    if not folder.is_dir():
        return []
    recover_all(folder, list(folder.iterdir()))  # a checkpoint a killed save had moved aside
    found = [
        (int(m.group(1)), p)
        for p in folder.iterdir()
        if (m := CHECKPOINT_RE.match(p.name)) and is_checkpoint(p)
    ]
    return [p for _, p in sorted(found)]


def candidates(run_dir: str | Path) -> list[Path]:
    """A run's checkpoints in the order ``choice.choose`` considers them: ``averaged/``, ``best/``,
    then the checkpoints newest first."""
    run_dir = Path(run_dir)
    for name in ("averaged", "best"):
        recover(run_dir / name)
    named = [run_dir / name for name in ("averaged", "best") if is_checkpoint(run_dir / name)]
    return named + list_checkpoints(run_dir)[::-1]


def verify(folder: str | Path, training: bool = False) -> None:
    """Check that every file of a checkpoint is present and readable (weights fully read).

    Raises:
        CheckpointError: naming the damaged or missing file.
    """
    from safetensors import safe_open

    folder = Path(folder)
    info = read_info(folder)
    ModelConfig.from_dict(info["model"])
    tokenizer_paths(folder, info)
    weights = checkpoint_file(folder, "model.safetensors")
    try:
        with safe_open(str(weights), framework="pt") as handle:
            for key in handle.keys():
                handle.get_tensor(key)
    except Exception as error:  # safetensors raises its own types for a truncated file
        raise CheckpointError(f"{weights} is damaged ({error})") from None
    if training:
        _read_state(folder)
        _read_trainer(folder)


def _read_state(folder: Path) -> dict:
    path = checkpoint_file(folder, "state.pt")
    if not path.is_file():
        raise CheckpointError(f"{path} is missing")
    try:
        return load_torch(path, "Use a checkpoint written by transduce")
    except TransduceError as error:
        raise CheckpointError(str(error)) from None


def _read_trainer(folder: Path) -> dict:
    try:
        data = read_json(checkpoint_file(folder, "trainer.json"))
    except TransduceError as error:
        raise CheckpointError(str(error)) from None
    if not isinstance(data.get("progress"), dict):
        raise CheckpointError(f"{folder / 'trainer.json'} is damaged: no 'progress' section")
    return data


def read_training_state(folder: str | Path) -> tuple[dict, dict]:
    """``(state.pt contents, trainer.json contents)`` of a training checkpoint."""
    folder = Path(folder)
    return _read_state(folder), _read_trainer(folder)


def _usable(run_dir: Path, exclude: Path) -> list[str]:
    good = []
    for folder in candidates(run_dir):
        if folder == exclude:
            continue
        try:
            verify(folder)
            good.append(str(folder))
        except TransduceError:
            pass
    return good


# Checkpoints written before the residual blocks had names (sub1, sub2, sub3) still load.
_LEGACY_BLOCK = re.compile(r"^(encoder|decoder)\.(\d+)\.sub([123])\.")
_LEGACY_NAMES = {("encoder", "1"): "self_attn_block", ("encoder", "2"): "ffn_block",
                 ("decoder", "1"): "self_attn_block", ("decoder", "2"): "cross_attn_block",
                 ("decoder", "3"): "ffn_block"}


def upgrade_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Weights by today's parameter names: ``decoder.0.sub3.norm.weight`` (an older checkpoint's)
    becomes ``decoder.0.ffn_block.norm.weight``."""
    def rename(name: str) -> str:
        match = _LEGACY_BLOCK.match(name)
        if match is None:
            return name
        stack, index, number = match.groups()
        return f"{stack}.{index}.{_LEGACY_NAMES[stack, number]}." + name[match.end():]

    return {rename(name): tensor for name, tensor in state.items()}


def load_weights(model: torch.nn.Module, path: str | Path, device: str | torch.device = "cpu"
                 ) -> tuple[list[str], list[str]]:
    """Load a ``model.safetensors`` into ``model`` (older names upgraded); returns the missing
    and unexpected keys, a tied weight stored once not counting as missing. Raises CheckpointError
    for a damaged file."""
    try:
        state = upgrade_names(load_file(str(path), device=str(device)))
    except Exception as error:  # safetensors raises its own types for a damaged file
        raise CheckpointError(f"{path} is damaged ({str(error).splitlines()[0]})") from None
    check_weights(state, model, path)
    missing, unexpected = model.load_state_dict(state, strict=False)
    current = model.state_dict()
    stored = {current[k].data_ptr() for k in state if k in current}
    return [k for k in missing if current[k].data_ptr() not in stored], unexpected


def load_model_from(folder: str | Path, device: str | torch.device = "cpu"):
    """``(model, info)`` from a checkpoint folder; the model is in eval mode.

    Raises:
        CheckpointError: a file is damaged or does not fit ``model.json``; for a folder inside a
    run,
            the message lists the run's checkpoints that can be used instead.
    """
    from .model import Transformer

    folder = Path(folder)
    try:
        info = read_info(folder)
        config = ModelConfig.from_dict(info["model"])
        check_fits(config, "cpu", source=f"{folder}/model.json")  # (built on the CPU, then moved)
        model = Transformer(config)
        if "adapter" in info:  # base + adapters, folded into one plain model
            load_adapted(model, folder, info)
            missing, unexpected = [], []
            merge(model)
        else:
            missing, unexpected = load_weights(model, checkpoint_file(folder, "model.safetensors"))
        if missing or unexpected:
            raise CheckpointError(f"{folder}/model.safetensors does not fit its model.json: "
                                  f"missing {missing[:5]}, unexpected {unexpected[:5]}")
    except (CheckpointError, ValueError, TypeError) as error:
        run_dir = folder.parent.parent if folder.parent.name == "checkpoints" else folder.parent
        usable = _usable(run_dir, folder) if (run_dir / "config.json").is_file() else []
        hint = f"; usable checkpoints: {', '.join(usable)}" if usable else ""
        raise CheckpointError(f"{error}{hint}") from None
    return model.to(device).eval(), info
