"""The server's settings and request bodies: each mistake a status and a sentence a person
reads."""

from __future__ import annotations

import re

import pytest

from transduce.config import DecodeConfig
from transduce.serving.schemas import ApiError, ServeSettings, parse_request


@pytest.mark.parametrize("kwargs, words", [
    (dict(batching="sometimes"), "batching 'sometimes': choose one of"),
    (dict(max_wait_ms=20_000.0), "max_wait_ms must be between 0 and 10000"),
    (dict(decode=DecodeConfig(sampling=True, beam=1)), "sampling is not served"),
    (dict(decode=DecodeConfig(beam=20)), "the default beam 20 is more than max_beam 16"),
    (dict(max_seconds=0.0), "max_seconds must be between 0 and 86400"),
    (dict(max_pixels=0), "max_pixels must be at least 1"),
    (dict(queue_limit=0), "queue_limit must be at least 1"),
])
def test_settings_that_cannot_serve_are_refused(kwargs, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        ServeSettings(**kwargs)


def test_true_and_false_batching_mean_dynamic_and_off():
    assert ServeSettings(batching=True).batching == "dynamic"
    assert ServeSettings(batching=False).batching == "off"


@pytest.mark.parametrize("body, status, words", [
    (b"\xff", 400, "not valid UTF-8 (byte 0)"),
    (b"  ", 400, "the body is empty"),
    (b'{"text": [', 400, "not valid JSON"),
    (b'["a"]', 422, "must be a JSON object such as"),
    (b'{"txt": ["a"]}', 422, "txt: unknown field"),
    (b'{}', 422, "text: missing"),
    (b'{"text": ["a", 5]}', 422, "text[1]: Input should be a valid string"),
    (b'{"text": ["\\ud800"]}', 422, "text[0]: not valid Unicode (a lone surrogate"),
])
def test_a_bad_body_is_its_status_and_a_message(body, status, words):
    with pytest.raises(ApiError) as refused:
        parse_request(body)
    assert refused.value.status == status and words in refused.value.message


def test_a_good_body_is_a_request():
    ask = parse_request('{"text": ["a dog", ""], "beam": 2}'.encode())
    assert ask.text == ["a dog", ""] and ask.beam == 2
