"""Do positional encodings extrapolate to sentences longer than training saw (the paper's §3.5
question)? The measurements of ``transduce ablate --rows positions``: a run scored per
source-length bucket around its training limit, the table and the picture."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional


def length_buckets(limit: int) -> list[tuple[int, Optional[int]]]:
    """Source-length buckets around the training limit L: up to L, L+1 to 2L, beyond 2L."""
    return [(1, limit), (limit + 1, 2 * limit), (2 * limit + 1, None)]


def evaluate_by_length(
    run: str | Path, data_dir: str | Path, limit: int, device: str = "cpu"
) -> list[dict]:
    """The run's last checkpoint on the validation split, per source-length bucket (tokens, without
    eos): sentences, perplexity of the unsmoothed NLL (teacher-forced) and greedy BLEU."""
    import torch

    from .checkpoint import list_checkpoints, load_model_from
    from .data.tokenizer import tokenizer_from_info
    from .config import DecodeConfig
    from .data import ParallelDataset, TokenBatchSampler, collate
    from .evaluate import score
    from .training.loss import label_smoothed_nll
    from .decoding import translate_ids

    folder = list_checkpoints(run)[-1]
    model, info = load_model_from(folder, device)
    tokenizer = tokenizer_from_info(folder, info)
    c = model.config
    ds = ParallelDataset(data_dir, "valid")
    references = ds.raw_text("tgt")
    results = []
    for low, high in length_buckets(limit):
        chosen = [
            i
            for i in range(len(ds))
            if ds.src_lengths[i] >= low and (high is None or ds.src_lengths[i] <= high)
        ]
        label = f"{low}-{high}" if high is not None else f">{low - 1}"
        if not chosen:
            results.append({"lengths": label, "sentences": 0, "ppl": None, "bleu": None})
            continue
        nll = tokens = 0.0
        sampler = TokenBatchSampler(
            ds.src_lengths[chosen], ds.tgt_lengths[chosen], 4096, shuffle=False
        )
        with torch.no_grad():
            for batch in sampler.batches(0):
                b = collate(ds, [chosen[j] for j in batch], c.pad_id, c.start_id, c.eos_id).to(
                    device
                )
                _, batch_nll = label_smoothed_nll(
                    model(b.src, b.tgt_in).flatten(0, 1), b.tgt_out.flatten(), 0.0, c.pad_id
                )
                nll, tokens = nll + float(batch_nll), tokens + b.target_tokens
        hyps = translate_ids(model, [ds[i][0].tolist() for i in chosen], DecodeConfig(beam=1))
        texts = [tokenizer.decode_tgt(h[0].tokens) for h in hyps]
        bleu = score(texts, [references[i] for i in chosen])["bleu"]
        results.append(
            {
                "lengths": label,
                "sentences": len(chosen),
                "ppl": round(math.exp(min(nll / tokens, 50)), 2),
                "bleu": bleu,
            }
        )
    return results


def positions_markdown(table: dict[str, list[dict]], limit: int, note: str = "") -> str:
    """One line per scheme: perplexity and BLEU in each length bucket."""
    buckets = next(iter(table.values()))
    head = "| positions | " + " | ".join(f"src {b['lengths']}: PPL / BLEU ({b['sentences']} "
                                         "sent.)" for b in buckets)
    out = [head + " |", "|" + "---|" * (len(buckets) + 1)]
    for scheme, rows in table.items():
        cells = [f"{r['ppl']:.2f} / {r['bleu']:.2f}" if r["ppl"] is not None else "-" for r in rows]
        out.append(f"| {scheme} | " + " | ".join(cells) + " |")
    return "\n".join(out) + ("\n\n" + note if note else "") + "\n"


def positions_plot(table: dict[str, list[dict]], limit: int, out: Path) -> Path:
    """BLEU per length bucket, one line per positional scheme."""
    from .visualize import _pyplot, _save

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for scheme, rows in table.items():
        done = [r for r in rows if r["bleu"] is not None]
        ax.plot([r["lengths"] for r in done], [r["bleu"] for r in done], "o-", label=scheme)
    ax.axvline(0.5, color="gray", linestyle=":", linewidth=1)
    ax.set_xlabel(f"source length (tokens); trained on pairs of at most {limit}")
    ax.set_ylabel("validation BLEU (greedy)")
    ax.legend()
    ax.grid(alpha=0.3)
    return _save(fig, out)
