"""Continuous batching in the server: sentences join the running search and leave it when done,
answers equal single requests, admission is first-come, vanished clients leave, answers stream."""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from dataclasses import replace

import pytest

from fastapi.testclient import TestClient

from transduce import load
from transduce.config import DecodeConfig
from transduce.decoding import translate_ids
from transduce.serving.app import ServeSettings, create_app
from transduce.serving.continuous import ContinuousBatcher

LOCAL = "http://127.0.0.1"
LONG = "the cat sat on the mat and the small dog sees a big red house on the blue mat"
SHORT = ["red", "a dog runs", "the big house", "blue cat", "sees the mat", "a small cat sat"]


@pytest.fixture(scope="module")
def translator(served_run):
    return load(served_run)


def ids(translator, text: str) -> list[int]:
    return translator.encode([text])[0]


def started_batcher(translator, **kwargs) -> ContinuousBatcher:
    batcher = ContinuousBatcher(translator, **kwargs)
    batcher.start()
    return batcher


def wait_for(condition, timeout: float = 300.0) -> None:  # (a guard against a hang only)
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


class StepGate:
    """Holds the worker after its ``after``-th step until ``until()`` is true (or ``release()``), so
    that sentences join at steps the test chooses, whatever the machine's speed."""

    def __init__(self, batcher, after: int, until=None):
        self.after, self.count, self.until = after, 0, until
        self.reached, self.released = threading.Event(), threading.Event()
        inner = batcher.on_batch

        def on_batch(record):
            if inner is not None:
                inner(record)
            self.count += 1
            if self.count == self.after:
                self.reached.set()
                if self.until is not None:
                    wait_for(self.until)
                else:
                    assert self.released.wait(60), "the test never released the worker"

        batcher.on_batch = on_batch

    def release(self) -> None:
        self.released.set()


def assert_alone(translator, job, decode: DecodeConfig) -> None:
    """Each sentence of ``job`` got what it gets searched alone: the same tokens and scores."""
    for source, result in zip(job.sources, job.results):
        alone = translate_ids(translator.model, [source], decode, precision=translator.precision)[0]
        assert [h.tokens for h in result.hypotheses] == [h.tokens for h in alone]
        assert all(abs(a.score - b.score) < 1e-4 for a, b in zip(result.hypotheses, alone))


def test_concurrent_requests_equal_single_requests(translator):
    """Mixed requests (1-3 sentences, beams 1 and 4, nbest, attention) at once: each answer is what
    the same request gets alone, and the running search held several sentences at a time."""
    bodies = [{"text": [s], "beam": 1 + 3 * (n % 2)} for n, s in enumerate(SHORT)]
    bodies += [
        {"text": [LONG, "red", ""], "nbest": 2},
        {"text": ["a dog runs", LONG], "attention": True},
    ]
    app = create_app(translator, ServeSettings(batching="continuous"))
    with TestClient(app, base_url=LOCAL) as client:
        alone = [client.post("/v1/translate", json=body).json() for body in bodies]
        batcher = app.state.batcher
        total = sum(1 for body in bodies for line in body["text"] if line)
        # after the first step, the worker waits until every other request has come: they join
        # together
        StepGate(
            batcher,
            after=len(batcher.history) + 1,
            until=lambda: batcher.waiting + batcher.busy >= total,
        )
        with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
            together = list(
                pool.map(lambda body: client.post("/v1/translate", json=body).json(), bodies)
            )
    for a, b in zip(alone, together):
        assert a["translations"] == b["translations"]
        assert a.get("hypotheses") == b.get("hypotheses")
        for x, y in zip(a.get("attention") or [], b.get("attention") or []):
            assert (x is None) == (y is None) and (x is None or x["target"] == y["target"])
    assert max(r.sentences for r in app.state.batcher.history) > 1


def test_a_sentence_joins_the_running_search_and_leaves_before_the_long_one(translator):
    batcher = ContinuousBatcher(translator)
    gate = StepGate(batcher, after=2)
    batcher.start()
    decode = DecodeConfig(beam=4)
    long = batcher.submit([ids(translator, LONG)], decode)
    assert gate.reached.wait(60)  # the long sentence is two steps in
    short = batcher.submit([ids(translator, "red")], decode)
    # the steps the worker had made when it answered each (whatever the threads' timing)
    answered = {}
    for name, job in (("short", short), ("long", long)):
        job.future.add_done_callback(lambda _, name=name: answered.setdefault(name, gate.count))
    gate.release()
    short.future.result(timeout=60)
    long.future.result(timeout=60)
    batcher.close()
    assert answered["short"] < answered["long"]  # answered while the long one still ran
    assert short.batch_sizes == [2]  # it joined a search that held the long one
    assert_alone(translator, short, decode)
    assert_alone(translator, long, decode)


