"""Pictures: attention heatmaps per layer and head, the sinusoids of §3.5, training curves.

matplotlib is imported lazily and with the non-interactive Agg backend, so these work on a
machine with no display.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

# (in the order a validation record is recognized by: a speech model's also has a perplexity)
KINDS = {"bleu": "a translation model (BLEU)", "cer": "a speech model (character error rate)",
         "ppl": "a language model (perplexity)", "accuracy": "a classifier (accuracy)"}
TITLES = {"bleu": "validation BLEU", "ppl": "validation perplexity",
          "accuracy": "validation accuracy", "cer": "validation character error rate"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: str | Path, dpi: int = 110, tight: bool = True, inputs=()) -> Path:
    """Write atomically (temporary file, rename): never a half-written picture, never over or inside
    one of ``inputs``."""
    from .files import output_file

    out = Path(out)
    try:
        with output_file(out, inputs, what="picture", binary=True) as handle:
            fig.savefig(
                handle,
                format=out.suffix.lstrip(".") or "png",
                dpi=dpi,
                bbox_inches="tight" if tight else None,
            )
    finally:
        _pyplot().close(fig)
    return out


def grid_size(rows: int, heads: int, longest: int) -> tuple[float, float]:
    """Figure size in inches of an attention grid: ``rows`` panels high, ``heads`` wide."""
    cell = max(2.0, 0.22 * longest)
    return cell * heads + 1.6, cell * rows + 1.0


DPI = 100


def attention_figure(
    panels: Sequence[tuple[str, np.ndarray, Sequence[str], Sequence[str]]],
    title: str,
    out: str | Path,
    inputs=(),
) -> Path:
    """A grid of heatmaps: one row per ``(label, weights (H, Q, K), query labels, key labels)``
    panel (a layer of one attention kind), one column per head. The picture is exactly
    ``grid_size(...)`` inches at ``DPI`` dots per inch."""
    plt = _pyplot()
    heads = panels[0][1].shape[0]
    longest = max(max(len(q), len(k)) for _, _, q, k in panels)
    fig, axes = plt.subplots(
        len(panels), heads, figsize=grid_size(len(panels), heads, longest), squeeze=False
    )
    fontsize = 8 if longest <= 20 else 6
    for r, (label, weights, q_labels, k_labels) in enumerate(panels):
        for h in range(heads):
            ax = axes[r][h]
            ax.imshow(weights[h], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            ax.set_xticks(range(len(k_labels)))
            ax.set_xticklabels(k_labels, rotation=90, fontsize=fontsize)
            ax.set_yticks(range(len(q_labels)))
            ax.set_yticklabels(q_labels if h == 0 else [], fontsize=fontsize)
            ax.set_title(f"{label}, head {h + 1}", fontsize=9)
    fig.suptitle(title, fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    # not "tight": the size stays the grid's
    return _save(fig, out, DPI, tight=False, inputs=inputs)


def attention_panels(
    attention,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    kinds=("encoder", "decoder", "cross"),
):
    """Panels for ``attention_figure`` from ``transduce.model.Attention`` (batch index 0).

    tgt_tokens label the decoder inputs (start token + target)."""
    panels = []
    labels = {
        "encoder": (src_tokens, src_tokens, "encoder self"),
        "decoder": (tgt_tokens, tgt_tokens, "decoder self"),
        "cross": (tgt_tokens, src_tokens, "cross"),
    }
    for kind in kinds:
        q, k, name = labels[kind]
        for layer, w in enumerate(getattr(attention, kind)):
            panels.append((f"{name} L{layer + 1}", w[0].float().cpu().numpy(), q, k))
    return panels


def plot_positional_encoding(
    d_model: int, positions: int, out: str | Path, layout: str = "interleaved"
) -> Path:
    """The table PE(pos, i) of §3.5 as a heatmap, and a few of its sinusoids as curves."""
    from .model.positions import sinusoidal_table

    plt = _pyplot()
    table = sinusoidal_table(positions, d_model, layout).numpy()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 8), gridspec_kw={"height_ratios": [3, 2]})
    image = top.imshow(table, cmap="RdBu", aspect="auto", vmin=-1, vmax=1)
    top.set_xlabel("dimension i")
    top.set_ylabel("position")
    top.set_title(f"sinusoidal positional encoding ({layout}), d_model = {d_model}")
    fig.colorbar(image, ax=top)
    # even columns (sines) from fast to slow frequencies
    dims = sorted({min(d_model - 2, 2 * (d_model // k)) if k else 0 for k in (0, 64, 32, 16, 8)})
    for dim in dims:
        bottom.plot(table[:, dim], label=f"dim {dim}")
    bottom.set_xlabel("position")
    bottom.legend(fontsize=8, ncol=3)
    return _save(fig, out)


def read_metrics(run_dir: str | Path) -> list[dict]:
    """The records of a run's ``metrics.jsonl``, with errors that name the file and line."""
    from .data.corpus import read_lines
    from .errors import TransduceError

    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise TransduceError(f"{run_dir} has no metrics.jsonl; is it a run directory?")
    records = []
    for number, line in enumerate(read_lines(path), start=1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except ValueError:
                raise TransduceError(f"{path}, line {number}: not a JSON record; the file is "
                                     "damaged") from None
    return records


def plot_training(runs: str | Path | Sequence[str | Path], out: str | Path) -> Path:
    """Training and validation loss, validation BLEU (a language model's: perplexity; a
    classifier's: accuracy) and the learning rate from ``metrics.jsonl``; several runs are drawn
    over each other (one color each)."""
    from .errors import TransduceError

    runs = [runs] if isinstance(runs, (str, Path)) else list(runs)
    curves = []
    for run in runs:
        records = read_metrics(run)
        train = [r for r in records if r.get("type") == "train"]
        valid = [r for r in records if r.get("type") == "valid"]
        if not train and not valid:
            raise TransduceError(f"{Path(run) / 'metrics.jsonl'} has no training or validation "
                                 "records yet: nothing to draw (train for at least one logged "
                                 "step first)")
        if not valid:
            print(f"note: {run} has no validation records yet; its validation curves are empty")
        curves.append(
            (run, train, valid, None if not valid else next(k for k in KINDS if k in valid[0]))
        )
    kinds = {kind for *_, kind in curves if kind}
    if len(kinds) > 1:
        raise TransduceError(
            "these runs cannot share a picture: "
            + ", ".join(
                f"{run} is {KINDS[kind]}"
                for run, *_, kind in curves
                if kind
            )
        )
    key = kinds.pop() if kinds else "bleu"
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for index, (run, train, valid, _) in enumerate(curves):
        color = f"C{index % 10}"
        label = Path(run).name if len(curves) > 1 else None
        axes[0].plot([r["step"] for r in train], [r["loss"] for r in train], color=color, alpha=0.6,
                     label=f"{label}: train "
                           "(label-smoothed)" if label else "train (label-smoothed)")
        axes[0].plot(
            [r["step"] for r in valid],
            [r["loss"] for r in valid],
            "o-",
            color=color if label else "C1",
            markersize=3,
            label=f"{label}: valid" if label else "valid",
        )
        # train --valid-extra: the second validation set
        extra = [r for r in valid if f"extra_{key}" in r]
        axes[1].plot(
            [r["step"] for r in valid],
            [r[key] for r in valid],
            "o-",
            markersize=3,
            color=color if label else "tab:green",
            label=label if label else "valid" if extra else None,
        )
        if extra:
            name = f"{label}: valid-extra" if label else "valid-extra"
            axes[0].plot(
                [r["step"] for r in extra],
                [r["extra_loss"] for r in extra],
                "s--",
                markersize=3,
                color=color if label else "C2",
                label=name,
            )
            axes[1].plot(
                [r["step"] for r in extra],
                [r[f"extra_{key}"] for r in extra],
                "s--",
                markersize=3,
                color=color if label else "tab:purple",
                label=name,
            )
        axes[2].plot(
            [r["step"] for r in train],
            [r["lr"] for r in train],
            color=color if label else "tab:red",
            label=label,
        )
    axes[0].set_title("loss")
    axes[0].legend(fontsize=8)
    axes[1].set_title(TITLES[key])
    axes[2].set_title("learning rate")
    if len(curves) > 1 or any(f"extra_{key}" in r for _, _, valid, _ in curves for r in valid):
        axes[1].legend(fontsize=8)
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.suptitle(str(runs[0]) if len(runs) == 1 else f"{len(runs)} runs")
    fig.tight_layout(rect=(0, 0, 1, 0.96))  # the panels below the run's title, not under it
    return _save(fig, out, inputs=[Path(run) / "metrics.jsonl" for run in runs])


def draw_attention(
    translator,
    src: str,
    tgt: str | None,
    out: str,
    kinds=("encoder", "decoder", "cross"),
    decode=None,
):
    """Write the picture; returns ``(path, target text)``. Without ``tgt``, the model's own
    translation with ``decode`` (a ``DecodeConfig``; its defaults when None)."""
    from .errors import TransduceError

    for kind in kinds:
        if kind not in ("encoder", "decoder", "cross"):
            raise TransduceError(f"--kinds: unknown kind {kind!r}; use encoder, decoder, cross")
    model, tok = translator.model, translator.tokenizer
    cfg = model.config
    if not src.strip():
        raise TransduceError("--src is empty")
    if tgt is None:
        tgt = translator.translate([src], decode=decode)[0]
    src_ids = translator.encode([src])[0]
    tgt_ids = tok.encode_tgt([tgt])[0][: cfg.max_positions - 1]
    attention = translator.attention([src_ids], [tgt_ids])
    src_labels = tok.src_pieces(src_ids) + ["</s>"]
    tgt_labels = ["<s>"] + tok.tgt_pieces(tgt_ids)
    panels = attention_panels(attention, src_labels, tgt_labels, kinds)
    path = attention_figure(
        panels, f"{src}  →  {tgt}", out, inputs=[translator.folder] if translator.folder else []
    )
    return path, tgt
