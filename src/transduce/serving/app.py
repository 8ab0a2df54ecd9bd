"""The HTTP service: a FastAPI app over one ``Translator`` and its ``Batcher``.

Routes: ``POST /v1/translate``, ``GET /v1/model``, ``GET /health``, ``GET /metrics`` (Prometheus
text), ``GET /`` (the page, ``page.html``), and FastAPI's ``/docs`` and ``/openapi.json``.
Every error is JSON ``{"detail": message}`` with a 4xx status for bad input (400 malformed body,
413 over a size limit, 422 well-formed but invalid) and 503 when the queue is full or the server
is stopping; the message names the limit and its value.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, replace
from importlib import resources
from typing import Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import HTTPException
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..config import DecodeConfig, _at_least
from ..translator import Translator
from .batcher import Batcher, QueueFull
from .metrics import Metrics

API_PATHS = ("/", "/health", "/metrics", "/v1/model", "/v1/translate", "/docs", "/openapi.json")
DIGITS = 4  # attention weights and scores in responses


@dataclass(frozen=True)
class ServeSettings:
    """The server's defaults and limits (``transduce serve --help`` names each flag).

    decode: the search settings a request does not give (beam, alpha and nbest can be given per
        request; the batch budget ``max_tokens``/``max_sentences`` is the batcher's).
    max_wait_ms: a batch waits for more sentences while they keep coming, each within this of the
        last (at most ``batcher.LINGER`` times this in all).
    batching: False serves one request per search (the baseline for ``benchmarks/serve_load.py``).
    max_request_sentences, max_chars, max_body_bytes, queue_limit, max_beam: request limits;
    queue_limit counts waiting sentences.
    drain_timeout: seconds a stopping server lets in-flight requests finish.
    """

    decode: DecodeConfig = DecodeConfig()
    max_wait_ms: float = 10.0
    batching: bool = True
    max_request_sentences: int = 64
    max_chars: int = 2000
    max_body_bytes: int = 1_000_000
    queue_limit: int = 1024
    max_beam: int = 16
    drain_timeout: float = 30.0

    def __post_init__(self) -> None:
        _at_least(self, 1, "max_request_sentences", "max_chars", "max_body_bytes", "queue_limit", "max_beam")
        if not 0 <= self.max_wait_ms <= 10_000:
            raise ValueError(f"max_wait_ms must be between 0 and 10000, got {self.max_wait_ms}")
        if self.drain_timeout < 0:
            raise ValueError(f"drain_timeout must be at least 0, got {self.drain_timeout}")
        if self.decode.sampling:
            raise ValueError("sampling is not served: a sampled batch mixes requests' random draws; use beam search")
        if self.decode.beam > self.max_beam:
            raise ValueError(f"the default beam {self.decode.beam} is more than max_beam {self.max_beam}")


class TranslateRequest(BaseModel):
    """The body of ``POST /v1/translate``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: list[str] = Field(description="Sentences to translate, one per item; an empty string stays empty.")
    beam: Optional[int] = Field(None, description="Beam size (1: greedy). Default: the server's --beam.")
    alpha: Optional[float] = Field(None, description="Length penalty exponent. Default: the server's --alpha.")
    nbest: int = Field(1, description="Hypotheses per sentence (<= beam); above 1 the response has `hypotheses`.")
    attention: bool = Field(False, description="Add each sentence's pieces and cross-attention (last layer, "
                                                "mean of the heads) as `attention`.")
    attention_layers: bool = Field(False, description="With `attention`: every layer's cross-attention too.")


class Hypothesis(BaseModel):
    text: str
    score: float = Field(description="The search's ranking score (length-normalized log-probability).")


class AttentionItem(BaseModel):
    source: list[str] = Field(description="Source pieces, then </s>: the columns.")
    target: list[str] = Field(description="Target pieces, then </s>: the rows; row i is the attention while "
                                          "producing piece i.")
    weights: list[list[float]] = Field(description="Cross-attention of the last layer, mean of the heads, "
                                                   "rows sum to 1.")
    layers: Optional[list[list[list[float]]]] = Field(None, description="Every layer's, with attention_layers.")


class TranslateResponse(BaseModel):
    translations: list[str]
    hypotheses: Optional[list[list[Hypothesis]]] = Field(None, description="With nbest > 1: per sentence, best first.")
    attention: Optional[list[Optional[AttentionItem]]] = Field(None, description="With attention: per sentence "
                                                                                 "(null for an empty one).")
    model: str
    timing_ms: dict[str, float | list[int]] = Field(description="total, queue (waiting for a batch), search (the "
                                                                "batches' time) and batch_sentences (their sizes).")


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: Optional[dict] = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


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


def read_page() -> str:
    return resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8")


def model_name(translator: Translator) -> str:
    folder = translator.folder
    if folder is None:
        return "model"
    return f"{folder.parent.parent.name}/{folder.name}" if folder.parent.name == "checkpoints" else \
        f"{folder.parent.name}/{folder.name}"


def describe(error: ValidationError) -> str:
    """Pydantic's errors as one line a person reads: ``text[2]: Input should be a valid string``."""
    known = ", ".join(TranslateRequest.model_fields)
    parts = []
    for item in error.errors()[:5]:
        where = "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if n else str(p))
                        for n, p in enumerate(item["loc"])) or "body"
        if item["type"] == "extra_forbidden":
            parts.append(f"{where}: unknown field (the fields are {known})")
        elif item["type"] == "missing":
            parts.append(f"{where}: missing (send {{\"text\": [\"a sentence\", ...]}})")
        else:
            parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def parse_request(body: bytes) -> TranslateRequest:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ApiError(400, f"the body is not valid UTF-8 (byte {error.start}); send JSON in UTF-8") from None
    if not text.strip():
        raise ApiError(400, 'the body is empty; send JSON such as {"text": ["A man is sleeping."]}')
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as error:
        raise ApiError(400, f"the body is not valid JSON: {error.msg} at line {error.lineno}, column {error.colno}") \
            from None
    if not isinstance(payload, dict):
        raise ApiError(422, f'the body must be a JSON object such as {{"text": ["..."]}}, not a {type(payload).__name__}')
    try:
        return TranslateRequest.model_validate(payload)
    except ValidationError as error:
        raise ApiError(422, describe(error)) from None


