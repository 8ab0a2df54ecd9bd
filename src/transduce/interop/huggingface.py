"""Hugging Face Marian (``MarianMTModel``, the opus-mt family) <-> transduce (GPT-2 and BERT import
through ``interop.gpt2`` and ``interop.bert``).

Marian is the paper's post-LN Transformer with a few options of its own, all of which are
``ModelConfig`` fields: [sin | cos] positions from 0 (``sinusoidal_concat``), SiLU ("swish")
activation in opus-mt models, a final logits bias (``output_bias``), and the pad token as the
decoder's first input (``decoder_start_id``). Its tokenizer maps SentencePiece pieces to ids
through ``vocab.json``; imported checkpoints keep those files and ``transduce.data.Tokenizer``
uses them.

``transformers`` is an optional dependency, needed only to *export* (to write its config
class); importing reads plain JSON and safetensors (or a ``pytorch_model.bin`` loaded with
``weights_only=True``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..checkpoint import load_model_from, resolve, tokenizer_paths, write_checkpoint
from ..config import ModelConfig
from ..errors import TransduceError
from ..files import check_output_dir, load_torch, output_dir, read_json

ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu"}
# Flags of Bart-family configs that Marian checkpoints leave off; transduce has no equivalent.
UNSUPPORTED_FLAGS = ("normalize_before", "add_final_layer_norm", "layernorm_embedding", "normalize_embedding",
                     "add_bias_logits", "static_position_embeddings")


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise TransduceError(message)


def config_from_hf(hf: dict, source: str) -> ModelConfig:
    """A ModelConfig for a Marian ``config.json``, or an error naming the unsupported field."""
    _require(hf.get("model_type") == "marian", f"{source}: model_type is {hf.get('model_type')!r}, not 'marian'")
    for flag in UNSUPPORTED_FLAGS:
        _require(not hf.get(flag), f"{source}: {flag}={hf.get(flag)!r} is not supported by transduce")
    act = hf.get("activation_function", "gelu")
    _require(act in ACTIVATIONS, f"{source}: activation_function={act!r} is not supported "
                                 f"(supported: {', '.join(ACTIVATIONS)})")
    for enc, dec in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        _require(hf[enc] == hf[dec], f"{source}: {enc}={hf[enc]} differs from {dec}={hf[dec]}; transduce uses one "
                                     "value for both stacks")
    shared = hf.get("share_encoder_decoder_embeddings", True)
    vocab = hf["vocab_size"]
    tgt_vocab = None if shared else hf.get("decoder_vocab_size") or vocab
    tying = "all" if shared else ("decoder" if hf.get("tie_word_embeddings", True) else "none")
    pad = hf["pad_token_id"]
    return ModelConfig(
        encoder_layers=hf["encoder_layers"], decoder_layers=hf["decoder_layers"], d_model=hf["d_model"],
        n_heads=hf["encoder_attention_heads"], d_ff=hf["encoder_ffn_dim"], dropout=hf.get("dropout", 0.1),
        attention_dropout=hf.get("attention_dropout", 0.0), activation_dropout=hf.get("activation_dropout", 0.0),
        activation=ACTIVATIONS[act], norm_position="post", positional="sinusoidal_concat",
        scale_embedding=hf.get("scale_embedding", False), tying=tying, vocab_size=vocab, tgt_vocab_size=tgt_vocab,
        pad_id=pad, bos_id=hf.get("decoder_start_token_id", pad), eos_id=hf["eos_token_id"],
        unk_id=hf.get("unk_token_id", 1) if hf.get("unk_token_id") is not None else 1,
        decoder_start_id=hf.get("decoder_start_token_id", pad), max_positions=hf["max_position_embeddings"],
        output_bias=True,
    )


def _attention_names(prefix: str) -> dict[str, str]:
    return {f"{prefix}.{p}_proj.{w}": p for p in "qkv" for w in ("weight", "bias")}


def hf_to_transduce(state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Rename (and fuse) Marian weights into transduce's names."""
    out: dict[str, torch.Tensor] = {}
    get = lambda name: state[name]  # noqa: E731
    shared = state.get("model.shared.weight")
    out["src_embed.tokens.weight"] = state.get("model.encoder.embed_tokens.weight", shared)
    out["tgt_embed.tokens.weight"] = state.get("model.decoder.embed_tokens.weight", shared)
    out["output.weight"] = state.get("lm_head.weight", out["tgt_embed.tokens.weight"])
    bias = state.get("final_logits_bias")
    out["output_bias"] = bias.reshape(-1) if bias is not None else torch.zeros(config.target_vocab_size)
    for stack, n in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        for i in range(n):
            hf, us = f"model.{stack}.layers.{i}", f"{stack}.{i}"
            for w in ("weight", "bias"):
                out[f"{us}.self_attn.qkv.{w}"] = torch.cat([get(f"{hf}.self_attn.{p}_proj.{w}") for p in "qkv"])
                out[f"{us}.self_attn.out.{w}"] = get(f"{hf}.self_attn.out_proj.{w}")
                out[f"{us}.ffn.w1.{w}"] = get(f"{hf}.fc1.{w}")
                out[f"{us}.ffn.w2.{w}"] = get(f"{hf}.fc2.{w}")
                out[f"{us}.self_attn_block.norm.{w}"] = get(f"{hf}.self_attn_layer_norm.{w}")
                out[f"{us}.ffn_block.norm.{w}"] = get(f"{hf}.final_layer_norm.{w}")
                if stack == "decoder":
                    out[f"{us}.cross_attn.q.{w}"] = get(f"{hf}.encoder_attn.q_proj.{w}")
                    out[f"{us}.cross_attn.kv.{w}"] = torch.cat([get(f"{hf}.encoder_attn.{p}_proj.{w}") for p in "kv"])
                    out[f"{us}.cross_attn.out.{w}"] = get(f"{hf}.encoder_attn.out_proj.{w}")
                    out[f"{us}.cross_attn_block.norm.{w}"] = get(f"{hf}.encoder_attn_layer_norm.{w}")
    return out


