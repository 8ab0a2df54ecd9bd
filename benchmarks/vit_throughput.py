"""Images/s of the Vision Transformer, transduce against Hugging Face's ViTForImageClassification
at the same shape (the vit-tiny preset: 28x28 greyscale, 7x7-pixel patches, d_model 128, 6 layers, 4
heads, d_ff 256, 10 classes) and precision: training (forward + backward + Adam on batches of 128
images) and inference (batches of 256, no gradients), fp32 and bf16 autocast.

    python benchmarks/vit_throughput.py [--quick] [--threads 1 2] [--trials 5] [--steady-allocator]

Each system runs in a process of its own, the two alternating (--rounds times) at each thread
count; the table gives each system's best thread count, the median images/s of all its trials
with min-max, and transduce/HF. The same
random images (speed does not depend on their content) for both. Writes
benchmarks/results/vit_throughput.json.

--steady-allocator runs both children with glibc's mmap threshold fixed at 64 MiB
(MALLOC_MMAP_THRESHOLD_): by default the C allocator hands the step's large blocks back to the
system and takes them again, and the page faults that costs vary from process to process by more
than the two models differ.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, save, table  # noqa: E402

SHAPE = dict(layers=6, d_model=128, heads=4, d_ff=256, size=28, patch=7, channels=1, classes=10)


def build(system: str):
    """``(model, step input)``: the model in train mode, and how a batch of uint8 images becomes
    its input (HF reads normalized pixels; transduce normalizes inside the model)."""
    torch.manual_seed(0)
    s = SHAPE
    if system == "transduce":
        from transduce import ModelConfig, Transformer

        model = Transformer(ModelConfig.preset("vit-tiny", dropout=0.0))
        return model, lambda images: (images,), lambda out: out[:, 0]
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(hidden_size=s["d_model"], num_hidden_layers=s["layers"],
                       num_attention_heads=s["heads"], intermediate_size=s["d_ff"],
                       image_size=s["size"], patch_size=s["patch"], num_channels=s["channels"],
                       num_labels=s["classes"], hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0, attn_implementation="sdpa")
    model = ViTForImageClassification(config)
    return (model, lambda images: ((images.float() / 255 - 0.5) / 0.5,),
            lambda out: out.logits)


def child(system: str, threads: int, trials: int, batch: int) -> dict:
    torch.set_num_threads(threads)
    model, inputs, logits_of = build(system)
    s = SHAPE
    generator = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (batch, s["channels"], s["size"], s["size"]),
                           dtype=torch.uint8, generator=generator)
    labels = torch.randint(0, s["classes"], (batch,), generator=generator)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    out = {}
    for precision in ("fp32", "bf16"):
        amp = (torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16"
               else nullcontext())

        def train_step() -> int:
            model.train()
            with amp:
                logits = logits_of(model(*inputs(images)))
            loss = torch.nn.functional.cross_entropy(logits.float(), labels)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return batch

        def infer() -> int:
            model.eval()
            with torch.no_grad(), amp:
                for half in images.repeat(2, 1, 1, 1).split(2 * batch):
                    logits_of(model(*inputs(half)))
            return 2 * batch

        for kind, fn in ((f"train_{precision}", train_step), (f"infer_{precision}", infer)):
            for _ in range(2):  # warm-up
                fn()
            rates = []
            for _ in range(trials):
                start = time.perf_counter()
                count = fn()
                rates.append(count / (time.perf_counter() - start))
            out[kind] = {"rates": rates}
    return out


def pooled(rounds: list[dict]) -> dict:
    """The rounds' trials as one: the median, min and max of every trial's images/s."""
    import statistics

    out = {}
    for kind in rounds[0]:
        rates = sorted(r for one in rounds for r in one[kind]["rates"])
        out[kind] = {"rate_median": statistics.median(rates), "rate_min": rates[0],
                     "rate_max": rates[-1], "trials": len(rates)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3,
                        help="the two systems alternate this many times at each thread count")
    parser.add_argument("--quick", action="store_true", help="2 trials, 1 round, 2 threads only")
    parser.add_argument("--steady-allocator", action="store_true",
                        help="both children with glibc's mmap threshold fixed (see above)")
    parser.add_argument("--child", nargs=2, metavar=("SYSTEM", "THREADS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.trials, args.threads, args.rounds = 2, [2], 1
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.trials, args.batch)))
        return
    env = dict(os.environ)
    if args.steady_allocator:
        env["MALLOC_MMAP_THRESHOLD_"] = str(64 << 20)
    runs: dict = {}
    for threads in args.threads:
        for _ in range(args.rounds):
            for system in ("hf", "transduce"):  # alternating, each in a fresh process
                command = [sys.executable, __file__, "--child", system, str(threads),
                           "--trials", str(args.trials), "--batch", str(args.batch)]
                done = subprocess.run(command, capture_output=True, text=True, check=True,
                                      env=env)
                runs.setdefault((system, threads), []).append(
                    json.loads(done.stdout.strip().splitlines()[-1]))
    results = {key: pooled(rounds) for key, rounds in runs.items()}
    rows = []
    for kind in ("train_fp32", "train_bf16", "infer_fp32", "infer_bf16"):
        best = {}
        for system in ("hf", "transduce"):
            threads = max(args.threads, key=lambda t: results[(system, t)][kind]["rate_median"])
            best[system] = (threads, results[(system, threads)][kind])
        row = {"work": kind.replace("_", ", ")}
        for system, (threads, r) in best.items():
            row[system] = (f"{r['rate_median']:,.0f} ({r['rate_min']:,.0f}-{r['rate_max']:,.0f}), "
                           f"{threads} thr")
        ratio = best["transduce"][1]["rate_median"] / best["hf"][1]["rate_median"]
        row["transduce / HF"] = f"{ratio:.2f}"
        rows.append(row)
    allocator = "steady allocator" if args.steady_allocator else "default allocator"
    print(f"images/s, batch {args.batch} (inference {2 * args.batch}), vit-tiny shape, "
          f"median (min-max) of {args.rounds} x {args.trials} trials, {allocator}")
    print(table(rows, ["work", "hf", "transduce", "transduce / HF"]))
    save("vit_throughput", {"machine": machine(), "shape": SHAPE, "batch": args.batch,
                            "steady_allocator": args.steady_allocator,
                            "rows": rows,
                            "raw": {f"{s}@{t}": r for (s, t), r in results.items()}})


if __name__ == "__main__":
    main()
