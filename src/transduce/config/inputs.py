"""The front ends' side of ``ModelConfig`` (``model/inputs.py`` builds them): whether a model reads
tokens, the checks of the fields of inputs other than tokens and of classifiers, and the numbers a
front end holds."""

from __future__ import annotations


def check_inputs(c) -> None:
    """``ModelConfig`` c: the fields of an input other than tokens, and of a classifier."""
    for name in ("image_mean", "image_std"):  # (JSON gives lists, --set a string "0.5,0.5")
        value = getattr(c, name)
        try:
            numbers = tuple(float(v) for v in (value.split(",") if isinstance(value, str)
                                               else value))
        except (TypeError, ValueError):
            raise ValueError(f"{name} = {value!r}: expected one number per channel") from None
        object.__setattr__(c, name, numbers)
    if c.classes < 0:
        raise ValueError(f"classes must be 0 (no classifier) or more, got {c.classes}")
    if c.classes and c.architecture != "encoder-only":
        raise ValueError(f"classes={c.classes}: a classifier is an encoder-only model, got "
                         f"architecture={c.architecture!r}")
    if c.classes and c.tying != "none":
        raise ValueError(f"classes={c.classes}: the classifier's output has its own weights; set "
                         "tying='none'")
    if c.ctc_weight and c.input != "audio" or not 0 <= c.ctc_weight < 1:
        raise ValueError(f"ctc_weight={c.ctc_weight}: a CTC head is for input='audio', with "
                         "0 <= ctc_weight < 1")
    if c.tag_weight and (c.input != "tokens" or c.architecture != "encoder-decoder") \
            or not 0 <= c.tag_weight < 1:
        raise ValueError(f"tag_weight={c.tag_weight}: a tagging head is for a parser (an "
                         "encoder-decoder of tokens), with 0 <= tag_weight < 1")
    if c.input == "tokens":
        return
    if c.input == "audio":  # speech recognition: frames in, the transcript's tokens out
        if c.architecture != "encoder-decoder" or c.classes:
            raise ValueError("input='audio' is for an encoder-decoder that writes what it hears: "
                             f"architecture='encoder-decoder' and classes=0 (got "
                             f"{c.architecture!r}, {c.classes})")
        if c.tying in ("embeddings", "all"):
            raise ValueError(f"tying={c.tying!r}: input='audio' has no source tokens to share "
                             "a table with; set tying='decoder' or 'none'")
        if c.channels < 1 or c.subsample not in (2, 4) or c.source_positions < 0:
            raise ValueError(f"input='audio' needs channels >= 1 (mel bins a frame), subsample 2 "
                             f"or 4 and source_positions >= 0; got {c.channels}, {c.subsample}, "
                             f"{c.source_positions}")
        if c.conv_channels < 0 or c.audio_conv == "2d" and c.subsample != 4:
            raise ValueError(f"audio_conv='2d' subsamples 4 times (strides 2 and 2 over time) "
                             f"and conv_channels >= 0; got subsample={c.subsample}, "
                             f"conv_channels={c.conv_channels}")
        return
    if c.input == "image" and not c.classes:
        raise ValueError("input='image' is for a classifier (the Vision Transformer): set classes")
    if c.patch_size < 1 or c.image_size < c.patch_size or c.image_size % c.patch_size:
        raise ValueError(f"image_size={c.image_size} must be a multiple of "
                         f"patch_size={c.patch_size}: set patch_size to a divisor of it, or "
                         "prepare the images with --image-size N to resize them")
    if c.channels < 1 or not len(c.image_mean) == len(c.image_std) == c.channels:
        raise ValueError(f"image_mean and image_std need one number per channel ({c.channels}), "
                         f"got {len(c.image_mean)} and {len(c.image_std)}")
    if min(c.image_std) <= 0:
        raise ValueError(f"image_std must be positive, got {c.image_std}")


def reads_tokens(c) -> bool:
    """Whether the model of ``ModelConfig`` c reads token ids (not an image or a recording)."""
    return c.input == "tokens"


def front_end_size(c, embeddings: int, positions: int, output: int) -> tuple[int, int, int]:
    """The numbers of the embeddings, position tables and output a model of ``ModelConfig`` c
    holds, given those of a model of tokens (``ModelConfig.size_estimate``)."""
    D = c.d_model
    output += (c.target_vocab_size * D + c.target_vocab_size) if c.tag_weight else 0
    if c.input == "image":  # the patches' projection, [CLS] and positions; no tokens
        return (c.channels * c.patch_size**2 + 1) * D, (c.num_patches + 1) * D, output
    if c.input == "audio":  # two convolutions, the encoder's positions; the target's tokens
        C = c.conv_channels or D
        embeddings = c.target_vocab_size * D + (
            3 * D * (c.channels + D) if c.audio_conv == "1d"
            else 9 * C * (1 + C) + c.conv_features * D)
        learned = c.positional == "learned"
        positions = (c.audio_positions * learned + c.max_positions) * D
        output += (c.target_vocab_size * D) if c.ctc_weight else 0
    return embeddings, positions, output
