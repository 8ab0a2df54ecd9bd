"""What a speculative search's check costs against a step: the fast decode step of one position
and ``inference.positions.read_positions`` of K positions, fp32 and int8, at batch 1, on a run's
weights (e.g. peers.py's random ``base``), after a 10-token prefix.

    python benchmarks/check_cost.py --run RUN [--positions 1 2 3 5 8] [--repeats 40]

Prints milliseconds per call and the ratio to one fp32 step; writes
benchmarks/results/check_cost.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, save  # noqa: E402

from transduce import load  # noqa: E402
from transduce.inference import encode, fast_decoder  # noqa: E402
from transduce.inference.positions import read_positions  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True)
    p.add_argument("--positions", type=int, nargs="+", default=[1, 2, 3, 5, 8])
    p.add_argument("--repeats", type=int, default=40)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = load(args.run, device="cpu", compile="off").model
    vocab = model.config.target_vocab_size
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, vocab - 1, (1, 14), generator=g)
    rows = []
    with torch.inference_mode():
        memory = encode(model, src)
        for precision in ("fp32", "int8"):
            fast = fast_decoder(model, precision)
            for k in args.positions:
                cache = fast.start(src, memory, 1, 64)
                read_positions(fast, torch.randint(4, vocab - 1, (10,), generator=g), cache)
                tokens = torch.randint(4, vocab - 1, (k,), generator=g)

                def call():
                    cache.length = 10
                    return fast.step(tokens, cache) if k == 1 else \
                        read_positions(fast, tokens, cache)
                for _ in range(3):
                    call()
                start = time.perf_counter()
                for _ in range(args.repeats):
                    call()
                ms = 1000 * (time.perf_counter() - start) / args.repeats
                rows.append({"precision": precision, "positions": k, "ms": ms})
    step = rows[0]["ms"]
    print(f"{args.run}: batch 1, {args.threads} threads, {args.repeats} calls each\n")
    print("| precision | positions | ms a call | vs an fp32 step |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['precision']} | {row['positions']} | {row['ms']:.2f} | "
              f"{row['ms'] / step:.2f}x |")
    save("check_cost", {"machine": machine(), "run": args.run, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
