"""Answers of POST /v1/translate: translations in the request's order, empty lines answered
empty, hypotheses and attention only when asked for, one body or a stream."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import numpy as np

from transduce.config import DecodeConfig
from transduce.decoding import Hypothesis
from transduce.serving.answers import respond, stream
from transduce.serving.schemas import TranslateRequest
from transduce.serving.worker import Job, Result

WORDS = {5: "ein", 6: "Hund", 7: "Katze"}
TOKENIZER = SimpleNamespace(decode_tgt=lambda ids: " ".join(WORDS[i] for i in ids),
                            src_pieces=lambda ids: [f"s{i}" for i in ids],
                            tgt_pieces=lambda ids: [WORDS[i] for i in ids])


def _job(ask: TranslateRequest):
    todo = [i for i, line in enumerate(ask.text) if line.strip()]
    job = Job([[9] * (n + 1) for n in range(len(todo))], DecodeConfig(), attention=ask.attention)
    job.results = [Result([Hypothesis([5, 6 + n], -1.0, -0.5), Hypothesis([7], -2.0, -1.25)],
                          np.full((2, 3, n + 2), 0.5)) for n in range(len(todo))]
    return todo, job


def test_translations_keep_the_request_s_order_and_empty_lines_stay_empty():
    ask = TranslateRequest(text=["a dog", "", "a cat"])
    todo, job = _job(ask)
    body = respond(ask, todo, job, TOKENIZER, "run", arrived=job.arrived)
    assert body["translations"] == ["ein Hund", "", "ein Katze"]
    assert "hypotheses" not in body and "attention" not in body and body["model"] == "run"
    assert set(body["timing_ms"]) == {"total", "queue", "search", "batch_sentences"}


def test_hypotheses_and_attention_come_when_asked_for():
    ask = TranslateRequest(text=["a dog", ""], nbest=2, beam=2, attention=True)
    todo, job = _job(ask)
    body = respond(ask, todo, job, TOKENIZER, "run", arrived=job.arrived)
    assert body["hypotheses"] == [[{"text": "ein Hund", "score": -0.5},
                                   {"text": "Katze", "score": -1.25}], []]
    attention = body["attention"][0]
    assert attention["source"] == ["s9", "</s>"] and attention["target"] == ["ein", "Hund", "</s>"]
    assert np.array(attention["weights"]).shape == (3, 2) and "layers" not in attention
    assert body["attention"][1] is None


def test_a_stream_sends_empty_lines_first_then_each_sentence_then_done():
    ask = TranslateRequest(text=["", "a dog", "a cat"])
    todo, job = _job(ask)

    async def read() -> list[dict]:
        answers: asyncio.Queue = asyncio.Queue()
        for k, result in enumerate(job.results):
            answers.put_nowait((k, result))
        job.future.set_result(job)
        return [json.loads(line) async for line in stream(ask, todo, job, answers, TOKENIZER,
                                                           "run", job.arrived)]

    lines = asyncio.run(read())
    assert [line.get("index") for line in lines] == [0, 1, 2, None]
    assert [line.get("translation") for line in lines[:3]] == ["", "ein Hund", "ein Katze"]
    assert lines[-1]["done"] is True and lines[-1]["model"] == "run"
