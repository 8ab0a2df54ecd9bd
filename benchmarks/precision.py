"""bf16 autocast against fp32, per task, on this machine: what ``--precision auto`` rests on.

For each task's usual small model (translation ``tiny`` and ``small`` on batches of ~2,000
tokens, a parser of ``small``'s shape with a bracket vocabulary, ``vit-tiny`` on 28x28 digits,
``speech-small`` on ~80 s of audio a batch) it times training updates (forward, loss, backward,
Adam) and inference (a translation model's greedy search of 30 tokens at batch 1 and 32, the ViT's
forward pass over 256 images), fp32 and bf16 one after another in alternating rounds in this one
process, on random inputs of the recipes' shapes, and prints the medians and bf16 / fp32.

    python benchmarks/precision.py [--rounds 3] [--steps 6] [--threads 2]

Writes benchmarks/results/precision.json. ``runtime.cpu_bf16`` names the CPU's maker and kind
(AMX, AVX512-BF16 only, none); the table in docs/benchmarks.md is this script's output per kind.
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

from transduce import DecodeConfig, ModelConfig, Transformer  # noqa: E402
from transduce.decoding import translate_ids  # noqa: E402
from transduce.runtime import autocast, cpu_bf16  # noqa: E402
from transduce.training import label_smoothed_nll  # noqa: E402


def shapes() -> dict:
    """Per task: (model config, a function making one batch (src, tgt_in, tgt_out), unit, units in
    a batch)."""
    g = torch.Generator().manual_seed(0)

    def tokens(vocab, b, s, t):
        return lambda: (torch.randint(4, vocab, (b, s), generator=g),
                        torch.randint(4, vocab, (b, t), generator=g),
                        torch.randint(4, vocab, (b, t), generator=g))

    def images(b):
        return lambda: (torch.randint(0, 256, (b, 1, 28, 28), dtype=torch.uint8, generator=g),
                        None, torch.randint(0, 10, (b,), generator=g))

    def audio(b, frames, t):
        return lambda: (torch.randn(b, frames, 80, generator=g),
                        torch.randint(4, 32, (b, t), generator=g),
                        torch.randint(4, 32, (b, t), generator=g))

    return {
        "translation tiny": (ModelConfig.preset("tiny", vocab_size=8000), tokens(8000, 80, 24, 25),
                             "target tokens", 80 * 25),
        "translation small": (ModelConfig.preset("small", vocab_size=8000),
                              tokens(8000, 80, 24, 25), "target tokens", 80 * 25),
        "parser (small)": (ModelConfig.preset("small", vocab_size=4000, tgt_vocab_size=120,
                                              tying="decoder"),
                           tokens(120, 32, 25, 60), "target tokens", 32 * 60),
        "vit-tiny": (ModelConfig.preset("vit-tiny", classes=10), images(128), "images", 128),
        "speech-small": (ModelConfig.preset("speech-small", vocab_size=32),
                         audio(16, 500, 60), "seconds of audio", 16 * 5),
    }


def train_rate(config: ModelConfig, batch, units: int, precision: str, steps: int) -> float:
    torch.manual_seed(0)
    model = Transformer(config).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    src, tgt_in, tgt_out = batch
    times = []
    for step in range(steps + 2):  # the first two warm the kernels up
        start = time.perf_counter()
        with autocast(torch.device("cpu"), precision):
            logits = model(src) if tgt_in is None else model(src, tgt_in)
            if tgt_in is None:
                logits = logits[:, 0]
            loss, _ = label_smoothed_nll(logits.float().reshape(-1, logits.size(-1)),
                                         tgt_out.reshape(-1), 0.1, config.pad_id)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= 2:
            times.append(time.perf_counter() - start)
    return units / statistics.median(times)


@torch.inference_mode()
def inference_rate(name: str, config: ModelConfig, precision: str, batch: int) -> float:
    torch.manual_seed(0)
    model = Transformer(config).eval()
    if name == "vit-tiny":
        images = torch.randint(0, 256, (batch, 1, 28, 28), dtype=torch.uint8)
        model(images)
        start = time.perf_counter()
        with autocast(torch.device("cpu"), precision):
            model(images)
        return batch / (time.perf_counter() - start)
    g = torch.Generator().manual_seed(1)
    sources = [torch.randint(4, 8000, (20,), generator=g).tolist() for _ in range(batch)]
    decode = DecodeConfig(beam=1, max_len_a=0, max_len_b=31, min_len=30)
    translate_ids(model, sources[:1], decode, precision=precision)
    start = time.perf_counter()
    translate_ids(model, sources, decode, precision=precision)
    return batch / (time.perf_counter() - start)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=6, help="timed training updates a round")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = []
    for name, (config, make, unit, units) in shapes().items():
        batch = make()
        rates: dict = {"fp32": [], "bf16": []}
        for _ in range(args.rounds):
            for precision in ("fp32", "bf16"):
                rates[precision].append(train_rate(config, batch, units, precision, args.steps))
        rows.append(("training", name, unit, rates))
    inference = [("translation small", 1), ("translation small", 32), ("vit-tiny", 256)]
    configs = {name: config for name, (config, *_) in shapes().items()}
    for name, batch in inference:
        rates = {"fp32": [], "bf16": []}
        for _ in range(args.rounds):
            for precision in ("fp32", "bf16"):
                rates[precision].append(inference_rate(name, configs[name], precision, batch))
        unit = "images" if name == "vit-tiny" else "sentences"
        rows.append(("inference", f"{name}, batch {batch}", unit, rates))
    facts = machine()
    maker, kind = cpu_bf16()
    print(f"CPU: {maker or 'unknown maker'}, bf16: {kind or 'none'}; {args.threads} threads; "
          f"medians of {args.rounds} rounds (bf16 / fp32: the median ratio and the range of "
          "ratios between rounds)\n")
    print("| work | model | unit/s | fp32 | bf16 | bf16 / fp32 |\n|---|---|---|---|---|---|")
    table = []
    for work, name, unit, rates in rows:
        fp32, bf16 = statistics.median(rates["fp32"]), statistics.median(rates["bf16"])
        spread = f"{min(rates['bf16']) / max(rates['fp32']):.2f}-" \
                 f"{max(rates['bf16']) / min(rates['fp32']):.2f}"
        print(f"| {work} | {name} | {unit} | {fp32:,.0f} | {bf16:,.0f} | {bf16 / fp32:.2f}x "
              f"({spread}) |")
        table.append({"work": work, "model": name, "unit": unit, "fp32": rates["fp32"],
                      "bf16": rates["bf16"], "ratio": bf16 / fp32})
    save("precision", {"machine": facts, "cpu_bf16": cpu_bf16(), "threads": args.threads,
                       "rows": table})
    return 0


if __name__ == "__main__":
    sys.exit(main())
