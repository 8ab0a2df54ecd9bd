"""Hugging Face GPT-2 (``GPT2LMHeadModel``) -> a transduce decoder-only model.

GPT-2 is the paper's decoder without encoder-decoder attention, with options transduce already
has: pre-LN with a final LayerNorm (``norm_position="pre"``), learned positions, the tanh
approximation of GELU (``gelu_tanh``; HF's "gelu_new"), unscaled embeddings, and the output tied
to the token embedding. Its ``Conv1D`` layers store weights as (in, out): they are transposed
into ``nn.Linear``'s (out, in), and its fused ``c_attn`` is already transduce's [q | k | v] order.

GPT-2's byte-level BPE tokenizer is not SentencePiece, so an imported model works on token ids
(``Transformer`` and the search functions) rather than through ``transduce generate``.
``interop.huggingface`` imports it with these tables.
"""

from __future__ import annotations


import torch

from ..config import ModelConfig
from ..errors import TransduceError

ACTIVATIONS = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu": "gelu",
    "relu": "relu",
}


def config_from_gpt2(hf: dict, source: str) -> ModelConfig:
    """A ModelConfig for a GPT-2 ``config.json``, or an error naming the unsupported field."""
    act = hf.get("activation_function", "gelu_new")
    if act not in ACTIVATIONS:
        raise TransduceError(f"{source}: activation_function={act!r} is not supported (supported: "
                             f"{', '.join(ACTIVATIONS)})")
    for flag, supported in (
        ("scale_attn_weights", True),
        ("scale_attn_by_inverse_layer_idx", False),
        ("add_cross_attention", False),
        ("tie_word_embeddings", True),
    ):
        if hf.get(flag, supported) != supported:
            raise TransduceError(f"{source}: {flag}={hf.get(flag)!r} is not supported by transduce")
    eos = hf.get("eos_token_id", 50256)
    return ModelConfig(
        architecture="decoder-only",
        encoder_layers=0,
        decoder_layers=hf["n_layer"],
        d_model=hf["n_embd"],
        n_heads=hf["n_head"],
        d_ff=hf.get("n_inner") or 4 * hf["n_embd"],
        dropout=hf.get("resid_pdrop", 0.1),
        attention_dropout=hf.get("attn_pdrop", 0.1),
        activation=ACTIVATIONS[act],
        norm_position="pre",
        norm_eps=hf.get("layer_norm_epsilon", 1e-5),
        positional="learned",
        scale_embedding=False,
        tying="decoder",
        vocab_size=hf["vocab_size"],
        max_positions=hf.get("n_positions", 1024),
        pad_id=eos,
        bos_id=hf.get("bos_token_id", eos),
        eos_id=eos,
        unk_id=eos,
    )


# GPT-2's names -> ours: the whole model's, and each block's (``h.{i}.``; a ``Conv1D`` stores its
# weight as (in, out), transposed on the way in)
TOP = {"wte.weight": "tgt_embed.tokens.weight", "wpe.weight": "tgt_embed.learned.weight",
       "ln_f.weight": "decoder_norm.weight", "ln_f.bias": "decoder_norm.bias"}
LAYER = {"attn.c_attn": "self_attn.qkv", "attn.c_proj": "self_attn.out", "mlp.c_fc": "ffn.w1",
         "mlp.c_proj": "ffn.w2", "ln_1": "self_attn_block.norm", "ln_2": "ffn_block.norm"}
CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")


def gpt2_to_transduce(
    state: dict[str, torch.Tensor], config: ModelConfig
) -> dict[str, torch.Tensor]:
    """Rename (and transpose) GPT-2's weights into transduce's names (``TOP``, ``LAYER``)."""
    # (the model's names with or without GPT2LMHeadModel's prefix; read by name only, since an
    # import refuses what was not read)
    prefix = "transformer." if "transformer.wte.weight" in state else ""
    out = {ours: state[prefix + theirs] for theirs, ours in TOP.items()}
    out["output.weight"] = state.get("lm_head.weight", out["tgt_embed.tokens.weight"])
    for i in range(config.decoder_layers):
        for theirs, ours in LAYER.items():
            for kind in ("weight", "bias"):
                t = state[f"{prefix}h.{i}.{theirs}.{kind}"]
                out[f"decoder.{i}.{ours}.{kind}"] = (
                    t.t().contiguous() if kind == "weight" and theirs in CONV1D else t
                )
    return out
