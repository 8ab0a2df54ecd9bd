"""Using a trained image classifier (the Vision Transformer): ``Classifier`` classifies image
files, scores an image folder (accuracy, per-class accuracy, the confusion matrix) and computes
the attention rollout of its [CLS] position over the patches; the pictures of both.

Attention rollout (Abnar & Zuidema 2020): each layer's attention averaged over its heads, plus the
identity for the residual connection, rows renormalized, multiplied through the layers; the row of
[CLS] is how much each patch flowed into the vector the classifier reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from .data.images import SUFFIXES, read_images, scan
from .errors import TransduceError, listed
from .evaluate import Evaluation
from .loading import load_checked
from .runtime import autocast


def image_files(paths: Sequence[str | Path]) -> list[Path]:
    """The image files named, a folder standing for the images in it (sorted); a missing file is
    an error."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(p for p in path.rglob("*")
                           if p.is_file() and p.suffix.lower() in SUFFIXES)
            if not found:
                raise TransduceError(f"{path}: no images in this folder ({', '.join(SUFFIXES)})")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise TransduceError(f"{path}: no such file or folder")
    return files


class Classifier:
    """A trained image classifier: ``Classifier.load(RUN)``, then ``classify(files)``,
    ``evaluate(folder)`` or ``rollout(file)``."""

    def __init__(self, model, info: dict, device: torch.device, precision: str,
                 folder: Path) -> None:
        self.model, self.info, self.device, self.precision = model, info, device, precision
        self.folder, self.config = folder, model.config
        self.classes: list[str] = info.get("classes") or [str(i) for i in
                                                          range(model.config.classes)]

    @classmethod
    def load(cls, path: str | Path, device: str = "auto", precision: str = "fp32"
             ) -> "Classifier":
        def refuse_int8(dev, precision: str) -> None:
            if precision == "int8":
                raise TransduceError("--precision int8 is for translation models; use fp32 or "
                                     "bf16")

        loaded = load_checked(path, ("image-classification",), "classify images", device,
                              precision, before=refuse_int8)
        return cls(loaded.model, loaded.info, loaded.device, loaded.precision, loaded.folder)

    def read(self, files: Sequence[Path], resize: bool = False) -> torch.Tensor:
        """The files as the model's input ``(N, C, H, W)`` uint8 (each file checked; a size other
        than the model's is an error unless ``resize``)."""
        c = self.config
        try:
            pixels = read_images(list(files), c.channels, (c.image_size, c.image_size), resize)
        except TransduceError as error:
            raise TransduceError(f"{error}\n(the model reads {c.image_size}x{c.image_size} "
                                 "pixels; --resize resizes other sizes)") from None
        return torch.from_numpy(pixels)

    @torch.no_grad()
    def probabilities(self, images: torch.Tensor, batch_size: int = 256) -> torch.Tensor:
        """``(N, classes)`` probabilities of the images ``(N, C, H, W)``."""
        out = []
        for start in range(0, len(images), batch_size):
            batch = images[start:start + batch_size].to(self.device)
            with autocast(self.device, self.precision):
                logits = self.model(batch)[:, 0]
            out.append(torch.softmax(logits.float(), dim=-1).cpu())
        return torch.cat(out) if out else torch.empty(0, self.config.classes)

    def classify(self, files: Sequence[str | Path], top_k: int = 5, resize: bool = False
                 ) -> list[list[tuple[str, float]]]:
        """For each image, its ``top_k`` classes with their probabilities, most probable first:
        ``files`` are image files or folders (their images, sorted), as the command takes them."""
        files = image_files(listed(files, "image files", "Classifier.classify"))
        probs = self.probabilities(self.read(files, resize))
        k = min(top_k, len(self.classes))
        values, indices = probs.topk(k, dim=-1)
        return [[(self.classes[i], float(v)) for v, i in zip(vs.tolist(), ix.tolist())]
                for vs, ix in zip(values, indices)]

    def evaluate(self, folder: str | Path, resize: bool = False) -> Evaluation:
        """Accuracy on an image folder whose class folders are named as the model's classes:
        ``scores`` holds ``accuracy``, ``per_class`` (each class's accuracy, nan for a class without
        images), ``confusion`` (``(C, C)`` counts as lists, rows the true class) and ``classes``;
        ``outputs`` the predicted class of each image, in the folder's order."""
        names, pairs, _ = scan(folder)
        unknown = [name for name in names if name not in self.classes]
        if unknown:
            raise TransduceError(f"{folder}: class folders the model does not know: "
                                 f"{', '.join(unknown[:10])} (its classes: "
                                 f"{', '.join(self.classes[:20])})")
        truth = np.asarray([self.classes.index(names[label]) for _, label in pairs])
        predicted = self.probabilities(self.read([p for p, _ in pairs], resize)).argmax(-1).numpy()
        C = len(self.classes)
        confusion = np.zeros((C, C), dtype=np.int64)
        np.add.at(confusion, (truth, predicted), 1)
        totals = confusion.sum(1)
        per_class = [float(confusion[i, i] / totals[i]) if totals[i] else float("nan")
                     for i in range(C)]
        accuracy = float((truth == predicted).mean())
        return Evaluation("accuracy", accuracy, len(truth), {
            "accuracy": accuracy, "per_class": dict(zip(self.classes, per_class)),
            "confusion": confusion.tolist(), "classes": list(self.classes)},
            [self.classes[i] for i in predicted])

    def attention(self, image: str | Path | torch.Tensor, resize: bool = False
                  ) -> tuple[np.ndarray, int, float]:
        """What the model attended to, as every facade's ``attention`` says it: here the
        ``rollout`` of one image."""
        return self.rollout(image, resize)

    @torch.no_grad()
    def rollout(self, image: str | Path | torch.Tensor, resize: bool = False
                ) -> tuple[np.ndarray, int, float]:
        """The attention rollout of [CLS] over the patches of one image (a file, or its pixels
        ``(C, H, W)``), as a ``(H / P, W / P)`` grid summing to at most 1, and the predicted class
        with its probability."""
        if isinstance(image, (str, Path)):
            image = self.read([Path(image)], resize)[0]
        c = self.config
        if c.pooling != "cls":
            raise TransduceError("attention rollout follows the [CLS] position; this model pools "
                                 "the mean (pooling='mean')")
        with autocast(self.device, self.precision):
            logits, attention = self.model(image[None].to(self.device), need_weights=True)
        flow = torch.eye(attention.encoder[0].size(-1))
        for weights in attention.encoder:  # (1, H, S, S)
            layer = weights[0].float().mean(0).cpu()  # (S, S), the heads averaged
            layer = layer + torch.eye(layer.size(0))  # the residual connection
            flow = (layer / layer.sum(-1, keepdim=True)) @ flow
        side = c.image_size // c.patch_size
        grid = flow[0, 1:].reshape(side, side).numpy()
        probs = torch.softmax(logits[0, 0].float(), -1)
        return grid, int(probs.argmax()), float(probs.max())


