"""Hugging Face BERT (``BertForMaskedLM``) -> a transduce encoder-only model.

BERT is the paper's encoder with options transduce has: post-LN layers, learned positions, GELU,
a LayerNorm on the embeddings (``embed_norm``) and the masked-LM head's dense layer, activation and
LayerNorm before the tied output projection and its bias (``output_transform``, ``output_bias``).
Its token-type (segment) embeddings have no counterpart: a model reading single segments adds
type 0's vector to every position, so it is folded into the position table. The query, key and
value projections are concatenated into transduce's fused QKV.

BERT's WordPiece tokenizer is not SentencePiece, so an imported model works on token ids
(``Transformer``, called as ``model(tokens)``) rather than through ``transduce fill-mask``.
``interop.huggingface`` imports it with these tables.
"""

from __future__ import annotations


import torch

from ..config import ModelConfig
from ..errors import TransduceError

ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
}


def config_from_bert(hf: dict, source: str) -> ModelConfig:
    """A ModelConfig for a BERT ``config.json``, or an error naming the unsupported field."""
    act = hf.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise TransduceError(f"{source}: hidden_act={act!r} is not supported (supported: "
                             f"{', '.join(ACTIVATIONS)})")
    position = hf.get("position_embedding_type", "absolute")
    if position != "absolute":
        raise TransduceError(f"{source}: position_embedding_type={position!r} is not supported "
                             "(absolute only)")
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise TransduceError(f"{source}: is_decoder/add_cross_attention are not supported (an "
                             "encoder-only model)")
    specials = {
        "pad_id": hf.get("pad_token_id", 0),
        "unk_id": 100,
        "bos_id": 101,
        "eos_id": 102,
        "mask_id": 103,
    }
    return ModelConfig(
        architecture="encoder-only",
        encoder_layers=hf["num_hidden_layers"],
        decoder_layers=0,
        d_model=hf["hidden_size"],
        n_heads=hf["num_attention_heads"],
        d_ff=hf["intermediate_size"],
        dropout=hf.get("hidden_dropout_prob", 0.1),
        attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
        activation=ACTIVATIONS[act],
        norm_position="post",
        norm_eps=hf.get("layer_norm_eps", 1e-12),
        positional="learned",
        scale_embedding=False,
        tying="all",
        output_bias=True,
        embed_norm=True,
        output_transform=True,
        vocab_size=hf["vocab_size"],
        max_positions=hf.get("max_position_embeddings", 512),
        **specials,
    )


# BERT's names -> ours: the whole model's, and each layer's (``bert.encoder.layer.{i}.``); the
# query,
# key and value projections are fused into one, and segment 0's vector joins the position table
TOP = {
    "bert.embeddings.word_embeddings": "src_embed.tokens",
    "bert.embeddings.LayerNorm": "src_embed.norm",
    "cls.predictions.transform.dense": "output_transform.dense",
    "cls.predictions.transform.LayerNorm": "output_transform.norm",
}
LAYER = {
    "attention.output.dense": "self_attn.out",
    "attention.output.LayerNorm": "self_attn_block.norm",
    "intermediate.dense": "ffn.w1",
    "output.dense": "ffn.w2",
    "output.LayerNorm": "ffn_block.norm",
}
FUSED = {"self_attn.qkv": ("attention.self.query", "attention.self.key", "attention.self.value")}


def bert_to_transduce(
    state: dict[str, torch.Tensor], config: ModelConfig
) -> dict[str, torch.Tensor]:
    """Rename (and fuse) BERT's weights into transduce's names (``TOP``, ``LAYER``, ``FUSED``)."""
    get = state.__getitem__
    segment = get("bert.embeddings.token_type_embeddings.weight")[0]  # every token is in segment 0
    out = {"src_embed.learned.weight": get("bert.embeddings.position_embeddings.weight") + segment,
           "output_bias": get("cls.predictions.bias")}
    for theirs, ours in TOP.items():
        out[f"{ours}.weight"] = get(f"{theirs}.weight")
        if ours != "src_embed.tokens":
            out[f"{ours}.bias"] = get(f"{theirs}.bias")
    for i in range(config.encoder_layers):
        theirs, ours = f"bert.encoder.layer.{i}", f"encoder.{i}"
        for kind in ("weight", "bias"):
            for name, parts in FUSED.items():
                out[f"{ours}.{name}.{kind}"] = torch.cat(
                    [get(f"{theirs}.{part}.{kind}") for part in parts]
                )
            for their, our in LAYER.items():
                out[f"{ours}.{our}.{kind}"] = get(f"{theirs}.{their}.{kind}")
    return out