def create_app(translator: Translator, settings: ServeSettings = ServeSettings(), compiled: bool = False):
    """The app; its lifespan starts and stops the batcher's worker."""
    from contextlib import asynccontextmanager

    import torch

    from .. import __version__
    from ..model import Transformer

    gate = Gate()
    metrics = Metrics()
    batcher = Batcher(translator, settings.max_wait_ms / 1000, settings.batching, settings.queue_limit,
                      on_batch=lambda r: metrics.batch(r.sentences, r.tokens, r.seconds), compiled=compiled)
    metrics.gauges = {
        "transduce_queue_sentences": ("Sentences waiting for a batch.", lambda: batcher.waiting),
        "transduce_busy_sentences": ("Sentences in the search running now.", lambda: batcher.busy),
        "transduce_requests_in_flight": ("Translation requests being answered.", lambda: gate.in_flight),
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

    app = FastAPI(title="transduce", version=__version__, lifespan=lifespan,
                  description="Translation with a Transformer trained by transduce. The page is at `/`.")
    app.add_middleware(Gatekeeper, gate=gate, metrics=metrics, max_body_bytes=settings.max_body_bytes)
    app.state.gate, app.state.batcher, app.state.metrics, app.state.settings = gate, batcher, metrics, settings

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError):
        return JSONResponse({"detail": error.message}, status_code=error.status, headers=error.headers)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException):
        return JSONResponse({"detail": error.detail}, status_code=error.status_code)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, error: Exception):
        return JSONResponse({"detail": f"internal error: {type(error).__name__}: {error}"}, status_code=500)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index():
        return HTMLResponse(page)

    @app.get("/health", summary="Ready (200) once the model is loaded; 503 while stopping")
    async def health():
        if gate.ready and not gate.draining:
            return {"status": "ready"}
        return JSONResponse({"status": "stopping" if gate.draining else "starting"}, status_code=503)

    @app.get("/metrics", response_class=PlainTextResponse, summary="Counters in the Prometheus text format")
    async def metrics_text():
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/model", summary="The model: languages, configuration, vocabularies, parameters, checkpoint")
    async def model_info():
        info = translator.info
        return {
            "name": name, "checkpoint": str(translator.folder), "step": info.get("step"),
            "source_language": info.get("src"), "target_language": info.get("tgt"),
            "vocabulary": {"source": config.vocab_size, "target": config.target_vocab_size,
                           "shared": config.tgt_vocab_size is None},
            "parameters": parameters, "device": str(translator.device), "precision": translator.precision,
            "config": config.to_dict(),
            "search": {"beam": decode.beam, "alpha": decode.alpha, "length_penalty": decode.length_penalty,
                       "max_len_a": decode.max_len_a, "max_len_b": decode.max_len_b, "max_beam": settings.max_beam},
            "limits": {"max_request_sentences": settings.max_request_sentences, "max_chars": settings.max_chars,
                       "max_body_bytes": settings.max_body_bytes, "queue_limit": settings.queue_limit,
                       "max_source_tokens": translator.max_source_tokens},
            "batching": {"enabled": settings.batching, "max_wait_ms": settings.max_wait_ms,
                         "max_tokens": decode.max_tokens, "max_sentences": decode.max_sentences},
            "transduce_version": __version__,
        }

    @app.post("/v1/translate", response_model=TranslateResponse, summary="Translate sentences",
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": TranslateRequest.model_json_schema()}}}},
              responses={400: {"description": "Malformed body (not UTF-8, not JSON)"},
                         413: {"description": "Over a size limit (body, sentences, characters, tokens)"},
                         422: {"description": "Invalid fields"},
                         503: {"description": "The queue is full, or the server is stopping"}})
    async def translate(request: Request):
        arrived = time.monotonic()
        ask = parse_request(await request.body())
        search = check_request(ask, settings, decode)
        todo = [i for i, line in enumerate(ask.text) if line.strip()]
        sources = tokenizer.encode_src([ask.text[i] for i in todo])
        for i, ids in zip(todo, sources):
            if len(ids) > translator.max_source_tokens:
                raise ApiError(413, f"text[{i}] is {len(ids)} tokens long, more than the model's "
                                    f"{translator.max_source_tokens}; split the sentence")
        try:
            job = batcher.submit(sources, search, attention=ask.attention)
        except QueueFull as full:
            raise ApiError(503, f"the queue is full: {full.waiting} sentences wait and this request brings "
                                f"{full.wanted}, over the limit of {full.limit} (--queue-limit); retry later",
                           headers={"Retry-After": "1"}) from None
        try:
            await asyncio.wrap_future(job.future)
        except asyncio.CancelledError:
            job.future.cancel()  # the client went away: its waiting sentences are dropped
            raise
        return JSONResponse(respond(ask, todo, job, tokenizer, name, arrived))

    return app