def draw_rollout(classifier: Classifier, file: str | Path, out: str | Path,
                 resize: bool = False) -> tuple[Path, str, float]:
    """The image with its [CLS] attention rollout over it, side by side with the rollout alone;
    returns the picture's path, the predicted class and its probability."""
    from .visualize import _pyplot, _save

    image = classifier.read([Path(file)], resize)[0]  # (C, H, W)
    grid, label, prob = classifier.rollout(image)
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(8, 4.2))
    pixels = image.permute(1, 2, 0).numpy()
    shown = pixels[..., 0] if pixels.shape[-1] == 1 else pixels
    size = classifier.config.image_size
    axes[0].imshow(shown, cmap="gray" if shown.ndim == 2 else None)
    edges = (-0.5, size - 0.5, size - 0.5, -0.5)  # (the image's pixel edges)
    axes[0].imshow(grid, cmap="inferno", alpha=0.55, extent=edges, interpolation="bilinear")
    axes[0].set_title("image, with the rollout over it")
    shown_grid = axes[1].imshow(grid, cmap="inferno")
    axes[1].set_title(f"[CLS] attention rollout ({grid.shape[0]}x{grid.shape[1]} patches)")
    fig.colorbar(shown_grid, ax=axes[1], fraction=0.046)
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    name = classifier.classes[label]
    fig.suptitle(f"{Path(file).name}: predicted {name} ({100 * prob:.1f}%)")
    return _save(fig, out, inputs=[file]), name, prob


def draw_confusion(scores: Evaluation, out: str | Path, title: Optional[str] = None) -> Path:
    """A classifier's confusion matrix (``Classifier.evaluate``) as a picture (counts, rows the
    true class)."""
    from .visualize import _pyplot, _save

    plt = _pyplot()
    classes, confusion = scores["classes"], np.asarray(scores["confusion"])
    C = len(classes)
    side = max(4.0, 0.45 * C + 2)
    fig, ax = plt.subplots(figsize=(side + 1, side))
    shown = ax.imshow(confusion, cmap="Blues")
    fig.colorbar(shown, ax=ax, fraction=0.046)
    ax.set_xticks(range(C), classes, rotation=90 if C > 12 else 0)
    ax.set_yticks(range(C), classes)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    if C <= 30:
        top = confusion.max() or 1
        for (i, j), n in np.ndenumerate(confusion):
            if n:
                ax.text(j, i, str(n), ha="center", va="center", fontsize=7,
                        color="white" if n > top / 2 else "black")
    ax.set_title(title or f"accuracy {100 * scores.value:.2f}% on {scores.count:,} images")
    return _save(fig, out)
