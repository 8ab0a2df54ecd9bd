"""The service in-process (FastAPI's TestClient over httpx): answers, errors, metrics, batching."""

from __future__ import annotations

import concurrent.futures
import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from fastapi.testclient import TestClient  # the serve extra, in the dev extra

from transduce import load
from transduce.config import DecodeConfig
from transduce.data.dataset import pad_sequences
from transduce.serving.app import ServeSettings, create_app
from transduce.serving.batcher import Batcher

from ..helpers import cli

LOCAL = "http://127.0.0.1"  # the Host a local client sends (a server answers only its own names)
SENTENCES = ["the cat sat on the "
             "mat", "", "a big dog runs", "red", "the small house sees a blue cat"]


@pytest.fixture(scope="module")
def translator(served_run):
    return load(served_run)


def client_for(translator, **settings) -> TestClient:
    return TestClient(create_app(translator, ServeSettings(**settings)), base_url=LOCAL)


def test_translations_equal_transduce_translate(translator, served_run):
    text = "\n".join(SENTENCES) + "\n"
    with client_for(translator) as client:
        for flags, body in (
            ([], {}),
            (["--beam", "1"], {"beam": 1}),
            (["--beam", "5", "--alpha", "1.0"], {"beam": 5, "alpha": 1.0}),
        ):
            expected = cli("translate", str(served_run), *flags, input=text).stdout.split("\n")[:-1]
            answer = client.post("/v1/translate", json={"text": SENTENCES, **body})
            assert answer.status_code == 200, answer.text
            assert answer.json()["translations"] == expected
            assert expected[1] == "" and all(expected[i] for i in (0, 2, 3, 4))
        # nbest: the same hypotheses and scores as translate --nbest
        rows = [
            line.split("\t")
            for line in cli(
                "translate", str(served_run), "--nbest", "3", input=text
            ).stdout.splitlines()
        ]
        answer = client.post("/v1/translate", json={"text": SENTENCES, "nbest": 3}).json()
        got = [
            (str(n), f"{h['score']:.4f}", h["text"])
            for n, hyps in enumerate(answer["hypotheses"])
            for h in hyps
        ]
        assert [tuple(r) for r in rows] == got
        assert answer["hypotheses"][1] == [] and len(answer["hypotheses"][0]) == 3


def test_the_model_s_task_prefix_goes_before_each_sentence(served_run):
    """A model trained with ``prepare --task-prefix`` is served as it translates: the prefix
    before every sentence."""
    prefixed = load(served_run)
    prefixed.task_prefix = "red blue "
    with client_for(prefixed) as client:
        answer = client.post("/v1/translate", json={"text": SENTENCES}).json()["translations"]
    assert answer == prefixed.translate(SENTENCES)
    prefixed.task_prefix = ""
    assert answer != prefixed.translate(SENTENCES)


def test_attention_is_each_sentences_own_cross_attention(translator):
    """Sentences of different lengths share a batch; each gets the weights a single-sentence
    teacher-forced pass over its own output gives, cut to its own pieces."""
    sentences = ["the cat sat on the mat", "red", "a big dog runs on a small blue mat"]
    with client_for(translator) as client:
        answer = client.post(
            "/v1/translate", json={"text": sentences, "attention": True, "attention_layers": True}
        )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    model, tok, cfg = translator.model, translator.tokenizer, translator.model.config
    for sentence, translation, item in zip(sentences, body["translations"], body["attention"]):
        src_ids = tok.encode_src([sentence])[0]
        tgt_ids = tok.encode_tgt([translation])[0]
        assert item["source"] == tok.src_pieces(src_ids) + ["</s>"]
        assert item["target"] == tok.tgt_pieces(tgt_ids) + ["</s>"]
        with torch.no_grad():
            _, attention = model(
                pad_sequences([src_ids], cfg.pad_id, suffix=cfg.eos_id),
                pad_sequences([tgt_ids], cfg.pad_id, prefix=cfg.start_id),
                need_weights=True,
            )
        expected = np.stack([w[0].mean(0).numpy() for w in attention.cross])  # (layers, T, S)
        weights = np.array(item["weights"])
        assert weights.shape == (len(tgt_ids) + 1, len(src_ids) + 1)
        np.testing.assert_allclose(weights, expected[-1], atol=2e-4)
        np.testing.assert_allclose(np.array(item["layers"]), expected, atol=2e-4)
        np.testing.assert_allclose(weights.sum(1), 1.0, atol=1e-3)
    with client_for(translator) as client:
        plain = client.post("/v1/translate", json={"text": ["red", ""], "attention": True}).json()
    assert plain["attention"][1] is None and "layers" not in plain["attention"][0]


LIMITS = dict(max_request_sentences=3, max_chars=40, max_body_bytes=400, queue_limit=4, max_beam=6)
LONG = " ".join(["cat"] * 300)  # more tokens than the model's 255


