"""``transduce serve``: the HTTP service (``transduce.serving``) on uvicorn, for a model of any
task it serves: translation, parsing, image classification, speech recognition.

The address is bound and the model loaded before the server starts, so a taken port or a bad
checkpoint is a message, not a half-started server. The first SIGINT or SIGTERM stops it
gracefully: requests in flight finish, new translation requests get 503, then it exits with
status 0 (a second SIGINT, or ``--drain-timeout`` seconds, ends it at once).
"""

from __future__ import annotations

import socket
import sys
import time

from dataclasses import fields

from ..config import DecodeConfig
from ..errors import TransduceError
from .common import (
    add_draft_options,
    add_task_search_options,
    announce,
    config_number,
    draft_search,
    number,
    set_threads,
    task_search,
)

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="serve a model of any task over HTTP, with batching and a "
                                     "page for it",
                       description="Serve a model over HTTP: its task's route (POST "
                                   "/v1/translate, /v1/parse, /v1/classify with an image as the "
                                   "body, /v1/transcribe with a recording), GET /v1/model, "
                                   "/health, /metrics, the task's page at / and the API's "
                                   "documentation at /docs. Needs the serve extra: pip install "
                                   "'transduce[serve]'.",
                       epilog="Search options left out take the served task's defaults "
                              "(`transduce translate --help`, `parse --help` and `transcribe "
                              "--help` show them); docs/serving.md has the routes of each task.")
    p.add_argument("model", help="a run directory or checkpoint folder")
    p.add_argument("--host", default="127.0.0.1",
                   help="the address to listen on (127.0.0.1: this machine only; 0.0.0.0: every "
                        "network, without authentication)")
    p.add_argument("--port", type=number(int, 0, 65_535), default=8000, help="the port (0: a free "
                                                                             "one, printed at the "
                                                                             "start)")
    g = p.add_argument_group("batching and limits")
    g.add_argument("--batching", choices=["auto", "continuous", "dynamic", "off", "on"],
                   default="auto",
                   help="continuous: sentences join the running search at every step and leave it "
                        "as soon as they are done; dynamic (or on): waiting sentences are "
                        "gathered into a batch, searched to its end; off: one request per search; "
                        "auto: dynamic on the CPU (measured: the same sentences/s with a lower "
                        "p99 latency), continuous on a GPU")
    g.add_argument("--max-wait-ms", type=number(float, 0, 10_000), default=10.0,
                   help="dynamic: a batch waits for more sentences while they keep coming, each "
                        "within this of the last (at most 5x this in all); continuous: a few "
                        "arrivals wait at most this long for company before they join the running "
                        "search")
    g.add_argument(
        "--max-request-sentences",
        type=number(int, 1, 1_000_000),
        default=64,
        help="sentences per request",
    )
    g.add_argument("--max-chars", type=number(int, 1, 10**8), default=2000, help="characters per "
                                                                                 "sentence")
    g.add_argument(
        "--max-body-bytes",
        type=number(int, 1, 2**40),
        default=1_000_000,
        help="bytes per request body",
    )
    g.add_argument("--queue-limit", type=number(int, 1, 10**8), default=1024,
                   help="sentences waiting at most; beyond it requests get 503 (memory stays "
                        "bounded)")
    g.add_argument("--max-beam", type=config_number(DecodeConfig, "beam"),
                   help="the largest beam a request may ask for (default: 16, or the served "
                        "search's beam when larger: a parser's is 21)")
    g.add_argument("--drain-timeout", type=number(float, 0, 86_400), default=30.0,
                   help="seconds a stopping server gives requests in flight to finish")
    g.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="answer requests for this host name too (repeatable; the loopback names "
                        "and --host always; every name when listening on every network): a "
                        "reverse proxy's name")
    g.add_argument("--body-timeout", type=number(float, 0.1, 3600), default=30.0,
                   help="seconds a request's head, and then its body, may take to arrive (a "
                        "connection that stalls gets 408 and is closed)")
    g.add_argument("--max-pixels", type=number(int, 1, 10**10), default=4096 * 4096,
                   help="the largest uploaded image, width x height, read from its header before "
                        "it is decoded (image classifiers)")
    g.add_argument("--max-seconds", type=number(float, 0.1, 86_400), default=30.0,
                   help="the longest uploaded recording, read from its header before it is "
                        "decoded (speech models)")
    g.add_argument("--no-access-log", action="store_true", help="do not log each request")
    p.add_argument("--adapter", action="append", default=[], metavar="NAME=PATH",
                   help="LoRA adapters trained on this model (train --lora) served beside it: a "
                        "request's \"adapter\": \"NAME\" translates with them (repeat for more)")
    add_task_search_options(p)
    add_draft_options(p)
    p.set_defaults(run=run)


def _settings(args, decode: DecodeConfig):
    from ..serving.app import ServeSettings

    default = 1 if getattr(args, "draft", None) else max(16, decode.beam)  # (a draft: greedy)
    max_beam = args.max_beam if args.max_beam is not None else default
    if decode.beam > max_beam:
        raise TransduceError(f"--beam {decode.beam} is more than --max-beam {args.max_beam}: raise "
                             "--max-beam or lower --beam")
    try:
        return ServeSettings(
            decode=decode,
            max_wait_ms=args.max_wait_ms,
            batching="dynamic" if args.batching == "on" else args.batching,
            max_request_sentences=args.max_request_sentences,
            max_chars=args.max_chars,
            max_body_bytes=args.max_body_bytes,
            queue_limit=args.queue_limit,
            max_beam=max_beam,
            drain_timeout=args.drain_timeout,
            host=args.host,
            allowed_hosts=tuple(args.allow_host),
            body_timeout=args.body_timeout,
            max_pixels=args.max_pixels,
            max_seconds=args.max_seconds,
        )
    except ValueError as error:
        raise flagged(error) from None