def check_request(ask: TranslateRequest, settings: ServeSettings, decode: DecodeConfig) -> DecodeConfig:
    """The limits, then the request's search settings (a 413 or 422 naming the limit)."""
    if not ask.text:
        raise ApiError(422, 'text: an empty list; send at least one sentence, e.g. {"text": ["A man is sleeping."]}')
    if len(ask.text) > settings.max_request_sentences:
        raise ApiError(413, f"text has {len(ask.text)} sentences; this server takes at most "
                            f"{settings.max_request_sentences} per request (--max-request-sentences): split it")
    for i, line in enumerate(ask.text):
        if len(line) > settings.max_chars:
            raise ApiError(413, f"text[{i}] has {len(line):,} characters; this server takes at most "
                                f"{settings.max_chars:,} per sentence (--max-chars)")
    beam = decode.beam if ask.beam is None else ask.beam
    if not 1 <= beam <= settings.max_beam:
        raise ApiError(422, f"beam {beam}: this server searches with a beam of 1 to {settings.max_beam} (--max-beam)")
    if ask.alpha is not None and not math.isfinite(ask.alpha):
        raise ApiError(422, f"alpha {ask.alpha}: must be a finite number")
    if ask.attention_layers and not ask.attention:
        raise ApiError(422, "attention_layers needs attention: true")
    try:
        return replace(decode, beam=beam, nbest=ask.nbest, alpha=decode.alpha if ask.alpha is None else ask.alpha)
    except ValueError as error:
        raise ApiError(422, str(error)) from None


def respond(ask: TranslateRequest, todo: list[int], job, tokenizer, name: str, arrived: float) -> dict:
    """The response body: translations in request order (and hypotheses, attention on request)."""
    translations = [""] * len(ask.text)
    hypotheses: list[list[dict]] = [[] for _ in ask.text]
    attention: list[Optional[dict]] = [None] * len(ask.text)
    for k, (i, result) in enumerate(zip(todo, job.results)):
        texts = [(tokenizer.decode_tgt(h.tokens), h.score) for h in result.hypotheses]
        translations[i] = texts[0][0]
        hypotheses[i] = [{"text": t, "score": round(s, DIGITS)} for t, s in texts]
        if result.attention is not None:
            best = result.hypotheses[0].tokens
            item = {"source": tokenizer.src_pieces(job.sources[k]) + ["</s>"],
                    "target": tokenizer.tgt_pieces(best) + ["</s>"],
                    "weights": result.attention[-1].astype(float).round(DIGITS).tolist()}
            if ask.attention_layers:
                item["layers"] = result.attention.astype(float).round(DIGITS).tolist()
            attention[i] = item
    body: dict = {"translations": translations}
    if ask.nbest > 1:
        body["hypotheses"] = hypotheses
    if ask.attention:
        body["attention"] = attention
    now = time.monotonic()
    body["model"] = name
    body["timing_ms"] = {"total": round(1000 * (now - arrived), 2),
                         "queue": round(1000 * ((job.started or now) - job.arrived), 2),
                         "search": round(1000 * job.search_seconds, 2), "batch_sentences": job.batch_sizes}
    return body
