"""The image classifier's facade: files and folders in, classes and scores out."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from transduce import ModelConfig, Transformer
from transduce.errors import TransduceError
from transduce.vision import Classifier, image_files

from .helpers import BARS, write_image_folder


@pytest.fixture()
def classifier(device):
    return tiny_classifier(device)


def tiny_classifier(device) -> Classifier:
    """A random ViT of three classes of 8x8 images (the ``BARS``), as a loaded facade."""
    torch.manual_seed(0)
    cfg = ModelConfig.preset("vit-tiny", classes=3, image_size=8, patch_size=4,
                             max_positions=5, encoder_layers=1)
    model = Transformer(cfg).to(device).eval()
    return Classifier(model, {"classes": list(BARS)}, torch.device(device), "fp32", Path("."))


def test_image_files_expand_folders_in_order_and_name_what_is_missing(tmp_path):
    root = write_image_folder(tmp_path / "images", per_class=2)
    found = image_files([root / "down", root / "across" / "1.png"])
    assert found == [root / "down" / "0.png", root / "down" / "1.png", root / "across" / "1.png"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(TransduceError, match="empty: no images in this folder"):
        image_files([tmp_path / "empty"])
    with pytest.raises(TransduceError, match="nowhere.png: no such file or folder"):
        image_files([tmp_path / "nowhere.png"])


def test_classify_gives_the_top_classes_most_probable_first_each_image_as_alone(classifier,
                                                                                 tmp_path):
    root = write_image_folder(tmp_path / "images", per_class=2)
    files = image_files([root])
    ranked = classifier.classify(files, top_k=2)
    assert len(ranked) == 6 and all(len(r) == 2 and r[0][1] >= r[1][1] for r in ranked)
    assert {name for r in ranked for name, _ in r} <= set(BARS)
    alone = classifier.classify(files[3:4], top_k=5)[0]  # top_k past the classes: all three
    assert len(alone) == 3 and math.isclose(sum(p for _, p in alone), 1.0, rel_tol=1e-5)
    assert [n for n, _ in alone[:2]] == [n for n, _ in ranked[3]]
    assert [p for _, p in alone[:2]] == pytest.approx([p for _, p in ranked[3]], abs=1e-5)
    with pytest.raises(TransduceError, match="takes a list"):
        classifier.classify(files[0])


def test_evaluate_counts_a_confusion_matrix_by_true_and_predicted_class(classifier, tmp_path):
    root = write_image_folder(tmp_path / "images", per_class=3)
    scores = classifier.evaluate(root)
    predicted = classifier.probabilities(classifier.read(image_files([root]))).argmax(-1)
    confusion = np.asarray(scores["confusion"])
    assert (scores.metric, scores.count) == ("accuracy", 9) and confusion.sum() == 9
    assert confusion.sum(1).tolist() == [3, 3, 3]  # each class folder holds three
    # the folders are read in sorted order (across, down, slash): the columns count predictions
    assert confusion.sum(0).tolist() == np.bincount(predicted.numpy(), minlength=3).tolist()
    assert scores.value == scores["accuracy"] == pytest.approx(np.trace(confusion) / 9)
    assert scores.outputs == [BARS[i] for i in predicted.tolist()]
    assert scores["per_class"].keys() == set(BARS) and scores.to_dict()["count"] == 9
    (root / "zebra").mkdir()
    write_image_folder(tmp_path / "other", per_class=1)
    (tmp_path / "other" / "down" / "0.png").rename(root / "zebra" / "0.png")
    with pytest.raises(TransduceError, match="class folders the model does not know: zebra"):
        classifier.evaluate(root)


def test_an_image_of_another_size_is_refused_unless_resized(classifier, tmp_path):
    root = write_image_folder(tmp_path / "big", per_class=1, size=16)
    files = image_files([root])
    with pytest.raises(TransduceError, match="the model reads 8x8 pixels; --resize resizes"):
        classifier.read(files)
    assert classifier.read(files, resize=True).shape == (3, 1, 8, 8)


def test_the_facade_takes_folders_as_the_command_does_and_rollout_a_file(classifier, tmp_path):
    root = write_image_folder(tmp_path / "images", per_class=2)
    files = image_files([root])
    assert classifier.classify([root], top_k=2) == classifier.classify(files, top_k=2)
    grid, label, probability = classifier.rollout(files[0])
    same = classifier.rollout(classifier.read([files[0]])[0])
    assert np.array_equal(grid, same[0]) and (label, probability) == same[1:]
    assert grid.shape == (2, 2) and 0 < grid.sum() <= 1 + 1e-6
    attended = classifier.attention(str(files[0]))  # every facade's verb: here the rollout
    assert np.array_equal(attended[0], grid) and attended[1:] == (label, probability)
