"""Sizes of the WMT14 recipe: the update frequency that makes ~25,000 target tokens an update on
N GPUs, and the GPU-hours of a run from a measured throughput.

    python recipes/wmt14/plan.py update-freq GPUS MAX_TOKENS
    python recipes/wmt14/plan.py estimate [--model base|big] [--gpus N]
        [--throughput benchmarks/results/train_throughput.json | --tokens-per-s X]

``estimate`` reads the median target tokens/s that ``benchmarks/train_throughput.py`` measured
for the model (per device, at the benchmark's batch) and prints the hours of the paper's number
of updates at ~25,000 target tokens each. Data parallelism is assumed to scale linearly, so this
is a lower bound for several GPUs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

TOKENS_PER_UPDATE = 25_000  # §5.1: ~25,000 source and ~25,000 target tokens a batch
STEPS = {"base": 100_000, "big": 300_000}  # §5.2
# real target tokens per padded position in length-sorted batches (Multi30k measured 0.88)
FILL = 0.88


def update_freq(gpus: int, max_tokens: int, fill: float = FILL) -> int:
    """Batches accumulated per update so that gpus x update_freq x max_tokens x fill ~ 25,000."""
    if gpus < 1 or max_tokens < 1:
        raise ValueError("GPUS and MAX_TOKENS must be at least 1")
    return max(1, round(TOKENS_PER_UPDATE / (gpus * max_tokens * fill)))


def gpu_hours(tokens_per_s: float, model: str = "base", gpus: int = 1) -> tuple[float, float]:
    """(wall-clock hours, device-hours) of the paper's updates at ``tokens_per_s`` per device."""
    seconds = STEPS[model] * TOKENS_PER_UPDATE / (tokens_per_s * gpus)
    return seconds / 3600, seconds * gpus / 3600


def measured_tokens_per_s(path: Path, model: str) -> tuple[float, dict]:
    data = json.loads(path.read_text())
    rows = [r for r in data["rows"] if r["preset"] == model]
    if not rows:
        raise SystemExit(f"{path} has no row for {model!r}; run: python "
                         f"benchmarks/train_throughput.py --presets {model}")
    best = max(rows, key=lambda r: r["rate_median"])
    machine = data["machine"]
    return (
        best["rate_median"],
        f"{best['precision']} on {machine.get('cpu')}, {machine.get('threads')} threads, "
        f"torch {machine.get('torch')}, from {path}",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    freq = sub.add_parser("update-freq")
    freq.add_argument("gpus", type=int)
    freq.add_argument("max_tokens", type=int)
    est = sub.add_parser("estimate")
    est.add_argument("--model", choices=sorted(STEPS), default="base")
    est.add_argument("--gpus", type=int, default=1)
    est.add_argument(
        "--throughput", type=Path, default=Path("benchmarks/results/train_throughput.json")
    )
    est.add_argument("--tokens-per-s", type=float, help="a measured figure instead of the "
                                                        "benchmark's file")
    args = parser.parse_args()
    if args.command == "update-freq":
        print(update_freq(args.gpus, args.max_tokens))
        return 0
    if args.tokens_per_s:
        rate, source = args.tokens_per_s, "given with --tokens-per-s"
    else:
        rate, source = measured_tokens_per_s(args.throughput, args.model)
    wall, device = gpu_hours(rate, args.model, args.gpus)
    print(f"{args.model}: {STEPS[args.model]:,} updates x {TOKENS_PER_UPDATE:,} target tokens at "
          f"{rate:,.0f} tokens/s per device ({source}): {wall:,.1f} h on {args.gpus} "
          f"device{'s' if args.gpus > 1 else ''}, {device:,.1f} device-hours (linear scaling "
          "assumed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
