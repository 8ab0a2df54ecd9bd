"""Where a decode step's time goes: PyTorch's profiler over the fast step (``inference/decoder.py``)
of a randomly initialised model at one sentence, greedy, grouped by operator, with the share of the
step spent in the weight products (``addmm``/``mm``/``bmm`` of the layouts, the int8 kernels).

    python benchmarks/step_profile.py [--shape small|base] [--precision fp32|int8|bf16] [--threads
2]
                                      [--rows N] [--compile] [--split]

``--compile`` profiles the captured step (``CapturedDecoder``; fp32) and also times the eager
step in the same process, in interleaved rounds, to print their ratio. ``--rows`` decodes N
sentences at once (one by default). ``--split`` (eager) also times, in interleaved rounds, the step
with every weight product replaced by a replay of its result (what the rest of the step costs),
and each product alone, called over and over (its weight then stays in the core's cache, which
the step's weights outgrow): the products' cost inside the step against the sum of their own.

The shapes are benchmarks/peers.py's (small: d_model 256, 3+3 layers, vocabulary 8,000). Prints
ms per step and the operator table; writes benchmarks/results/step_profile.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, save  # noqa: E402

from transduce import ModelConfig, Transformer  # noqa: E402
import transduce.inference.decoder as fast  # noqa: E402
from transduce.inference.captured import CapturedDecoder  # noqa: E402
from transduce.inference.tuned_linear import TunedLinear  # noqa: E402

SHAPES = {"small": dict(d_model=256, encoder_layers=3, decoder_layers=3, n_heads=4, d_ff=1024),
          "base": dict(d_model=512, encoder_layers=6, decoder_layers=6, n_heads=8, d_ff=2048)}
PRODUCTS = ("aten::addmm", "aten::mm", "quantized::linear_dynamic", "aten::linear",
            # the last two: the captured step's
            "aoti_torch_cpu_addmm_out", "aoti_torch_cpu_mm_out")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="small")
    parser.add_argument("--precision", choices=["fp32", "int8", "bf16"], default="fp32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rows", type=int, default=1, help="sentences decoded at once")
    parser.add_argument("--compile", action="store_true", help="the captured step, against the "
                                                               "eager one")
    parser.add_argument("--split", action="store_true",
                        help="the step against the step without its products, and the products "
                             "timed alone")
    args = parser.parse_args()
    if args.compile and args.precision != "fp32":
        parser.error("--compile captures the fp32 step only (int8 and the CPU's bf16 step are "
                     "eager)")
    if args.split and (args.compile or args.precision == "bf16"):
        parser.error("--split times the eager fp32 or int8 step")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = ModelConfig.preset("base", vocab_size=8000, dropout=0.0, **SHAPES[args.shape])
    model = Transformer(config).eval()
    src = torch.randint(4, 8000, (args.rows, 20))
    eager = fast.FastDecoder(model, args.precision) if args.compile else None
    began = time.perf_counter()
    make = CapturedDecoder if args.compile else fast.FastDecoder
    decoder = make(model, args.precision)

    def run(decoder=decoder) -> None:
        cache = decoder.start(src, memory, 1, capacity=args.steps)
        token = torch.full((args.rows,), config.start_id)
        for _ in range(args.steps):
            token = decoder.step(token, cache).max(-1).indices

    def ms_per_step(decoder, runs: int = 4) -> float:
        began = time.perf_counter()
        for _ in range(runs):
            run(decoder)
        return (time.perf_counter() - began) / runs / args.steps * 1e3

    with torch.inference_mode():
        memory = model.encode(src)
        run()
        if args.compile:
            print(f"compiled in {time.perf_counter() - began:.1f} s (the first search, inductor's "
                  "disk cache included)")
        for _ in range(5):  # the measured choices are made here
            run()
            if eager is not None:
                run(eager)
        ms, eager_ms = float("inf"), float("inf")
        # interleaved rounds, each keeping its best (robust to a neighbour's burst)
        for _ in range(5):
            ms = min(ms, ms_per_step(decoder))
            if eager is not None:
                eager_ms = min(eager_ms, ms_per_step(eager))
        if eager is not None:
            print(f"captured {ms:.3f} ms a step, eager {eager_ms:.3f}: {eager_ms / ms:.2f}x\n")
        parts = split(decoder, run, ms_per_step, args.rows) if args.split else None
        with torch.profiler.profile() as prof:
            for _ in range(5):
                run()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    steps = 5 * args.steps
    rows = [
        {
            "op": e.key,
            "calls per step": e.count / steps,
            "us per step": e.self_cpu_time_total / steps,
            "share": e.self_cpu_time_total / total,
        }
        for e in events
    ]
    products = sum(r["share"] for r in rows if r["op"] in PRODUCTS)
    calls = sum(r["calls per step"] for r in rows)
    share = ("inside the compiled graph's call" if args.compile else
             f"{products:.0%} of the profiled time (addmm, mm, int8; the blocks layout's bmm "
             "counts with attention's)")
    print(f"{args.shape}, {args.precision}{', captured' if args.compile else ''}, {args.rows} "
          f"sentence(s), {args.threads} threads: {ms:.3f} ms per step; weight products {share}, "
          f"{calls:.0f} operator calls a step (nested ones included)\n")
    print("| operator | calls a step | us a step | share |\n|---|---|---|---|")
    for r in rows[:20]:
        print(f"| {r['op']} | {r['calls per step']:.0f} | {r['us per step']:.1f} | "
              f"{r['share']:.1%} |")
    save(
        "step_profile",
        {
            "machine": machine(),
            "shape": args.shape,
            "precision": args.precision,
            "compiled": args.compile,
            "sentences": args.rows,
            "threads": args.threads,
            "ms_per_step": ms,
            "eager_ms_per_step": eager_ms if args.compile else None,
            "products_share": products,
            "split": parts,
            "rows": rows,
        },
    )


def split(decoder, run, ms_per_step, rows: int) -> dict:
    """The step with and without its weight products (each replaced by a replay of its first result
    for that shape; the feed-forward's feature-major products too), timed in interleaved rounds,
    and the sum of the products timed alone (each called 50 times in a row, best of 5)."""
    replayed: dict = {}
    call, columns = TunedLinear.__call__, TunedLinear.columns

    def replay(method):
        def product(self, x):
            key = (id(self), method.__name__, tuple(x.shape))
            if key not in replayed:
                replayed[key] = method(self, x)
            return replayed[key]
        return product

    full, rest = float("inf"), float("inf")
    for _ in range(5):
        full = min(full, ms_per_step(decoder))
        TunedLinear.__call__, TunedLinear.columns = replay(call), replay(columns)
        try:
            run(decoder)  # (records the replays)
            rest = min(rest, ms_per_step(decoder))
        finally:
            TunedLinear.__call__, TunedLinear.columns = call, columns
    alone = 0.0
    for d in decoder.denses():
        x = torch.randn(rows, d.weight.size(1))
        d(x)
        best = float("inf")
        for _ in range(5):
            began = time.perf_counter()
            for _ in range(50):
                d(x)
            best = min(best, (time.perf_counter() - began) / 50)
        alone += best * 1e3
    inside = full - rest
    print(f"the step {full:.3f} ms; without its products {rest:.3f} ms; so the products take "
          f"{inside:.3f} ms inside the step, against {alone:.3f} ms timed one by one "
          f"({inside / alone:.2f}x: their weights read from farther than the core's cache)\n")
    return {
        "step_ms": full,
        "without_products_ms": rest,
        "products_in_step_ms": inside,
        "products_alone_ms": alone,
    }


if __name__ == "__main__":
    main()
