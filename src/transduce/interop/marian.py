"""Hugging Face Marian (``MarianMTModel``, the opus-mt family) <-> transduce: the configuration, the
one table of weight names that import, export and the CTranslate2 spec all read, and the export.

Marian is the paper's post-LN Transformer with a few options of its own, all of which are
``ModelConfig`` fields: [sin | cos] positions from 0 (``sinusoidal_concat``), SiLU ("swish")
activation in opus-mt models, a final logits bias (``output_bias``), and the pad token as the
decoder's first input (``decoder_start_id``). Its tokenizer maps SentencePiece pieces to ids through
``vocab.json``; imported checkpoints keep those files and ``transduce.data.Tokenizer`` uses them.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..checkpoint import load_model_from, tokenizer_paths
from ..choice import resolve
from ..config import ModelConfig
from ..errors import TransduceError
from ..files import output_dir

ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu"}
# Flags of Bart-family configs that Marian checkpoints leave off; transduce has no equivalent.
UNSUPPORTED_FLAGS = (
    "normalize_before",
    "add_final_layer_norm",
    "layernorm_embedding",
    "normalize_embedding",
    "add_bias_logits",
    "static_position_embeddings",
)


@dataclass(frozen=True)
class Name:
    """One weight of a layer, as transduce, Marian and CTranslate2's spec call it.

    ours: under ``{stack}.{i}.``; marian: under ``model.{stack}.layers.{i}.``, one name, or the
    parts that ours fuses, in order (q, k, v); ct2: the attribute path under a spec layer. ``kind``:
    "linear" (weight, bias) or "norm" (weight, bias; CTranslate2's gamma, beta). ``reads`` and
    ``writes``: whether its input or output is the residual stream (d_model wide), which an export
    reorders when the model's positions are interleaved (``transduce_to_hf``).
    """

    ours: str
    marian: tuple[str, ...]
    ct2: str
    kind: str
    reads: bool
    writes: bool


LAYER = (
    Name(
        "self_attn.qkv",
        ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
        "self_attention.linear.0",
        "linear",
        True,
        False,
    ),
    Name(
        "self_attn.out", ("self_attn.out_proj",), "self_attention.linear.1", "linear", False, True
    ),
    Name(
        "self_attn_block.norm",
        ("self_attn_layer_norm",),
        "self_attention.layer_norm",
        "norm",
        True,
        True,
    ),
    Name("ffn.w1", ("fc1",), "ffn.linear_0", "linear", True, False),
    Name("ffn.w2", ("fc2",), "ffn.linear_1", "linear", False, True),
    Name("ffn_block.norm", ("final_layer_norm",), "ffn.layer_norm", "norm", True, True),
)
CROSS = (  # the decoder's layers have these too
    Name("cross_attn.q", ("encoder_attn.q_proj",), "attention.linear.0", "linear", True, False),
    Name(
        "cross_attn.kv",
        ("encoder_attn.k_proj", "encoder_attn.v_proj"),
        "attention.linear.1",
        "linear",
        True,
        False,
    ),
    Name("cross_attn.out", ("encoder_attn.out_proj",), "attention.linear.2", "linear", False, True),
    Name(
        "cross_attn_block.norm",
        ("encoder_attn_layer_norm",),
        "attention.layer_norm",
        "norm",
        True,
        True,
    ),
)


def layer_names(stack: str) -> tuple[Name, ...]:
    return LAYER + CROSS if stack == "decoder" else LAYER


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise TransduceError(message)


def config_from_hf(hf: dict, source: str) -> ModelConfig:
    """A ModelConfig for a Marian ``config.json``, or an error naming the unsupported field."""
    _require(hf.get("model_type") == "marian", f"{source}: model_type is {hf.get('model_type')!r}, "
                                               "not 'marian'")
    for flag in UNSUPPORTED_FLAGS:
        _require(not hf.get(flag), f"{source}: {flag}={hf.get(flag)!r} is not supported by "
                                   "transduce")
    act = hf.get("activation_function", "gelu")
    _require(act in ACTIVATIONS, f"{source}: activation_function={act!r} is not supported "
                                 f"(supported: {', '.join(ACTIVATIONS)})")
    for enc, dec in (
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_ffn_dim", "decoder_ffn_dim"),
    ):
        _require(hf[enc] == hf[dec], f"{source}: {enc}={hf[enc]} differs from {dec}={hf[dec]}; "
                                     "transduce uses one value for both stacks")
    shared = hf.get("share_encoder_decoder_embeddings", True)
    vocab = hf["vocab_size"]
    tgt_vocab = None if shared else hf.get("decoder_vocab_size") or vocab
    tying = "all" if shared else ("decoder" if hf.get("tie_word_embeddings", True) else "none")
    pad = hf["pad_token_id"]
    return ModelConfig(
        encoder_layers=hf["encoder_layers"],
        decoder_layers=hf["decoder_layers"],
        d_model=hf["d_model"],
        n_heads=hf["encoder_attention_heads"],
        d_ff=hf["encoder_ffn_dim"],
        dropout=hf.get("dropout", 0.1),
        attention_dropout=hf.get("attention_dropout", 0.0),
        activation_dropout=hf.get("activation_dropout", 0.0),
        activation=ACTIVATIONS[act],
        norm_position="post",
        positional="sinusoidal_concat",
        scale_embedding=hf.get("scale_embedding", False),
        tying=tying,
        vocab_size=vocab,
        tgt_vocab_size=tgt_vocab,
        pad_id=pad,
        bos_id=hf.get("decoder_start_token_id", pad),
        eos_id=hf["eos_token_id"],
        unk_id=hf.get("unk_token_id", 1) if hf.get("unk_token_id") is not None else 1,
        decoder_start_id=hf.get("decoder_start_token_id", pad),
        max_positions=hf["max_position_embeddings"],
        output_bias=True,
    )


def hf_to_transduce(state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Rename (and fuse) Marian weights into transduce's names (``LAYER``, ``CROSS``)."""
    out: dict[str, torch.Tensor] = {}
    shared = state.get("model.shared.weight")
    out["src_embed.tokens.weight"] = state.get("model.encoder.embed_tokens.weight", shared)
    out["tgt_embed.tokens.weight"] = state.get("model.decoder.embed_tokens.weight", shared)
    out["output.weight"] = state.get("lm_head.weight", out["tgt_embed.tokens.weight"])
    bias = state.get("final_logits_bias")
    out["output_bias"] = (
        bias.reshape(-1) if bias is not None else torch.zeros(config.target_vocab_size)
    )
    for stack, n in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        for i in range(n):
            theirs, ours = f"model.{stack}.layers.{i}", f"{stack}.{i}"
            for name in layer_names(stack):
                for w in ("weight", "bias"):
                    out[f"{ours}.{name.ours}.{w}"] = torch.cat(
                        [state[f"{theirs}.{part}.{w}"] for part in name.marian]
                    )
    return out


def _concat_order(d_model: int) -> torch.Tensor:
    """Index that turns an interleaved [s0 c0 s1 c1 ...] dimension order into [s0 s1 ... | c0 c1
    ...]."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def check_exportable(config: ModelConfig) -> None:
    """Refuse, naming the option, what Marian cannot express."""
    rules = [("norm_position", "post"), ("norm_type", "layernorm")]
    for name, value in rules:
        _require(getattr(config, name) == value, f"{name}={getattr(config, name)!r} cannot be "
                                                 f"expressed in Marian (it needs {value!r})")
    _require(config.positional in ("sinusoidal", "sinusoidal_concat"),
             f"positional={config.positional!r} cannot be expressed in Marian (sinusoidal "
             "positions only)")
    _require(config.activation not in ("swiglu", "geglu"),
             f"activation={config.activation!r} cannot be expressed in Marian")
    _require(config.tying != "embeddings", "tying='embeddings' cannot be expressed in Marian "
                                           "(tying 'all', 'decoder' or 'none')")
    _require(config.d_model % 2 == 0, "an odd d_model cannot be expressed in Marian")
    _require(config.norm_eps == 1e-5, f"norm_eps={config.norm_eps} cannot be expressed in Marian "
                                      "(1e-5)")
    _require(config.activation != "gelu_tanh", "activation='gelu_tanh' cannot be expressed in "
                                               "Marian")
    _require(config.beyond_paper() is None,
             f"{config.beyond_paper()} cannot be expressed in Marian (the paper's encoder-decoder: "
             "heads d_model / n_heads wide, scaled by 1/sqrt(d_k), every key/value head, no "
             "window)")


def transduce_to_hf(state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Marian weights from transduce weights.

    The paper's interleaved sinusoids differ from Marian's [sin | cos] only by an order of the
    d_model dimensions, so an interleaved model is exported exactly by permuting every weight
    that touches the residual stream (LayerNorm and attention are indifferent to the order).
    """
    perm = _concat_order(config.d_model) if config.positional == "sinusoidal" else None

    def rows(t):  # output dimension is d_model
        return t[perm] if perm is not None else t

    def cols(t):  # input dimension is d_model
        return t[:, perm] if perm is not None else t

    out: dict[str, torch.Tensor] = {}
    src, tgt = cols(state["src_embed.tokens.weight"]), cols(state["tgt_embed.tokens.weight"])
    if config.tying == "all":
        out["model.shared.weight"] = src
    out["model.encoder.embed_tokens.weight"] = src
    out["model.decoder.embed_tokens.weight"] = tgt
    out["lm_head.weight"] = cols(state["output.weight"])
    bias = state.get("output_bias")
    out["final_logits_bias"] = (
        bias if bias is not None else torch.zeros(config.target_vocab_size)
    )[None]
    for stack, n in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        for i in range(n):
            theirs, ours = f"model.{stack}.layers.{i}", f"{stack}.{i}"
            for name in layer_names(stack):
                weight, bias = (
                    state[f"{ours}.{name.ours}.weight"],
                    state[f"{ours}.{name.ours}.bias"],
                )
                if name.kind == "norm":
                    weight, bias = rows(weight), rows(bias)
                else:
                    weight = cols(weight) if name.reads else weight
                    weight, bias = (rows(weight), rows(bias)) if name.writes else (weight, bias)
                for part, w, b in zip(
                    name.marian, weight.chunk(len(name.marian)), bias.chunk(len(name.marian))
                ):
                    out[f"{theirs}.{part}.weight"], out[f"{theirs}.{part}.bias"] = w, b
    return {k: v.contiguous().clone() for k, v in out.items()}


def hf_config(config: ModelConfig) -> dict:
    act = {"silu": "swish", "relu": "relu", "gelu": "gelu"}[config.activation]
    shared = config.tying == "all"
    return {
        "model_type": "marian",
        "architectures": ["MarianMTModel"],
        "vocab_size": config.vocab_size,
        "decoder_vocab_size": config.target_vocab_size,
        "share_encoder_decoder_embeddings": shared,
        "tie_word_embeddings": config.tying != "none",
        "d_model": config.d_model,
        "encoder_layers": config.encoder_layers,
        "decoder_layers": config.decoder_layers,
        "encoder_attention_heads": config.n_heads,
        "decoder_attention_heads": config.n_heads,
        "encoder_ffn_dim": config.d_ff,
        "decoder_ffn_dim": config.d_ff,
        "activation_function": act,
        "dropout": config.dropout,
        "attention_dropout": config.attention_dropout,
        "activation_dropout": config.activation_dropout,
        "max_position_embeddings": config.max_positions,
        "scale_embedding": config.scale_embedding,
        "pad_token_id": config.pad_id,
        "eos_token_id": config.eos_id,
        "bos_token_id": config.bos_id,
        "decoder_start_token_id": config.start_id,
        "forced_eos_token_id": config.eos_id,
        "is_encoder_decoder": True,
        "init_std": 0.02,
        "encoder_layerdrop": 0.0,
        "decoder_layerdrop": 0.0,
        "use_cache": True,
    }


def export_hf(model_path: str | Path, out: str | Path) -> Path:
    """Write a folder that ``MarianMTModel`` and ``MarianTokenizer`` ``from_pretrained`` load."""
    folder = resolve(model_path)
    model, info = load_model_from(folder)
    config = model.config
    check_exportable(config)
    tok = info["tokenizer"]
    paths = tokenizer_paths(folder, info)
    with output_dir(out, "hf export", [folder], what="the export folder") as tmp:
        state = {k: v for k, v in model.state_dict().items()}
        save_file(
            transduce_to_hf(state, config),
            str(tmp / "model.safetensors"),
            metadata={"format": "pt"},
        )
        (tmp / "config.json").write_text(json.dumps(hf_config(config), indent=2) + "\n")
        shutil.copyfile(paths["src"], tmp / "source.spm")
        shutil.copyfile(paths["tgt"], tmp / "target.spm")
        if "vocab" in paths:
            shutil.copyfile(paths["vocab"], tmp / "vocab.json")
            if "tgt_vocab" in paths:
                shutil.copyfile(paths["tgt_vocab"], tmp / "target_vocab.json")
        else:
            _write_spm_vocab(paths["src"], tmp / "vocab.json")
            if tok["tgt"] != tok["src"]:
                _write_spm_vocab(paths["tgt"], tmp / "target_vocab.json")
        separate = bool(tok.get("tgt_vocab")) or (not tok.get("vocab") and tok["tgt"] != tok["src"])
        (tmp / "tokenizer_config.json").write_text(
            json.dumps(
                {
                    "tokenizer_class": "MarianTokenizer",
                    "separate_vocabs": separate,
                    "model_max_length": config.max_positions,
                    "eos_token": "</s>",
                    "unk_token": "<unk>",
                    "pad_token": "<pad>",
                },
                indent=2,
            )
            + "\n"
        )
        (tmp / "generation_config.json").write_text(
            json.dumps(
                {
                    "decoder_start_token_id": config.start_id,
                    "eos_token_id": config.eos_id,
                    "pad_token_id": config.pad_id,
                    "forced_eos_token_id": config.eos_id,
                    "bad_words_ids": [[config.pad_id]],
                    "num_beams": 4,
                    "max_length": config.max_positions,
                },
                indent=2,
            )
            + "\n"
        )
    return Path(out)


def _write_spm_vocab(model_file: Path, out: Path) -> None:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model_file))
    out.write_text(
        json.dumps(
            {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}, ensure_ascii=False, indent=0
        )
        + "\n",
        encoding="utf-8",
    )
