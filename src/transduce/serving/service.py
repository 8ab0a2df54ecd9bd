"""A task's service: the route that takes the task's inputs, the search the worker runs on them and
the answer it gives. Every service shares the app around it (batching, limits, metrics, graceful
stop, errors); ``services.service_for`` names each facade's. Translation's own route (streaming,
attention, continuous batching) is ``serving.translation``; the others use ``add_routes`` below.
"""

from __future__ import annotations

import asyncio
import io
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from fastapi import Request

from ..config import DecodeConfig
from .answers import timing
from .schemas import ApiError, ServeSettings
from .worker import QueueFull, Searches

ERRORS = {400: {"description": "Malformed body"},
          413: {"description": "Over a size limit (body, items, decoded size)"},
          415: {"description": "A body of another media type"},
          422: {"description": "Invalid fields or an input the model cannot take"},
          503: {"description": "The queue is full, or the server is stopping"}}


@dataclass
class Ask:
    """A request, read and checked: ``items`` for the worker (one per input; requests whose
    ``decode`` is equal share a batch) and the answer's ``options``."""

    items: list
    decode: DecodeConfig
    options: dict = field(default_factory=dict)


class Service(Searches):
    """One task served: ``route`` (POST) and its ``summary``; ``uploads``: the media types taken
    as a raw body (an image, a recording; the size gate reads them, bounded, before anything
    decodes them), none for JSON; ``page``: the page at ``/``; ``media``: the schema of a
    request body for the API's documentation."""

    verb = ""
    route = ""
    summary = ""
    page = "page.html"
    uploads: tuple[str, ...] = ()
    noun = "items"  # what its items are called in messages
    continuous = False  # whether continuous batching can serve it (translation's running search)

    def __init__(self, facade, settings: ServeSettings, compiled: Optional[bool] = None) -> None:
        super().__init__(facade, bool(compiled))
        self.facade, self.settings = facade, settings
        # what holds the model, its info, folder, device and precision (a parser's translator)
        self.runs = facade

    def load_adapters(self, folders: dict) -> None:
        """Serve LoRA adapters beside the model (translation's service does)."""
        raise ValueError("--adapter serves LoRA adapters of translation models")

    def described(self) -> str:
        """What the start-up line says of the model beside its task (a translation's languages)."""
        return ""

    def searched(self) -> str:
        """What the start-up line says of the search."""
        decode = self.settings.decode
        return f"; beam {decode.beam}, alpha {decode.alpha}"

    def read(self, body: bytes, query: Mapping[str, str]) -> Ask:
        """The request (its body and query), checked: a 4xx ``ApiError`` naming what is wrong."""
        raise NotImplementedError

    def answer(self, ask: Ask, outputs: list) -> dict:
        """The response body for ``outputs``, one per item of ``ask``."""
        raise NotImplementedError

    def model(self) -> dict:
        """The task's own fields of ``GET /v1/model``."""
        return {}

    def media(self) -> dict:
        """The request body's OpenAPI ``content``."""
        return {kind + "*": {"schema": {"type": "string", "format": "binary"}}
                for kind in self.uploads}

    def add_routes(self, app, batcher, name: str) -> None:
        """``POST route``: read, queue for the worker, answer (the model's name and the timing)."""
        from fastapi.responses import JSONResponse

        async def handle(request: Request):
            arrived = time.monotonic()
            ask = self.read(await request.body(), request.query_params)
            job = submit(batcher, ask.items, ask.decode, self.noun)
            try:
                await asyncio.wrap_future(job.future)
            except asyncio.CancelledError:
                job.future.cancel()  # the client went away: its waiting items are dropped
                raise
            body = self.answer(ask, [result.hypotheses for result in job.results])
            return JSONResponse({**body, "model": name, "timing_ms": timing(job, arrived)})

        app.add_api_route(self.route, handle, methods=["POST"], summary=self.summary,
                          responses=ERRORS, openapi_extra={"requestBody": {
                              "required": True, "content": self.media()}})


def submit(batcher, items: list, decode: DecodeConfig, noun: str = "items", **kwargs):
    """Queue a request's items; a full queue is the 503 that says so."""
    try:
        return batcher.submit(items, decode, **kwargs)
    except QueueFull as full:
        raise ApiError(503, f"the queue is full: {full.waiting} {noun} wait and this request "
                            f"brings {full.wanted}, over the limit of {full.limit} "
                            "(--queue-limit); retry later", headers={"Retry-After": "1"}) from None


class Upload(io.BytesIO):
    """An uploaded file's bytes, named in messages as ``name`` (readers print their file)."""

    def __init__(self, data: bytes, name: str) -> None:
        super().__init__(data)
        self.name = name

    def __str__(self) -> str:
        return self.name


def options(query: Mapping[str, str], known: Mapping[str, Any]) -> dict:
    """A query's options, each of the type of its default in ``known``; an unknown name or a
    value of the wrong kind is a 422 naming it."""
    unknown = sorted(set(query) - set(known))
    if unknown:
        raise ApiError(422, f"unknown query parameter {unknown[0]!r} (this route takes "
                            f"{', '.join(known) or 'none'})")
    out = dict(known)
    for name, text in query.items():
        default = known[name]
        if isinstance(default, bool):
            if text.lower() not in ("true", "false", "1", "0"):
                raise ApiError(422, f"{name}={text}: true or false")
            out[name] = text.lower() in ("true", "1")
        elif isinstance(default, int):
            if not text.isdigit() or not 1 <= int(text) <= 1000:
                raise ApiError(422, f"{name}={text}: a whole number from 1 to 1000")
            out[name] = int(text)
    return out


def uploaded(body: bytes, what: str) -> bytes:
    if not body:
        raise ApiError(400, f"the body is empty; send the {what} as the body, e.g. curl "
                            "--data-binary @FILE -H 'Content-Type: ...'")
    return body
