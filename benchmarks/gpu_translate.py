"""Eager against captured (``--compile on``: torch.compile, CUDA graphs) translation on a GPU:
the same outputs, and the time of three passes over the same lines in one process, the first
with its compilations, the others with everything compiled; then the first ``--stream`` lines one
at a time, as a server gets them (batch 1, where capture could pay: the GPU waits on launches),
two passes, the second timed.

    python benchmarks/gpu_translate.py RUN LINES [--refs REFS] [--device cuda] [--beam 4] [--stream
30]

Prints a markdown table and writes benchmarks/results/gpu_translate.json. Run by
benchmarks/gpu_check.sh, never in CI. Exits 1 when the captured outputs differ from the eager ones.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, save, table  # noqa: E402

from transduce.data.corpus import read_lines  # noqa: E402
from transduce.translator import Translator  # noqa: E402


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def passes(
    translator: Translator, lines: list[str], beam: int, count: int = 3
) -> tuple[list[str], list[float]]:
    seconds, outputs = [], None
    device = str(translator.device)
    for _ in range(count):
        sync(device)
        start = time.perf_counter()
        outputs = translator.translate(lines, beam=beam)
        sync(device)
        seconds.append(time.perf_counter() - start)
    return outputs, seconds


def stream(translator: Translator, lines: list[str], beam: int) -> tuple[list[str], float]:
    """One line at a time, twice (the first pass compiles what it needs); the second pass's
    seconds."""
    device = str(translator.device)
    for _ in range(2):
        sync(device)
        start = time.perf_counter()
        outputs = [translator.translate([line], beam=beam)[0] for line in lines]
        sync(device)
    return outputs, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run")
    parser.add_argument("lines")
    parser.add_argument("--refs")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--stream", type=int, default=30, help="lines then translated one at a "
                                                               "time (0: none)")
    args = parser.parse_args()
    lines = list(read_lines(args.lines))
    results, rows, streamed = {}, [], {}
    for mode in ("off", "on"):
        translator = Translator.load(args.run, device=args.device, compile=mode)
        results[mode], seconds = passes(translator, lines, args.beam)
        rows.append(
            {
                "step": "eager" if mode == "off" else "captured",
                "first pass s": f"{seconds[0]:.2f}",
                "second pass s": f"{seconds[1]:.2f}",
                "third pass s": f"{seconds[2]:.2f}",
                "sentences/s (third)": f"{len(lines) / seconds[2]:.1f}",
                "seconds": seconds,
            }
        )
        print(rows[-1], flush=True)
        if args.stream:
            streamed[mode], seconds = stream(translator, lines[: args.stream], args.beam)
            rows.append({"step": f"{rows[-1]['step']}, one line at a "
                                 "time", "second pass s": f"{seconds:.2f}",
                         "sentences/s "
                         "(third)": f"{len(streamed[mode]) / seconds:.1f} (second pass)",
                         "seconds": [seconds]})
            print(rows[-1], flush=True)
    differ = sum(a != b for a, b in zip(results["off"], results["on"]))
    differ += sum(a != b for a, b in zip(streamed.get("off", []), streamed.get("on", [])))
    summary = (f"{len(lines)} lines and {len(streamed.get('off', []))} one at a time, beam "
               f"{args.beam}: {differ} differ between eager and captured")
    if args.refs:
        refs = list(read_lines(args.refs))
        refs = (refs * (len(lines) // max(len(refs), 1) + 1))[: len(lines)]
        exact = sum(a == r for a, r in zip(results["off"], refs))
        summary += f"; eager matches the reference exactly on {exact}"
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    print(f"\n{name}, torch {torch.__version__}; {summary}")
    print(table(rows, ["step", "first pass s", "second pass "
                                               "s", "third pass s", "sentences/s (third)"]))
    save("gpu_translate", {"machine": {**machine(), "gpu": name}, "summary": summary,
                           "differ": differ, "rows": rows})
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