def adapter_folders(given: list[str], folder) -> dict:
    """``--adapter NAME=PATH`` flags as name -> checkpoint folder, each checked to hold adapters
    trained on the weights of ``folder`` (the served checkpoint), before any weight is read."""
    import re

    from ..checkpoint import read_info, weights_fingerprint
    from ..choice import resolve

    adapters: dict = {}
    base = weights_fingerprint(folder) if given else None
    for flag in given:
        name, equals, path = flag.partition("=")
        if not equals or not path or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise TransduceError(f"--adapter {flag}: expected NAME=PATH, the name of letters, "
                                 "digits, '_', '-' or '.'")
        if name in adapters:
            raise TransduceError(f"--adapter {flag}: the name {name} is given twice")
        adapters[name] = resolve(path)
        info = read_info(adapters[name]).get("adapter")
        if info is None:
            raise TransduceError(f"--adapter {flag}: {adapters[name]} holds a full model, not LoRA "
                                 "adapters (train them with transduce train --lora)")
        if info["base_fingerprint"] != base:
            raise TransduceError(f"--adapter {flag}: its adapters were trained on other weights "
                                 f"({info['base']}) than {folder} holds")
    return adapters


def flagged(error: ValueError) -> TransduceError:
    """A settings error in the words of its flag (``max_beam ...`` -> ``--max-beam ...``)."""
    from ..serving.app import ServeSettings

    text, name = str(error), str(error).split(" ")[0]
    if name in {f.name for f in fields(ServeSettings)} or name in {f.name for f in
                                                                   fields(DecodeConfig)}:
        text = "--" + name.replace("_", "-") + text[len(name):]
    return TransduceError(text)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket, or a message saying why there is none."""
    if not 0 <= port <= 65535:
        raise TransduceError(f"--port {port}: choose a port from 1 to 65535 (0: a free one)")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise TransduceError(f"--host {host}: not an address of this machine "
                             f"({error.strerror})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as error:
        sock.close()
        hint = (
            "; another program (or another transduce serve) uses it: choose another --port, or 0 "
            "for a free one"
            if error.errno in (98, 48, 10048)
            else ""
        )
        raise TransduceError(f"cannot listen on {host}:{port}: {error.strerror}{hint}") from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def url_of(sock: socket.socket, host: str) -> str:
    port = sock.getsockname()[1]
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else (f"[{host}]" if ":" in host else host)
    return f"http://{shown}:{port}/"


def run(args) -> int:
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError:
        raise TransduceError("transduce serve needs FastAPI and uvicorn: pip install "
                             "'transduce[serve]' (from a clone: pip install -e "
                             "'.[serve]')") from None
    import transduce

    from ..loading import checkpoint_task
    from ..serving.app import create_app
    from ..serving.server import GracefulServer, head_deadline
    from ..serving.services import SERVED

    announce(args.model)  # a missing or damaged run is a message before the port is taken
    folder, task = checkpoint_task(args.model)
    if task.facade not in SERVED:
        raise TransduceError(f"{args.model} holds {task.what}; transduce serve serves "
                             "translation, parsing, image classification and speech recognition "
                             f"models (run this one with transduce {task.verb})")
    decode = draft_search(args, task_search(args, task))
    settings = _settings(args, decode)
    adapters = adapter_folders(args.adapter, folder)
    sock = bind(args.host, args.port)
    try:
        threads = set_threads(args.threads)
        started = time.monotonic()
        facade = transduce.load(folder, args.device, args.precision, args.compile,
                                draft=args.draft, draft_tokens=args.draft_tokens)
        try:
            app = create_app(facade, settings, adapters=adapters)
        except ValueError as error:
            raise flagged(error) from None
    except BaseException:
        sock.close()
        raise
    service = app.state.service
    runs, compiled, (mode, why) = service.runs, service.compiled, app.state.batching
    url = url_of(sock, args.host)
    print(f"serving {runs.folder} ({task.what}{service.described()}: POST {service.route}), "
          f"loaded in {time.monotonic() - started:.1f} s", file=sys.stderr)
    budget = f"up to {decode.max_tokens} tokens / {decode.max_sentences} {service.noun}"
    described = {"continuous": f"continuous ({budget} in flight)",
                 "dynamic": f"dynamic ({budget} a batch, waiting at most {settings.max_wait_ms:g} "
                            "ms)", "off": "off"}
    searched = service.searched()
    if args.draft is not None:
        searched += f", draft {args.draft} proposing up to {args.draft_tokens} tokens"
    print(f"device {runs.device}, precision {runs.precision}, {threads} "
          f"thread(s){', compiled' if compiled else ''}{searched}; batching {described[mode]}",
          file=sys.stderr)
    if why:
        print(f"batching {mode}: {why}", file=sys.stderr)
    if args.host not in LOOPBACK:
        print(f"warning: listening on {args.host}: anyone who can reach this machine can use the "
              "model (there is no authentication)", file=sys.stderr)
    print(f"open {url} (the API's documentation: {url}docs); Ctrl+C "
          "stops", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="info", access_log=not args.no_access_log, lifespan="on",
                            http=head_deadline(settings.body_timeout),
                            timeout_graceful_shutdown=max(1, int(settings.drain_timeout)))
    server = GracefulServer(config, app.state.gate, settings.drain_timeout)
    server.run(sockets=[sock])
    print("stopped", file=sys.stderr)
    return 0
