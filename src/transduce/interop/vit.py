"""Hugging Face ViT (``ViTForImageClassification``) <-> a transduce image classifier.

ViT is the paper's encoder with options transduce has: pre-LN layers, GELU, biases, a final
LayerNorm, and an image front end (``model.inputs.PatchEmbeddings``: the patches' projection, [CLS]
and learned positions) with a classifier on [CLS]. The query, key and value projections are
concatenated into transduce's fused QKV. The image processor's normalization (mean and standard
deviation per channel, pixels rescaled by 1/255) is part of transduce's model, read from
``preprocessor_config.json`` on import and written back on export; the processor's resize is
the caller's (transduce reads images at the model's size, or ``--resize``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import torch

from ..config import ModelConfig
from ..errors import TransduceError

ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "relu": "relu"}
TOP = {"vit.embeddings.patch_embeddings.projection": "src_embed.project",
       "vit.layernorm": "encoder_norm"}
LAYER = {
    "attention.output.dense": "self_attn.out",
    "layernorm_before": "self_attn_block.norm",
    "layernorm_after": "ffn_block.norm",
    "intermediate.dense": "ffn.w1",
    "output.dense": "ffn.w2",
}
QKV = ("attention.attention.query", "attention.attention.key", "attention.attention.value")


def config_from_vit(hf: dict, source: str, processor: Optional[dict]) -> ModelConfig:
    """A ModelConfig for a ViT ``config.json`` (and its ``preprocessor_config.json``, if any), or
    an error naming the field transduce does not compute."""
    act = hf.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise TransduceError(f"{source}: hidden_act={act!r} is not supported (supported: "
                             f"{', '.join(ACTIVATIONS)})")
    if not hf.get("qkv_bias", True):
        raise TransduceError(f"{source}: qkv_bias=false is not supported (transduce's ViT has "
                             "biases in every projection)")
    size, patch = hf.get("image_size", 224), hf.get("patch_size", 16)
    for name, value in (("image_size", size), ("patch_size", patch)):
        if not isinstance(value, int):
            raise TransduceError(f"{source}: {name}={value!r} is not supported (square images "
                                 "and patches: one integer)")
    channels = hf.get("num_channels", 3)
    mean, std = [0.5] * channels, [0.5] * channels
    if processor is not None:
        if not processor.get("do_rescale", True) or processor.get("rescale_factor",
                                                                     1 / 255) != 1 / 255:
            raise TransduceError(f"{source}: the image processor must rescale pixels by 1/255 "
                                 "(do_rescale, rescale_factor)")
        if processor.get("do_normalize", True):
            mean = processor.get("image_mean", mean)
            std = processor.get("image_std", std)
        else:
            mean, std = [0.0] * channels, [1.0] * channels
    return ModelConfig.preset(
        "vit-b16",
        encoder_layers=hf["num_hidden_layers"],
        d_model=hf["hidden_size"],
        n_heads=hf["num_attention_heads"],
        d_ff=hf["intermediate_size"],
        dropout=hf.get("hidden_dropout_prob", 0.0),
        attention_dropout=hf.get("attention_probs_dropout_prob", 0.0),
        activation=ACTIVATIONS[act],
        norm_eps=hf.get("layer_norm_eps", 1e-12),
        image_size=size,
        patch_size=patch,
        channels=channels,
        image_mean=tuple(mean),
        image_std=tuple(std),
        classes=label_count(hf),
        max_positions=(size // patch) ** 2 + 1,
    )


def label_count(hf: dict) -> int:
    """``num_labels``, else as many as ``id2label`` names, else 2 (as transformers counts)."""
    names = hf.get("id2label") or {}
    if not isinstance(names, dict):
        raise TransduceError(f"id2label = {str(names)[:40]!r} should be an object (id -> name)")
    return hf.get("num_labels", len(names) or 2)


def labels(hf: dict) -> list[str]:
    """The class names in label order (``id2label``; ``LABEL_i`` as transformers names them)."""
    names = hf.get("id2label") or {}
    return [str(names.get(str(i), names.get(i, f"LABEL_{i}"))) for i in range(label_count(hf))]


def vit_to_transduce(state: dict[str, torch.Tensor], config: ModelConfig
                     ) -> dict[str, torch.Tensor]:
    """ViT's weights under transduce's names (``TOP``, ``LAYER``; ``QKV`` fused)."""
    get = state.__getitem__
    out = {"src_embed.cls": get("vit.embeddings.cls_token"),
           "src_embed.positions": get("vit.embeddings.position_embeddings"),
           "output.weight": get("classifier.weight"), "output_bias": get("classifier.bias")}
    for theirs, ours in TOP.items():
        for kind in ("weight", "bias"):
            out[f"{ours}.{kind}"] = get(f"{theirs}.{kind}")
    for i in range(config.encoder_layers):
        theirs, ours = f"vit.encoder.layer.{i}", f"encoder.{i}"
        for kind in ("weight", "bias"):
            out[f"{ours}.self_attn.qkv.{kind}"] = torch.cat([get(f"{theirs}.{p}.{kind}")
                                                             for p in QKV])
            for their, our in LAYER.items():
                out[f"{ours}.{our}.{kind}"] = get(f"{theirs}.{their}.{kind}")
    return out


def transduce_to_vit(state: dict[str, torch.Tensor], config: ModelConfig
                     ) -> dict[str, torch.Tensor]:
    """The inverse of ``vit_to_transduce``: ViTForImageClassification's state dict."""
    out = {"vit.embeddings.cls_token": state["src_embed.cls"],
           "vit.embeddings.position_embeddings": state["src_embed.positions"],
           "classifier.weight": state["output.weight"], "classifier.bias": state["output_bias"]}
    for theirs, ours in TOP.items():
        for kind in ("weight", "bias"):
            out[f"{theirs}.{kind}"] = state[f"{ours}.{kind}"]
    for i in range(config.encoder_layers):
        theirs, ours = f"vit.encoder.layer.{i}", f"encoder.{i}"
        for kind in ("weight", "bias"):
            for part, tensor in zip(QKV, state[f"{ours}.self_attn.qkv.{kind}"].chunk(3)):
                out[f"{theirs}.{part}.{kind}"] = tensor
            for their, our in LAYER.items():
                out[f"{theirs}.{their}.{kind}"] = state[f"{ours}.{our}.{kind}"]
    return {k: v.contiguous() for k, v in out.items()}


