"""Images for the Vision Transformer: ``prepare --images DIR``, the memory-mapped dataset, and its
batches (with the augmentation of small images: a random crop of the image padded on each side).

The input is the "image folder" convention: one folder per class, named by its label, holding the
class's images (PNG, JPEG, BMP, GIF, WebP or TIFF, read by Pillow). Output folder layout (the
same conventions as the text ``prepare``)::

    meta.json            "kind": "images", the class names (in label order), the image shape
    SPLIT.images.bin     uint8 pixels, (N, C, H, W) in file order
    SPLIT.labels.bin     int64 labels, (N,)

Every image must have the dataset's size (the first image's, or ``image_size`` to resize each to
a square of that side with Pillow's bicubic filter) and is converted to its channels (1 for grey
images, 3 for colour: a colour image is made grey, or a grey one colour, by Pillow's conversion).
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from ..errors import DataError
from ..files import check_output_dir, output_dir
from ..reading import read_json
from ..version import __version__
from .corpus import fingerprint, previously_prepared, unusable
from .dataset import Batch

FORMAT_VERSION = 1
SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
LABEL_PAD = -1  # (a label is never this: a batch of labels has no padding)


def scan(root: str | Path) -> tuple[list[str], list[tuple[Path, int]], list[Path]]:
    """``(class names, [(file, label)], skipped files)`` of an image folder, or a DataError."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: no such folder (expected one folder per class of images)")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise DataError(f"{root}: no class folders; expected {root}/LABEL/IMAGE for each class "
                        "(the image folder convention)")
    files, skipped, empty = [], [], []
    for label, name in enumerate(classes):
        found = 0
        for path in sorted((root / name).rglob("*")):
            if not path.is_file() or path.name.startswith("."):
                continue
            if path.suffix.lower() in SUFFIXES:
                files.append((path, label))
                found += 1
            else:
                skipped.append(path)
        if not found:
            empty.append(name)
    if empty:
        raise DataError(f"{root}: {len(empty)} class folder(s) without images: "
                        f"{', '.join(empty[:5])}; remove them or add images "
                        f"({', '.join(SUFFIXES)})")
    return classes, files, skipped


# what Pillow raises for a file it cannot decode (a decompression bomb is not an OSError)
def _unreadable():
    import struct

    from PIL import Image

    return (OSError, ValueError, SyntaxError, EOFError, struct.error,
            Image.DecompressionBombError)


