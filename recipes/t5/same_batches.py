"""Is the encoder's collapse in span-corruption pretraining transduce's, or the recipe's? Trains
transduce's T5 and Hugging Face's T5ForConditionalGeneration side by side from the same random
weights, on the same batches, with the same Adam and schedule, and reports every ``--every``
updates, for each, whether it reads its encoder (validation span perplexity with each block's own
input and with the batch's inputs rotated by one, as ``encoder_use.py``) and how much the encoder's
output varies across positions (it falls towards 0 as the encoder collapses to one vector).

    python recipes/t5/same_batches.py RUN DATA [--updates 800] [--every 200]

RUN: the pretraining's run (its model config is used, with new random weights); DATA: the
monolingual dataset (``prepare --monolingual --sentinels``). Dropout draws differ between the two,
so their numbers drift apart a little; the weights agree exactly at the start (printed).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from transduce import Transformer
from transduce.data import TokenStream
from transduce.interop.t5 import check_exportable, hf_config, transduce_to_t5

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encoder_use import load_checked, perplexities, span_batch, span_nll  # noqa: E402


def build(config, seed: int):
    """transduce's model of ``config`` from new random weights, and HF's holding the same."""
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(seed)
    ours = Transformer(config)
    fields = {k: v for k, v in hf_config(config).items() if k not in ("model_type",
                                                                       "architectures")}
    theirs = T5ForConditionalGeneration(T5Config(**fields))
    theirs.load_state_dict(transduce_to_t5(ours.state_dict(), config), strict=False)
    return {"transduce": ours, "hf": theirs}


def forward(name: str, model):
    """``(src, tgt_in) -> logits`` of either model."""
    if name == "transduce":
        return model
    return lambda src, tgt_in: model(input_ids=src, attention_mask=(src != 0).long(),
                                     decoder_input_ids=tgt_in).logits


def encoded(name: str, model, src):
    if name == "transduce":
        return model.encode(src)
    return model.encoder(input_ids=src, attention_mask=(src != 0).long()).last_hidden_state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run")
    parser.add_argument("data")
    parser.add_argument("--updates", type=int, default=800)
    parser.add_argument("--every", type=int, default=200)
    parser.add_argument("--peak-lr", type=float, default=1.5e-3)
    parser.add_argument("--warmup", type=int, default=800)
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    # (check_exportable: a model Hugging Face's T5 can hold, or a message naming the option)
    _, trained, meta = load_checked("same_batches.py", args.run, args.data, check_exportable)
    config = trained.config
    models = build(config, args.seed)
    train, valid = TokenStream(args.data, "train"), TokenStream(args.data, "valid")

    def batch(stream, blocks, generator):
        return span_batch(stream, blocks, args.block_size, config, meta, generator)

    held = batch(valid, np.arange(min(32, valid.num_blocks(args.block_size, False))),
                 np.random.default_rng(0))
    with torch.no_grad():
        for model in models.values():
            model.eval()
        first = [forward(name, m)(held.src, held.tgt_in) for name, m in models.items()]
        print(f"at the start, largest logit difference: {(first[0] - first[1]).abs().max():.2e}")
    optimizers = {name: torch.optim.Adam(m.parameters(), lr=args.peak_lr, betas=(0.9, 0.98),
                                         eps=1e-9) for name, m in models.items()}
    generator = np.random.default_rng(args.seed + 1)
    blocks, per_batch = train.num_blocks(args.block_size, False), args.max_tokens // args.block_size
    start = time.perf_counter()
    for step in range(1, args.updates + 1):
        one = batch(train, generator.choice(blocks, per_batch, replace=False), generator)
        lr = args.peak_lr * min(step / args.warmup, math.sqrt(args.warmup / step))
        for name, model in models.items():
            model.train()
            for group in optimizers[name].param_groups:
                group["lr"] = lr
            span_nll(forward(name, model)(one.src, one.tgt_in), one, config.pad_id).backward()
            optimizers[name].step()
            optimizers[name].zero_grad(set_to_none=True)
        if step % args.every == 0 or step == args.updates:
            report = [f"update {step} ({time.perf_counter() - start:.0f} s)"]
            for name, model in models.items():
                model.eval()
                own, other = perplexities(forward(name, model), held, config.pad_id).values()
                with torch.no_grad():
                    spread = encoded(name, model, held.src).std(1).mean().item()
                report.append(f"{name}: perplexity {own:.3f} own input, {other:.3f} another's; "
                              f"encoder spread {spread:.3f}")
            print(" | ".join(report), flush=True)


if __name__ == "__main__":
    main()
