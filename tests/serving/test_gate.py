"""The gate in front of every route (ASGI, driven here without a server): hosts, JSON, the body
limit, the stopping server's 503, requests in flight and their metrics."""

from __future__ import annotations

import asyncio
import json

import pytest

from transduce.serving.gate import Gate, Gatekeeper, _host_name
from transduce.serving.metrics import Metrics


def _call(gate: Gate, path="/v1/translate", method="POST", body=b'{"text": ["a"]}',
          headers=None, hosts=None, chunks=None, max_body=100):
    """One request through a Gatekeeper in front of an app that echoes the body it reads;
    returns (status, JSON answer, what the app saw in flight, the metrics' text)."""
    seen = {}

    async def app(scope, receive, send):
        seen["in_flight"] = gate.in_flight
        message = await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": json.dumps(
            {"echo": message["body"].decode()}).encode()})

    metrics = Metrics()
    keeper = Gatekeeper(app, gate, metrics, max_body, hosts)
    head = {"host": "127.0.0.1:8000", "content-type": "application/json", **(headers or {})}
    scope = {"type": "http", "path": path, "method": method,
             "headers": [(k.encode(), v.encode()) for k, v in head.items()]}
    parts = chunks or [body]
    incoming = [{"type": "http.request", "body": part, "more_body": n < len(parts) - 1}
                for n, part in enumerate(parts)]
    sent = []

    async def receive():
        return incoming.pop(0)

    async def send(message):
        sent.append(message)

    asyncio.run(keeper(scope, receive, send))
    status = sent[0]["status"]
    return status, json.loads(sent[1]["body"]), seen.get("in_flight"), metrics.render()


def test_a_request_reaches_the_app_with_its_body_and_is_counted_in_flight():
    gate = Gate()
    status, answer, in_flight, text = _call(gate, chunks=[b'{"text": ', b'["a"]}'])
    assert (status, answer, in_flight) == (200, {"echo": '{"text": ["a"]}'}, 1)
    assert gate.in_flight == 0  # and no more once answered
    assert 'transduce_requests_total{path="/v1/translate",status="200"} 1' in text


@pytest.mark.parametrize("kwargs, status, words", [
    (dict(headers={"host": "evil.example"}, hosts={"127.0.0.1", "localhost"}), 403,
     "this server answers for 127.0.0.1, localhost, not for the host 'evil.example'"),
    (dict(headers={"content-type": "text/plain"}), 415, "send the body as JSON"),
    (dict(body=b"x" * 101), 413, "larger than this server's limit of 100 bytes"),
    (dict(chunks=[b"x" * 60, b"x" * 60]), 413, "(--max-body-bytes)"),
    (dict(headers={"content-length": "5000"}), 413, "larger than"),
])
def test_what_the_gate_refuses_never_reaches_the_app(kwargs, status, words):
    got, answer, in_flight, _ = _call(Gate(), **kwargs)
    assert got == status and words in answer["detail"] and in_flight is None


def test_a_stopping_server_refuses_translations_and_still_answers_the_rest():
    gate = Gate()
    told = []
    gate.on_drain.append(lambda: told.append(True))
    gate.drain()
    assert told == [True]
    assert _call(gate)[:2] == (503, {"detail": "the server is stopping; it takes no new "
                                               "requests"})
    assert _call(gate, path="/health", method="GET", body=b"")[0] == 200


@pytest.mark.parametrize("host, name", [("localhost:8000", "localhost"), ("[::1]:80", "::1"),
                                        ("::1", "::1"), ("Example.COM", "example.com")])
def test_the_host_name_is_read_without_its_port(host, name):
    assert _host_name(host) == name
