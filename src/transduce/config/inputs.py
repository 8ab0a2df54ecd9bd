"""The checks of ``ModelConfig``'s fields for inputs other than tokens, and for classifiers."""

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
    if c.input == "tokens":
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
