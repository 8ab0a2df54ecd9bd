"""Hugging Face BERT (``BertForMaskedLM``) -> a transduce encoder-only model.

BERT is the paper's encoder with options transduce has: post-LN layers, learned positions, GELU,
a LayerNorm on the embeddings (``embed_norm``) and the masked-LM head's dense layer, activation and
LayerNorm before the tied output projection and its bias (``output_transform``, ``output_bias``).
Its token-type (segment) embeddings have no counterpart: a model reading single segments adds
type 0's vector to every position, so it is folded into the position table. The query, key and
value projections are concatenated into transduce's fused QKV.

BERT's WordPiece tokenizer is not SentencePiece, so an imported model works on token ids
(``Transformer``, called as ``model(tokens)``) rather than through ``transduce fill-mask``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..config import ModelConfig
from ..errors import TransduceError

ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}


def config_from_bert(hf: dict, source: str) -> ModelConfig:
    """A ModelConfig for a BERT ``config.json``, or an error naming the unsupported field."""
    act = hf.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise TransduceError(f"{source}: hidden_act={act!r} is not supported (supported: {', '.join(ACTIVATIONS)})")
    position = hf.get("position_embedding_type", "absolute")
    if position != "absolute":
        raise TransduceError(f"{source}: position_embedding_type={position!r} is not supported (absolute only)")
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise TransduceError(f"{source}: is_decoder/add_cross_attention are not supported (an encoder-only model)")
    specials = {"pad_id": hf.get("pad_token_id", 0), "unk_id": 100, "bos_id": 101, "eos_id": 102, "mask_id": 103}
    return ModelConfig(
        architecture="encoder-only", encoder_layers=hf["num_hidden_layers"], decoder_layers=0,
        d_model=hf["hidden_size"], n_heads=hf["num_attention_heads"], d_ff=hf["intermediate_size"],
        dropout=hf.get("hidden_dropout_prob", 0.1), attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
        activation=ACTIVATIONS[act], norm_position="post", norm_eps=hf.get("layer_norm_eps", 1e-12),
        positional="learned", scale_embedding=False, tying="all", output_bias=True, embed_norm=True,
        output_transform=True, vocab_size=hf["vocab_size"], max_positions=hf.get("max_position_embeddings", 512),
        **specials)


def bert_to_transduce(state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Rename (and fuse) BERT's weights into transduce's names."""
    get = state.__getitem__
    e = "bert.embeddings"
    segment = get(f"{e}.token_type_embeddings.weight")[0]  # every token is in segment 0
    out = {"src_embed.tokens.weight": get(f"{e}.word_embeddings.weight"),
           "src_embed.learned.weight": get(f"{e}.position_embeddings.weight") + segment,
           "output_bias": get("cls.predictions.bias")}
    pairs = {f"{e}.LayerNorm": "src_embed.norm", "cls.predictions.transform.dense": "output_transform.dense",
             "cls.predictions.transform.LayerNorm": "output_transform.norm"}
    for i in range(config.encoder_layers):
        hf, us = f"bert.encoder.layer.{i}", f"encoder.{i}"
        for kind in ("weight", "bias"):
            out[f"{us}.self_attn.qkv.{kind}"] = torch.cat([get(f"{hf}.attention.self.{p}.{kind}")
                                                           for p in ("query", "key", "value")])
        pairs.update({f"{hf}.attention.output.dense": f"{us}.self_attn.out",
                      f"{hf}.attention.output.LayerNorm": f"{us}.self_attn_block.norm",
                      f"{hf}.intermediate.dense": f"{us}.ffn.w1", f"{hf}.output.dense": f"{us}.ffn.w2",
                      f"{hf}.output.LayerNorm": f"{us}.ffn_block.norm"})
    for theirs, ours in pairs.items():
        for kind in ("weight", "bias"):
            out[f"{ours}.{kind}"] = get(f"{theirs}.{kind}")
    return out


def import_bert(folder: Path, hf: dict, out: Path) -> Path:
    """Write a BertForMaskedLM folder's model as a new run directory ``out``; returns its checkpoint folder."""
    from .huggingface import _read_hf_weights, write_imported

    config_path = folder / "config.json"
    try:
        config = config_from_bert(hf, str(config_path))
    except KeyError as error:
        raise TransduceError(f"{config_path}: the key {error.args[0]!r} is missing") from None
    try:
        weights = bert_to_transduce(_read_hf_weights(folder), config)
    except KeyError as error:
        raise TransduceError(f"{folder}: the weight {error.args[0]!r} is missing; is it a BertForMaskedLM folder, and "
                             "config.json the one of these weights?") from None
    return write_imported(folder, config, weights, out, tied=("output.weight",))
