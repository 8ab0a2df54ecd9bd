"""Hugging Face model folders -> transduce runs: reading ``config.json`` and the weights, writing
the imported checkpoint, and choosing the converter by ``model_type``: Marian (``interop.marian``,
with its tokenizer files), GPT-2 and BERT (``interop.gpt2``, ``interop.bert``: tables of names over
``import_family``), T5 (``interop.t5``, with its SentencePiece model and sentinels). Export goes to
Marian (``interop.marian``) or T5 (``interop.t5``), as the model's options say.

``transformers`` is an optional dependency, needed only to *export* (to write its config class);
importing reads plain JSON and safetensors (or a ``pytorch_model.bin`` loaded with
``weights_only=True``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch
from safetensors.torch import load_file

from ..tasks import task_of
from ..checkpoint import check_weights, write_checkpoint
from ..config import ModelConfig
from ..data.audio import HOP
from ..errors import TransduceError
from ..files import check_output_dir, output_dir
from ..reading import load_torch, read_json
from ..model import Transformer
from ..runtime import check_fits
from . import bert, gpt2, t5, vit, whisper
from .folder import IGNORED, Tensors, check_config, hf_file
from .marian import config_from_hf, hf_to_transduce
from .marian import export_hf as export_marian

__all__ = [
    "FAMILIES",
    "Family",
    "export_hf",
    "import_family",
    "import_hf",
    "read_hf_config",
    "read_hf_weights",
    "write_imported",
]


@dataclass(frozen=True)
class Family:
    """A model family without a SentencePiece tokenizer: its config and weight converters."""

    # (config.json, its path for messages) -> ModelConfig
    config: Callable[[dict, str], ModelConfig]
    weights: Callable[[dict, ModelConfig], dict]  # their state dict -> ours
    what: str  # the Hugging Face class, for messages
    tied: tuple[str, ...] = ()  # our weights that may be missing (shared with another)


FAMILIES = {
    "gpt2": Family(gpt2.config_from_gpt2, gpt2.gpt2_to_transduce, "GPT2LMHeadModel"),
    "bert": Family(
        bert.config_from_bert, bert.bert_to_transduce, "BertForMaskedLM", tied=("output.weight",)
    ),
}


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise TransduceError(message)


def read_hf_weights(folder: Path) -> Tensors:
    """The folder's weights by name (``Tensors``: a converter's unread ones are refused)."""
    path = hf_file(folder, "model.safetensors")
    if path.is_file():
        try:
            return Tensors(load_file(str(path)))
        except Exception as error:  # safetensors raises its own types for a damaged file
            raise TransduceError(f"{path} is damaged ({error})") from None
    path = hf_file(folder, "pytorch_model.bin")
    if path.is_file():
        return Tensors(load_torch(path, "Convert it to model.safetensors with a tool you trust"))
    raise TransduceError(f"{folder}: neither model.safetensors nor pytorch_model.bin found")


def read_hf_config(path: Path) -> ModelConfig:
    """The ModelConfig of a Marian ``config.json``, with errors that name the file and the key."""
    hf = read_json(path)
    check_config(hf, str(path), "marian")
    try:
        return config_from_hf(hf, str(path))
    except KeyError as error:
        raise TransduceError(f"{path}: the key {error.args[0]!r} is missing") from None
    except (TypeError, ValueError) as error:
        raise TransduceError(f"{path}: a value has the wrong type or is out of range "
                             f"({error})") from None


def import_hf(hf_dir: str | Path, out: str | Path) -> Path:
    """Convert a Hugging Face model folder (MarianMTModel; GPT2LMHeadModel and BertForMaskedLM
    through ``FAMILIES``) into a new transduce run directory; returns its checkpoint folder."""
    folder = Path(hf_dir)
    run = Path(out)
    check_output_dir(run, "run", [folder])
    if run.exists() and any(run.iterdir()):
        raise TransduceError(f"--out {run} is not empty; import into a new folder (an import never "
                             "joins another run or replaces one)")
    config_path = hf_file(folder, "config.json")
    _require(config_path.is_file(), f"{folder}: no config.json; is this a Hugging Face model "
                                    "folder?")
    hf = read_json(config_path)
    if hf.get("model_type") in ("t5", "mt5", "umt5"):
        return import_t5(folder, hf, run)
    if hf.get("model_type") in FAMILIES:
        return import_family(folder, hf, run, FAMILIES[hf["model_type"]])
    if hf.get("model_type") == "vit":
        return import_vit(folder, hf, run)
    if hf.get("model_type") == "whisper":
        return import_whisper(folder, hf, run)
    config = read_hf_config(config_path)
    for name in ("source.spm", "target.spm", "vocab.json"):
        _require(hf_file(folder, name).is_file(), f"{folder}: {name} is missing (MarianTokenizer "
                                                  "files are needed)")
    check_fits(config, source=str(config_path))
    model = Transformer(config)
    state = read_hf_weights(folder)
    weights = hf_to_transduce(state, config)
    state.refuse_unread(folder, IGNORED["marian"])
    check_weights(weights, model, folder)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    tied = {"tgt_embed.tokens.weight", "output.weight", "src_embed.tokens.weight"}
    _require(not [m for m in missing if m not in tied] and not unexpected,
             f"{folder}: weights do not fit the config (missing {missing[:5]}, unexpected "
             f"{unexpected[:5]})")
    tok = {"src": "source.spm", "tgt": "target.spm", "vocab": "vocab.json"}
    files = [hf_file(folder, name) for name in ("source.spm", "target.spm", "vocab.json")]
    if hf_file(folder, "target_vocab.json").is_file():
        tok["tgt_vocab"] = "target_vocab.json"
        files.append(hf_file(folder, "target_vocab.json"))
    info = {"model": config.to_dict(), "src": "src", "tgt": "tgt", "tokenizer": tok, "step": 0,
            "imported_from": str(folder)}
    with output_dir(run, "run", [folder]) as tmp:
        write_checkpoint(tmp / "checkpoints" / "step_00000000", model.eval(), info, files)
    return run / "checkpoints" / "step_00000000"


def import_t5(folder: Path, hf: dict, out: Path) -> Path:
    """Write a T5ForConditionalGeneration folder as a new run directory ``out``, its tokenizer
    ``spiece.model`` and the sentinels (``added_tokens.json``); returns its checkpoint folder."""
    import tempfile

    import sentencepiece as spm

    config_path = folder / "config.json"
    check_config(hf, str(config_path), "t5")
    state = read_hf_weights(folder)
    shared = state.get("shared.weight", state.get("encoder.embed_tokens.weight"))
    head = state.get("lm_head.weight")
    untied = head is not None and not (shared is not None and torch.equal(head, shared))
    config = t5.config_from_t5(hf, str(config_path), untied)
    spiece = hf_file(folder, "spiece.model")
    _require(spiece.is_file(), f"{folder}: spiece.model is missing (T5's SentencePiece model is "
                               "needed)")
    try:
        sp = spm.SentencePieceProcessor(model_file=str(spiece))
    except (OSError, RuntimeError) as error:
        raise TransduceError(f"{spiece} is damaged ({error})") from None
    for name, piece in (("pad", "<pad>"), ("eos", "</s>")):
        wanted = getattr(config, f"{name}_id")
        _require(sp.piece_to_id(piece) == wanted, f"{spiece}: {piece} has the id "
                 f"{sp.piece_to_id(piece)}, config.json says {name} is {wanted}")
    found = t5.sentinels(folder, sp.get_piece_size())
    outside = [p for p, i in found.items() if not 0 <= i < config.vocab_size]
    _require(not outside, f"{folder}: {outside[:1]} has an id outside the model's vocabulary "
                          f"({config.vocab_size})")
    try:
        weights = t5.t5_to_transduce(state, config)
    except KeyError as error:
        raise TransduceError(f"{folder}: the weight {error.args[0]!r} is missing; is it a "
                             "T5ForConditionalGeneration folder, and config.json the one of these "
                             "weights?") from None
    state.refuse_unread(folder, IGNORED["t5"])
    with tempfile.TemporaryDirectory() as scratch:
        added = Path(scratch) / "added_tokens.json"
        t5.write_sentinels(found, added)
        tok = {"src": "spiece.model", "tgt": "spiece.model", "added": "added_tokens.json"}
        return write_imported(folder, config, weights, out, tokenizer=(tok, [spiece, added]))


def import_vit(folder: Path, hf: dict, out: Path) -> Path:
    """Write a ViTForImageClassification folder (and its image processor's normalization) as a new
    run directory ``out``, its classes named as config.json's id2label."""
    processor_path = hf_file(folder, "preprocessor_config.json")
    processor = read_json(processor_path) if processor_path.is_file() else None
    source = str(folder / "config.json")
    check_config(hf, source, "vit")
    config = vit.config_from_vit(hf, source, processor)
    check_fits(config, source=source)  # (before a list of its classes is made)
    state = read_hf_weights(folder)
    try:
        weights = vit.vit_to_transduce(state, config)
    except KeyError as error:
        raise TransduceError(f"{folder}: {error.args[0]!r} is missing; is it a "
                             "ViTForImageClassification folder, and config.json the one of these "
                             "weights?") from None
    state.refuse_unread(folder, IGNORED["vit"])
    return write_imported(folder, config, weights, out, info={"classes": vit.labels(hf)})


def import_whisper(folder: Path, hf: dict, out: Path) -> Path:
    """Write a WhisperForConditionalGeneration folder as a new run directory ``out``, with its
    tokenizer and feature extractor files (read when transcribing) and the length of the chunks
    its encoder reads."""
    source = str(folder / "config.json")
    check_config(hf, source, "whisper")
    state = read_hf_weights(folder)
    try:
        config = whisper.config_from_whisper(hf, source)
        weights = whisper.whisper_to_transduce(state, config)
    except KeyError as error:
        raise TransduceError(f"{folder}: {error.args[0]!r} is missing; is it a "
                             "WhisperForConditionalGeneration folder, and config.json the one of "
                             "these weights?") from None
    state.refuse_unread(folder, IGNORED["whisper"])
    features = hf_file(folder, "preprocessor_config.json")
    chunk = whisper.check_features(read_json(features) if features.is_file() else {},
                                   config.channels, str(features))
    _require(chunk // HOP == 2 * config.audio_positions, f"{features}: chunks of {chunk} samples "
             f"make {chunk // HOP} frames, but the encoder reads {2 * config.audio_positions}")
    files = [hf_file(folder, name) for name in whisper.FILES if hf_file(folder, name).is_file()]
    info = {"whisper": {"files": [f.name for f in files], "chunk_samples": chunk}}
    return write_imported(folder, config, weights, out, tokenizer=({}, files), info=info)


def export_hf(model_path: str | Path, out: str | Path) -> Path:
    """Write a Hugging Face folder for the model at ``model_path``: a T5ForConditionalGeneration
    for a model with T5's relative positions, a MarianMTModel for the paper's encoder-decoder."""
    from ..checkpoint import read_info
    from ..choice import resolve

    info = read_info(resolve(model_path))
    config = ModelConfig.from_dict(info["model"])
    kind = task_of(config, info).data_kind
    if kind == "images":
        return vit.export_vit(model_path, out)
    if kind == "recordings":
        return whisper.export_whisper(model_path, out)
    if config.positional == "relative":
        return t5.export_t5(model_path, out)
    return export_marian(model_path, out)


def import_family(folder: Path, hf: dict, out: Path, family: Family) -> Path:
    """Write a folder of ``family`` (GPT-2, BERT) as a new run directory ``out``; returns its
    checkpoint folder."""
    config_path = folder / "config.json"
    check_config(hf, str(config_path), hf["model_type"])
    try:
        config = family.config(hf, str(config_path))
    except KeyError as error:
        raise TransduceError(f"{config_path}: the key {error.args[0]!r} is missing") from None
    state = read_hf_weights(folder)
    try:
        weights = family.weights(state, config)
    except KeyError as error:
        raise TransduceError(f"{folder}: the weight {error.args[0]!r} is missing; is it a "
                             f"{family.what} folder, and "
                             "config.json the one of these weights?") from None
    state.refuse_unread(folder, IGNORED[hf["model_type"]])
    return write_imported(folder, config, weights, out, tied=family.tied)


def write_imported(folder: Path, config: ModelConfig, weights: dict[str, torch.Tensor], out: Path,
                   tied: tuple[str, ...] = (), tokenizer: tuple[dict, list] = ({}, []),
                   info: Optional[dict] = None) -> Path:
    """A new run ``out`` holding ``weights`` as a model of ``config``, with the ``tokenizer``
    (model.json's roles, and the files) or none (the language models' tokenizers are not
    SentencePiece) and more of model.json (``info``: an image classifier's classes); ``tied`` may
    be missing (shared tensors). Returns its checkpoint folder;
    nothing is written when the weights do not fit."""
    check_fits(config, source=str(folder / "config.json"))
    model = Transformer(config)
    check_weights(weights, model, folder)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    _require(not [m for m in missing if m not in tied] and not unexpected,
             f"{folder}: weights do not fit the config (missing {missing[:5]}, unexpected "
             f"{unexpected[:5]})")
    roles, files = tokenizer
    languages = ("src", "tgt") if roles else ("text", "text")
    info = {"model": config.to_dict(), "tokenizer": roles, "step": 0,
            "imported_from": str(folder), **(info or {}),
            **({"src": languages[0], "tgt": languages[1]}
               if task_of(config).data_kind in ("pairs", "stream") else {})}
    with output_dir(out, "run", [folder]) as tmp:
        write_checkpoint(tmp / "checkpoints" / "step_00000000", model.eval(), info, files)
    return out / "checkpoints" / "step_00000000"
