"""The HTTP service: a FastAPI app over one ``Translator`` and its ``Batcher``.

Routes: ``POST /v1/translate``, ``GET /v1/model``, ``GET /health``, ``GET /metrics`` (Prometheus
text), ``GET /`` (the page, ``page.html``), and FastAPI's ``/docs`` and ``/openapi.json``.
Every error is JSON ``{"detail": message}`` with a 4xx status for bad input (400 malformed body,
413 over a size limit, 422 well-formed but invalid) and 503 when the queue is full or the server
is stopping; the message names the limit and its value.
"""

from __future__ import annotations

import asyncio
import functools
import html
import math
import time
from dataclasses import replace
from importlib import resources
from typing import TYPE_CHECKING, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import HTTPException
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse

from ..config import DecodeConfig
from .answers import respond, stream
from .batcher import Batcher
from .worker import QueueFull
from .continuous import ContinuousBatcher
from .gate import API_PATHS, LOOPBACK_HOSTS, Gate, Gatekeeper
from .metrics import Metrics
from .schemas import ApiError, ServeSettings, TranslateRequest, TranslateResponse, parse_request

if TYPE_CHECKING:  # (a Translator is handed in; serving does not build one)
    from ..translator import Translator

__all__ = ["API_PATHS", "ServeSettings", "create_app"]


def read_page() -> str:
    return resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8")


def api_page(openapi: dict) -> str:
    """The API's routes as a self-contained page (no assets from elsewhere), from the OpenAPI
    schema."""
    rows = []
    for path, methods in openapi.get("paths", {}).items():
        for method, route in methods.items():
            rows.append(f"<tr><td><code>{html.escape(method.upper())} "
                        f"{html.escape(path)}</code></td>"
                        f"<td>{html.escape(route.get('summary', ''))}</td></tr>")
    info = openapi.get("info", {})
    return (f"<!doctype html><meta charset=utf-8><title>{html.escape(info.get('title', 'API'))} "
            "API</title>"
            "<style>body{font-family:sans-serif;max-width:48em;margin:2em auto}td{padding:.3em "
            ".8em}</style>"
            f"<h1>{html.escape(info.get('title', 'API'))} "
            f"{html.escape(info.get('version', ''))}</h1>"
            f"<p>{html.escape(info.get('description', ''))}</p><table>{''.join(rows)}</table>"
            '<p>The full schema (request and response fields): <a '
            'href="/openapi.json">/openapi.json</a>.</p>')


def model_name(translator: Translator) -> str:
    folder = translator.folder
    if folder is None:
        return "model"
    return (
        f"{folder.parent.parent.name}/{folder.name}"
        if folder.parent.name == "checkpoints"
        else f"{folder.parent.name}/{folder.name}"
    )


