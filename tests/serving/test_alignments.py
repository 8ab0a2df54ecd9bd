"""Word alignments served: ``"alignments": true`` answers each translation's alignment as
``translate --alignments`` writes it, in one response or streamed."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient  # the serve extra, in the dev extra

from transduce import load
from transduce.config import DecodeConfig
from transduce.decoding.alignment import align_lines
from transduce.serving.app import ServeSettings, create_app

SENTENCES = ["the cat sat on the mat", "", "a big dog runs", "red blue house"]


def test_the_served_alignments_are_translate_s(served_run):
    translator = load(served_run)
    expected = align_lines(translator, SENTENCES, DecodeConfig())
    client = TestClient(create_app(translator, ServeSettings()), base_url="http://127.0.0.1")
    with client:
        body = client.post("/v1/translate", json={"text": SENTENCES, "alignments": True}).json()
        plain = client.post("/v1/translate", json={"text": SENTENCES}).json()
        streamed = client.post("/v1/translate",
                               json={"text": SENTENCES, "alignments": True, "stream": True})
    assert body["translations"] == [text for text, _ in expected] == plain["translations"]
    assert body["alignments"] == [pairs for _, pairs in expected]
    assert body["alignments"][1] == "" and all(body["alignments"][i] for i in (0, 2, 3))
    assert "alignments" not in plain and "attention" not in body
    items = [json.loads(line) for line in streamed.text.splitlines()]
    by_index = {item["index"]: item["alignments"] for item in items if "index" in item}
    assert [by_index[i] for i in range(len(SENTENCES))] == body["alignments"]
