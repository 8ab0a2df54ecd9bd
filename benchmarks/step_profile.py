"""Where a decode step's time goes: PyTorch's profiler over the fast step (``model/fast.py``) of a
randomly initialised model at one sentence, greedy, grouped by operator, with the share of the
step spent in the weight products (``addmm``/``mm``/``bmm`` of the layouts, the int8 kernels).

    python benchmarks/step_profile.py [--shape small|base] [--precision fp32|int8|bf16] [--threads 2]
                                      [--int8-float-max-mb MB]

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
import transduce.model.fast as fast  # noqa: E402

SHAPES = {"small": dict(d_model=256, encoder_layers=3, decoder_layers=3, n_heads=4, d_ff=1024),
          "base": dict(d_model=512, encoder_layers=6, decoder_layers=6, n_heads=8, d_ff=2048)}
PRODUCTS = ("aten::addmm", "aten::mm", "quantized::linear_dynamic", "aten::linear")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="small")
    parser.add_argument("--precision", choices=["fp32", "int8", "bf16"], default="fp32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--int8-float-max-mb", type=float, default=None,
                        help="override INT8_FLOAT_MAX_BYTES (int8: up to which decoder size fp32 products compete)")
    args = parser.parse_args()
    if args.int8_float_max_mb is not None:
        fast.INT8_FLOAT_MAX_BYTES = int(args.int8_float_max_mb * 2**20)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = ModelConfig.preset("base", vocab_size=8000, dropout=0.0, **SHAPES[args.shape])
    model = Transformer(config).eval()
    src = torch.randint(4, 8000, (1, 20))
    decoder = fast.FastDecoder(model, args.precision)

    def run() -> None:
        cache = decoder.start(src, memory, 1, capacity=args.steps)
        token = torch.full((1,), config.start_id)
        for _ in range(args.steps):
            token = decoder.step(token, cache).argmax(-1)

    with torch.inference_mode():
        memory = model.encode(src)
        for _ in range(5):  # the measured choices are made here
            run()
        began, runs = time.perf_counter(), 20
        for _ in range(runs):
            run()
        ms = (time.perf_counter() - began) / runs / args.steps * 1e3
        with torch.profiler.profile() as prof:
            for _ in range(5):
                run()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    steps = 5 * args.steps
    rows = [{"op": e.key, "calls per step": e.count / steps, "us per step": e.self_cpu_time_total / steps,
             "share": e.self_cpu_time_total / total} for e in events]
    products = sum(r["share"] for r in rows if r["op"] in PRODUCTS)
    calls = sum(r["calls per step"] for r in rows)
    print(f"{args.shape}, {args.precision}, {args.threads} threads: {ms:.3f} ms per step; weight products "
          f"{products:.0%} of the profiled time (addmm, mm, int8; the blocks layout's bmm counts with "
          f"attention's), {calls:.0f} operator calls a step (nested ones included)\n")
    print("| operator | calls a step | us a step | share |\n|---|---|---|---|")
    for r in rows[:20]:
        print(f"| {r['op']} | {r['calls per step']:.0f} | {r['us per step']:.1f} | {r['share']:.1%} |")
    save("step_profile", {"machine": machine(), "shape": args.shape, "precision": args.precision,
                          "threads": args.threads, "ms_per_step": ms, "products_share": products, "rows": rows})


if __name__ == "__main__":
    main()