def _read_hf_weights(folder: Path) -> dict[str, torch.Tensor]:
    path = folder / "model.safetensors"
    if path.is_file():
        try:
            return load_file(str(path))
        except Exception as error:  # safetensors raises its own types for a damaged file
            raise TransduceError(f"{path} is damaged ({error})") from None
    path = folder / "pytorch_model.bin"
    if path.is_file():
        return load_torch(path, "Convert it to model.safetensors with a tool you trust")
    raise TransduceError(f"{folder}: neither model.safetensors nor pytorch_model.bin found")


def read_hf_config(path: Path) -> ModelConfig:
    """The ModelConfig of a Marian ``config.json``, with errors that name the file and the key."""
    hf = read_json(path)
    for key in ("d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
                "encoder_ffn_dim", "decoder_ffn_dim", "vocab_size", "max_position_embeddings", "pad_token_id",
                "eos_token_id"):
        if key in hf and (not isinstance(hf[key], int) or isinstance(hf[key], bool)):
            raise TransduceError(f"{path}: {key} = {hf[key]!r} should be an integer")
    try:
        return config_from_hf(hf, str(path))
    except KeyError as error:
        raise TransduceError(f"{path}: the key {error.args[0]!r} is missing") from None
    except (TypeError, ValueError) as error:
        raise TransduceError(f"{path}: a value has the wrong type or is out of range ({error})") from None


def import_hf(hf_dir: str | Path, out: str | Path) -> Path:
    """Convert a MarianMTModel folder into a new transduce run directory; returns its checkpoint folder."""
    from ..model import Transformer

    folder = Path(hf_dir)
    run = Path(out)
    check_output_dir(run, "run", [folder])
    if run.exists() and any(run.iterdir()):
        raise TransduceError(f"--out {run} is not empty; import into a new folder (an import never joins another "
                             "run or replaces one)")
    config_path = folder / "config.json"
    _require(config_path.is_file(), f"{folder}: no config.json; is this a Hugging Face model folder?")
    model_type = read_json(config_path).get("model_type")
    if model_type == "gpt2":
        from .gpt2 import import_gpt2

        return import_gpt2(folder, read_json(config_path), run)
    if model_type == "bert":
        from .bert import import_bert

        return import_bert(folder, read_json(config_path), run)
    config = read_hf_config(config_path)
    for name in ("source.spm", "target.spm", "vocab.json"):
        _require((folder / name).is_file(), f"{folder}: {name} is missing (MarianTokenizer files are needed)")
    model = Transformer(config)
    weights = hf_to_transduce(_read_hf_weights(folder), config)
    shapes = model.state_dict()
    wrong = [f"{k} {tuple(v.shape)} where config.json implies {tuple(shapes[k].shape)}"
             for k, v in weights.items() if k in shapes and v is not None and v.shape != shapes[k].shape]
    _require(not wrong, f"{folder}: the weights do not fit {config_path} ({len(wrong)} tensors differ, e.g. "
                        f"{wrong[0] if wrong else ''}); is config.json the one of these weights?")
    missing, unexpected = model.load_state_dict(weights, strict=False)
    tied = {"tgt_embed.tokens.weight", "output.weight", "src_embed.tokens.weight"}
    _require(not [m for m in missing if m not in tied] and not unexpected,
             f"{folder}: weights do not fit the config (missing {missing[:5]}, unexpected {unexpected[:5]})")
    tok = {"src": "source.spm", "tgt": "target.spm", "vocab": "vocab.json"}
    files = [folder / "source.spm", folder / "target.spm", folder / "vocab.json"]
    if (folder / "target_vocab.json").is_file():
        tok["tgt_vocab"] = "target_vocab.json"
        files.append(folder / "target_vocab.json")
    info = {"model": config.to_dict(), "src": "src", "tgt": "tgt", "tokenizer": tok, "step": 0,
            "imported_from": str(folder)}
    with output_dir(run, "run", [folder]) as tmp:
        write_checkpoint(tmp / "checkpoints" / "step_00000000", model.eval(), info, files)
    return run / "checkpoints" / "step_00000000"


