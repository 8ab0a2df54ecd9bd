"""GPU checks in one process: training throughput of the paper's base model in bf16 and fp16
(target tokens/s and MFU against a measured matmul peak), and translation throughput.

    python benchmarks/gpu_check.py [--device cuda] [--steps 20]

Batches are random token ids shaped like the paper's (~25k target tokens, sentences of 25 tokens):
throughput does not depend on the words. Prints a markdown table and writes
benchmarks/results/gpu_check.json. Run by benchmarks/gpu_check.sh, never in CI.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, save, table  # noqa: E402
from train_throughput import matmul_flops_per_target_token  # noqa: E402

from transduce import ModelConfig, Transformer  # noqa: E402
from transduce.data.dataset import Batch  # noqa: E402
from transduce.config import DecodeConfig  # noqa: E402
from transduce.decoding import beam_search, greedy_search  # noqa: E402
from transduce.training import label_smoothed_nll  # noqa: E402


def device_peak(device: torch.device, dtype: torch.dtype, n: int = 8192) -> float:
    """Measured matmul TFLOP/s at n x n x n on ``device``."""
    a, b = (
        torch.randn(n, n, device=device, dtype=dtype),
        torch.randn(n, n, device=device, dtype=dtype),
    )
    for _ in range(3):
        a @ b
    torch.cuda.synchronize(device)
    start, reps = time.perf_counter(), 20
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize(device)
    return 2 * n**3 * reps / (time.perf_counter() - start) / 1e12


def random_batch(B: int, L: int, vocab: int, device) -> Batch:
    g = torch.Generator().manual_seed(B * L)
    ids = torch.randint(4, vocab, (B, L + 1), generator=g)
    src = torch.cat([ids[:, :-1], torch.full((B, 1), 2)], 1)
    tgt_in = torch.cat([torch.full((B, 1), 1), ids[:, 1:-1]], 1)
    tgt_out = ids[:, 1:]
    return Batch(src, tgt_in, tgt_out, torch.arange(B)).to(device)


def train_throughput(device, precision: str, steps: int) -> dict:
    torch.manual_seed(0)
    cfg = ModelConfig.preset("base", vocab_size=37000)
    model = Transformer(cfg).to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None
    batch = random_batch(1000, 25, cfg.vocab_size, device)  # 25,000 target tokens

    def step():
        with torch.autocast("cuda", dtype=dtype):
            logits = model(batch.src, batch.tgt_in)
            loss, _ = label_smoothed_nll(logits.flatten(0, 1), batch.tgt_out.flatten(), 0.1, 0)
        loss = loss / batch.target_tokens
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize(device)
    seconds = (time.perf_counter() - start) / steps
    tokens_per_s = batch.target_tokens / seconds
    flops = matmul_flops_per_target_token(cfg, batch) * 3 * tokens_per_s / 1e12
    return {"tokens_per_s": tokens_per_s, "tflops": flops, "step_ms": seconds * 1e3,
            "memory_gib": torch.cuda.max_memory_allocated(device) / 2**30}


@torch.inference_mode()
def translate_throughput(device, beam: int, batch_size: int, preset: str) -> dict:
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset(preset, vocab_size=8000)).to(device).eval()
    src = random_batch(batch_size, 20, 8000, device).src
    # random weights: fixed-length outputs
    decode = DecodeConfig(beam=beam, max_len_a=0, max_len_b=30)
    search = (
        (lambda: greedy_search(model, src, decode))
        if beam == 1
        else (lambda: beam_search(model, src, decode))
    )
    search()
    torch.cuda.synchronize(device)
    start, reps = time.perf_counter(), 5
    for _ in range(reps):
        search()
    torch.cuda.synchronize(device)
    return {"sentences_per_s": batch_size * reps / (time.perf_counter() - start)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device)
    peaks = {
        p: device_peak(device, d) for p, d in (("bf16", torch.bfloat16), ("fp16", torch.float16))
    }
    rows = []
    for precision in ("bf16", "fp16"):
        r = train_throughput(device, precision, args.steps)
        rows.append({"what": f"train base, {precision}, 25k-token batches",
                     "result": f"{r['tokens_per_s']:,.0f} target tokens/s ({r['step_ms']:.0f} "
                               "ms/step)",
                     "MFU": f"{r['tflops'] / peaks[precision]:.0%} of {peaks[precision]:.0f} "
                            "TFLOP/s measured",
                     **r})
        print(rows[-1]["what"], rows[-1]["result"], rows[-1]["MFU"], flush=True)
    for preset, beam, batch_size in (
        ("small", 1, 1),
        ("small", 4, 1),
        ("base", 4, 32),
        ("base", 1, 32),
    ):
        r = translate_throughput(device, beam, batch_size, preset)
        rows.append({"what": f"translate {preset}, beam {beam}, batch {batch_size} (fp32, 30 "
                             "tokens)",
                     "result": f"{r['sentences_per_s']:,.1f} sentences/s", "MFU": "", **r})
        print(rows[-1]["what"], rows[-1]["result"], flush=True)
    print(f"\n{name}, torch {torch.__version__}")
    print(table(rows, ["what", "result", "MFU"]))
    save("gpu_check", {"machine": {**machine(), "gpu": name}, "peaks_tflops": peaks, "rows": rows})


if __name__ == "__main__":
    main()
