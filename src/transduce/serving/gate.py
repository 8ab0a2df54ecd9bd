"""The size gate: ASGI middleware that bounds a request body before the app reads it, refuses new
translations while the server stops, counts requests in flight, and records each request's
metrics."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Optional

from .metrics import Metrics

# every task's route (a server has its own model's; a service in ``services`` names each)
TASK_ROUTES = ("/v1/translate", "/v1/parse", "/v1/classify", "/v1/transcribe")
API_PATHS = ("/", "/health", "/metrics", "/v1/model", *TASK_ROUTES, "/docs", "/openapi.json")


class Gate:
    """Requests in flight, and whether the server is stopping (new translations get 503)."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.draining = False
        self.ready = False
        self.on_drain: list = []  # called once when the server starts stopping

    def drain(self) -> None:
        """Stop taking translation requests; those in flight finish (the worker is told: no more
        company is coming for a batch that waits for some)."""
        self.draining = True
        for hook in self.on_drain:
            hook()


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class Gatekeeper:
    """ASGI middleware, in front of every route: the hosts the server answers for, JSON for the API,
    the body size limit and the time a body may take, the stopping server's 503, in-flight counting
    and the request metrics (a server error counts as 500). The body is read here (bounded) and
    handed on.

    ``hosts``: the names a request's ``Host`` may carry (None: any, for a server told to listen on
    every network). A page on another site can make a browser send requests to 127.0.0.1, but
    its own name in ``Host`` (DNS rebinding), and a form's ``text/plain`` POST needs no preflight:
    both are refused, as local web services such as Jupyter do.

    ``routes``: the task's routes (counted in flight, refused while stopping), each with the media
    types it takes as a raw body (an image, a recording: ``("image/",)``); a route without any
    takes JSON, as every other POST.
    """

    def __init__(
        self,
        app,
        gate: Gate,
        metrics: Metrics,
        max_body_bytes: int,
        hosts: Optional[set[str]] = None,
        body_timeout: float = 30.0,
        routes: Optional[dict[str, tuple[str, ...]]] = None,
    ):
        self.app, self.gate, self.metrics, self.max_body = app, gate, metrics, max_body_bytes
        self.hosts, self.body_timeout = hosts, body_timeout
        self.routes = routes if routes is not None else {"/v1/translate": ()}

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

        counted = path in self.routes
        headers = {name.lower(): value for name, value in scope.get("headers", [])}
        try:
            host = headers.get(b"host", b"").decode("latin-1")
            if self.hosts is not None and _host_name(host) not in self.hosts:
                return await _plain_error(send_status, 403, "this server answers for "
                                                            f"{', '.join(sorted(self.hosts))}, not "
                                                            f"for the host {host!r} (--allow-host "
                                                            "adds names)")
            if scope["method"] in ("POST", "PUT", "PATCH"):
                kind = (
                    headers.get(b"content-type", b"")
                    .decode("latin-1")
                    .split(";")[0]
                    .strip()
                    .lower()
                )
                uploads = self.routes.get(scope["path"], ())
                if uploads and not kind.startswith(uploads):
                    wanted = " or ".join(f"{u}..." for u in uploads)
                    return await _plain_error(send_status, 415, "send the file itself as the "
                                                                f"body, with Content-Type {wanted} "
                                                                f"(got {kind or 'none'!r})")
                if not uploads and not (kind == "application/json" or kind.endswith("+json")):
                    return await _plain_error(send_status, 415, "send the body as JSON, with "
                                                                "Content-Type: application/json "
                                                                f"(got {kind or 'none'!r})")
                try:
                    body = await asyncio.wait_for(
                        self._read_body(scope, receive), self.body_timeout
                    )
                except asyncio.TimeoutError:
                    return await _plain_error(
                        send_status,
                        408,
                        f"the request body did not arrive within {self.body_timeout:g} s",
                    )
                if body is None:
                    return await _plain_error(send_status, 413, self._too_large())
                receive = _replay(body, receive)
            if counted and self.gate.draining:
                return await _plain_error(send_status, 503, "the server is stopping; it takes no "
                                                            "new requests")
            if counted:
                self.gate.in_flight += 1
            try:
                await self.app(scope, receive, send_status)
            except Exception:
                # the error is answered outside this middleware: it is the server's
                if status == 499:
                    status = 500
                raise
            finally:
                if counted:
                    self.gate.in_flight -= 1
        finally:
            self.metrics.request(path, status, time.monotonic() - start)

    def _too_large(self) -> str:
        return (
            f"the request body is larger than this server's limit of {self.max_body:,} bytes "
            "(--max-body-bytes)"
        )

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
    """A ``receive`` that hands the app the body read already, then the connection's own messages (a
    disconnect)."""
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
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _host_name(host: str) -> str:
    """The name of a ``Host`` header, without its port: ``[::1]:8000`` -> ``::1``."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]")[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host