def write_imported(folder: Path, config: ModelConfig, weights: dict[str, torch.Tensor], out: Path,
                   tied: tuple[str, ...] = ()) -> Path:
    """A new run ``out`` holding ``weights`` as a model of ``config``, without a tokenizer (the
    language models' tokenizers are not SentencePiece); ``tied`` may be missing (shared tensors).
    Returns its checkpoint folder; nothing is written when the weights do not fit."""
    from ..model import Transformer

    model = Transformer(config)
    shapes = model.state_dict()
    wrong = [f"{k} {tuple(v.shape)} where config.json implies {tuple(shapes[k].shape)}"
             for k, v in weights.items() if k in shapes and v.shape != shapes[k].shape]
    _require(not wrong, f"{folder}: the weights do not fit {folder / 'config.json'} ({len(wrong)} tensors differ, "
                        f"e.g. {wrong[0] if wrong else ''}); is config.json the one of these weights?")
    missing, unexpected = model.load_state_dict(weights, strict=False)
    _require(not [m for m in missing if m not in tied] and not unexpected,
             f"{folder}: weights do not fit the config (missing {missing[:5]}, unexpected {unexpected[:5]})")
    info = {"model": config.to_dict(), "src": "text", "tgt": "text", "tokenizer": {}, "step": 0,
            "imported_from": str(folder)}
    with output_dir(out, "run", [folder]) as tmp:
        write_checkpoint(tmp / "checkpoints" / "step_00000000", model.eval(), info, [])
    return out / "checkpoints" / "step_00000000"


# --- export -----------------------------------------------------------------------------------


