"""Table 3 of the paper at the scale of a laptop: variations of a base model, each trained for the
same number of updates on the same data with the same seed, then compared on the validation set.

The rows follow the paper's, scaled to the base model given (by default the ``small`` preset;
the paper's base is d_model 512, h 8, N 6):

    (A) the number of heads h, with d_k = d_v = d_model / h (constant compute): the paper's h in
        {1, 4, 16, 32}, those that divide d_model into heads of at least 4 (and differ from the
base)
    (B) a smaller d_k = d_v at the base's h: {16, 32}
    (C) the model's size: N in {N - 1, N + 1}, d_model halved and doubled (d_k follows), d_ff halved
        and doubled
    (D) dropout in {0, 0.2}, label smoothing in {0, 0.2}
    (E) learned positions instead of sinusoids
    (scale) no 1/sqrt(d_k) in the attention (§3.2.1's argument)
    (moe) not a row of Table 3 but a descendant: the feed-forward networks as mixtures of experts
        at the base's active parameters per token: 4 experts of d_ff with k = 1 (Switch), and 4 of
        d_ff / 2 with k = 2 (each token meets two half-width experts)
    (positions) not a row of Table 3 but §3.5's conjecture: sinusoidal, learned, RoPE and ALiBi
        positions, each trained only on pairs of at most ``train_max_len`` tokens, then evaluated
        on validation sentences of each length bucket (``evaluate_by_length``): do they extrapolate?

Each row (and seed) is a run folder ``OUT/<row>-s<seed>`` trained by ``transduce train`` with the
base's recipe and ``--max-steps``; running the command again resumes unfinished rows and skips
finished ones. ``OUT/table3.md`` (and ``.json``) holds the table: the row's shape, parameters, the
final validation perplexity (of the unsmoothed NLL) and greedy validation BLEU; ``OUT/table3.png``
draws the BLEU of each row beside the base's.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from .config import ModelConfig, TrainConfig
from .errors import TransduceError

TABLE3 = ("base", "A", "B", "C", "D", "E", "scale")

# The paper's Table 3 (newstest2013, base model: N 6, d_model 512, d_ff 2048, h 8, d_k 64, 100K
# steps): each variation's change, dev perplexity (per wordpiece) and dev BLEU, as published. Our
# rows point at the paper's row that changes the same thing in the same direction.
PAPER_TABLE3 = {
    "base": ("base", 4.92, 25.8),
    "h1": ("h 1, d_k 512", 5.29, 24.9), "h4": ("h 4, d_k 128", 5.00, 25.5),
    "h16": ("h 16, d_k 32", 4.91, 25.8), "h32": ("h 32, d_k 16", 5.01, 25.4),
    "dk16": ("d_k 16", 5.16, 25.1), "dk32": ("d_k 32", 5.01, 25.4),
    "fewer layers": ("N 4", 5.19, 25.3), "more layers": ("N 8", 4.88, 25.5),
    "narrower": ("d_model 256", 5.75, 24.5), "wider": ("d_model 1024", 4.66, 26.0),
    "smaller d_ff": ("d_ff 1024", 5.12, 25.4), "larger d_ff": ("d_ff 4096", 4.75, 26.2),
    "drop0": ("P_drop 0", 5.77, 24.6), "drop0.2": ("P_drop 0.2", 4.95, 25.5),
    "ls0": ("eps_ls 0", 4.67, 25.3), "ls0.2": ("eps_ls 0.2", 5.47, 25.7),
    "learned": ("learned positions", 4.92, 25.7),
}
GROUPS = TABLE3 + ("moe", "positions")
SCHEMES = ("sinusoidal", "learned", "rope", "alibi")


@dataclass
class Row:
    """One variation: its name, group, and what it changes."""

    name: str
    group: str
    model: dict = field(default_factory=dict)
    train: dict = field(default_factory=dict)
    paper: Optional[str] = None  # the key of the paper's counterpart in PAPER_TABLE3


def table3_rows(
    base: ModelConfig, groups: Sequence[str] = TABLE3, train_max_len: int = 0
) -> list[Row]:
    """The rows of Table 3 for ``base`` (see the module's docstring); the positions study's rows
    train on pairs of at most ``train_max_len`` tokens."""
    D, h, N, ff = base.d_model, base.n_heads, base.encoder_layers, base.d_ff
    rows: list[Row] = []
    if "base" in groups:
        rows.append(Row("base", "base", paper="base"))
    if "A" in groups:
        for heads in (1, 4, 16, 32):
            if heads != h and D % heads == 0 and D // heads >= 4:
                rows.append(
                    Row(f"A-h{heads}", "A", {"n_heads": heads, "head_dim": None}, paper=f"h{heads}")
                )
    if "B" in groups:
        for d_k in (16, 32):
            if d_k != base.d_k:
                rows.append(Row(f"B-dk{d_k}", "B", {"head_dim": d_k}, paper=f"dk{d_k}"))
    if "C" in groups:
        for layers in (N - 1, N + 1):
            if layers >= 1:
                rows.append(
                    Row(
                        f"C-N{layers}",
                        "C",
                        {"encoder_layers": layers, "decoder_layers": layers},
                        paper="fewer layers" if layers < N else "more layers",
                    )
                )
        for width in (D // 2, D * 2):
            if width % h == 0:
                rows.append(Row(f"C-d{width}", "C", {"d_model": width, "head_dim": None},
                                paper="narrower" if width < D else "wider"))
        for inner in (ff // 2, ff * 2):
            rows.append(
                Row(
                    f"C-ff{inner}",
                    "C",
                    {"d_ff": inner},
                    paper="smaller d_ff" if inner < ff else "larger d_ff",
                )
            )
    if "D" in groups:
        for p in (0.0, 0.2):
            if p != base.dropout:
                rows.append(Row(f"D-drop{p:g}", "D", {"dropout": p}, paper=f"drop{p:g}"))
        for eps in (0.0, 0.2):
            rows.append(
                Row(f"D-ls{eps:g}", "D", train={"label_smoothing": eps}, paper=f"ls{eps:g}")
            )
    if "E" in groups and base.positional != "learned":
        rows.append(Row("E-learned", "E", {"positional": "learned"}, paper="learned"))
    if "scale" in groups and base.attention_scale != "none":
        rows.append(Row("scale-none", "scale", {"attention_scale": "none"}))
    if "moe" in groups and base.ffn != "moe":
        rows.append(Row("moe-E4k1", "moe", {"ffn": "moe", "moe_experts": 4, "moe_top_k": 1}))
        rows.append(
            Row(
                "moe-E4k2", "moe", {"ffn": "moe", "moe_experts": 4, "moe_top_k": 2, "d_ff": ff // 2}
            )
        )
    if "positions" in groups:
        if train_max_len < 1:
            raise ValueError("the positions study needs train_max_len (--train-max-len L): the "
                             "length to train up to")
        for scheme in SCHEMES:
            rows.append(
                Row(
                    f"pos-{scheme}",
                    "positions",
                    {"positional": scheme},
                    {"train_max_len": train_max_len},
                )
            )
    return rows


def _overrides(values: dict) -> list[str]:
    return [f"{key}={'None' if value is None else value}" for key, value in values.items()]


class AblationStopped(Exception):
    """A row's training was interrupted (Ctrl-C, SIGTERM): the ablation stops, resumable."""


def stopped_by_signal(run: Path) -> Optional[str]:
    """Why the run's last training ended, if a signal (Ctrl-C, SIGTERM) ended it; else None."""
    from .visualize import read_metrics

    if not (run / "metrics.jsonl").is_file():
        return None
    end = next((r for r in reversed(read_metrics(run)) if r.get("type") == "end"), None)
    reason = str((end or {}).get("stopped") or "")
    return reason if reason.startswith(("interrupted", "terminated")) else None


def last_validation(run: Path) -> Optional[dict]:
    """The run's last validation record (None before its first)."""
    from .visualize import read_metrics

    if not (run / "metrics.jsonl").is_file():
        return None
    return next((r for r in reversed(read_metrics(run)) if r.get("type") == "valid"), None)


def run_ablation(out: str | Path, base: ModelConfig, recipe: TrainConfig, base_args: list[str],
                 rows: Sequence[Row], seeds: Sequence[int], max_steps: int,
                 train: Callable[[list[str]], None], log=print) -> list[dict]:
    """Train (or resume, or skip) every row and seed; returns one result per row and seed.

    ``train(argv)`` runs ``transduce train`` with those arguments (raising on a failure);
    ``base_args`` are the arguments every run shares (data, preset or config, threads, ...).
    """
    import torch

    from .model import Transformer

    out = Path(out)
    results = []
    for row in rows:
        config = base.with_overrides(row.model)
        with torch.device("meta"):
            counts = Transformer(config).num_parameters()
        params, active = counts["total"], counts["active"]
        train_config = recipe.with_overrides(row.train)
        for seed in seeds:
            run = out / f"{row.name}-s{seed}"
            record = last_validation(run)
            done = record is not None and record.get("step", 0) >= max_steps
            if done:
                log(f"{row.name}, seed {seed}: done already (step {record['step']})")
            else:
                argv = [
                    *base_args,
                    "--out",
                    str(run),
                    "--max-steps",
                    str(max_steps),
                    "--seed",
                    str(seed),
                ]
                for item in _overrides(row.model) + _overrides(row.train):
                    argv += ["--set", item]
                if (run / "config.json").is_file():
                    argv.append("--resume")
                log(f"{row.name}, seed {seed}: training {params:,} parameters for {max_steps} "
                    f"updates -> {run}")
                try:
                    train(argv)
                except TransduceError as error:
                    log(f"{row.name}, seed {seed}: failed: {error}")
                    results.append(
                        {
                            "row": row.name,
                            "group": row.group,
                            "seed": seed,
                            "params": params,
                            "active": active,
                            "paper": row.paper,
                            "failed": str(error),
                            **_shape(config, train_config),
                        }
                    )
                    continue
                signal = stopped_by_signal(run)
                if signal:  # the user (or a scheduler) stopped it: stop here, not at the next row
                    raise AblationStopped(f"{row.name}, seed {seed}: {signal}; the ablation stops "
                                          "here (its checkpoint is saved: run the same command "
                                          "again to resume)")
                record = last_validation(run)
            results.append(
                {
                    "row": row.name,
                    "group": row.group,
                    "seed": seed,
                    "params": params,
                    "active": active,
                    "paper": row.paper,
                    "steps": record["step"] if record else None,
                    "dev_ppl": record["ppl"] if record else None,
                    "dev_bleu": record["bleu"] if record else None,
                    **_shape(config, train_config),
                }
            )
    return results


def _shape(config: ModelConfig, train: TrainConfig) -> dict:
    return {
        "N": config.encoder_layers,
        "d_model": config.d_model,
        "d_ff": config.d_ff,
        "h": config.n_heads,
        "d_k": config.d_k,
        "d_v": config.d_k,
        "P_drop": config.dropout,
        "eps_ls": train.label_smoothing,
        "positional": config.positional,
        "scale": config.attention_scale,
    }


def summarize(results: list[dict]) -> list[dict]:
    """One line per row: the mean (and range) over seeds."""
    lines = []
    for name in dict.fromkeys(r["row"] for r in results):
        runs = [r for r in results if r["row"] == name]
        ok = [r for r in runs if r.get("dev_bleu") is not None]
        line = {
            k: runs[0][k]
            for k in (
                "row",
                "group",
                "N",
                "d_model",
                "d_ff",
                "h",
                "d_k",
                "d_v",
                "P_drop",
                "eps_ls",
                "positional",
                "scale",
                "params",
            )
        }
        line["active"] = runs[0].get("active", line["params"])
        line["paper"] = PAPER_TABLE3.get(runs[0].get("paper"))
        line["seeds"] = len(runs)
        line["steps"] = ok[0]["steps"] if ok else None
        for key in ("dev_ppl", "dev_bleu"):
            values = [r[key] for r in ok]
            line[key] = round(statistics.mean(values), 2) if values else None
            line[key + "_range"] = (min(values), max(values)) if len(values) > 1 else None
        line["failed"] = next((r["failed"] for r in runs if r.get("failed")), None)
        lines.append(line)
    return lines


def markdown(lines: list[dict], note: str = "") -> str:
    head = ("| row | N | d_model | d_ff | h | d_k | d_v | P_drop | eps_ls | positions | scale | "
            "params | updates | dev PPL | dev BLEU | the paper's row | its PPL | its BLEU |")
    out = [head, "|" + "---|" * 18]
    for line in lines:
        def value(key):
            if line.get("failed"):
                return "failed"
            v = line[key]
            if v is None:
                return "-"
            spread = line.get(key + "_range")
            return f"{v:.2f}" + (f" ({spread[0]:.2f}-{spread[1]:.2f})" if spread else "")

        out.append(
            f"| {line['row']} | {line['N']} | {line['d_model']} | {line['d_ff']} | {line['h']} | "
            f"{line['d_k']} | {line['d_v']} | {line['P_drop']:g} | {line['eps_ls']:g} | "
            f"{line['positional']} | {'1/sqrt(d_k)' if line['scale'] == 'sqrt_dk' else 'none'} | "
            f"{line['params']:,}"
            + (
                f" ({line['active']:,} active)"
                if line.get("active", line["params"]) != line["params"]
                else ""
            )
            + " | "
            f"{line['steps'] if line['steps'] is not None else '-'} | {value('dev_ppl')} | "
            f"{value('dev_bleu')} | "
            + (
                " | ".join([paper[0], f"{paper[1]:.2f}", f"{paper[2]:.1f}"])
                if (paper := line.get("paper"))
                else "- | - | -"
            )
            + " |"
        )
    return "\n".join(out) + ("\n\n" + note if note else "") + "\n"


def plot(lines: list[dict], out: Path) -> Optional[Path]:
    """Validation BLEU per row, the base's as a line."""
    from .visualize import _pyplot, _save

    done = [line for line in lines if line.get("dev_bleu") is not None]
    if not done:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(done) + 1.5))
    colors = {
        "base": "tab:gray",
        "A": "tab:blue",
        "B": "tab:cyan",
        "C": "tab:green",
        "D": "tab:orange",
        "E": "tab:purple",
        "scale": "tab:red",
        "moe": "tab:brown",
    }
    names = [line["row"] for line in done][::-1]
    values = [line["dev_bleu"] for line in done][::-1]
    ax.barh(names, values, color=[colors.get(line["group"], "tab:gray") for line in done][::-1])
    base = next((line["dev_bleu"] for line in done if line["row"] == "base"), None)
    if base is not None:
        ax.axvline(base, color="black", linestyle="--", linewidth=1, label=f"base {base:.2f}")
        ax.legend(loc="lower right")
    ax.set_xlim(left=0)
    ax.set_xlabel("validation BLEU (greedy)")
    ax.set_title(f"Table 3 variations, {done[0]['steps']} updates each")
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, out)
