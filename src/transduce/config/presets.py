"""The named presets of ``ModelConfig``: each a set of overrides on the paper's defaults (which are
the ``base`` row of Table 3), the descendants' (GPT, BERT, T5) included."""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    "base": {},
    "big": {"d_model": 1024, "d_ff": 4096, "n_heads": 16, "dropout": 0.3},
    "small": {"encoder_layers": 3, "decoder_layers": 3, "d_model": 256, "n_heads": 4, "d_ff": 1024},
    "tiny": {"encoder_layers": 2, "decoder_layers": 2, "d_model": 64, "n_heads": 4, "d_ff": 256,
             "max_positions": 256},
}

# A deep encoder and a shallow decoder (Kasai et al. 2021, "Deep Encoder, Shallow Decoder"): about
# the parameters of the preset they are named after, spent where a step costs nothing, since at
# batch 1 each decoding step reads every decoder layer's weights and the encoder runs once.
PRESETS.update(
    {
        "small-deep": {**PRESETS["small"], "encoder_layers": 6, "decoder_layers": 1},
        "base-deep": {"encoder_layers": 12, "decoder_layers": 1},
    }
)

# The descendants: GPT keeps the decoder without cross-attention; GPT-2's choices are
# pre-LN, learned positions, tanh-GELU, unscaled embeddings, the output tied to the embedding.
_GPT = {
    "architecture": "decoder-only",
    "encoder_layers": 0,
    "norm_position": "pre",
    "positional": "learned",
    "activation": "gelu_tanh",
    "scale_embedding": False,
    "tying": "decoder",
}
# BERT keeps the encoder and fills in masked tokens: post-LN (as the paper), learned positions,
# GELU.
_BERT = {
    "architecture": "encoder-only",
    "decoder_layers": 0,
    "positional": "learned",
    "activation": "gelu",
    "scale_embedding": False,
    "tying": "all",
    "output_bias": True,
    "embed_norm": True,
    "output_transform": True,
    "mask_id": 4,
}
PRESETS.update(
    {
        "gpt-tiny": {
            **_GPT,
            "decoder_layers": 2,
            "d_model": 64,
            "n_heads": 4,
            "d_ff": 256,
            "max_positions": 256,
        },
        "gpt-small": {
            **_GPT,
            "decoder_layers": 6,
            "d_model": 384,
            "n_heads": 6,
            "d_ff": 1536,
            "max_positions": 512,
        },
        "gpt2": {
            **_GPT,
            "decoder_layers": 12,
            "d_model": 768,
            "n_heads": 12,
            "d_ff": 3072,
            "max_positions": 1024,
            "vocab_size": 50257,
            "pad_id": 50256,
            "bos_id": 50256,
            "eos_id": 50256,
            "unk_id": 50256,
        },
        "bert-tiny": {
            **_BERT,
            "encoder_layers": 2,
            "d_model": 128,
            "n_heads": 2,
            "d_ff": 512,
            "max_positions": 512,
        },
        "bert-small": {
            **_BERT,
            "encoder_layers": 4,
            "d_model": 512,
            "n_heads": 8,
            "d_ff": 2048,
            "max_positions": 512,
        },
        "bert-base": {
            **_BERT,
            "encoder_layers": 12,
            "d_model": 768,
            "n_heads": 12,
            "d_ff": 3072,
            "max_positions": 512,
            "vocab_size": 30522,
            "norm_eps": 1e-12,
        },
    }
)

# T5 (Raffel et al. 2020) keeps both stacks and changes the details: relative position buckets
# instead of absolute positions, RMS norms before each sub-layer, no biases, no 1/sqrt(d_k) (folded
# into the initialization instead), unscaled embeddings shared three ways with the output rescaled
# by d_model^-0.5, dropout everywhere. This is T5 1.0; T5 1.1 and flan-t5 differ in
# activation="geglu", tying="embeddings" and scale_output=False.
_T5 = {
    "norm_position": "pre",
    "norm_type": "rmsnorm",
    "norm_eps": 1e-6,
    "positional": "relative",
    "attention_scale": "none",
    "linear_bias": False,
    "scale_embedding": False,
    "tying": "all",
    "scale_output": True,
    "init": "t5",
    "attention_dropout": 0.1,
    "activation_dropout": 0.1,
}
PRESETS.update(
    {
        "t5-tiny": {
            **_T5,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "d_model": 64,
            "n_heads": 4,
            "d_ff": 256,
            "max_positions": 512,
        },
        "t5-small": {
            **_T5,
            "encoder_layers": 6,
            "decoder_layers": 6,
            "d_model": 512,
            "n_heads": 8,
            "head_dim": 64,
            "d_ff": 2048,
            "vocab_size": 32128,
            "max_positions": 512,
        },
    }
)

