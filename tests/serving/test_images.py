"""Image classification served (``serving/images.py``): an uploaded image's classes as the
facade gives them, and every upload refused before it is decoded when it is too large."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from PIL import Image

from transduce.serving.app import ServeSettings, create_app

from ..helpers import BARS, write_image_folder
from ..test_vision import tiny_classifier

LOCAL = "http://127.0.0.1"


@pytest.fixture()
def classifier(device):
    classifier = tiny_classifier(device)  # as a run of 7 updates
    classifier.info, classifier.folder = {"classes": list(BARS), "step": 7}, \
        Path("runs/vit/checkpoints/step-7")
    return classifier


def client(classifier, **settings) -> TestClient:
    return TestClient(create_app(classifier, ServeSettings(**settings)), base_url=LOCAL)


def png(pixels: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels, "L").save(out, format="PNG")
    return out.getvalue()


def test_an_uploaded_image_gets_the_classes_and_rollout_the_facade_gives(classifier, tmp_path):
    files = sorted(write_image_folder(tmp_path / "images", per_class=1).rglob("*.png"))
    with client(classifier) as api:
        for file in files:
            answer = api.post("/v1/classify?top_k=2&rollout=true", content=file.read_bytes(),
                              headers={"Content-Type": "image/png"})
            assert answer.status_code == 200, answer.text
            body = answer.json()
            expected = classifier.classify([file], top_k=2)[0]
            assert [c["label"] for c in body["classes"]] == [name for name, _ in expected]
            assert [c["probability"] for c in body["classes"]] == pytest.approx(
                [p for _, p in expected], abs=1e-4)
            grid = classifier.rollout(file)[0]
            assert np.asarray(body["rollout"]) == pytest.approx(grid, abs=1e-4)
            assert body["model"] == "vit/step-7" and body["timing_ms"]["batch_sentences"] == [1]
        model = api.get("/v1/model").json()
        assert (model["task"], model["route"], model["classes"]) == ("classify", "/v1/classify",
                                                                     list(BARS))
        assert model["limits"]["max_pixels"] == 4096 * 4096


def test_images_searched_together_get_what_each_gets_alone(classifier, tmp_path):
    files = sorted(write_image_folder(tmp_path / "images", per_class=2).rglob("*.png"))
    service = create_app(classifier, ServeSettings()).state.service
    asks = [service.read(f.read_bytes(), {}) for f in files]
    together = service.search([a.items[0] for a in asks], service.settings.decode)
    for ask, (row, _) in zip(asks, together):
        alone, _ = service.search(ask.items, service.settings.decode)[0]
        assert torch.allclose(row, alone, atol=1e-5)


def test_an_image_too_large_is_refused_from_its_header_before_it_is_decoded(classifier,
                                                                           monkeypatch):
    import transduce.serving.images as served

    def never(*args, **kwargs):
        raise AssertionError("the image was decoded")

    big = png(np.zeros((300, 400), dtype=np.uint8))
    with client(classifier, max_pixels=100_000) as api:
        monkeypatch.setattr(served, "read_image", never)
        answer = api.post("/v1/classify?resize=true", content=big,
                          headers={"Content-Type": "image/png"})
        assert answer.status_code == 413
        assert "400x300 pixels, more than this server's 100,000 (--max-pixels)" in \
            answer.json()["detail"]
    with client(classifier, max_body_bytes=len(big) - 1) as api:
        answer = api.post("/v1/classify?resize=true", content=big,
                          headers={"Content-Type": "image/png"})
        assert answer.status_code == 413 and "--max-body-bytes" in answer.json()["detail"]


@pytest.mark.parametrize("body, kind, query, status, words", [
    ("small", "image/png", "", 422, "16x16 pixels; the model reads 8x8: add ?resize=true"),
    ("small", "image/png", "?resize=true", 200, ""),
    (b"not an image", "image/png", "", 422, "the uploaded image: not a readable image"),
    ("small", "application/json", "", 415, "with Content-Type image/..."),
    ("small", "image/png", "?top_k=zero", 422, "top_k=zero: a whole number"),
    ("small", "image/png", "?colour=red", 422, "unknown query parameter 'colour'"),
    (b"", "image/png", "", 400, "the body is empty"),
])
def test_each_bad_upload_is_a_status_and_a_sentence(classifier, body, kind, query, status, words):
    body = png(np.full((16, 16), 200, dtype=np.uint8)) if body == "small" else body
    with client(classifier) as api:
        answer = api.post("/v1/classify" + query, content=body, headers={"Content-Type": kind})
        assert answer.status_code == status, answer.text
        assert words in answer.text
