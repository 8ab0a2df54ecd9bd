"""Terminology served: ``"constraints"`` gives each sentence the translation ``translate
--constraints`` gives it, whatever its batch-mates; what cannot be served is a 422."""

from __future__ import annotations

from fastapi.testclient import TestClient  # the serve extra, in the dev extra

from transduce import load
from transduce.config import DecodeConfig
from transduce.serving.app import ServeSettings, create_app

SENTENCES = ["blue blue red big mat", "", "sees sat big", "the small house"]
TERMS = [["house"], [], ["dog", "cat"], []]


def test_the_served_terms_are_translate_s(served_run):
    translator = load(served_run)
    expected = translator.translate(SENTENCES, DecodeConfig(), constraints=TERMS)
    plain = translator.translate(SENTENCES, DecodeConfig())
    app = create_app(translator, ServeSettings(batching="dynamic"))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        body = client.post("/v1/translate", json={"text": SENTENCES, "constraints": TERMS}).json()
        alone = [client.post("/v1/translate", json={"text": [s], "constraints": [t]}).json()
                 for s, t in zip(SENTENCES, TERMS)]
        unconstrained = client.post("/v1/translate", json={"text": SENTENCES}).json()
        errors = [client.post("/v1/translate", json=body) for body in (
            {"text": SENTENCES, "constraints": TERMS[:2]},
            {"text": ["red"], "constraints": [["house dog cat " * 30]]})]
    assert body["translations"] == expected and expected != plain
    assert "house" in expected[0].split() and {"dog", "cat"} <= set(expected[2].split())
    assert [a["translations"][0] for a in alone] == expected
    assert unconstrained["translations"] == plain
    assert [e.status_code for e in errors] == [422, 422]
    assert "constraints has 2 lists for 4 sentences" in errors[0].text
    assert "constraints[0]: its constraints take" in errors[1].text
    continuous = create_app(translator, ServeSettings(batching="continuous"))
    with TestClient(continuous, base_url="http://127.0.0.1") as client:
        refused = client.post("/v1/translate", json={"text": ["red"], "constraints": [["dog"]]})
    assert refused.status_code == 422 and "--batching dynamic" in refused.text
