"""Speculative greedy search against plain greedy search at batch 1, on a trained run: sentences/s
of greedy search (the fast step, and the model's own decode, which speculative search calls),
and of speculative search for each draft and number of proposed tokens, with the share of
proposals kept; every output checked equal to greedy search's.

    python benchmarks/speculative.py --run RUN --src FILE [--draft self:1 RUN ...]
        [--tokens 2 4 6] [--adaptive] [--also RUN ...] [--sentences 100] [--rounds 3]
        [--threads 2]

Prints a markdown table and writes benchmarks/results/speculative.json. The systems alternate in
each round, in this one process.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, save  # noqa: E402

from transduce import load  # noqa: E402
from transduce.config import DecodeConfig  # noqa: E402
from transduce.data.corpus import read_lines  # noqa: E402
from transduce.decoding import Draft, SearchOptions, search  # noqa: E402
from transduce.data.dataset import pad_sequences  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True)
    p.add_argument("--src", required=True, help="source sentences, one a line")
    p.add_argument("--draft", nargs="+", default=["self:1"])
    p.add_argument("--tokens", type=int, nargs="+", default=[2, 4, 6])
    p.add_argument("--sentences", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--also", nargs="*", default=[], metavar="RUN",
                   help="greedy search of other runs on the same sentences, for their speed (a "
                        "deep-encoder shallow-decoder model beside the recipe's)")
    p.add_argument("--adaptive", action="store_true",
                   help="also each draft with K adapting to what the model keeps (up to K)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    translator = load(args.run, device="cpu", compile="off")
    model, config = translator.model, translator.model.config
    lines = [line for line in read_lines(args.src) if line.strip()][: args.sentences]
    sources = [pad_sequences([ids], config.pad_id, suffix=config.eos_id)
               for ids in translator.encode(lines)]
    decode = DecodeConfig(beam=1)
    drafts = {}
    for name in args.draft:
        for k in args.tokens:
            fixed = translator.use_draft(name, k)
            fixed.adaptive = False
            drafts[f"draft {name}, {k} tokens"] = fixed
            if args.adaptive:  # (as translate --draft: K adapts)
                drafts[f"draft {name}, up to {k} tokens, adaptive"] = translator.use_draft(name, k)
    translator.draft = None
    systems = {"greedy (fast step)": SearchOptions(),
               "greedy (the model's decode)": SearchOptions(fast=False)}
    systems.update({name: SearchOptions(draft=draft) for name, draft in drafts.items()})
    others = {f"greedy, {run} (fast step)": load(run, device="cpu", compile="off").model
              for run in args.also}
    systems.update({name: SearchOptions() for name in others})
    outputs, rates = {}, {name: [] for name in systems}
    for _ in range(args.rounds):
        for name, options in systems.items():
            searched = others.get(name, model)
            start = time.perf_counter()
            with torch.inference_mode():
                out = [search(searched, src, decode, options)[0][0].tokens for src in sources]
            rates[name].append(len(sources) / (time.perf_counter() - start))
            outputs.setdefault(name, out)
    reference = outputs["greedy (fast step)"]
    base = statistics.median(rates["greedy (fast step)"])
    print(f"{args.run}: {len(sources)} sentences at batch 1, {args.threads} threads, medians of "
          f"{args.rounds} rounds\n")
    print("| search | sentences/s | vs greedy (fast step) | proposals kept | same output |")
    print("|---|---|---|---|---|")
    rows = []
    for name in systems:
        rate = statistics.median(rates[name])
        draft = drafts.get(name)
        kept = f"{100 * draft.rate:.1f}%" if draft is not None else ""
        same = sum(a == b for a, b in zip(outputs[name], reference))
        same = f"{same}/{len(reference)}" if name not in others else "(another model)"
        print(f"| {name} | {rate:.1f} ({min(rates[name]):.1f}-{max(rates[name]):.1f}) | "
              f"{rate / base:.2f}x | {kept} | {same} |")
        rows.append({"search": name, "rates": rates[name], "kept": draft.rate if draft else None,
                     "same": same})
    save("speculative", {"machine": machine(), "run": args.run, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