JSON = {"Content-Type": "application/json"}


def raw(body: bytes | str, headers: dict = JSON):
    return {"content": body.encode() if isinstance(body, str) else body, "headers": headers}


BAD_REQUESTS = [
    # (name, request keyword arguments, status, part of the message)
    ("not-utf8", raw(b'{"text": ["\xff\xfe"]}'), 400, "not valid UTF-8 (byte 11)"),
    (
        "malformed-json",
        raw('{"text": ["a"'),
        400,
        "not valid JSON: Expecting ',' delimiter at line 1, column 14",
    ),
    ("empty-body", raw(""), 400, "the body is empty"),
    ("not-an-object", {"json": ["a"]}, 422, "must be a JSON object"),
    ("text-missing", {"json": {"beam": 2}}, 422, "text: missing"),
    ("text-a-string", {"json": {"text": "the cat"}}, 422, "text: Input should be a valid list"),
    (
        "text-numbers",
        {"json": {"text": ["the cat", 5]}},
        422,
        "text[1]: Input should be a valid string",
    ),
    ("text-empty-list", {"json": {"text": []}}, 422, "text: an empty list"),
    ("unknown-field", {"json": {"text": ["a"], "beams": 2}}, 422, "beams: unknown field"),
    (
        "beam-a-string",
        {"json": {"text": ["a"], "beam": "4"}},
        422,
        "beam: Input should be a valid integer",
    ),
    (
        "beam-0",
        {"json": {"text": ["a"], "beam": 0}},
        422,
        "beam 0: this server searches with a beam of 1 to 6",
    ),
    ("beam-over-max", {"json": {"text": ["a"], "beam": 7}}, 422, "(--max-beam)"),
    (
        "nbest-over-beam",
        {"json": {"text": ["a"], "beam": 2, "nbest": 3}},
        422,
        "nbest=3 is more than beam=2",
    ),
    ("alpha-nan", raw('{"text": ["a"], "alpha": NaN}'), 422, "alpha nan: must be a finite number"),
    ("alpha-negative", {"json": {"text": ["a"], "alpha": -1.0}}, 422, "alpha must be at least 0"),
    (
        "layers-without-attention",
        {"json": {"text": ["a"], "attention_layers": True}},
        422,
        "attention_layers needs attention",
    ),
    (
        "too-many-sentences",
        {"json": {"text": ["a"] * 4}},
        413,
        "at most 3 per request (--max-request-sentences)",
    ),
    (
        "too-many-characters",
        {"json": {"text": ["a", "x" * 41]}},
        413,
        "text[1] has 41 characters; this server takes at most 40",
    ),
    (
        "body-too-large",
        {"json": {"text": ["a" * 30] * 3, "pad": "x" * 400}},
        413,
        "larger than this server's limit of 400 bytes (--max-body-bytes)",
    ),
    (
        "body-too-large-chunked",
        {"content": iter([b'{"text": ["', b"a" * 300, b"a" * 300, b'"]}']), "headers": JSON},
        413,
        "limit of 400 bytes",
    ),
    (
        "lone-surrogate",
        raw('{"text": ["a \\ud800 b"]}'),
        422,
        "text[0]: not valid Unicode (a lone surrogate",
    ),
    (
        "a-form-not-json",
        raw('{"text": ["a"]}', {"Content-Type": "text/plain"}),
        415,
        "Content-Type: application/json",
    ),
    ("no-content-type", raw('{"text": ["a"]}', {}), 415, "send the body as JSON"),
    (
        "a-foreign-host",
        raw('{"text": ["a"]}', {**JSON, "Host": "attacker.example"}),
        403,
        "not for the host 'attacker.example'",
    ),
]


@pytest.mark.parametrize(
    "body", ["[" * 100_000 + "]" * 100_000, '{"text": ' + "[" * 100_000 + "]" * 100_000 + "}"]
)
def test_json_nested_without_bound_is_a_bad_request_not_a_server_error(translator, body):
    with client_for(translator) as client:
        answer = client.post("/v1/translate", **raw(body))
    assert answer.status_code == 400 and "nests JSON too deeply" in answer.json()["detail"]


@pytest.mark.parametrize(
    "name,request_,status,message", BAD_REQUESTS, ids=[c[0] for c in BAD_REQUESTS]
)
def test_bad_requests_get_their_status_and_a_message(translator, name, request_, status, message):
    with client_for(translator, **LIMITS) as client:
        answer = client.post("/v1/translate", **request_)
        assert answer.status_code == status, answer.text
        assert message in answer.json()["detail"]
        # and it goes on
        assert client.post("/v1/translate", json={"text": ["the cat"]}).status_code == 200