def test_admission_is_first_come_whatever_the_budget_or_settings(translator):
    """A sentence that does not fit the budget, or asks for other settings, is not overtaken by the
    ones behind it: they join no earlier than it does."""
    batcher = started_batcher(translator)
    decode = replace(DecodeConfig(beam=2), max_tokens=40)
    first = batcher.submit([ids(translator, LONG)], decode)
    wait_for(lambda: len(batcher.history) >= 1)
    big = batcher.submit([ids(translator, LONG)], decode)  # 2 x the long source is over 40 tokens
    behind = [batcher.submit([ids(translator, s)], decode) for s in SHORT[:2]]
    other = batcher.submit([ids(translator, "red")], replace(decode, beam=1))
    after = batcher.submit([ids(translator, "blue cat")], decode)
    for job in (first, big, *behind, other, after):
        job.future.result(timeout=60)
    batcher.close()
    assert first.started < big.started <= min(job.started for job in behind)
    # after the first left
    assert big.started >= first.future.result().started + first.search_seconds - 1e-6
    assert max(job.started for job in behind) <= other.started <= after.started


def test_a_vanished_client_leaves_the_running_search(translator):
    batcher = ContinuousBatcher(translator)
    gate = StepGate(batcher, after=1)
    decode = DecodeConfig(beam=4)
    gone = batcher.submit([ids(translator, LONG)] * 3, decode)
    kept = batcher.submit([ids(translator, LONG)], decode)
    batcher.start()  # both join at the first step
    assert gate.reached.wait(60) and batcher.busy == 4
    gone.future.cancel()  # (one step in: the long sentences are far from done)
    gate.release()
    wait_for(lambda: batcher.busy <= 1)
    kept.future.result(timeout=60)
    batcher.close()
    assert batcher.search is not None and len(batcher.search) == 0
    assert all(r is None for r in gone.results)
    assert_alone(translator, kept, decode)


def test_close_finishes_what_is_queued_and_in_flight(translator):
    batcher = started_batcher(translator)
    jobs = [
        batcher.submit([ids(translator, s)], DecodeConfig(beam=1 + n % 2))
        for n, s in enumerate(SHORT)
    ]
    batcher.close()
    assert all(job.future.done() and job.remaining == 0 for job in jobs)


def stream_lines(client, body) -> list[dict]:
    with client.stream("POST", "/v1/translate", json={**body, "stream": True}) as answer:
        assert answer.status_code == 200 and answer.headers["content-type"].startswith(
            "application/x-ndjson"
        )
        return [json.loads(line) for line in answer.iter_lines() if line]


@pytest.mark.parametrize("batching", ["continuous", "dynamic"])
def test_a_streamed_request_gets_each_sentence_once_then_done(translator, batching):
    body = {"text": [LONG, "", "red", "a dog runs"], "nbest": 2, "attention": True}
    with TestClient(
        create_app(translator, ServeSettings(batching=batching)), base_url=LOCAL
    ) as client:
        whole = client.post("/v1/translate", json=body).json()
        lines = stream_lines(client, body)
    *sentences, last = lines
    assert last["done"] is True and last["model"] == whole["model"] and "total" in last["timing_ms"]
    assert sorted(item["index"] for item in sentences) == [0, 1, 2, 3]
    for item in sentences:
        i = item["index"]
        assert (
            item["translation"] == whole["translations"][i]
            and item["hypotheses"] == whole["hypotheses"][i]
        )
        assert item.get("attention") == whole["attention"][i]
    if batching == "continuous":  # the short sentences were sent before the long one finished
        order = [item["index"] for item in sentences]
        assert order.index(0) == len(order) - 1


def test_a_stream_says_when_the_search_failed(translator, monkeypatch):
    from transduce.decoding.running import RunningSearch

    def fail(self):
        raise RuntimeError("out of memory (simulated)")

    monkeypatch.setattr(RunningSearch, "step", fail)
    with TestClient(create_app(translator, ServeSettings(batching="continuous")),
                    base_url=LOCAL) as client:
        lines = stream_lines(client, {"text": ["", "red"]})
    assert lines[0] == {"index": 0, "translation": ""}
    assert lines[-1] == {"error": "internal error: RuntimeError: out of memory (simulated)"}


def test_a_sentence_is_not_kept_waiting_by_a_stream_of_shorter_ones(translator):
    """Clients send short sentences back to back, keeping the search busy; a long sentence, whose
    budget fits only beside few others, joins before every sentence sent after it."""
    batcher = started_batcher(translator)
    decode = replace(DecodeConfig(beam=2), max_tokens=48)
    stop, sent = threading.Event(), []

    def client(text):
        while not stop.is_set():
            job = batcher.submit([ids(translator, text)], decode)
            sent.append(job)
            job.future.result(timeout=60)

    threads = [threading.Thread(target=client, args=(s,)) for s in SHORT]
    for t in threads:
        t.start()
    wait_for(lambda: batcher.busy >= 2)
    long = batcher.submit([ids(translator, LONG)], decode)
    after = len(sent)
    try:
        long.future.result(timeout=60)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        batcher.close()
    later = sent[after:]
    assert later and all(job.started >= long.started for job in later)
    assert_alone(translator, long, decode)
