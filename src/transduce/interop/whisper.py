"""Hugging Face Whisper (``WhisperForConditionalGeneration``) <-> a transduce speech model.

Whisper is the encoder-decoder with options transduce has: pre-LN layers with a final LayerNorm in
each stack, GELU, unscaled embeddings, learned decoder positions and an output tied to the decoder's
embedding, reading log-mel frames through an audio front end (``model.inputs.AudioFeatures``: two
convolutions, strides 1 and 2, and a table of the encoder's positions, which Whisper fills with
fixed sinusoids). Its layers are named as Marian's (``marian.layer_names``), but its key
projections have no bias: a bias on the keys adds the same q . b to every key's score, which the
softmax ignores, so import gives them a zero bias and export drops them, exactly.

The feature extractor's settings (``preprocessor_config.json``) must be the log-mel features
transduce computes (16 kHz, a 400-point FFT every 160 samples); Whisper reads 30 s at a time, so a
recording is padded with silence to 30 s before its features are computed, as Whisper's extractor
does. The tokenizer (byte-level BPE with special tokens) is read with ``transformers``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import torch

from ..config import ModelConfig
from ..data.audio import HOP, N_FFT, SAMPLE_RATE
from ..errors import TransduceError
from .marian import layer_names

# the tokenizer's and feature extractor's files an import keeps, when the folder has them
FILES = ("vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json",
         "added_tokens.json", "special_tokens_map.json", "normalizer.json",
         "preprocessor_config.json", "generation_config.json")
TOP = {"model.encoder.conv1": "src_embed.conv1", "model.encoder.conv2": "src_embed.conv2",
       "model.encoder.layer_norm": "encoder_norm", "model.decoder.layer_norm": "decoder_norm"}
TABLES = {"model.encoder.embed_positions.weight": "src_embed.learned.weight",
          "model.decoder.embed_positions.weight": "tgt_embed.learned.weight",
          "model.decoder.embed_tokens.weight": "tgt_embed.tokens.weight"}
KEYS = ("self_attn.k_proj", "encoder_attn.k_proj")  # Whisper's projections without a bias


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise TransduceError(message)


def check_features(settings: dict, mels: int, source: str) -> int:
    """A Whisper feature extractor's settings, checked against the features transduce computes;
    returns the samples of a chunk (30 s)."""
    for name, ours in (("feature_size", mels), ("sampling_rate", SAMPLE_RATE),
                       ("hop_length", HOP), ("n_fft", N_FFT)):
        value = settings.get(name, ours)
        _require(value == ours, f"{source}: {name}={value!r} is not supported (transduce computes "
                                f"{name}={ours})")
    return int(settings.get("n_samples", 30 * SAMPLE_RATE))


def config_from_whisper(hf: dict, source: str) -> ModelConfig:
    """A ModelConfig for a Whisper ``config.json``, or an error naming the field transduce does not
    compute."""
    act = hf.get("activation_function", "gelu")
    _require(act == "gelu", f"{source}: activation_function={act!r} is not supported (Whisper's "
                            "gelu only)")
    _require(not hf.get("scale_embedding", False), f"{source}: scale_embedding=true is not "
                                                   "supported")
    for enc, dec in (("encoder_attention_heads", "decoder_attention_heads"),
                     ("encoder_ffn_dim", "decoder_ffn_dim")):
        _require(hf[enc] == hf[dec], f"{source}: {enc}={hf[enc]} differs from {dec}={hf[dec]}; "
                                     "transduce uses one value for both stacks")
    eos = hf.get("eos_token_id", 50257)
    return ModelConfig.preset(
        "whisper-tiny",
        encoder_layers=hf["encoder_layers"],
        decoder_layers=hf["decoder_layers"],
        d_model=hf["d_model"],
        n_heads=hf["encoder_attention_heads"],
        d_ff=hf["encoder_ffn_dim"],
        dropout=hf.get("dropout", 0.0),
        attention_dropout=hf.get("attention_dropout", 0.0),
        activation_dropout=hf.get("activation_dropout", 0.0),
        vocab_size=hf["vocab_size"],
        channels=hf.get("num_mel_bins", 80),
        source_positions=hf.get("max_source_positions", 1500),
        max_positions=hf.get("max_target_positions", 448),
        pad_id=hf.get("pad_token_id", eos),
        bos_id=hf.get("bos_token_id", eos),
        eos_id=eos,
        unk_id=eos,
        decoder_start_id=hf.get("decoder_start_token_id", 50258),
        tying="decoder" if hf.get("tie_word_embeddings", True) else "none",
    )


def whisper_to_transduce(state: dict[str, torch.Tensor], config: ModelConfig
                         ) -> dict[str, torch.Tensor]:
    """Whisper's weights under transduce's names (the keys' missing biases as zeros)."""
    out = {ours: state[theirs] for theirs, ours in TABLES.items()}
    out["output.weight"] = state.get("proj_out.weight", out["tgt_embed.tokens.weight"])
    for theirs, ours in TOP.items():
        for kind in ("weight", "bias"):
            out[f"{ours}.{kind}"] = state[f"{theirs}.{kind}"]
    for stack, n in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        for i in range(n):
            theirs, ours = f"model.{stack}.layers.{i}", f"{stack}.{i}"
            for name in layer_names(stack):
                for kind in ("weight", "bias"):
                    parts = []
                    for part in name.marian:
                        key = f"{theirs}.{part}.{kind}"
                        parts.append(torch.zeros_like(state[f"{theirs}.{part}.weight"][:, 0])
                                     if kind == "bias" and part in KEYS else state[key])
                    out[f"{ours}.{name.ours}.{kind}"] = torch.cat(parts)
    return out


def transduce_to_whisper(state: dict[str, torch.Tensor], config: ModelConfig
                         ) -> dict[str, torch.Tensor]:
    """The inverse of ``whisper_to_transduce`` (the keys' biases dropped: the softmax ignores them);
    sinusoidal positions are written as the tables Whisper reads."""
    from ..model.positions import sinusoidal_table

    state = dict(state)
    for key, rows in (("src_embed.learned.weight", config.audio_positions),
                      ("tgt_embed.learned.weight", config.max_positions)):
        if key not in state:  # sinusoidal: the table the model adds
            layout = "interleaved" if config.positional == "sinusoidal" else "concat"
            state[key] = sinusoidal_table(rows, config.d_model, layout)
    out = {theirs: state[ours] for theirs, ours in TABLES.items()}
    if config.tying != "decoder":  # (tied, it is the decoder's embedding, as Whisper saves it)
        out["proj_out.weight"] = state["output.weight"]
    for theirs, ours in TOP.items():
        for kind in ("weight", "bias"):
            out[f"{theirs}.{kind}"] = state[f"{ours}.{kind}"]
    for stack, n in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        for i in range(n):
            theirs, ours = f"model.{stack}.layers.{i}", f"{stack}.{i}"
            for name in layer_names(stack):
                for kind in ("weight", "bias"):
                    tensor = state[f"{ours}.{name.ours}.{kind}"]
                    for part, piece in zip(name.marian, tensor.chunk(len(name.marian))):
                        if not (kind == "bias" and part in KEYS):
                            out[f"{theirs}.{part}.{kind}"] = piece
    return {k: v.contiguous().clone() for k, v in out.items()}


def check_exportable(config: ModelConfig) -> None:
    """Whisper's shape, or an error naming the first option it cannot express."""
    expected = {"input": "audio", "subsample": 2, "audio_conv": "1d",
                "norm_position": "pre", "norm_type": "layernorm",
                "activation": "gelu", "scale_embedding": False, "linear_bias": True,
                "attention_scale": "sqrt_dk", "ffn": "dense", "output_bias": False,
                "head_dim": None, "attention_window": 0, "norm_eps": 1e-5, "scale_output": False,
                "output_transform": False, "embed_norm": False}
    for name, value in expected.items():
        _require(getattr(config, name) == value, f"{name}={getattr(config, name)!r}: Hugging "
                                                 f"Face's Whisper has {name}={value!r}; this "
                                                 "model cannot be exported to it")
    _require(config.kv_heads == config.n_heads, f"n_kv_heads={config.n_kv_heads}: Whisper has a "
                                                "key and value head per query head")
    _require(config.positional in ("learned", "sinusoidal", "sinusoidal_concat"),
             f"positional={config.positional!r}: Whisper reads position tables")
    _require(config.tying in ("decoder", "none"), f"tying={config.tying!r}: Whisper ties the "
                                                  "output to the decoder's embedding, or not")


def hf_config(config: ModelConfig) -> dict:
    return {
        "architectures": ["WhisperForConditionalGeneration"], "model_type": "whisper",
        "d_model": config.d_model, "encoder_layers": config.encoder_layers,
        "decoder_layers": config.decoder_layers, "encoder_attention_heads": config.n_heads,
        "decoder_attention_heads": config.n_heads, "encoder_ffn_dim": config.d_ff,
        "decoder_ffn_dim": config.d_ff, "activation_function": "gelu",
        "dropout": config.dropout, "attention_dropout": config.attention_dropout,
        "activation_dropout": config.activation_dropout, "vocab_size": config.vocab_size,
        "num_mel_bins": config.channels, "max_source_positions": config.audio_positions,
        "max_target_positions": config.max_positions, "scale_embedding": False,
        "pad_token_id": config.pad_id, "bos_token_id": config.bos_id,
        "eos_token_id": config.eos_id, "decoder_start_token_id": config.start_id,
        "tie_word_embeddings": config.tying == "decoder", "is_encoder_decoder": True,
        "suppress_tokens": None, "begin_suppress_tokens": None, "torch_dtype": "float32",
    }


def export_whisper(model_path: str | Path, out: str | Path) -> Path:
    """A folder that ``WhisperForConditionalGeneration`` loads, with the imported model's tokenizer
    and feature extractor files (a model with a character vocabulary has no Whisper tokenizer:
    refused by name)."""
    import shutil

    from safetensors.torch import save_file

    from ..checkpoint import checkpoint_file, load_model_from
    from ..choice import resolve
    from ..files import output_dir

    folder = resolve(model_path)
    model, info = load_model_from(folder)
    config = model.config
    whisper: Optional[dict] = info.get("whisper")
    _require(whisper is not None, f"{folder}: a speech model trained here (its targets are "
             "characters or its own pieces, not Whisper's tokenizer) has no Hugging Face class "
             "that holds it; only a model imported from Whisper (import-hf, fine-tuned or not) "
             "exports, to Whisper's own folder. Use this one with `transduce transcribe` or "
             "`transduce serve`")
    check_exportable(config)
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("ctc.")}
    with output_dir(out, "hf export", [folder], what="the export folder") as tmp:
        save_file(transduce_to_whisper(state, config), str(tmp / "model.safetensors"),
                  metadata={"format": "pt"})
        for name in whisper["files"]:
            shutil.copyfile(checkpoint_file(folder, name), tmp / name)
        (tmp / "config.json").write_text(json.dumps(hf_config(config), indent=2) + "\n")
    return Path(out)