def test_token_and_queue_limits(translator):
    with client_for(translator, max_chars=10_000) as client:
        answer = client.post("/v1/translate", json={"text": ["the cat", LONG]})
        assert (
            answer.status_code == 413
            and "text[1] is 300 tokens long, more than the model's 255" in answer.json()["detail"]
        )
    with client_for(translator, queue_limit=2) as client:
        answer = client.post("/v1/translate", json={"text": ["a", "b", "c"]})
        assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
        assert (
            "the queue is full: 0 sentences wait and this request brings 3, over the limit of 2"
            in answer.json()["detail"]
        )


@pytest.mark.parametrize("batching", ["continuous", "dynamic"])
def test_a_failing_search_is_a_500_and_the_worker_goes_on(translator, monkeypatch, batching):
    from transduce.decoding.running import RunningSearch
    from transduce.serving.worker import Searches

    owner, name = (Searches, "search") if batching == "dynamic" else (RunningSearch, "step")
    real, calls = getattr(owner, name), []

    def fail_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("out of memory (simulated)")
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, fail_once)
    app = create_app(translator, ServeSettings(batching=batching))
    with TestClient(app, raise_server_exceptions=False, base_url=LOCAL) as client:
        answer = client.post("/v1/translate", json={"text": ["the cat"]})
        assert answer.status_code == 500 and "out of memory (simulated)" in answer.json()["detail"]
        assert client.post("/v1/translate", json={"text": ["the cat"]}).status_code == 200
        # a server error is counted as one, not as a client gone
        metrics = client.get("/metrics").text
        assert 'path="/v1/translate",status="500"} 1' in metrics and 'status="499"' not in metrics


def test_health_model_metrics_and_the_page(translator):
    from transduce.model import Transformer

    with client_for(translator) as client:
        assert client.get("/health").json() == {"status": "ready"}
        info = client.get("/v1/model").json()
        assert (info["source_language"], info["target_language"]) == ("en", "de")
        assert info["parameters"] == Transformer(translator.model.config).num_parameters()["total"]
        assert info["vocabulary"]["source"] == translator.model.config.vocab_size
        assert info["search"]["beam"] == 4 and info["limits"]["max_source_tokens"] == 255
        assert (
            info["checkpoint"] == str(translator.folder) and info["step"] == translator.info["step"]
        )
        for _ in range(3):
            assert (
                client.post("/v1/translate", json={"text": ["the cat", "a dog"]}).status_code == 200
            )
        client.post("/v1/translate", json={"text": []})
        client.get("/no-such-page")
        metrics = client.get("/metrics")
        assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
        values = {}
        for line in metrics.text.splitlines():
            if line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                values[key] = float(value)
        assert values['transduce_requests_total{path="/v1/translate",status="200"}'] == 3
        assert values['transduce_request_errors_total{path="/v1/translate",status="422"}'] == 1
        assert values['transduce_requests_total{path="other",status="404"}'] == 1
        assert values['transduce_request_duration_seconds_count{path="/v1/translate"}'] == 4
        assert (
            values['transduce_request_duration_seconds_bucket{path="/v1/translate",le="+Inf"}'] == 4
        )
        # (a step of the running search counts as a batch: several per request)
        assert (
            values["transduce_sentences_total"] == 6
            and values["transduce_batch_sentences_count"] >= 3
        )
        assert (
            values["transduce_generated_tokens_total"] >= 6
            and values["transduce_tokens_per_second"] > 0
        )
        assert (
            values["transduce_queue_sentences"] == 0 and values["transduce_requests_in_flight"] == 0
        )
        page = client.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        html = page.text
        assert '<label id="source-label" for="source">' in html and 'id="translate"' in html
        # works offline
        assert "src=\"http" not in html and "href=\"http" not in html and "@import" not in html
        schema = client.get("/openapi.json").json()
        assert "/v1/translate" in schema["paths"] and "TranslateRequest" in json.dumps(schema)


def hold_until_queued(batcher, sentences: int) -> None:
    """The worker takes its first work only once ``sentences`` wait in the queue: the requests of a
    test all arrive before the first search, whatever the machine's speed (a 60 s deadlock
    guard)."""
    import time

    real, held = batcher._next_work, []

    def first_when_all_queued():
        if not held:
            deadline = time.monotonic() + 60
            while batcher.waiting < sentences:
                assert time.monotonic() < deadline, "the requests never all arrived"
                time.sleep(0.001)
            held.append(True)
        return real()

    batcher._next_work = first_when_all_queued


def post_concurrently(client, bodies):
    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda body: client.post("/v1/translate", json=body), bodies))


