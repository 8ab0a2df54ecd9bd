"""LoRA adapters against full fine-tuning, on the fine-tuning recipe's new domain (the Multi30k
pairs that mention a dog, ``recipes/finetune/run.sh``).

    python benchmarks/lora.py [--work runs/finetune] [--steps 300] [--ranks 8 32]
                              [--lora-peaks 1e-4 1e-3]

Needs the recipe's first two steps done (``WORK/general``, ``WORK/data/dogs``, ``WORK/raw``).
Trains, each in a process of its own and for ``--steps`` updates from the general model:
``full`` (``--recipe finetune``, every weight) and LoRA at each rank and peak learning rate
(``--recipe finetune --lora R --set peak_lr=P``; the recipe's own peak is a tenth of ``auto``'s),
all validating every 50 updates on the dog validation pairs (``best/`` chosen there). Reports the
trainable parameters, the size of ``best/model.safetensors``, the training process's peak resident
memory,
updates per second of training, and sacreBLEU (beam 4) of ``best/`` on the dog test pairs and on
test_2016_flickr. Prints a markdown table; writes benchmarks/results/lora.json.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import MULTI30K, bleu, machine, save, table, transduce  # noqa: E402

from transduce.data.corpus import read_lines  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", default="runs/finetune")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--ranks", type=int, nargs="+", default=[8, 32])
    p.add_argument("--lora-peaks", type=float, nargs="+", default=[1e-3])
    args = p.parse_args()
    work = Path(args.work)
    for need in (work / "general", work / "data" / "dogs", work / "raw" / "dogs.test.en"):
        if not need.exists():
            sys.exit(f"lora.py: {need} is missing: run recipes/finetune/run.sh first (its steps "
                     "1 and 2 make it)")
    settings = [("full", [])] + [
        (f"LoRA r={rank}, peak {peak:g}", ["--lora", str(rank), "--set", f"peak_lr={peak:g}"])
        for rank in args.ranks for peak in args.lora_peaks
    ]
    rows = []
    for name, extra in settings:
        out = work / "lora" / re.sub(r"[^a-z0-9.]+", "-", name.lower()).strip("-")
        log = transduce("train", str(work / "data" / "dogs"), "--out", str(out), "--init-from",
                        str(work / "general"), "--recipe", "finetune", "--max-steps",
                        str(args.steps), "--set", "valid_every=50", "--set", "patience=0",
                        "--quiet", *extra, memory=True)
        peak_kb = int(re.findall(r"maxrss (\d+)", log.stderr)[-1])
        records = [json.loads(line) for line in read_lines(out / "metrics.jsonl")]
        trained = [r for r in records if r["type"] == "train"]
        share = re.search(r"train ([\d,]+) of ([\d,]+) parameters", log.stdout + log.stderr)
        params = share.group(1) if share else "all"
        rows.append({
            "training": name,
            "trainable parameters": params,
            "best/ weights MB": f"{(out / 'best' / 'model.safetensors').stat().st_size / 1e6:.2f}",
            "peak memory MB": f"{peak_kb / 1024:.0f}",
            "updates/s": f"{trained[-1]['step'] / trained[-1]['elapsed']:.2f}",
            "dog test BLEU": f"{bleu(out, str(work / 'raw' / 'dogs.test')):.2f}",
            "test_2016_flickr BLEU": f"{bleu(out, str(MULTI30K / 'test_2016_flickr'), '.gz'):.2f}",
        })
        print(rows[-1], file=sys.stderr, flush=True)
    columns = list(rows[0])
    print(table(rows, columns))
    print(f"\n({machine()})")
    save("lora", {"rows": rows, "steps": args.steps, "machine": machine()})


if __name__ == "__main__":
    main()
