"""The decode step's products on this machine: microseconds per call of each float layout a
``TunedLinear`` chooses between (``rows``, ``columns``, ``blocks``), of ``F.linear`` on the model's
own layout (``linear``: what ``TunedLinear.plain`` gives a GPU; on the CPU the captured step uses
``rows``), of a bf16 copy, of an ``Int8Linear`` (``int8``: each row quantized over its own range)
and of fbgemm's kernel alone on the same int8 weights (``fbgemm``: all rows over one range, what
the per-row mapping costs on top), for the decoder shapes of the small and base presets at 1, 4, 16
and 32 rows. The float layouts are what ``TunedLinear`` measures for itself the first time it sees
a row count (``inference/tuned_linear.py``); the bf16 column is what ``BF16_MIN_MACS`` was set
from.

    python benchmarks/dense_layouts.py [--threads 2] [--calls 200]

Prints a markdown table and writes benchmarks/results/dense_layouts.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, measure, save, table  # noqa: E402

from transduce.inference.int8 import Int8Linear  # noqa: E402
from transduce.inference.tuned_linear import TunedLinear  # noqa: E402

SHAPES = [
    (8000, 256),
    (768, 256),
    (256, 256),
    (1024, 256),
    (256, 1024),
    (32000, 512),
    (512, 512),
    (2048, 512),
    (512, 2048),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=200, help="calls timed per cell (median of 3 "
                                                               "trials)")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16, 32])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows_out, raw = [], {}
    for out, inp in SHAPES:
        weight, bias = torch.randn(out, inp), torch.randn(out)
        dense = TunedLinear(weight, bias, bf16=True)
        int8 = Int8Linear(weight, bias)
        low, low_bias = weight.to(torch.bfloat16), bias.to(torch.bfloat16)
        for rows in args.rows:
            x = torch.randn(rows, inp)
            cells = {}
            for layout in ("rows", "columns", "blocks", "linear", "bf16", "int8", "fbgemm"):
                if layout == "blocks" and rows > 16:
                    continue  # not a candidate beyond 16 rows

                def call(layout=layout):
                    for _ in range(args.calls):
                        if layout == "bf16":
                            torch.nn.functional.linear(x.to(torch.bfloat16), low, low_bias).float()
                        elif layout == "int8":
                            int8(x)
                        elif layout == "fbgemm":
                            torch.ops.quantized.linear_dynamic(x, int8.packed, True)
                        else:
                            dense._multiply(x, layout)

                cells[layout] = measure(call, trials=3, warmup=1)["median_s"] / args.calls * 1e6
            raw[f"{out}x{inp}/{rows}"] = cells
            fp32 = {k: v for k, v in cells.items() if k in ("rows", "columns", "blocks")}
            rows_out.append({"weight (out x in)": f"{out} x {inp}", "rows": rows,
                             **{f"{k} us": f"{v:.1f}" for k, v in cells.items()},
                             "fastest fp32": min(fp32, key=fp32.get),
                             "multiply-adds": f"{rows * out * inp / 1e6:.1f}M"})
    print(
        table(
            rows_out,
            [
                "weight (out x in)",
                "rows",
                "rows us",
                "columns us",
                "blocks us",
                "linear us",
                "bf16 us",
                "int8 us",
                "fbgemm us",
                "fastest fp32",
                "multiply-adds",
            ],
        )
    )
    print(f"\n({machine()})")
    save("dense_layouts", {**raw, "machine": machine()})


if __name__ == "__main__":
    main()
