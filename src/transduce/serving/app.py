"""The HTTP service: a FastAPI app over one task's facade (a ``Translator``, ``Parser``,
``Classifier`` or ``Transcriber``), its service (``services.service_for``) and a batcher.

Routes: the task's (``POST /v1/translate``, ``/v1/parse``, ``/v1/classify`` or
``/v1/transcribe``), ``GET /v1/model``, ``GET /health``, ``GET /metrics`` (Prometheus text),
``GET /`` (the task's page) and ``/docs`` and ``/openapi.json``. Every error is JSON
``{"detail": message}`` with a 4xx status for bad input (400 malformed body, 413 over a size
limit, 415 another media type, 422 well-formed but invalid) and 503 when the queue is full or the
server is stopping; the message names the limit and its value.
"""

from __future__ import annotations

import asyncio
import html
from importlib import resources
from typing import Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import HTTPException
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse

from .batcher import Batcher
from .continuous import ContinuousBatcher
from .gate import API_PATHS, LOOPBACK_HOSTS, TASK_ROUTES, Gate, Gatekeeper
from .metrics import Metrics
from .schemas import ApiError, ServeSettings
from .services import service_for

__all__ = ["API_PATHS", "ServeSettings", "create_app"]


def read_page(name: str = "page.html") -> str:
    """A task's page, whole: the head and the script every page shares (``common.html``,
    ``common.js``) put in at their marks, so that the page is one file that works offline."""
    def part(file: str) -> str:
        return resources.files(__package__).joinpath(file).read_text(encoding="utf-8")

    return (part(name).replace("<!-- transduce:common -->\n", part("common.html"))
            .replace("/* transduce:common.js */\n", part("common.js")))


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


def model_name(runs) -> str:
    folder = runs.folder
    if folder is None:
        return "model"
    return (
        f"{folder.parent.parent.name}/{folder.name}"
        if folder.parent.name == "checkpoints"
        else f"{folder.parent.name}/{folder.name}"
    )


def create_app(facade, settings: ServeSettings = ServeSettings(),
               compiled: Optional[bool] = None, adapters: Optional[dict] = None):
    """The app; its lifespan starts and stops the batcher's worker. ``compiled``: whether the
    decode step is captured (None: as the facade was loaded). A setting the task does not take is
    a ValueError (``--ctc-weight`` for translation, continuous batching for images).
    ``adapters``: name -> a checkpoint of LoRA adapters of the model, served beside it.
    ``app.state`` holds the service, the batching ``(mode, why)`` and the rest the app runs on."""
    from contextlib import asynccontextmanager

    import torch

    from ..model import Transformer
    from ..version import __version__

    service = service_for(facade, settings, compiled)
    if adapters:
        service.load_adapters(adapters)
    runs, compiled = service.runs, service.compiled
    gate = Gate()
    metrics = Metrics()
    mode, why = batching_mode(settings, compiled, runs.device, service.continuous)
    common = dict(max_wait=settings.max_wait_ms / 1000, queue_limit=settings.queue_limit,
                  compiled=compiled,
                  on_batch=lambda r: metrics.batch(r.sentences, r.tokens, r.seconds, r.done))
    batcher = ContinuousBatcher(runs, searches=service, **common) if mode == "continuous" else \
        Batcher(runs, batching=mode != "off", searches=service, **common)
    metrics.gauges = {
        "transduce_queue_sentences": ("Inputs waiting for a batch.", lambda: batcher.waiting),
        "transduce_busy_sentences": ("Inputs in the search running now.", lambda: batcher.busy),
        "transduce_requests_in_flight": ("Requests being answered.", lambda: gate.in_flight),
    }
    config = runs.model.config
    with torch.device("meta"):
        parameters = Transformer(config).num_parameters()["total"]
    name = model_name(runs)
    page = read_page(service.page)
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
        description=f"{service.summary} with a Transformer trained by transduce. The page is at "
                    "`/`.",
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
        routes={service.route: service.uploads},
    )
    gate.on_drain.append(batcher.drain)
    app.state.gate, app.state.batcher, app.state.metrics, app.state.settings = (
        gate,
        batcher,
        metrics,
        settings,
    )
    app.state.service, app.state.batching = service, (mode, why)

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

    @app.get("/v1/model", summary="The model: its task and route, configuration, parameters, "
                                  "checkpoint, limits")
    async def model_info():
        own = service.model()
        return {
            "name": name,
            "task": service.verb,
            "route": service.route,
            "checkpoint": str(runs.folder),
            "step": runs.info.get("step"),
            **{key: value for key, value in own.items() if key != "limits"},
            "parameters": parameters,
            "device": str(runs.device),
            "precision": runs.precision,
            "config": config.to_dict(),
            "limits": {
                "max_request_sentences": settings.max_request_sentences,
                "max_chars": settings.max_chars,
                "max_body_bytes": settings.max_body_bytes,
                "queue_limit": settings.queue_limit,
                **own.get("limits", {}),
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

    service.add_routes(app, batcher, name)
    for route in TASK_ROUTES:
        if route != service.route:  # another task's route: say which one this server has
            app.add_api_route(route, elsewhere(route, service), methods=["POST"],
                              include_in_schema=False)
    return app


def elsewhere(route: str, service):
    async def refuse():
        raise ApiError(404, f"this server does not serve {route}: its model's route is POST "
                            f"{service.route} ({service.summary.lower()}; /docs lists the routes)")
    return refuse


def batching_mode(settings: ServeSettings, compiled: bool, device,
                  continuous: bool = True) -> tuple[str, str]:
    """``(mode, why)``: the batching the server runs and, when it was not simply asked for, why.

    ``auto`` chooses by device from measurement: on the CPU, dynamic batching (``python
    benchmarks/serve_load.py``, docs/benchmarks.md: continuous batching served as many sentences a
    second but with a 14-60% higher p99 latency in every single-sentence row, since a CPU step's
    cost grows with its rows); elsewhere continuous batching, whose step costs about the same for
    more rows on a GPU (not yet measured against dynamic there). A captured (compiled) step needs
    the fixed shapes of dynamic batching's searches; a task without a running search
    (``continuous`` False: everything but translation) is batched dynamically."""
    import torch

    mode, why = settings.batching, ""
    if not continuous:
        if mode == "continuous":
            raise ValueError("batching continuous: this task's inputs are batched dynamically "
                             "(the running search is translation's); use --batching dynamic")
        return ("dynamic" if mode == "auto" else mode), ""
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
