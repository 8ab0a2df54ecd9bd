"""The decoding cache with shared key/value heads: bytes held and time per step, for the paper's
base shape (6 decoder layers, 8 heads of 64) with n_kv_heads 8 (the paper), 2 (grouped-query) and
1 (multi-query), and with a sliding window.

    python benchmarks/gqa_cache.py [--batch 8] [--beam 4] [--steps 64] [--threads 2]

Random weights (the cache's size and the step's cost do not depend on training); each model decodes
the same random tokens through ``Transformer.decode``. Bytes are what the cache's tensors hold after
the last step (``DecoderCache.nbytes``, the positions kept); times are medians of 3 trials of the
whole decode, all models in this one process. Prints a markdown table and writes
benchmarks/results/gqa_cache.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, measure, save, table  # noqa: E402

from transduce import ModelConfig, Transformer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8, help="sentences")
    parser.add_argument("--beam", type=int, default=4, help="hypotheses per sentence")
    parser.add_argument("--steps", type=int, default=64, help="decoded positions")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    src = torch.randint(4, 8000, (args.batch, 30))
    tokens = torch.randint(4, 8000, (args.batch * args.beam, args.steps))
    rows = []
    for label, overrides in (("8 (the paper)", {}), ("2 (grouped-query)", {"n_kv_heads": 2}),
                             ("1 (multi-query)", {"n_kv_heads": 1}),
                             ("8, window 16", {"attention_window": 16})):
        model = Transformer(ModelConfig.preset("base", vocab_size=8000, **overrides)).eval()
        held = {}

        def decode():
            with torch.inference_mode():
                cache = model.start_decoding(
                    src, model.encode(src), beam=args.beam, capacity=args.steps
                )
                for t in range(args.steps):
                    model.decode(tokens[:, t : t + 1], cache)
            held["bytes"] = cache.nbytes()
            return args.steps

        timing = measure(decode, trials=3, warmup=1)
        kept = min(args.steps, model.config.attention_window or args.steps)
        per_position = held["bytes"] / (args.batch * args.beam) / kept / 1024
        rows.append({"key/value heads": label, "parameters": f"{model.num_parameters()['total']:,}",
                     "cache bytes": f"{held['bytes']:,}", "per position and "
                                                          "hypothesis": f"{per_position:.1f} KiB",
                     "ms per step": f"{1000 / timing['rate_median']:.1f}"})
    columns = list(rows[0])
    print(f"base shape, batch {args.batch} x beam {args.beam}, {args.steps} positions, "
          f"{args.threads} threads")
    print(table(rows, columns))
    save("gqa_cache", {"machine": machine(), "args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
