"""The size gate: ASGI middleware that bounds a request body before the app reads it, refuses new
translations while the server stops, counts requests in flight, and records each request's metrics."""

from __future__ import annotations

import json
import time
from typing import Optional

from .metrics import Metrics

API_PATHS = ("/", "/health", "/metrics", "/v1/model", "/v1/translate", "/docs", "/openapi.json")


class Gate:
    """Requests in flight, and whether the server is stopping (new translations get 503)."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.draining = False
        self.ready = False


class Gatekeeper:
    """ASGI middleware: the body size limit, the stopping server's 503, in-flight counting and
    the request metrics. The body is read here (bounded) and handed on."""

    def __init__(self, app, gate: Gate, metrics: Metrics, max_body_bytes: int):
        self.app, self.gate, self.metrics, self.max_body = app, gate, metrics, max_body_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.monotonic()
        path = scope["path"] if scope["path"] in API_PATHS else "other"
        status = 499  # (nginx's "client closed request") unless a response starts

        async def send_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        counted = path == "/v1/translate"
        try:
            if scope["method"] in ("POST", "PUT", "PATCH"):
                body = await self._read_body(scope, receive)
                if body is None:
                    return await _plain_error(send_status, 413, self._too_large())
                receive = _replay(body, receive)
            if counted and self.gate.draining:
                return await _plain_error(send_status, 503, "the server is stopping; it takes no new requests")
            if counted:
                self.gate.in_flight += 1
            try:
                await self.app(scope, receive, send_status)
            finally:
                if counted:
                    self.gate.in_flight -= 1
        finally:
            self.metrics.request(path, status, time.monotonic() - start)

    def _too_large(self) -> str:
        return f"the request body is larger than this server's limit of {self.max_body:,} bytes (--max-body-bytes)"

    async def _read_body(self, scope, receive) -> Optional[bytes]:
        """The whole body, or None when it is over the limit (by its header or by counting)."""
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_body:
                return None
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return b""  # the client went away; the app sees an empty body and nothing is sent
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _replay(body: bytes, receive):
    """A ``receive`` that hands the app the body read already, then the connection's own messages
    (a disconnect)."""
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()
    return replay


async def _plain_error(send, status: int, message: str) -> None:
    body = json.dumps({"detail": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