def test_concurrent_requests_share_batches_and_get_their_own_results(translator):
    """Twelve single-sentence requests arrive within the batcher's wait: fewer searches than
    requests, and every response is its own sentence's translation."""
    sentences = [
        "the cat sat",
        "a dog runs",
        "red blue",
        "the big house",
        "sees the mat",
        "a small cat",
        "the dog sat on a mat",
        "blue",
        "walks the red dog",
        "the cat sees a house",
        "big",
        "on the mat",
    ]
    alone = [translator.translate([s])[0] for s in sentences]
    app = create_app(translator, ServeSettings(batching="dynamic", max_wait_ms=1500))
    hold_until_queued(app.state.batcher, len(sentences))
    with TestClient(app, base_url=LOCAL) as client:
        answers = post_concurrently(client, [{"text": [s]} for s in sentences])
    assert [a.json()["translations"] for a in answers] == [[t] for t in alone]
    history = list(app.state.batcher.history)
    assert sum(r.sentences for r in history) == len(sentences)
    assert len(history) < len(sentences) and max(r.requests for r in history) > 1
    assert max(max(a.json()["timing_ms"]["batch_sentences"]) for a in answers) > 1


def test_different_searches_are_batched_separately(translator):
    app = create_app(translator, ServeSettings(batching="dynamic", max_wait_ms=1500))
    bodies = [{"text": ["the cat sat"], "beam": 1}, {"text": ["the cat sat"], "beam": 4},
              {"text": ["a dog runs"], "beam": 1}, {"text": ["a dog runs"], "beam": 4, "nbest": 2}]
    hold_until_queued(app.state.batcher, len(bodies))
    with TestClient(app, base_url=LOCAL) as client:
        answers = post_concurrently(client, bodies)
    for body, answer in zip(bodies, answers):
        assert answer.json()["translations"] == translator.translate(
            body["text"], beam=body["beam"]
        )
    # beam 1 shared; nbest 2 apart
    assert sorted(r.beam for r in app.state.batcher.history) == [1, 4, 4]


def test_batching_off_serves_one_request_per_search(translator):
    app = create_app(translator, ServeSettings(batching=False, max_wait_ms=1500))
    with TestClient(app, base_url=LOCAL) as client:
        answers = post_concurrently(client, [{"text": ["the cat", "a dog"]}] * 4)
    assert all(a.json()["translations"] == answers[0].json()["translations"] for a in answers)
    assert [r.sentences for r in app.state.batcher.history] == [2, 2, 2, 2]


def test_a_cancelled_request_is_dropped_from_the_queue(translator):
    batcher = Batcher(translator, max_wait=0.0)
    decode = DecodeConfig()
    gone = batcher.submit([[5, 6, 7]], decode)
    kept = batcher.submit([[8, 9]], decode)
    gone.future.cancel()  # its client went away before the worker took it
    batcher.start()
    assert kept.future.result(timeout=60) is kept
    batcher.close()
    assert [r.sentences for r in batcher.history] == [1]


def test_the_token_budget_splits_a_queue(translator):
    batcher = Batcher(translator, max_wait=0.0)
    decode = replace(DecodeConfig(), max_tokens=12)  # 3 sentences of 3 tokens + eos
    jobs = [batcher.submit([[5, 6, 7]], decode) for _ in range(7)]
    batcher.start()
    for job in jobs:
        job.future.result(timeout=60)
    batcher.close()
    assert [r.sentences for r in batcher.history] == [3, 3, 1]


def test_docs_page_works_offline(translator):
    """/docs describes every route from the OpenAPI schema without loading anything from elsewhere
    (FastAPI's Swagger UI comes from a CDN and is blank offline); the schema is at /openapi.json."""
    with client_for(translator) as client:
        page = client.get("/docs")
        schema = client.get("/openapi.json").json()
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for path in schema["paths"]:
        assert path in page.text
    assert (
        "/openapi.json" in page.text
        and "<script" not in page.text
        and "cdn" not in page.text.lower()
    )


def test_a_drafted_translator_is_served_greedily_with_the_same_translations(served_run):
    from transduce.serving.app import batching_mode

    drafted, plain = load(served_run), load(served_run)
    drafted.use_draft("self:1", 3)
    greedy = ServeSettings(decode=DecodeConfig(beam=1), max_beam=1)
    with pytest.raises(ValueError, match="serve it with --beam 1 and --max-beam 1"):
        create_app(drafted, ServeSettings(decode=DecodeConfig(beam=1)))
    app = create_app(drafted, greedy)
    assert batching_mode(greedy, False, "cuda", app.state.service.continuous)[0] == "dynamic"
    with TestClient(app, base_url=LOCAL) as client, client_for(plain, **vars(greedy)) as other:
        answer = client.post("/v1/translate", json={"text": SENTENCES}).json()["translations"]
        assert answer == other.post("/v1/translate", json={"text": SENTENCES}).json()[
            "translations"]
    assert drafted.draft.proposed > 0