@contextmanager
def open_image(path: str | Path):
    """``path`` opened with Pillow; whatever keeps it from being read is a DataError naming it."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            yield image
    except _unreadable() as error:
        raise DataError(f"{path}: not a readable image ({error})") from None


GREY = {"1", "L", "I", "F"}  # Pillow's bands of a grey image (with "A" beside them)
WIDE = ("I;16", "I;16L", "I;16B", "I;16N", "I", "F")  # more than 8 bits a pixel


def eight_bits(image, path) -> "Image.Image":
    """``image`` in a mode of 8 bits a channel without losing a value: 16- and 32-bit grey whose
    values fit in 8 bits, opaque images with an alpha channel (the alpha dropped); any other
    (values above 255, transparency, a colour space other than RGB) is a DataError saying which
    mode, since a conversion would change pixels without a word."""
    from PIL import Image

    mode = image.mode
    if mode in WIDE:
        values = np.asarray(image)
        integral = mode != "F" or bool(np.all(values == np.round(values)))
        if values.size and (values.min() < 0 or values.max() > 255 or not integral):
            raise DataError(f"{path}: {values.dtype.itemsize * 8}-bit grey pixels (Pillow mode "
                            f"{mode}) with values from {values.min():g} to {values.max():g}; "
                            "transduce reads 8 bits a channel and would clip them: save the "
                            "images with 8 bits a channel (scaled, not clipped) first")
        return Image.fromarray(values.astype(np.uint8), "L")
    if mode == "P" and "transparency" in image.info or "A" in image.getbands():
        alpha = np.asarray(image.convert("RGBA" if mode in ("P", "PA") else mode))[..., -1]
        if alpha.min() < 255:
            raise DataError(f"{path}: transparent pixels (Pillow mode {mode}, alpha down to "
                            f"{alpha.min()}); transduce reads opaque images: flatten the "
                            "images onto a background first")
        return image.convert("RGB" if image.mode in ("P", "PA", "RGBA", "RGBa") else "L")
    if mode not in ("1", "L", "P", "RGB", "YCbCr"):
        raise DataError(f"{path}: colour space {mode} (Pillow's mode); transduce reads grey and "
                        "RGB images: convert the images to RGB with a colour-managed tool first")
    return image


def read_image(path: str | Path, channels: int, size: Optional[tuple[int, int]] = None,
               resize: bool = False) -> np.ndarray:
    """One image as uint8 ``(C, H, W)``; ``size`` (W, H) checked, or made so with ``resize``."""
    from PIL import Image

    with open_image(path) as image:
        try:
            image = eight_bits(image, path).convert("L" if channels == 1 else "RGB")
            if size is not None and image.size != size:
                if not resize:
                    raise DataError(f"{path}: {image.size[0]}x{image.size[1]} pixels, not "
                                    f"{size[0]}x{size[1]} as the others; prepare with "
                                    "--image-size N to resize every image to N x N")
                image = image.resize(size, Image.Resampling.BICUBIC)
            pixels = np.asarray(image, dtype=np.uint8)
        except _unreadable() as error:  # (decoding happens on first use of the pixels)
            raise DataError(f"{path}: not a readable image ({error})") from None
    return pixels[None] if channels == 1 else pixels.transpose(2, 0, 1)


def image_channels(path: Path) -> int:
    """1 for a grey image (with or without alpha), else 3."""
    with open_image(path) as image:
        return 1 if set(image.getbands()) - {"A"} <= GREY else 3


def read_images(paths: Sequence[Path], channels: int, size: tuple[int, int], resize: bool,
                what: str = "images", out: Optional[np.ndarray] = None,
                bad: Optional[list[str]] = None) -> np.ndarray:
    """``(N, C, H, W)`` uint8 of ``paths`` (into ``out``, e.g. a file's memory map, if given);
    every unreadable or odd-sized file is named (the first ten) in one DataError, after all are
    tried (or added to ``bad``, for the caller to name with those of other splits)."""
    from tqdm.auto import tqdm

    if out is None:
        out = np.empty((len(paths), channels, size[1], size[0]), dtype=np.uint8)
    collect = bad is not None
    bad = bad if bad is not None else []
    for i, path in enumerate(tqdm(paths, desc=f"reading {what}", unit=" images", leave=False,
                                  disable=None)):
        try:
            out[i] = read_image(path, channels, size, resize)
        except DataError as error:
            bad.append(str(error))
    if bad and not collect:
        raise unusable(f"{len(bad)} of {len(paths):,} {what} cannot be used", bad)
    return out


def prepare_images(images: str | Path, out: str | Path, valid: Optional[str | Path] = None,
                   hold_out: int = 0, image_size: Optional[int] = None, seed: int = 1,
                   force: bool = False, log=print) -> dict:
    """Prepare ``out`` from the image folder ``images`` (train) and ``valid`` (or ``hold_out``
    training images drawn at random as the validation split). Reuses ``out`` when the inputs
    and options are unchanged; returns the metadata."""
    out, say = Path(out), log or (lambda *a, **k: None)
    classes, files, skipped = scan(images)
    splits = {"train": files}
    if valid is not None:
        valid_classes, splits["valid"], more = scan(valid)
        skipped += more
        if valid_classes != classes:
            raise DataError(f"{valid}: its classes ({', '.join(valid_classes[:10])}) are not "
                            f"those of {images} ({', '.join(classes[:10])})")
    elif hold_out:
        if hold_out >= len(files):
            raise DataError(f"--hold-out {hold_out}: {images} has only {len(files):,} images")
        order = np.random.default_rng(seed).permutation(len(files))
        held = set(order[:hold_out].tolist())
        splits = {"train": [f for i, f in enumerate(files) if i not in held],
                  "valid": [f for i, f in enumerate(files) if i in held]}
    if len(classes) < 2:
        raise DataError(f"{images}: one class folder ({classes[0]}); a classifier needs at least "
                        "two classes to tell apart (one folder per class: "
                        f"{images}/LABEL/IMAGE)")
    if skipped:
        say(f"skipped {len(skipped):,} file(s) that are not images by their suffix, e.g. "
            f"{skipped[0]}")
    first = files[0][0]
    channels = image_channels(first)
    if image_size is None:
        with open_image(first) as image:
            size = image.size
        if size[0] != size[1]:
            raise DataError(f"{first}: {size[0]}x{size[1]} pixels; the model reads square images: "
                            "prepare with --image-size N to resize every image to N x N")
    else:
        size = (image_size, image_size)
    options = {"kind": "images", "format": FORMAT_VERSION, "hold_out": hold_out, "seed": seed,
               "image_size": image_size, "valid": valid is not None}
    inputs = [Path(images)] + ([Path(valid)] if valid is not None else [])
    check_output_dir(out, "prepared dataset", inputs)
    every = [path for split in splits.values() for path, _ in split]
    fp = fingerprint(every, options)
    def missing(meta: dict) -> list[str]:
        names = [f"{split}.{kind}.bin" for split in meta.get("splits", {})
                 for kind in ("images", "labels")]
        return [name for name in names if not (out / name).is_file()]

    old = previously_prepared(out, fp, force, missing, say)
    if old is not None:
        return old
    start = time.time()
    with output_dir(out, "prepared dataset", inputs) as tmp:
        meta = {"format": FORMAT_VERSION, "kind": "images", "transduce_version": __version__,
                "classes": classes, "channels": channels, "image_size": size[0],
                "fingerprint": fp, "inputs": {"images": str(images), "valid": str(valid or "")},
                "splits": {}}
        bad: list[str] = []  # every split's unusable images, named together
        for split, pairs in splits.items():
            # written as they are read: memory stays flat however many images there are
            pixels = np.memmap(tmp / f"{split}.images.bin", np.uint8, "w+",
                               shape=(len(pairs), channels, size[1], size[0]))
            read_images([p for p, _ in pairs], channels, size, image_size is not None,
                        f"{split} images", out=pixels, bad=bad)
            pixels.flush()
            del pixels
            labels = np.asarray([label for _, label in pairs], dtype=np.int64)
            labels.tofile(tmp / f"{split}.labels.bin")
            counts = np.bincount(labels, minlength=len(classes))
            meta["splits"][split] = {"images": len(pairs), "per_class": counts.tolist()}
        if bad:
            raise unusable(f"{len(bad)} of {len(every):,} images cannot be used", bad)
        for split, counts in ((k, np.asarray(v["per_class"])) for k, v in meta["splits"].items()):
            say(f"{split}: {int(counts.sum()):,} images, {len(classes)} classes "
                f"({int(counts.min()):,} to {int(counts.max()):,} a class)")
        meta["seconds"] = round(time.time() - start, 2)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


class ImageSet:
    """One split of a prepared image dataset, memory-mapped: ``images (N, C, H, W)`` uint8 and
    ``labels (N,)``."""

    def __init__(self, folder: str | Path, split: str) -> None:
        folder = Path(folder)
        meta = read_json(folder / "meta.json")
        self.classes: list[str] = meta["classes"]
        C, S = meta["channels"], meta["image_size"]
        n = meta["splits"][split]["images"]
        try:
            self.images = np.memmap(folder / f"{split}.images.bin", np.uint8, "r",
                                    shape=(n, C, S, S))
            self.labels = np.fromfile(folder / f"{split}.labels.bin", dtype=np.int64)
        except (OSError, ValueError) as error:
            raise DataError(f"{folder}: the {split} images do not match meta.json ({error}); "
                            "prepare it again") from None
        if len(self.labels) != n:
            raise DataError(f"{folder}/{split}.labels.bin: {len(self.labels)} labels for {n} "
                            "images; prepare it again")

    def __len__(self) -> int:
        return len(self.labels)


def augment(images: np.ndarray, padding: int, flip: bool, rng: np.random.Generator) -> np.ndarray:
    """A random crop of each image padded with ``padding`` zero pixels on each side (and a
    horizontal flip of half of them with ``flip``): ``(B, C, H, W)`` -> the same shape."""
    B, _, H, W = images.shape
    if padding:
        padded = np.pad(images, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
        dy, dx = rng.integers(0, 2 * padding + 1, size=(2, B))
        rows = dy[:, None] + np.arange(H)  # (B, H)
        cols = dx[:, None] + np.arange(W)  # (B, W)
        channels = np.arange(images.shape[1])[:, None, None]
        images = padded[np.arange(B)[:, None, None, None], channels, rows[:, None, :, None],
                        cols[:, None, None, :]]
    if flip:
        turn = rng.random(B) < 0.5
        images = np.where(turn[:, None, None, None], images[..., ::-1], images)
    return np.ascontiguousarray(images)


def collate_images(data: ImageSet, indices, padding: int = 0, flip: bool = False,
                   rng: Optional[np.random.Generator] = None) -> Batch:
    """A batch of images and labels: the images in ``tgt_in`` ``(B, C, H, W)`` (a classifier's
    only input) and the labels in ``tgt_out`` ``(B, 1)``; augmented when ``rng`` is given."""
    indices = np.asarray(indices, dtype=np.int64)
    images = np.asarray(data.images[indices])  # (B, C, H, W), read from the memory map
    if rng is not None:
        images = augment(images, padding, flip, rng)
    labels = torch.from_numpy(data.labels[indices].copy())[:, None]
    return Batch(None, torch.from_numpy(images), labels, torch.from_numpy(indices), LABEL_PAD)