def check_exportable(config: ModelConfig) -> None:
    """ViT's shape, or an error naming the first option it cannot express."""
    expected = {"architecture": "encoder-only", "norm_position": "pre", "norm_type": "layernorm",
                "positional": "learned", "pooling": "cls", "linear_bias": True,
                "attention_scale": "sqrt_dk", "ffn": "dense", "output_bias": True,
                "n_kv_heads": None, "head_dim": None, "attention_window": 0}
    for name, value in expected.items():
        if getattr(config, name) != value and not (name == "n_kv_heads"
                                                  and config.kv_heads == config.n_heads):
            raise TransduceError(f"{name}={getattr(config, name)!r}: Hugging Face's ViT has "
                                 f"{name}={value!r}; this model cannot be exported to it")
    if config.activation not in ACTIVATIONS.values():
        raise TransduceError(f"activation={config.activation!r}: Hugging Face's ViT computes "
                             f"{', '.join(sorted(set(ACTIVATIONS.values())))}")


def hf_config(config: ModelConfig, classes: list[str]) -> dict:
    act = {v: k for k, v in ACTIVATIONS.items() if k != "gelu_new"}[config.activation]
    return {
        "architectures": ["ViTForImageClassification"], "model_type": "vit",
        "hidden_size": config.d_model, "num_hidden_layers": config.encoder_layers,
        "num_attention_heads": config.n_heads, "intermediate_size": config.d_ff,
        "hidden_act": act, "hidden_dropout_prob": config.dropout,
        "attention_probs_dropout_prob": config.attention_dropout,
        "layer_norm_eps": config.norm_eps, "image_size": config.image_size,
        "patch_size": config.patch_size, "num_channels": config.channels, "qkv_bias": True,
        "id2label": {str(i): name for i, name in enumerate(classes)},
        "label2id": {name: i for i, name in enumerate(classes)},
        "initializer_range": 0.02, "torch_dtype": "float32",
    }


def processor_config(config: ModelConfig) -> dict:
    """``ViTImageProcessor``'s settings: resize to the model's size, rescale, normalize."""
    return {"image_processor_type": "ViTImageProcessor", "do_resize": True,
            "size": {"height": config.image_size, "width": config.image_size}, "resample": 2,
            "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
            "image_mean": list(config.image_mean), "image_std": list(config.image_std)}


def export_vit(model_path: str | Path, out: str | Path) -> Path:
    """A folder that ``ViTForImageClassification`` and ``ViTImageProcessor`` load."""
    from safetensors.torch import save_file

    from ..checkpoint import load_model_from
    from ..choice import resolve
    from ..files import output_dir

    folder = resolve(model_path)
    model, info = load_model_from(folder)
    config = model.config
    check_exportable(config)
    classes = info.get("classes") or [f"LABEL_{i}" for i in range(config.classes)]
    with output_dir(out, "hf export", [folder], what="the export folder") as tmp:
        state = transduce_to_vit(model.state_dict(), config)
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(hf_config(config, classes), indent=2) + "\n")
        (tmp / "preprocessor_config.json").write_text(
            json.dumps(processor_config(config), indent=2) + "\n")
    return Path(out)
