"""Parsing served (``serving/parsing.py``): each sentence's tree as ``Parser.parse`` gives it,
errors named by the request's own numbering (a translator of bracket vocabulary stands in for a
trained parser, as in ``tests/test_parser.py``)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from transduce.config import DecodeConfig
from transduce.parser import Parser
from transduce.serving.app import ServeSettings, create_app

from ..test_parser import Brackets

LOCAL = "http://127.0.0.1"


class Run(Brackets):
    info = {"step": 3}


@pytest.fixture()
def parser():
    return Parser(Run())


def test_each_sentence_gets_the_tree_and_score_the_parser_gives(parser):
    lines = ["the cat sat", "", "dogs bark loudly at night"]
    with TestClient(create_app(parser, ServeSettings()), base_url=LOCAL) as api:
        answer = api.post("/v1/parse", json={"text": lines, "beam": 2})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        expected = parser.parse_scored(lines, beam=2)
        assert body["trees"] == [tree for tree, _ in expected]
        assert body["scores"] == [pytest.approx(s, abs=1e-4) for _, s in expected[:1]] + [None] \
            + [pytest.approx(expected[2][1], abs=1e-4)]
        default = api.post("/v1/parse", json={"text": lines[:1]}).json()["trees"]
        assert default == parser.parse(lines[:1], DecodeConfig())  # the server's search
        model = api.get("/v1/model").json()
        assert (model["task"], model["route"], model["step"]) == ("parse", "/v1/parse", 3)
        wrong = api.post("/v1/translate", json={"text": lines})
        assert wrong.status_code == 404 and "its model's route is POST /v1/parse" in wrong.text


@pytest.mark.parametrize("body, status, words", [
    ({"text": []}, 422, "text: an empty list"),
    ({"text": ["a b"], "beam": 99}, 422, "beam 99: this server searches with a beam of 1 to 16"),
    ({"text": ["a b"], "alpha": 1.0}, 422, "alpha: unknown field (the fields are text, beam)"),
    ({"text": ["a"] * 65}, 413, "text has 65 sentences"),
    ({"text": ["a b", " ".join(["w"] * 40)], "beam": 1}, 422, "text[1]: a tree over its 40 words"),
])
def test_each_bad_request_is_a_status_and_a_sentence(parser, body, status, words):
    settings = ServeSettings(decode=DecodeConfig(max_len_a=0, max_len_b=20))
    with TestClient(create_app(parser, settings), base_url=LOCAL) as api:
        answer = api.post("/v1/parse", json=body)
        assert answer.status_code == status, answer.text
        assert words in answer.json()["detail"]


def test_settings_a_parser_does_not_take_are_refused(parser):
    with pytest.raises(ValueError, match="--nbest and --min-len do not apply"):
        create_app(parser, ServeSettings(decode=DecodeConfig(beam=4, nbest=2)))
