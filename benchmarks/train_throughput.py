"""Training throughput of transduce: target tokens/s for forward + backward + Adam on Multi30k
batches of ~4,096 tokens, fp32 and bf16 autocast, for the small and base presets; with --compile,
also with the model under torch.compile (what `transduce train --compile` does), side by side.

    python benchmarks/train_throughput.py [--quick] [--presets small base] [--threads 2] [--compile]

Prints a markdown table and writes benchmarks/results/train_throughput.json. Figures are medians
of several steps with min-max; all configurations run in this one process, one after another.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import MULTI30K, gemm_peak, machine, measure, save, table  # noqa: E402

from transduce import ModelConfig, Transformer  # noqa: E402
# noqa: E402
from transduce.data import ParallelDataset, PrepareOptions, TokenBatchSampler, collate, prepare
from transduce.training import label_smoothed_nll  # noqa: E402


def multi30k_batches(data_dir: Path, max_tokens: int, count: int):
    prepare(
        PrepareOptions(src="en", tgt="de", train_prefix=str(MULTI30K / "train"), vocab_size=8000),
        data_dir,
        log=None,
    )
    ds = ParallelDataset(data_dir, "train")
    batches = TokenBatchSampler(ds.src_lengths, ds.tgt_lengths, max_tokens, seed=1).batches(0)[
        :count
    ]
    return [collate(ds, b) for b in batches]


def matmul_flops_per_target_token(cfg: ModelConfig, batch) -> float:
    """Forward matmul FLOPs of one batch (weights only, no attention scores), over its target
    tokens."""
    D, F, V = cfg.d_model, cfg.d_ff, cfg.target_vocab_size
    S, T = batch.src.numel(), batch.tgt_in.numel()
    enc = cfg.encoder_layers * (4 * D * D + 2 * D * F) * S
    dec = cfg.decoder_layers * ((4 * D * D + 2 * D * F) * T + 2 * D * D * T + 2 * D * D * S)
    out = D * V * T
    return 2 * (enc + dec + out) / batch.target_tokens


def run(preset: str, precision: str, batches, steps: int, compiled: bool = False) -> dict:
    import time

    torch.manual_seed(0)
    cfg = ModelConfig.preset(preset, vocab_size=8000, dropout=0.1)
    model = Transformer(cfg).train()
    forward = torch.compile(model) if compiled else model
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    ctx = (
        (lambda: torch.autocast("cpu", dtype=torch.bfloat16))
        if precision == "bf16"
        else nullcontext
    )
    state = {"i": 0}

    def step():
        batch = batches[state["i"] % len(batches)]
        state["i"] += 1
        with ctx():
            logits = forward(batch.src, batch.tgt_in)
            loss, _ = label_smoothed_nll(logits.flatten(0, 1), batch.tgt_out.flatten(), 0.1, 0)
        (loss / batch.target_tokens).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return batch.target_tokens

    warmup_s = 0.0
    # compile for every batch shape the measurement will see, then measure the same batches
    if compiled:
        start = time.perf_counter()
        for _ in range(steps + 2):
            step()
        warmup_s, state["i"] = time.perf_counter() - start, 0
    result = measure(step, trials=steps)
    result["compile_warmup_s"] = warmup_s
    # fwd + 2x bwd
    flops = sum(matmul_flops_per_target_token(cfg, b) for b in batches) / len(batches) * 3
    result["flops_per_token"] = flops
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps")
    parser.add_argument("--presets", nargs="+", default=["small", "base"])
    parser.add_argument("--precisions", nargs="+",
                        help="default: fp32, and bf16 where the CPU multiplies it natively "
                             "(emulated bf16 is many times slower than fp32: not worth the "
                             "minutes its row costs)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--compile", action="store_true",
                        help="also measure each row with the model under torch.compile (warm-up "
                             "reported apart)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.precisions is None:
        from transduce.runtime import cpu_bf16

        args.precisions = ["fp32", "bf16"] if (cpu_bf16() is not None) else ["fp32"]
    steps = 3 if args.quick else 8
    with tempfile.TemporaryDirectory() as tmp:
        batches = multi30k_batches(Path(tmp) / "m30k", args.max_tokens, 16)
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    peaks = {precision: gemm_peak(dtypes[precision]) for precision in args.precisions}
    rows = []
    modes = ["eager", "compiled"] if args.compile else ["eager"]
    for preset in args.presets:
        for precision in args.precisions:
            for mode in modes:
                r = run(preset, precision, batches, steps, compiled=mode == "compiled")
                achieved = r["rate_median"] * r["flops_per_token"] / 1e9
                rows.append({"preset": preset, "precision": precision, "mode": mode,
                             "target tokens/s (median)": f"{r['rate_median']:,.0f}",
                             "min-max": f"{r['rate_min']:,.0f}-{r['rate_max']:,.0f}",
                             "GFLOP/token": f"{r['flops_per_token'] / 1e9:.3f}",
                             "MFU": f"{achieved / peaks[precision]:.0%} of {peaks[precision]:,.1f} "
                                    "GFLOP/s", **r})
                if mode == "compiled":
                    eager = rows[-2]["rate_median"]
                    rows[-1]["vs eager"] = f"{r['rate_median'] / eager:.2f}x"
                    rows[-1]["compile warm-up"] = f"{r['compile_warmup_s']:.0f} s"
                print(rows[-1]["preset"], precision, mode, rows[-1]["target tokens/s "
                                                                    "(median)"], flush=True)
    columns = (
        ["preset", "precision"]
        + (["mode", "vs eager", "compile warm-up"] if args.compile else [])
        + ["target tokens/s (median)", "min-max", "GFLOP/token", "MFU"]
    )
    print(table(rows, columns))
    save(
        "train_throughput",
        {"machine": machine(), "gemm_gflops": peaks, "steps": steps, "rows": rows},
    )


if __name__ == "__main__":
    main()