def create_app(
    translator: Translator, settings: ServeSettings = ServeSettings(), compiled: bool = False
):
    """The app; its lifespan starts and stops the batcher's worker."""
    from contextlib import asynccontextmanager

    import torch

    from ..version import __version__
    from ..model import Transformer

    gate = Gate()
    metrics = Metrics()
    mode, _ = batching_mode(settings, compiled, translator.device)
    common = dict(max_wait=settings.max_wait_ms / 1000, queue_limit=settings.queue_limit,
                  compiled=compiled,
                  on_batch=lambda r: metrics.batch(r.sentences, r.tokens, r.seconds, r.done))
    batcher = ContinuousBatcher(translator, **common) if mode == "continuous" else \
        Batcher(translator, batching=mode != "off", **common)
    metrics.gauges = {
        "transduce_queue_sentences": ("Sentences waiting for a batch.", lambda: batcher.waiting),
        "transduce_busy_sentences": ("Sentences in the search running now.", lambda: batcher.busy),
        "transduce_requests_in_flight": ("Translation requests being "
                                         "answered.", lambda: gate.in_flight),
    }
    config = translator.model.config
    with torch.device("meta"):
        parameters = Transformer(config).num_parameters()["total"]
    name = model_name(translator)
    page = read_page()
    tokenizer = translator.tokenizer
    decode = settings.decode

    @asynccontextmanager
    async def lifespan(app):
        batcher.start()
        gate.ready = True
        try:
            yield
        finally:
            gate.ready = False
            await asyncio.get_running_loop().run_in_executor(None, batcher.close)

    # FastAPI's /docs loads Swagger UI from a CDN, blank on a machine without the network: the
    # routes are described by a page of its own instead, and the schema is at /openapi.json
    app = FastAPI(
        title="transduce",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        description="Translation with a Transformer trained by transduce. The page is at `/`.",
    )
    everywhere = settings.host in ("0.0.0.0", "::", "")
    hosts = (
        None
        if everywhere
        else {*LOOPBACK_HOSTS, settings.host.lower(), *(h.lower() for h in settings.allowed_hosts)}
    )
    app.add_middleware(
        Gatekeeper,
        gate=gate,
        metrics=metrics,
        max_body_bytes=settings.max_body_bytes,
        hosts=hosts,
        body_timeout=settings.body_timeout,
    )
    gate.on_drain.append(batcher.drain)
    app.state.gate, app.state.batcher, app.state.metrics, app.state.settings = (
        gate,
        batcher,
        metrics,
        settings,
    )

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError):
        return JSONResponse(
            {"detail": error.message}, status_code=error.status, headers=error.headers
        )

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException):
        return JSONResponse({"detail": error.detail}, status_code=error.status_code)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, error: Exception):
        return JSONResponse({"detail": f"internal error: {type(error).__name__}: "
                                       f"{error}"}, status_code=500)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index():
        return HTMLResponse(page)

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    async def api_docs():
        return HTMLResponse(api_page(app.openapi()))

    @app.get("/health", summary="Ready (200) once the model is loaded; 503 while stopping")
    async def health():
        if gate.ready and not gate.draining:
            return {"status": "ready"}
        return JSONResponse(
            {"status": "stopping" if gate.draining else "starting"}, status_code=503
        )

    @app.get("/metrics", response_class=PlainTextResponse, summary="Counters in the Prometheus "
                                                                   "text format")
    async def metrics_text():
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4; "
                                                              "charset=utf-8")

    @app.get("/v1/model", summary="The model: languages, configuration, vocabularies, parameters, "
                                  "checkpoint")
    async def model_info():
        info = translator.info
        return {
            "name": name,
            "checkpoint": str(translator.folder),
            "step": info.get("step"),
            "source_language": info.get("src"),
            "target_language": info.get("tgt"),
            "vocabulary": {
                "source": config.vocab_size,
                "target": config.target_vocab_size,
                "shared": config.tgt_vocab_size is None,
            },
            "parameters": parameters,
            "device": str(translator.device),
            "precision": translator.precision,
            "config": config.to_dict(),
            "search": {
                "beam": decode.beam,
                "alpha": decode.alpha,
                "length_penalty": decode.length_penalty,
                "max_len_a": decode.max_len_a,
                "max_len_b": decode.max_len_b,
                "max_beam": settings.max_beam,
            },
            "limits": {
                "max_request_sentences": settings.max_request_sentences,
                "max_chars": settings.max_chars,
                "max_body_bytes": settings.max_body_bytes,
                "queue_limit": settings.queue_limit,
                "max_source_tokens": translator.max_source_tokens,
            },
            "batching": {
                "mode": mode,
                "enabled": mode != "off",
                "max_wait_ms": settings.max_wait_ms,
                "max_tokens": decode.max_tokens,
                "max_sentences": decode.max_sentences,
            },
            "transduce_version": __version__,
        }

    @app.post("/v1/translate", response_model=TranslateResponse, summary="Translate sentences",
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": TranslateRequest.model_json_schema()}}}},
              responses={400: {"description": "Malformed body (not UTF-8, not JSON)"},
                         413: {"description": "Over a size limit (body, sentences, characters, "
                                              "tokens)"},
                         422: {"description": "Invalid fields"},
                         503: {"description": "The queue is full, or the server is stopping"}})
    async def translate(request: Request):
        arrived = time.monotonic()
        ask = parse_request(await request.body())
        search = check_request(ask, settings, decode)
        todo = [i for i, line in enumerate(ask.text) if line.strip()]
        sources = translator.source_ids([ask.text[i] for i in todo])
        for i, ids in zip(todo, sources):
            if len(ids) > translator.max_source_tokens:
                raise ApiError(413, f"text[{i}] is {len(ids)} tokens long, more than the model's "
                                    f"{translator.max_source_tokens}; split the sentence")
        answers: Optional[asyncio.Queue] = asyncio.Queue() if ask.stream else None
        # streaming: each sentence as it is done, from the worker thread to this request's loop
        on_result = (
            functools.partial(deliver, asyncio.get_running_loop(), answers) if ask.stream else None
        )
        try:
            job = batcher.submit(sources, search, attention=ask.attention, on_result=on_result)
        except QueueFull as full:
            raise ApiError(503, f"the queue is full: {full.waiting} sentences wait and this "
                                f"request brings {full.wanted}, over the limit of {full.limit} "
                                "(--queue-limit); retry later",
                           headers={"Retry-After": "1"}) from None
        if answers is not None:
            return StreamingResponse(stream(ask, todo, job, answers, tokenizer, name, arrived),
                                     media_type="application/x-ndjson")
        try:
            await asyncio.wrap_future(job.future)
        except asyncio.CancelledError:
            job.future.cancel()  # the client went away: its waiting sentences are dropped
            raise
        return JSONResponse(respond(ask, todo, job, tokenizer, name, arrived))

    return app