# The Vision Transformer (Dosovitskiy et al. 2021) keeps the encoder and reads an image: its
# patches through a linear map, a learned [CLS] vector first and learned positions; pre-LN and GELU
# as ViT-B/16, a classifier on [CLS]'s final vector. (classes: ImageNet's 1,000.)
_VIT = {
    "architecture": "encoder-only",
    "decoder_layers": 0,
    "input": "image",
    "norm_position": "pre",
    "norm_eps": 1e-12,
    "positional": "learned",
    "activation": "gelu",
    "tying": "none",
    "output_bias": True,
    "pooling": "cls",
    "dropout": 0.0,
    "image_size": 224,
    "patch_size": 16,
    "channels": 3,
    "classes": 1000,
    "max_positions": 197,
}
PRESETS.update(
    {
        # small enough to train on MNIST's 28x28 digits on a CPU: 4x4 patches of 7x7 pixels (4x4
        # patches of 4x4 pixels learned more slowly per minute on the CPUs we measured:
        # docs/vit.md)
        "vit-tiny": {
            **_VIT,
            "encoder_layers": 6,
            "d_model": 128,
            "n_heads": 4,
            "d_ff": 256,
            "image_size": 28,
            "patch_size": 7,
            "channels": 1,
            "image_mean": (0.5,),
            "image_std": (0.5,),
            "classes": 10,
            "max_positions": 17,
        },
        "vit-ti16": {**_VIT, "encoder_layers": 12, "d_model": 192, "n_heads": 3, "d_ff": 768},
        "vit-b16": {**_VIT, "encoder_layers": 12, "d_model": 768, "n_heads": 12, "d_ff": 3072},
    }
)

# Speech (the Speech Transformer, Dong et al. 2018; Whisper, Radford et al. 2022): the same
# encoder-decoder reading log-mel frames through two convolutions (model.inputs.AudioFeatures),
# writing the transcript's characters or pieces; pre-LN and GELU as Whisper.
_SPEECH = {
    "input": "audio",
    "norm_position": "pre",
    "norm_eps": 1e-5,
    "activation": "gelu",
    "tying": "decoder",
    "scale_embedding": False,
    "channels": 80,
}
PRESETS.update(
    {
        # small enough to learn AN4's 948 recordings in an hour of a laptop's CPU (recipes/an4):
        # one encoder position per 40 ms, sinusoidal positions added to inputs scaled by
        # sqrt(d_model) (the paper's §3.4; unscaled, the sinusoids drowned the frames and the
        # characters, and an hour's training learned little of the sound: docs/speech.md), CTC
        # beside the decoder
        "speech-small": {
            **_SPEECH,
            "scale_embedding": True,
            "encoder_layers": 6,
            "decoder_layers": 3,
            "d_model": 256,
            "n_heads": 4,
            "d_ff": 1024,
            "subsample": 4,
            "positional": "sinusoidal",
            "max_positions": 512,
            "source_positions": 1500,
            "ctc_weight": 0.3,
        },
        # Whisper-tiny's shape (39M parameters with its 51,865 pieces): 30 s = 1,500 positions of
        # 20 ms, 448 decoder positions, learned positions (the encoder's hold Whisper's sinusoids)
        "whisper-tiny": {
            **_SPEECH,
            "encoder_layers": 4,
            "decoder_layers": 4,
            "d_model": 384,
            "n_heads": 6,
            "d_ff": 1536,
            "subsample": 2,
            "positional": "learned",
            "vocab_size": 51865,
            "max_positions": 448,
            "source_positions": 1500,
            "dropout": 0.0,
        },
    }
)
