"""``prepare --images``: the image folder read, checked and memory-mapped; the augmentation."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from PIL import Image

from transduce.data.images import ImageSet, augment, collate_images, prepare_images
from transduce.errors import DataError

from ..helpers import BARS, cli, write_image_folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_image_folder(tmp_path_factory.mktemp("bars") / "train", 20)


def test_prepare_keeps_every_pixel_and_label(folder, tmp_path):
    meta = prepare_images(folder, tmp_path / "data", log=None)
    assert meta["classes"] == sorted(BARS) and meta["channels"] == 1 and meta["image_size"] == 8
    assert meta["splits"]["train"] == {"images": 60, "per_class": [20, 20, 20]}
    ds = ImageSet(tmp_path / "data", "train")
    for i in (0, 25, 59):
        label = meta["classes"][ds.labels[i]]
        files = sorted((folder / label).iterdir())
        position = i - 20 * ds.labels[i]
        assert np.array_equal(ds.images[i, 0], np.asarray(Image.open(files[position])))


def test_a_held_out_part_is_drawn_the_same_way_every_time(folder, tmp_path):
    a = prepare_images(folder, tmp_path / "a", hold_out=12, log=None)
    prepare_images(folder, tmp_path / "b", hold_out=12, log=None)
    assert a["splits"]["train"]["images"] == 48 and a["splits"]["valid"]["images"] == 12
    for split in ("train", "valid"):
        x, y = ImageSet(tmp_path / "a", split), ImageSet(tmp_path / "b", split)
        assert np.array_equal(x.images, y.images) and np.array_equal(x.labels, y.labels)
    train, valid = ImageSet(tmp_path / "a", "train"), ImageSet(tmp_path / "a", "valid")
    seen = {train.images[i].tobytes() for i in range(len(train))}
    assert not any(valid.images[i].tobytes() in seen for i in range(len(valid)))


def test_colour_images_keep_three_channels(tmp_path):
    write_image_folder(tmp_path / "rgb", 3, mode="RGB")
    meta = prepare_images(tmp_path / "rgb", tmp_path / "data", log=None)
    assert meta["channels"] == 3
    assert ImageSet(tmp_path / "data", "train").images.shape == (9, 3, 8, 8)


def test_other_sizes_are_named_or_resized(tmp_path):
    write_image_folder(tmp_path / "mixed", 3)
    Image.new("L", (10, 10)).save(tmp_path / "mixed" / "down" / "odd.png")
    with pytest.raises(DataError, match=r"(?s)1 of 10 .*odd.png: 10x10 pixels, not 8x8.*--imag"):
        prepare_images(tmp_path / "mixed", tmp_path / "data", log=None)
    assert not (tmp_path / "data").exists()  # nothing written
    meta = prepare_images(tmp_path / "mixed", tmp_path / "data", image_size=6, log=None)
    assert meta["image_size"] == 6
    assert ImageSet(tmp_path / "data", "train").images.shape == (10, 1, 6, 6)


@pytest.mark.parametrize("damage, message", [
    ("corrupt", r"(?s)across/broken.png: not a readable image"),
    ("empty class", r"1 class folder\(s\) without images: empty"),
    ("no classes", r"no class folders; expected .*LABEL/IMAGE"),
    ("not square", r"0.png: 8x6 pixels; the model reads square images: .*--image-size"),
])
def test_bad_folders_are_messages_naming_the_file(tmp_path, damage, message):
    root = write_image_folder(tmp_path / "images", 2)
    if damage == "corrupt":
        (root / "across" / "broken.png").write_bytes(b"\x89PNG not really")
    elif damage == "empty class":
        (root / "empty").mkdir()
    elif damage == "no classes":
        root = tmp_path / "flat"
        root.mkdir()
        Image.new("L", (8, 8)).save(root / "0.png")
    else:
        for path in (root / "across").iterdir():
            Image.new("L", (8, 6)).save(path)
    with pytest.raises(DataError, match=message):
        prepare_images(root, tmp_path / "data", log=None)
    assert not (tmp_path / "data").exists()


def test_files_that_are_not_images_are_skipped_and_reported(tmp_path):
    root = write_image_folder(tmp_path / "images", 2)
    (root / "down" / "notes.txt").write_text("not an image")
    out = cli("prepare", "--images", str(root), "--out", str(tmp_path / "data")).stdout
    assert "skipped 1 file(s) that are not images by their suffix, e.g. " in out
    assert "notes.txt" in out and "train 6 images" in out


def test_the_command_refuses_text_options_and_two_validation_sources(tmp_path):
    root = write_image_folder(tmp_path / "images", 2)
    for extra, message in ((["--src", "en"], "--src belong to text"),
                           (["--hold-out", "2", "--valid-images", str(root)], "not both")):
        result = cli("prepare", "--images", str(root), "--out", str(tmp_path / "d"), *extra,
                     check=False)
        assert result.returncode == 2 and message in result.stderr
    result = cli("prepare", "--hold-out", "2", "--out", str(tmp_path / "d"), check=False)
    assert result.returncode == 2 and "go with --images DIR" in result.stderr


def test_validation_classes_must_be_the_training_ones(tmp_path):
    train = write_image_folder(tmp_path / "train", 2)
    valid = write_image_folder(tmp_path / "valid", 2)
    (valid / "across").rename(valid / "sideways")
    with pytest.raises(DataError, match="are not those of"):
        prepare_images(train, tmp_path / "data", valid, log=None)


def test_the_random_crop_moves_the_image_within_its_padding():
    images = np.arange(2 * 1 * 4 * 4, dtype=np.uint8).reshape(2, 1, 4, 4) + 1
    rng = np.random.default_rng(0)
    out = augment(images, 2, False, rng)
    assert out.shape == images.shape
    dy, dx = np.random.default_rng(0).integers(0, 5, size=(2, 2))
    for b in range(2):
        padded = np.pad(images[b, 0], 2)
        assert np.array_equal(out[b, 0], padded[dy[b]:dy[b] + 4, dx[b]:dx[b] + 4])
    assert np.array_equal(augment(images, 0, False, rng), images)  # off: unchanged
    flipped = augment(images, 0, True, np.random.default_rng(3))
    for b in range(2):  # each image as it was, or mirrored
        assert (np.array_equal(flipped[b], images[b])
                or np.array_equal(flipped[b], images[b][..., ::-1]))


def test_a_batch_holds_the_images_and_their_labels(folder, tmp_path):
    prepare_images(folder, tmp_path / "data", log=None)
    ds = ImageSet(tmp_path / "data", "train")
    batch = collate_images(ds, [41, 3, 22])
    assert batch.src is None and batch.tgt_in.shape == (3, 1, 8, 8)
    assert batch.tgt_out[:, 0].tolist() == [ds.labels[41], ds.labels[3], ds.labels[22]]
    assert np.array_equal(batch.tgt_in[0].numpy(), ds.images[41])
    assert batch.target_tokens == 3  # label 0 is a label, not padding
    meta = json.loads((tmp_path / "data" / "meta.json").read_text())
    assert meta["kind"] == "images"


def test_a_prepared_folder_is_reused_until_a_file_is_missing(folder, tmp_path):
    said = []
    prepare_images(folder, tmp_path / "data", log=said.append)
    prepare_images(folder, tmp_path / "data", log=said.append)
    assert "already prepared from these inputs; reusing it" in said[-1]
    (tmp_path / "data" / "train.labels.bin").unlink()
    prepare_images(folder, tmp_path / "data", log=said.append)
    assert any("train.labels.bin is missing; preparing again" in line for line in said)
    assert len(ImageSet(tmp_path / "data", "train")) == 60


def test_every_mode_read_is_read_without_loss_or_refused_by_name(tmp_path):
    """16- and 32-bit grey whose values fit in 8 bits, opaque images with alpha and palettes are
    read exactly; values over 255, transparency and other colour spaces are refused, naming the
    mode (Pillow's own conversions would clip, drop the alpha or guess the colours)."""
    from transduce.data.images import image_channels, read_image

    grey = np.arange(64, dtype=np.uint8).reshape(8, 8) * 3
    colour = np.stack([grey, 255 - grey, grey // 2], axis=-1)
    kept = {
        "grey16.png": (Image.fromarray(grey.astype(np.uint16)), grey[None]),
        "grey32.tif": (Image.fromarray(grey.astype(np.int32)), grey[None]),
        "opaque-la.png": (Image.fromarray(np.dstack([grey, np.full_like(grey, 255)]), "LA"),
                          grey[None]),
        "opaque-rgba.png": (Image.fromarray(np.dstack([colour, np.full_like(grey, 255)]),
                                            "RGBA"), colour.transpose(2, 0, 1)),
        "palette.png": (Image.fromarray(colour).quantize(256), None),
    }
    for name, (image, pixels) in kept.items():
        image.save(tmp_path / name)
        read = read_image(tmp_path / name, image_channels(tmp_path / name))
        expected = pixels if pixels is not None else np.asarray(
            image.convert("RGB")).transpose(2, 0, 1)
        assert np.array_equal(read, expected), name
    refused = {
        "wide.png": (Image.fromarray(grey.astype(np.uint16) * 300), "16-bit grey pixels (Pillow "
                     "mode I;16) with values from 0 to 56700"),
        "alpha.png": (Image.fromarray(np.dstack([colour, np.full_like(grey, 128)]), "RGBA"),
                      "transparent pixels (Pillow mode RGBA, alpha down to 128)"),
        "print.jpg": (Image.fromarray(colour).convert("CMYK"), "colour space CMYK"),
    }
    for name, (image, message) in refused.items():
        image.save(tmp_path / name)
        with pytest.raises(DataError, match=re.escape(f"{tmp_path / name}: {message}")):
            read_image(tmp_path / name, 3)


def test_a_decompression_bomb_is_a_message_wherever_the_image_is_opened(tmp_path):
    from transduce.data.images import image_channels, read_image

    from ..integration.test_user_errors_inputs import bomb_png

    bomb_png(tmp_path / "bomb.png")
    for read in (lambda p: image_channels(p), lambda p: read_image(p, 1)):
        with pytest.raises(DataError, match="bomb.png: not a readable image .*decompression bomb"):
            read(tmp_path / "bomb.png")


def test_every_splits_unusable_images_are_named_together_before_any_summary(tmp_path):
    write_image_folder(tmp_path / "train", 3)
    write_image_folder(tmp_path / "valid", 2)
    Image.fromarray(np.full((8, 8), 4000, np.uint16)).save(tmp_path / "train" / "down" / "0.png")
    Image.fromarray(np.full((8, 8), 4000, np.uint16)).save(tmp_path / "valid" / "down" / "1.png")
    said: list[str] = []
    with pytest.raises(DataError, match=r"2 of 15 images cannot be used:\n  .*train/down/0.png: "
                                        r"16-bit.*\n  .*valid/down/1.png: 16-bit"):
        prepare_images(tmp_path / "train", tmp_path / "data", valid=tmp_path / "valid",
                       log=said.append)
    assert not any(line.startswith(("train:", "valid:")) for line in said)
    assert not (tmp_path / "data").exists()
