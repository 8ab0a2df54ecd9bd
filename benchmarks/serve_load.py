"""Load on ``transduce serve``: K concurrent clients on loopback, with dynamic batching on and off.

    python benchmarks/serve_load.py --run runs/multi30k-small [--clients 16] [--seconds 40]
                                    [--max-requests 5000] [--trials 3] [--beam 4] [--threads 2]

For each mode a fresh server process (``transduce serve RUN --port 0 --batching on|off``) is
started, warmed up with a few requests, then K clients (asyncio + httpx, one process) each send
single-sentence requests one after another, cycling through Multi30k's test_2016_flickr English
side (``../shared/data``), until ``--seconds`` or ``--max-requests`` is reached. Reported per mode:
requests/s, sentences/s, p50/p99 latency, errors (any status but 200), the mean batch size from
the server's /metrics and the server's peak resident memory (VmHWM); then the ratio of
sentences/s, batching on over off, per trial (a pair of runs, one after the other) and its median. The clients share the machine with the server (2 cores here),
as they would on a laptop. Writes ``benchmarks/results/serve_load.json`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import MULTI30K, machine, save, table  # noqa: E402


def sentences() -> list[str]:
    from transduce.data.corpus import read_lines

    path = MULTI30K / "test_2016_flickr.en.gz"
    if not path.is_file():
        sys.exit(f"serve_load.py: {path} is missing; it reads Multi30k from ../shared/data")
    return [line.strip() for line in read_lines(path) if line.strip()]


def start_server(run: str, batching: str, beam: int, threads: int, max_wait_ms) -> tuple[subprocess.Popen, str]:
    command = [sys.executable, "-m", "transduce", "serve", run, "--port", "0", "--no-access-log", "--batching",
               batching, "--beam", str(beam), "--threads", str(threads)]
    if max_wait_ms is not None:
        command += ["--max-wait-ms", str(max_wait_ms)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
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


async def load(url: str, texts: list[str], clients: int, seconds: float, max_requests: int) -> dict:
    import httpx

    latencies: list[float] = []
    errors = 0
    issued = 0
    stop_at = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal errors, issued
        while issued < max_requests and time.monotonic() < stop_at:
            text = texts[issued % len(texts)]
            issued += 1
            start = time.monotonic()
            try:
                answer = await http.post(url + "/v1/translate", json={"text": [text]}, timeout=60)
                ok = answer.status_code == 200
            except httpx.HTTPError:
                ok = False
            latencies.append(time.monotonic() - start)
            errors += not ok

    async with httpx.AsyncClient(limits=limits) as http:
        began = time.monotonic()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        elapsed = time.monotonic() - began
    latencies.sort()
    return {"requests": len(latencies), "errors": errors, "seconds": round(elapsed, 2),
            "requests_per_s": round(len(latencies) / elapsed, 2), "sentences_per_s": round(len(latencies) / elapsed, 2),
            "p50_ms": round(1000 * statistics.median(latencies), 1),
            "p99_ms": round(1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 1)}


def run_mode(args, batching: str, texts: list[str]) -> dict:
    import httpx

    process, url = start_server(args.run, batching, args.beam, args.threads, args.max_wait_ms)
    try:
        for text in texts[:5]:  # warm-up
            httpx.post(url + "/v1/translate", json={"text": [text]}, timeout=60).raise_for_status()
        before = httpx.get(url + "/metrics").text
        result = asyncio.run(load(url, texts, args.clients, args.seconds, args.max_requests))
        after = httpx.get(url + "/metrics").text
        batches = metric(after, "transduce_batch_sentences_count") - metric(before, "transduce_batch_sentences_count")
        sents = metric(after, "transduce_batch_sentences_sum") - metric(before, "transduce_batch_sentences_sum")
        result.update(batching=batching, clients=args.clients, mean_batch=round(sents / max(batches, 1), 2),
                      peak_memory_mb=round(peak_memory_mb(process.pid), 1))
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    print(f"  batching {batching}: {result}", file=sys.stderr)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a trained run (e.g. runs/multi30k-small)")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=40.0, help="each mode's load lasts at most this long")
    parser.add_argument("--max-requests", type=int, default=5000, help="and sends at most this many requests")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="the server's CPU threads")
    parser.add_argument("--max-wait-ms", type=float, help="the server's --max-wait-ms (default: its default)")
    parser.add_argument("--trials", type=int, default=3, help="pairs of runs, on then off, side by side")
    parser.add_argument("--modes", nargs="+", default=["on", "off"], choices=["on", "off"])
    args = parser.parse_args()
    texts = sentences()
    rows, ratios = [], []
    for trial in range(1, args.trials + 1):
        pair = [dict(trial=trial, **run_mode(args, mode, texts)) for mode in args.modes]
        rows += pair
        if len(pair) == 2:
            ratios.append(round(pair[0]["sentences_per_s"] / pair[1]["sentences_per_s"], 2))
    payload = {"machine": machine(), "run": args.run, "beam": args.beam, "threads": args.threads,
               "max_wait_ms": args.max_wait_ms, "seconds": args.seconds, "max_requests": args.max_requests,
               "rows": rows, "ratios": ratios}
    print(table(rows, ["trial", "batching", "clients", "requests", "errors", "sentences_per_s", "p50_ms", "p99_ms",
                       "mean_batch", "peak_memory_mb"]))
    if ratios:
        payload["ratio_median"] = statistics.median(ratios)
        print(f"\nsentences/s, batching on / off, per trial: {', '.join(f'{r}x' for r in ratios)} "
              f"(median {payload['ratio_median']}x)")
    print(f"wrote {save('serve_load', payload)}", file=sys.stderr)


if __name__ == "__main__":
    main()
