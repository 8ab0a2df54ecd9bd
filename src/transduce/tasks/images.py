"""Image classification: a Vision Transformer (an encoder over an image's patches and a class
token), trained on class folders of images (``prepare --images``); chosen by validation
accuracy."""

from __future__ import annotations

from .base import Metric, Task

TASK = Task(
    name="image-classification",
    what="an image classifier",
    model=lambda config, info: config.input == "image" or config.classes > 0,
    data=lambda meta: meta.get("kind") == "images",
    data_kind="images",
    metric=Metric("accuracy", "accuracy", percent=True),
    validation="images",
    shown=(("accuracy", "accuracy", True),),
    counted=("images", "images"),
    facade="Classifier",
    verb="classify",
    family=lambda config, info: "ViT",
    commands=("classify", "evaluate", "attention", "average", "export", "info"),
    flags=(),  # a classifier searches nothing
    preset="vit-tiny",
    holds="images",
    prepare="transduce prepare --images DIR --out DATA",
    next=("transduce classify {run} IMAGE.png ...", "transduce evaluate {run} --images TEST_DIR",
          "transduce attention {run} --image IMAGE.png --out attention.png"),
)
