"""Speech recognition served (``serving/speech.py``): an uploaded recording's transcript as the
facade gives it, and every recording too long refused before it is decoded (or, when its header
understates it, before more than the limit is decoded)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile
from fastapi.testclient import TestClient

from transduce.serving.app import ServeSettings, create_app

from ..helpers import write_tone_recordings
from ..test_transcriber import transcriber  # noqa: F401 (the fixture)

LOCAL = "http://127.0.0.1"


def flac(seconds: float) -> bytes:
    out = io.BytesIO()
    tone = 0.3 * np.sin(np.arange(int(seconds * 16_000)) / 10).astype(np.float32)
    soundfile.write(out, tone, 16_000, format="FLAC")
    return out.getvalue()


def test_an_uploaded_recording_gets_the_transcript_the_facade_gives(transcriber, tmp_path):
    write_tone_recordings(tmp_path, count=3)
    files = sorted((tmp_path / "table").glob("*.flac"))
    transcriber.info = {"step": 5}
    settings = ServeSettings(decode=transcriber.decode)  # (the server searches with its own)
    with TestClient(create_app(transcriber, settings), base_url=LOCAL) as api:
        for file in files:
            answer = api.post("/v1/transcribe", content=file.read_bytes(),
                              headers={"Content-Type": "audio/flac"})
            assert answer.status_code == 200, answer.text
            assert answer.json()["text"] == list(transcriber.transcribe([file]))[0]
            assert answer.json()["seconds"] == pytest.approx(soundfile.info(file).duration,
                                                             abs=1e-3)
        model = api.get("/v1/model").json()
        assert (model["task"], model["limits"]["max_seconds"]) == ("transcribe", 30.0)


def test_a_recording_too_long_is_refused_before_it_is_decoded(transcriber, monkeypatch):
    import transduce.serving.speech as served

    decoded = []
    real = served.decode_audio
    monkeypatch.setattr(served, "decode_audio", lambda *a, **k: decoded.append(1) or real(*a, **k))
    with TestClient(create_app(transcriber, ServeSettings(max_seconds=1.0)),
                    base_url=LOCAL) as api:
        answer = api.post("/v1/transcribe", content=flac(1.5),
                          headers={"Content-Type": "audio/flac"})
        assert answer.status_code == 413 and decoded == []
        assert "is 1.5 s long, more than this server's 1 s (--max-seconds)" in answer.text
        # a header that says less than the file holds: no more than the limit is decoded
        monkeypatch.setattr(soundfile, "info", lambda *a: type("Info", (), {
            "frames": 8000, "samplerate": 16_000})())
        answer = api.post("/v1/transcribe", content=flac(1.5),
                          headers={"Content-Type": "audio/flac"})
        assert answer.status_code == 413 and "more than its header says" in answer.text
    with TestClient(create_app(transcriber, ServeSettings()), base_url=LOCAL) as api:
        answer = api.post("/v1/transcribe", content=flac(3.0),
                          headers={"Content-Type": "audio/flac"})
        assert answer.status_code == 422  # found once decoded, where the header said 0.5 s
        assert "3.0 s, longer than the about 2 s the model's encoder positions hold" in answer.text
    monkeypatch.undo()
    with TestClient(create_app(transcriber, ServeSettings()), base_url=LOCAL) as api:
        answer = api.post("/v1/transcribe", content=flac(3.0),
                          headers={"Content-Type": "audio/flac"})
        assert answer.status_code == 422  # the model's encoder holds about 2 s
        assert "3.0 s, longer than the about 2 s the model's encoder positions hold" in answer.text


@pytest.mark.parametrize("body, kind, status, words", [
    (b"not a recording", "audio/flac", 422, "the uploaded recording: not a readable recording"),
    ("short", "image/png", 415, "with Content-Type audio/..."),
    ("short", "text/plain", 415, "(got 'text/plain')"),
    (b"", "audio/wav", 400, "the body is empty"),
])
def test_each_bad_upload_is_a_status_and_a_sentence(transcriber, body, kind, status, words):
    body = flac(0.5) if body == "short" else body
    with TestClient(create_app(transcriber, ServeSettings()), base_url=LOCAL) as api:
        answer = api.post("/v1/transcribe", content=body, headers={"Content-Type": kind})
        assert answer.status_code == status, answer.text
        assert words in answer.text
