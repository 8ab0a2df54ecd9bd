"""Helpers shared by the benchmark scripts: timing, medians, markdown tables, machine facts."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import torch

MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
RESULTS = Path(__file__).resolve().parent / "results"
# the command in a process that reports its own peak resident memory (kB) last on stderr
MEASURED = ("import resource, sys; from transduce.cli.main import main; code = main(sys.argv[1:]); "
            "print('maxrss', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); "
            "sys.exit(code)")


def transduce(*args: str, memory: bool = False) -> subprocess.CompletedProcess:
    """Run a transduce command; exit with its error output if it fails. ``memory``: its stderr
    ends with ``maxrss KB``, the process's peak resident memory."""
    command = ["-c", MEASURED] if memory else ["-m", "transduce"]
    result = subprocess.run([sys.executable, *command, *args], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"transduce {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return result


def bleu(run: Path, prefix: str, suffix: str = "", beam: int = 4) -> float:
    """sacreBLEU of ``transduce evaluate`` on the English-German pair ``prefix.en/.de`` + suffix."""
    out = transduce("evaluate", str(run), "--src", f"{prefix}.en{suffix}", "--ref",
                    f"{prefix}.de{suffix}", "--json", "--beam", str(beam))
    return json.loads(out.stdout)["bleu"]


def measure(fn: Callable[[], float | None], trials: int, warmup: int = 2) -> dict:
    """Run ``fn`` warmup + trials times; each call returns its own work count or None.

    Returns median/min/max seconds (and work/s when fn returns a count).
    """
    for _ in range(warmup):
        fn()
    times, work = [], []
    for _ in range(trials):
        start = time.perf_counter()
        count = fn()
        times.append(time.perf_counter() - start)
        work.append(count)
    out = {
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "trials": trials,
    }
    if work[0] is not None:
        rates = sorted(w / t for w, t in zip(work, times))
        out.update(rate_median=statistics.median(rates), rate_min=rates[0], rate_max=rates[-1])
    return out


def gemm_peak(dtype: torch.dtype, n: int = 2048, trials: int = 5) -> float:
    """This machine's matmul throughput in GFLOP/s at n x n x n (median of trials)."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    result = measure(lambda: (a @ b, None)[1], trials, warmup=2)
    return 2 * n**3 / result["median_s"] / 1e9


def machine() -> dict:
    return {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }


def table(rows: list[dict], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(str(row.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)


def save(name: str, payload: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def joined_at_random(model, sources: list, decode, precision: str = "fp32", seed: int = 0
                     ) -> list:
    """Each source's n-best list from one running search that the sources join a few at a time
    (1-8) at random steps, in input order: the server's continuous batching."""
    import random

    from transduce.decoding import RunningSearch, SearchOptions

    running = RunningSearch(model, decode, SearchOptions(precision=precision))
    found, draw, next_ = {}, random.Random(seed), 0
    with torch.inference_mode():
        while next_ < len(sources) or len(running):
            if next_ < len(sources) and draw.random() < 0.3:
                k = min(draw.randrange(1, 9), len(sources) - next_)
                running.join(sources[next_:next_ + k], range(next_, next_ + k))
                next_ += k
            for key, hyps in running.step():
                found[key] = hyps
    return [found[i] for i in range(len(sources))]