def check_request(
    ask: TranslateRequest, settings: ServeSettings, decode: DecodeConfig
) -> DecodeConfig:
    """The limits, then the request's search settings (a 413 or 422 naming the limit)."""
    if not ask.text:
        raise ApiError(422, 'text: an empty list; send at least one sentence, e.g. {"text": ["A '
                            'man is sleeping."]}')
    if len(ask.text) > settings.max_request_sentences:
        raise ApiError(413, f"text has {len(ask.text)} sentences; this server takes at most "
                            f"{settings.max_request_sentences} per request "
                            "(--max-request-sentences): split it")
    for i, line in enumerate(ask.text):
        if len(line) > settings.max_chars:
            raise ApiError(413, f"text[{i}] has {len(line):,} characters; this server takes at "
                                f"most {settings.max_chars:,} per sentence (--max-chars)")
    beam = decode.beam if ask.beam is None else ask.beam
    if not 1 <= beam <= settings.max_beam:
        raise ApiError(422, f"beam {beam}: this server searches with a beam of 1 to "
                            f"{settings.max_beam} (--max-beam)")
    if ask.alpha is not None and not math.isfinite(ask.alpha):
        raise ApiError(422, f"alpha {ask.alpha}: must be a finite number")
    if ask.attention_layers and not ask.attention:
        raise ApiError(422, "attention_layers needs attention: true")
    try:
        return replace(
            decode,
            beam=beam,
            nbest=ask.nbest,
            alpha=decode.alpha if ask.alpha is None else ask.alpha,
        )
    except ValueError as error:
        raise ApiError(422, str(error)) from None


def deliver(loop: asyncio.AbstractEventLoop, answers: asyncio.Queue, index: int, result) -> None:
    """Hand a sentence's result from the worker thread to the request's event loop."""
    loop.call_soon_threadsafe(answers.put_nowait, (index, result))


def batching_mode(settings: ServeSettings, compiled: bool, device) -> tuple[str, str]:
    """``(mode, why)``: the batching the server runs and, when it was not simply asked for, why.

    ``auto`` chooses by device from measurement: on the CPU, dynamic batching (``python
    benchmarks/serve_load.py``, docs/benchmarks.md: continuous batching served as many sentences a
    second but with a 14-60% higher p99 latency in every single-sentence row, since a CPU step's
    cost grows with its rows); elsewhere continuous batching, whose step costs about the same for
    more rows on a GPU (not yet measured against dynamic there). A captured (compiled) step needs
    the fixed shapes of dynamic batching's searches."""
    import torch

    mode, why = settings.batching, ""
    if mode == "auto":
        cpu = torch.device(device).type == "cpu"
        mode = "dynamic" if cpu else "continuous"
        if cpu:
            why = ("chosen by --batching auto on the CPU, where continuous batching served as "
                   "many sentences a second with a higher p99 latency (docs/benchmarks.md); "
                   "--batching continuous for the other")
        else:
            why = (f"chosen by --batching auto on {torch.device(device).type}; --batching dynamic "
                   "for the other")
    if mode == "continuous" and compiled:
        mode, why = "dynamic", "the compiled step needs dynamic batching's fixed shapes"
    return mode, why
