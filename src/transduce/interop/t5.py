"""Hugging Face T5 (``T5ForConditionalGeneration``; ``mt5`` has the same layout) <-> transduce.

T5 is the paper's encoder-decoder with options transduce has (``ModelConfig``'s T5 fields): relative
position buckets computed by the first layer of each stack and shared by the others, RMS norms
before each sub-layer and after each stack, no biases, no 1/sqrt(d_k), unscaled embeddings. T5 1.0
ties the output to the shared embedding and rescales the decoder's output by d_model^-0.5; T5 1.1
(and flan-t5, mT5) keeps a separate output and gates the feed-forward network with tanh-GELU.

The tokenizer is ``spiece.model``, whose ids are the model's (pad 0, eos 1, unk 2, no bos), plus the
sentinels ``<extra_id_N>`` outside it: read from ``tokenizer.json`` where the folder has one, else
placed as T5's tokenizer places them (``<extra_id_0>`` the last id, counting down). They go into the
run as ``added_tokens.json``. The decoder starts from pad, as in T5.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from ..config import ModelConfig
from ..data.spans import SENTINEL
from ..errors import TransduceError

ACTIVATIONS = {"relu": "relu", "gated-gelu": "geglu"}
SENTINEL_PATTERN = re.compile(r"<extra_id_\d+>")  # (data.spans.SENTINEL's names)


def config_from_t5(hf: dict, source: str, untied: bool) -> ModelConfig:
    """A ModelConfig for a T5 ``config.json``, or an error naming what transduce does not compute.

    ``untied``: the weights hold an output projection of their own (T5 1.1). Whether the decoder's
    output is rescaled is ``scale_decoder_outputs`` where the config has it (transformers 5), else
    ``tie_word_embeddings`` (earlier versions, whose T5 1.1 configs set it to false)."""
    if hf.get("model_type") == "umt5":
        raise TransduceError(f"{source}: model_type 'umt5' (a relative position table in every "
                             "layer) is not supported; T5, T5 1.1, flan-t5 and mT5 are")
    proj = hf.get("feed_forward_proj", "relu")
    if proj not in ACTIVATIONS:
        raise TransduceError(f"{source}: feed_forward_proj={proj!r} is not supported (supported: "
                             f"{', '.join(ACTIVATIONS)})")
    for key in ("d_model", "d_kv", "d_ff", "num_layers", "num_heads", "vocab_size"):
        if not isinstance(hf.get(key), int) or isinstance(hf[key], bool):
            raise TransduceError(f"{source}: {key} = {hf.get(key)!r} should be an integer")
    scale = hf.get("scale_decoder_outputs", hf.get("tie_word_embeddings", True) is not False)
    if hf.get("model_type") == "mt5":  # (mT5's class never rescales: its checkpoints are T5 1.1's)
        scale = False
    dropout = hf.get("dropout_rate", 0.1)
    pad = hf.get("pad_token_id", 0)
    try:
        return ModelConfig(
            encoder_layers=hf["num_layers"],
            decoder_layers=hf.get("num_decoder_layers") or hf["num_layers"],
            d_model=hf["d_model"],
            n_heads=hf["num_heads"],
            head_dim=hf["d_kv"],
            d_ff=hf["d_ff"],
            dropout=dropout,
            attention_dropout=dropout,
            activation_dropout=dropout,
            activation=ACTIVATIONS[proj],
            linear_bias=False,
            norm_position="pre",
            norm_type="rmsnorm",
            norm_eps=hf.get("layer_norm_epsilon", 1e-6),
            positional="relative",
            relative_buckets=hf.get("relative_attention_num_buckets", 32),
            relative_max_distance=hf.get("relative_attention_max_distance", 128),
            attention_scale="none",
            scale_embedding=False,
            tying="embeddings" if untied else "all",
            scale_output=bool(scale),
            init="t5",
            vocab_size=hf["vocab_size"],
            pad_id=pad,
            # T5 has no bos; its decoder starts at pad
            bos_id=hf.get("decoder_start_token_id", pad),
            eos_id=hf.get("eos_token_id", 1),
            unk_id=2,
            decoder_start_id=hf.get("decoder_start_token_id", pad),
            max_positions=hf.get("n_positions", 512),
        )
    except (TypeError, ValueError) as error:
        raise TransduceError(f"{source}: {error}") from None


def _stack_names(stack: str, layers: int, gated: bool) -> list[tuple[str, list[str]]]:
    """(ours, [theirs, ...]) for every weight of one stack; several of theirs are concatenated
    into one of ours (the fused projections)."""
    names = []
    attention = "SelfAttention"
    for i in range(layers):
        block, ours = f"{stack}.block.{i}.layer", f"{stack}.{i}"
        names += [
            (f"{ours}.self_attn.qkv.weight", [f"{block}.0.{attention}.{x}.weight" for x in "qkv"]),
            (f"{ours}.self_attn.out.weight", [f"{block}.0.{attention}.o.weight"]),
            (f"{ours}.self_attn_block.norm.weight", [f"{block}.0.layer_norm.weight"]),
        ]
        ffn = 1
        if stack == "decoder":
            ffn = 2
            names += [
                (f"{ours}.cross_attn.q.weight", [f"{block}.1.EncDecAttention.q.weight"]),
                (f"{ours}.cross_attn.kv.weight",
                 [f"{block}.1.EncDecAttention.{x}.weight" for x in "kv"]),
                (f"{ours}.cross_attn.out.weight", [f"{block}.1.EncDecAttention.o.weight"]),
                (f"{ours}.cross_attn_block.norm.weight", [f"{block}.1.layer_norm.weight"]),
            ]
        dense = f"{block}.{ffn}.DenseReluDense"
        names += [
            (f"{ours}.ffn.w1.weight", [f"{dense}.wi_0.weight" if gated else f"{dense}.wi.weight"]),
            (f"{ours}.ffn.w2.weight", [f"{dense}.wo.weight"]),
            (f"{ours}.ffn_block.norm.weight", [f"{block}.{ffn}.layer_norm.weight"]),
        ]
        if gated:
            names.append((f"{ours}.ffn.w3.weight", [f"{dense}.wi_1.weight"]))
    relative = f"{stack}.block.0.layer.0.{attention}.relative_attention_bias.weight"
    names += [
        (f"{stack}_relative.buckets.weight", [relative]),
        (f"{stack}_norm.weight", [f"{stack}.final_layer_norm.weight"]),
    ]
    return names


def names(config: ModelConfig) -> list[tuple[str, list[str]]]:
    """Every weight of a T5 model of ``config``: (ours, [T5's, ...])."""
    gated = config.activation == "geglu"
    out = [("src_embed.tokens.weight", ["shared.weight"])]
    out += _stack_names("encoder", config.encoder_layers, gated)
    out += _stack_names("decoder", config.decoder_layers, gated)
    out.append(("output.weight", ["lm_head.weight"]))
    return out


def t5_to_transduce(state: dict[str, torch.Tensor], config: ModelConfig
                    ) -> dict[str, torch.Tensor]:
    """T5's weights under transduce's names (raises KeyError naming a missing one). ``state`` is
    only read by name (an import refuses what was not read)."""
    for name in state:
        match = re.match(r"(encoder|decoder)\.block\.(\d+)\..*relative_attention_bias", name)
        if match and match.group(2) != "0":
            raise TransduceError(f"{name}: a relative position table in a layer other than the "
                                 "first (UMT5's per-layer buckets) is not supported")

    def get(name: str) -> torch.Tensor:
        if name == "lm_head.weight" and config.tying == "all":
            name = "shared.weight"
        if name == "shared.weight" and name not in state:
            name = "encoder.embed_tokens.weight"
        return state[name]

    out = {ours: torch.cat([get(t) for t in theirs]) for ours, theirs in names(config)}
    out["tgt_embed.tokens.weight"] = out["src_embed.tokens.weight"]
    return out


def transduce_to_t5(state: dict[str, torch.Tensor], config: ModelConfig
                    ) -> dict[str, torch.Tensor]:
    """transduce's weights under T5's names (the fused projections split again; the output
    projection always written, so that every version of transformers reads it)."""
    out = {}
    for ours, theirs in names(config):
        for name, part in zip(theirs, state[ours].chunk(len(theirs))):
            out[name] = part.contiguous().clone()
    return out


def check_exportable(config: ModelConfig) -> None:
    """Refuse, naming the option, a model that T5's classes cannot express."""
    wanted = dict(architecture="encoder-decoder", positional="relative", linear_bias=False,
                  norm_position="pre", norm_type="rmsnorm", attention_scale="none",
                  scale_embedding=False, n_kv_heads=None, attention_window=0, ffn="dense",
                  output_bias=False, embed_norm=False, output_transform=False,
                  tgt_vocab_size=None)
    for name, value in wanted.items():
        if getattr(config, name) != value and not (name == "n_kv_heads"
                                                   and config.kv_heads == config.n_heads):
            raise TransduceError(f"{name}={getattr(config, name)!r} cannot be expressed in T5 (it "
                                 f"needs {value!r})")
    if config.activation not in ("relu", "geglu"):
        raise TransduceError(f"activation={config.activation!r} cannot be expressed in T5 (relu "
                             "or geglu)")
    if config.tying not in ("all", "embeddings"):
        raise TransduceError(f"tying={config.tying!r} cannot be expressed in T5 (its encoder and "
                             "decoder share one embedding: tying 'all' or 'embeddings')")


def hf_config(config: ModelConfig) -> dict:
    """The ``config.json`` of a T5ForConditionalGeneration holding a model of ``config``."""
    return {
        "model_type": "t5",
        "architectures": ["T5ForConditionalGeneration"],
        "vocab_size": config.vocab_size,
        "d_model": config.d_model,
        "d_kv": config.d_k,
        "d_ff": config.d_ff,
        "num_layers": config.encoder_layers,
        "num_decoder_layers": config.decoder_layers,
        "num_heads": config.n_heads,
        "relative_attention_num_buckets": config.relative_buckets,
        "relative_attention_max_distance": config.relative_max_distance,
        "dropout_rate": config.dropout,
        "layer_norm_epsilon": config.norm_eps,
        "feed_forward_proj": "gated-gelu" if config.activation == "geglu" else "relu",
        # transformers before 5 reads both the tying and the rescaling from tie_word_embeddings;
        # lm_head.weight is always written, so that false is right for every model
        "tie_word_embeddings": config.scale_output,
        "scale_decoder_outputs": config.scale_output,
        "is_encoder_decoder": True,
        "pad_token_id": config.pad_id,
        "eos_token_id": config.eos_id,
        "decoder_start_token_id": config.start_id,
        "n_positions": config.max_positions,
        "use_cache": True,
    }


def sentinels(folder: Path, pieces: int) -> dict[str, int]:
    """The folder's ``<extra_id_N>`` -> id: from ``tokenizer.json``'s added tokens where there is
    one, else T5's layout after ``pieces`` SentencePiece pieces (``extra_ids`` of them, 100 by
    default, ``<extra_id_0>`` last)."""
    from ..reading import read_json
    from .folder import hf_file

    path = hf_file(folder, "tokenizer.json")
    if path.is_file():
        added = read_json(path).get("added_tokens", [])
        found = {t["content"]: int(t["id"]) for t in added
                 if isinstance(t, dict) and SENTINEL_PATTERN.fullmatch(str(t.get("content", "")))}
        if found:
            return found
    config = hf_file(folder, "tokenizer_config.json")
    extra = read_json(config).get("extra_ids", 100) if config.is_file() else 100
    if not isinstance(extra, int) or extra < 0:
        raise TransduceError(f"{config}: extra_ids = {extra!r} should be a count")
    return {SENTINEL.format(n): pieces + extra - 1 - n for n in range(extra)}


def write_sentinels(found: dict[str, int], path: Path) -> None:
    path.write_text(json.dumps(found, indent=0) + "\n", encoding="utf-8")


def export_t5(model_path: str | Path, out: str | Path) -> Path:
    """Write a folder that ``T5ForConditionalGeneration`` and ``AutoTokenizer`` ``from_pretrained``
    load: the weights, config.json, generation_config.json, spiece.model, and the tokenizer (with
    the model's sentinels at their ids) as transformers writes it."""
    import shutil

    from safetensors.torch import save_file

    from ..checkpoint import load_model_from, tokenizer_paths
    from ..choice import resolve
    from ..data.tokenizer import Tokenizer, spm_model_type
    from ..files import output_dir

    folder = resolve(model_path)
    model, info = load_model_from(folder)
    config = model.config
    check_exportable(config)
    paths = tokenizer_paths(folder, info)
    if paths["src"] != paths["tgt"] or "vocab" in paths:
        raise TransduceError(f"{folder}: T5 has one SentencePiece model for both sides, whose ids "
                             "are the model's; this model has another tokenizer")
    tokenizer = Tokenizer.from_roles(paths, unk_id=config.unk_id)
    kind = spm_model_type(tokenizer.src)
    if kind != "unigram":
        raise TransduceError(f"{folder}: its SentencePiece model is {kind}; T5's tokenizer in "
                             "transformers reads a unigram model only (prepare the data with "
                             "--model-type unigram to export a T5 model)")
    hf_tokenizer = _hf_tokenizer(tokenizer, config)  # (before writing: it may refuse)
    with output_dir(out, "hf export", [folder], what="the export folder") as tmp:
        state = transduce_to_t5(model.state_dict(), config)
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(hf_config(config), indent=2) + "\n")
        # the tokens transduce's search never writes (pad, and bos or the start where they are
        # not eos): banned in generate too, so that it searches the same space
        banned = sorted({config.pad_id, config.bos_id, config.start_id} - {config.eos_id})
        generation = {"decoder_start_token_id": config.start_id, "eos_token_id": config.eos_id,
                      "pad_token_id": config.pad_id, "bad_words_ids": [[i] for i in banned]}
        (tmp / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
        hf_tokenizer.save_pretrained(str(tmp))
        shutil.copyfile(paths["src"], tmp / "spiece.model")
    return Path(out)


def _hf_tokenizer(tokenizer, config: ModelConfig):
    """transformers' ``T5Tokenizer`` over the SentencePiece model's pieces and scores, with the
    sentinels added at their ids."""
    try:
        from transformers import T5Tokenizer
    except ImportError:
        raise TransduceError("exporting to Hugging Face needs the optional package: "
                             "pip install 'transduce[hf]'") from None
    sp = tokenizer.src
    size = sp.get_piece_size()
    vocab = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(size)]
    try:
        hf = T5Tokenizer(vocab=vocab, extra_ids=0, eos_token=sp.id_to_piece(config.eos_id),
                         unk_token=sp.id_to_piece(config.unk_id),
                         pad_token=sp.id_to_piece(config.pad_id))
    except TypeError:  # transformers 4: the SentencePiece-backed tokenizer reads spiece.model
        raise TransduceError("exporting T5's tokenizer needs transformers 5 or later") from None
    added = sorted(tokenizer.added.items(), key=lambda item: item[1])
    hf.add_special_tokens({"additional_special_tokens": [piece for piece, _ in added]})
    moved = [(p, i) for p, i in added if hf.convert_tokens_to_ids(p) != i]
    if moved:
        raise TransduceError(f"the added pieces do not follow the SentencePiece model's {size} "
                             f"pieces without a gap (first: {moved[0][0]} at {moved[0][1]})")
    return hf