def _concat_order(d_model: int) -> torch.Tensor:
    """Index that turns an interleaved [s0 c0 s1 c1 ...] dimension order into [s0 s1 ... | c0 c1 ...]."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def check_exportable(config: ModelConfig) -> None:
    """Refuse, naming the option, what Marian cannot express."""
    rules = [("norm_position", "post"), ("norm_type", "layernorm")]
    for name, value in rules:
        _require(getattr(config, name) == value, f"{name}={getattr(config, name)!r} cannot be expressed in Marian "
                                                 f"(it needs {value!r})")
    _require(config.positional in ("sinusoidal", "sinusoidal_concat"),
             f"positional={config.positional!r} cannot be expressed in Marian (sinusoidal positions only)")
    _require(config.activation != "swiglu", "activation='swiglu' cannot be expressed in Marian")
    _require(config.d_model % 2 == 0, "an odd d_model cannot be expressed in Marian")
    _require(config.norm_eps == 1e-5, f"norm_eps={config.norm_eps} cannot be expressed in Marian (1e-5)")
    _require(config.activation != "gelu_tanh", "activation='gelu_tanh' cannot be expressed in Marian")
    _require(config.beyond_paper() is None,
             f"{config.beyond_paper()} cannot be expressed in Marian (the paper's encoder-decoder: heads d_model / "
             "n_heads wide, scaled by 1/sqrt(d_k), every key/value head, no window)")


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
    D = config.d_model
    src, tgt = cols(state["src_embed.tokens.weight"]), cols(state["tgt_embed.tokens.weight"])
    if config.tying == "all":
        out["model.shared.weight"] = src
    out["model.encoder.embed_tokens.weight"] = src
    out["model.decoder.embed_tokens.weight"] = tgt
    out["lm_head.weight"] = cols(state["output.weight"])
    bias = state.get("output_bias")
    out["final_logits_bias"] = (bias if bias is not None else torch.zeros(config.target_vocab_size))[None]
    for stack, n in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        for i in range(n):
            hf, us = f"model.{stack}.layers.{i}", f"{stack}.{i}"
            qkv_w, qkv_b = state[f"{us}.self_attn.qkv.weight"], state[f"{us}.self_attn.qkv.bias"]
            for j, p in enumerate("qkv"):
                out[f"{hf}.self_attn.{p}_proj.weight"] = cols(qkv_w[j * D : (j + 1) * D])
                out[f"{hf}.self_attn.{p}_proj.bias"] = qkv_b[j * D : (j + 1) * D]
            out[f"{hf}.self_attn.out_proj.weight"] = rows(state[f"{us}.self_attn.out.weight"])
            out[f"{hf}.self_attn.out_proj.bias"] = rows(state[f"{us}.self_attn.out.bias"])
            out[f"{hf}.fc1.weight"] = cols(state[f"{us}.ffn.w1.weight"])
            out[f"{hf}.fc1.bias"] = state[f"{us}.ffn.w1.bias"]
            out[f"{hf}.fc2.weight"] = rows(state[f"{us}.ffn.w2.weight"])
            out[f"{hf}.fc2.bias"] = rows(state[f"{us}.ffn.w2.bias"])
            for w in ("weight", "bias"):
                out[f"{hf}.self_attn_layer_norm.{w}"] = rows(state[f"{us}.self_attn_block.norm.{w}"])
                out[f"{hf}.final_layer_norm.{w}"] = rows(state[f"{us}.ffn_block.norm.{w}"])
            if stack == "decoder":
                out[f"{hf}.encoder_attn.q_proj.weight"] = cols(state[f"{us}.cross_attn.q.weight"])
                out[f"{hf}.encoder_attn.q_proj.bias"] = state[f"{us}.cross_attn.q.bias"]
                kv_w, kv_b = state[f"{us}.cross_attn.kv.weight"], state[f"{us}.cross_attn.kv.bias"]
                for j, p in enumerate("kv"):
                    out[f"{hf}.encoder_attn.{p}_proj.weight"] = cols(kv_w[j * D : (j + 1) * D])
                    out[f"{hf}.encoder_attn.{p}_proj.bias"] = kv_b[j * D : (j + 1) * D]
                out[f"{hf}.encoder_attn.out_proj.weight"] = rows(state[f"{us}.cross_attn.out.weight"])
                out[f"{hf}.encoder_attn.out_proj.bias"] = rows(state[f"{us}.cross_attn.out.bias"])
                for w in ("weight", "bias"):
                    out[f"{hf}.encoder_attn_layer_norm.{w}"] = rows(state[f"{us}.cross_attn_block.norm.{w}"])
    return {k: v.contiguous().clone() for k, v in out.items()}


def hf_config(config: ModelConfig) -> dict:
    act = {"silu": "swish", "relu": "relu", "gelu": "gelu"}[config.activation]
    shared = config.tying == "all"
    return {
        "model_type": "marian", "architectures": ["MarianMTModel"], "vocab_size": config.vocab_size,
        "decoder_vocab_size": config.target_vocab_size, "share_encoder_decoder_embeddings": shared,
        "tie_word_embeddings": config.tying != "none", "d_model": config.d_model,
        "encoder_layers": config.encoder_layers, "decoder_layers": config.decoder_layers,
        "encoder_attention_heads": config.n_heads, "decoder_attention_heads": config.n_heads,
        "encoder_ffn_dim": config.d_ff, "decoder_ffn_dim": config.d_ff, "activation_function": act,
        "dropout": config.dropout, "attention_dropout": config.attention_dropout,
        "activation_dropout": config.activation_dropout, "max_position_embeddings": config.max_positions,
        "scale_embedding": config.scale_embedding, "pad_token_id": config.pad_id, "eos_token_id": config.eos_id,
        "bos_token_id": config.bos_id, "decoder_start_token_id": config.start_id,
        "forced_eos_token_id": config.eos_id, "is_encoder_decoder": True, "init_std": 0.02,
        "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0, "use_cache": True,
    }


def export_hf(model_path: str | Path, out: str | Path) -> Path:
    """Write a folder that ``MarianMTModel`` and ``MarianTokenizer`` ``from_pretrained`` load."""
    folder = resolve(model_path)
    model, info = load_model_from(folder)
    config = model.config
    check_exportable(config)
    tok = info["tokenizer"]
    paths = tokenizer_paths(folder, info)
    with output_dir(out, "hf export", [folder, model_path], what="the export folder") as tmp:
        state = {k: v for k, v in model.state_dict().items()}
        save_file(transduce_to_hf(state, config), str(tmp / "model.safetensors"), metadata={"format": "pt"})
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
        (tmp / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "MarianTokenizer", "separate_vocabs": separate, "model_max_length": config.max_positions,
            "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}, indent=2) + "\n")
        (tmp / "generation_config.json").write_text(json.dumps({
            "decoder_start_token_id": config.start_id, "eos_token_id": config.eos_id, "pad_token_id": config.pad_id,
            "forced_eos_token_id": config.eos_id, "bad_words_ids": [[config.pad_id]], "num_beams": 4,
            "max_length": config.max_positions}, indent=2) + "\n")
    return Path(out)


def _write_spm_vocab(model_file: Path, out: Path) -> None:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model_file))
    out.write_text(json.dumps({sp.id_to_piece(i): i for i in range(sp.get_piece_size())}, ensure_ascii=False,
                              indent=0) + "\n", encoding="utf-8")
