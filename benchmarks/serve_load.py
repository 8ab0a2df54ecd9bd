"""Load on ``transduce serve``: K concurrent clients on loopback, with continuous batching, dynamic
batching and batching off, side by side.

    python benchmarks/serve_load.py --run runs/multi30k-small [--clients 16 64] [--loads single
mixed]
                                    [--seconds 30] [--trials 2] [--beam 4] [--threads 2]

For each mode a fresh server process (``transduce serve RUN --port 0 --batching MODE``) is started,
warmed up with a few requests, then K clients (asyncio + httpx, one process) each send requests one
after another until ``--seconds`` or ``--max-requests`` is reached: ``single``, one sentence of
Multi30k's test_2016_flickr English side (``../shared/data``) per request, in turn; ``mixed``, 1-20
sentences drawn at random per request (so of mixed lengths), asked as a stream (``"stream": true``),
timed to its first sentence as well. Reported per run: requests/s, sentences/s, p50/p99 request
latency, the median time to the first sentence (mixed), errors (any status but 200, or a stream cut
short), the mean sentences per batch from the server's /metrics (continuous: in flight per step),
the share of the time its worker spent searching, and the server's peak resident memory (VmHWM);
then, per trial, continuous over dynamic: the ratio of sentences/s and of p99 latency. The clients
share the machine with the server (2 cores here), as they would on a laptop. Writes
``benchmarks/results/serve_load.json`` and prints markdown tables."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import MULTI30K, machine, save, table  # noqa: E402


def sentences() -> list[str]:
    from transduce.data.corpus import read_lines

    path = MULTI30K / "test_2016_flickr.en.gz"
    if not path.is_file():
        sys.exit(f"serve_load.py: {path} is missing; it reads Multi30k from ../shared/data")
    return [line.strip() for line in read_lines(path) if line.strip()]


def start_server(
    run: str, batching: str, beam: int, threads: int, max_wait_ms
) -> tuple[subprocess.Popen, str]:
    command = [
        sys.executable,
        "-m",
        "transduce",
        "serve",
        run,
        "--port",
        "0",
        "--no-access-log",
        "--batching",
        batching,
        "--beam",
        str(beam),
        "--threads",
        str(threads),
    ]
    if max_wait_ms is not None:
        command += ["--max-wait-ms", str(max_wait_ms)]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    for line in process.stderr:
        if line.startswith("open http://"):
            url = line.split()[1].rstrip("/")
            # keep draining stderr so the server never blocks on a full pipe
            import threading

            threading.Thread(target=lambda: [None for _ in process.stderr], daemon=True).start()
            return process, url
    raise SystemExit(f"serve_load.py: the server did not start ({process.wait()})")


def peak_memory_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


async def load(
    url: str, texts: list[str], clients: int, seconds: float, max_requests: int, mixed: bool
) -> dict:
    """K clients, each sending its next request when the last is answered. ``mixed``: requests of
    1-20 sentences drawn at random (so of mixed lengths), streamed, timed to their first sentence
    too."""
    import random

    import httpx

    latencies: list[float] = []
    firsts: list[float] = []
    errors = sentences_done = issued = 0
    stop_at = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    draw = random.Random(0)

    async def one(http: httpx.AsyncClient, batch: list[str]) -> tuple[bool, int, Optional[float]]:
        start = time.monotonic()
        if not mixed:
            answer = await http.post(url + "/v1/translate", json={"text": batch}, timeout=120)
            return answer.status_code == 200, len(batch), None
        done, first = 0, None
        async with http.stream("POST", url + "/v1/translate", json={"text": batch, "stream": True},
                               timeout=120) as answer:
            if answer.status_code != 200:
                return False, 0, None
            async for line in answer.aiter_lines():
                if line.strip() and '"index"' in line:
                    first = first if first is not None else time.monotonic() - start
                    done += 1
        return done == len(batch), done, first

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal errors, issued, sentences_done
        while issued < max_requests and time.monotonic() < stop_at:
            batch = (
                [draw.choice(texts) for _ in range(draw.randint(1, 20))]
                if mixed
                else [texts[issued % len(texts)]]
            )
            issued += 1
            start = time.monotonic()
            try:
                ok, done, first = await one(http, batch)
            except httpx.HTTPError:
                ok, done, first = False, 0, None
            latencies.append(time.monotonic() - start)
            errors += not ok
            sentences_done += done
            if first is not None:
                firsts.append(first)

    async with httpx.AsyncClient(limits=limits) as http:
        began = time.monotonic()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        elapsed = time.monotonic() - began
    result = {"requests": len(latencies), "errors": errors, "seconds": round(elapsed, 2),
              "requests_per_s": round(len(latencies) / elapsed, 2),
              "sentences_per_s": round(sentences_done / elapsed, 2),
              "p50_ms": round(1000 * percentile(latencies, 0.5), 1),
              "p99_ms": round(1000 * percentile(latencies, 0.99), 1)}
    if firsts:
        result["first_p50_ms"] = round(1000 * percentile(firsts, 0.5), 1)
    return result


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run_mode(args, batching: str, texts: list[str], clients: int, mixed: bool) -> dict:
    import httpx

    process, url = start_server(args.run, batching, args.beam, args.threads, args.max_wait_ms)
    try:
        for text in texts[:5]:  # warm-up
            httpx.post(url + "/v1/translate", json={"text": [text]}, timeout=60).raise_for_status()
        before = httpx.get(url + "/metrics").text
        result = asyncio.run(load(url, texts, clients, args.seconds, args.max_requests, mixed))
        after = httpx.get(url + "/metrics").text
        batches = metric(after, "transduce_batch_sentences_count") - metric(
            before, "transduce_batch_sentences_count"
        )
        sents = metric(after, "transduce_batch_sentences_sum") - metric(
            before, "transduce_batch_sentences_sum"
        )
        busy = metric(after, "transduce_search_seconds_total") - metric(
            before, "transduce_search_seconds_total"
        )
        result["worker_busy"] = round(busy / result["seconds"], 2)
        result = dict(
            batching=batching,
            load="mixed" if mixed else "single",
            clients=clients,
            **result,
            mean_batch=round(sents / max(batches, 1), 2),
            peak_memory_mb=round(peak_memory_mb(process.pid), 1),
        )
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    print(f"  {result}", file=sys.stderr, flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a trained run (e.g. runs/multi30k-small)")
    parser.add_argument("--clients", type=int, nargs="+", default=[16, 64])
    parser.add_argument(
        "--loads",
        nargs="+",
        default=["single", "mixed"],
        choices=["single", "mixed"],
        help="single: one sentence a request; mixed: 1-20 sentences a request, streamed",
    )
    parser.add_argument("--seconds", type=float, default=30.0, help="each run's load lasts at "
                                                                    "most this long")
    parser.add_argument("--max-requests", type=int, default=5000, help="and sends at most this "
                                                                       "many requests")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="the server's "
                                                                                 "CPU threads")
    parser.add_argument("--max-wait-ms", type=float, help="the server's --max-wait-ms (default: "
                                                          "its default)")
    parser.add_argument("--trials", type=int, default=2, help="rounds of every mode, side by side")
    parser.add_argument("--modes", nargs="+", default=["continuous", "dynamic", "off"],
                        choices=["continuous", "dynamic", "off"])
    args = parser.parse_args()
    texts = sentences()
    rows, ratios = [], []
    for trial in range(1, args.trials + 1):
        for load_kind in args.loads:
            for clients in args.clients:
                group = {
                    mode: dict(
                        trial=trial, **run_mode(args, mode, texts, clients, load_kind == "mixed")
                    )
                    for mode in args.modes
                }
                rows += group.values()
                if "continuous" in group and "dynamic" in group:
                    c, d = group["continuous"], group["dynamic"]
                    ratios.append(
                        {
                            "trial": trial,
                            "load": load_kind,
                            "clients": clients,
                            "sentences_per_s": round(
                                c["sentences_per_s"] / d["sentences_per_s"], 2
                            ),
                            "p99": round(c["p99_ms"] / d["p99_ms"], 2),
                        }
                    )
    payload = {
        "machine": machine(),
        "run": args.run,
        "beam": args.beam,
        "threads": args.threads,
        "max_wait_ms": args.max_wait_ms,
        "seconds": args.seconds,
        "max_requests": args.max_requests,
        "rows": rows,
        "ratios": ratios,
    }
    print(
        table(
            rows,
            [
                "trial",
                "load",
                "clients",
                "batching",
                "requests",
                "errors",
                "sentences_per_s",
                "p50_ms",
                "p99_ms",
                "first_p50_ms",
                "mean_batch",
                "worker_busy",
                "peak_memory_mb",
            ],
        )
    )
    if ratios:
        print("\ncontinuous / dynamic batching, per trial (sentences/s; p99 latency):")
        print(table(ratios, ["trial", "load", "clients", "sentences_per_s", "p99"]))
    print(f"wrote {save('serve_load', payload)}", file=sys.stderr)


if __name__ == "__main__":
    main()
