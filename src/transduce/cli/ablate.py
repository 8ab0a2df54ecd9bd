"""``transduce ablate``: the paper's Table 3 at your scale (see ``transduce.ablate``)."""

from __future__ import annotations

import json
import sys

from ..config import TrainConfig
from ..errors import TransduceError
from .common import THREADS, config_number, number

ROWS_HELP = ("comma-separated groups: base, A (heads at constant compute), B (smaller d_k), C "
             "(size), D (dropout and label smoothing), E (learned positions), scale (no "
             "1/sqrt(d_k)); moe (mixtures of experts at the base's active parameters); and "
             "positions (sinusoidal, learned, RoPE, ALiBi trained on pairs up to --train-max-len, "
             "evaluated on longer ones)")


def add_parser(sub) -> None:
    from ..config import PRECISIONS, ModelConfig

    p = sub.add_parser("ablate", help="the paper's Table 3 at your scale: variations of a model, "
                                      "trained alike",
                       description="Train the rows of Table 3 (heads, d_k, size, dropout, label "
                                   "smoothing, positions, and no attention scaling) as variations "
                                   "of a base model, each for the same number of updates with the "
                                   "same data, recipe and seed, and write OUT/table3.md, .json "
                                   "and .png. Run it again to resume; finished rows are kept.")
    p.add_argument("data_dir", help="a folder written by `transduce prepare`")
    p.add_argument("--out", required=True, help="the folder of the rows' runs and the table")
    p.add_argument(
        "--preset", default="small", choices=ModelConfig.preset_names(), help="the base model"
    )
    p.add_argument("--config", help="a TOML recipe with [model] and [train] tables, as for train")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change the base (as for train)",
    )
    p.add_argument("--rows", default="base,A,B,C,D,E,scale", help=ROWS_HELP)
    p.add_argument("--max-steps", type=number(int, 1), default=800, help="updates per row (the "
                                                                         "budget of each)")
    p.add_argument("--seeds", type=number(int, 1, 100), default=1, help="train each row with "
                                                                        "seeds 1..N and report "
                                                                        "the mean")
    p.add_argument("--train-max-len", type=number(int, 0, 1_000_000), default=0,
                   help="--rows positions: train on pairs of at most this many tokens, then "
                        "evaluate by length")
    p.add_argument(
        "--max-tokens",
        type=config_number(TrainConfig, "max_tokens"),
        help="tokens per batch and side",
    )
    p.add_argument("--precision", choices=list(PRECISIONS), default="auto", help="as for train")
    p.add_argument("--threads", type=THREADS, default=0, help="as for train")
    p.add_argument("--dry-run", action="store_true", help="print the rows and their sizes; train "
                                                          "nothing")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(run=run)


def run(args) -> int:
    from .. import ablate
    from ..data import load_meta
    from ..files import check_output_dir, write_marker, write_text
    from .main import build_parser
    from ..training.recipe import SCHEDULE_KEYS, describe_schedule
    from .train import resolve_configs

    groups = [g.strip() for g in args.rows.split(",") if g.strip()]
    unknown = [g for g in groups if g not in ablate.GROUPS]
    if unknown or not groups:
        raise TransduceError(f"--rows {args.rows!r}: unknown group {unknown[0]!r}; "
                             f"{ROWS_HELP}" if unknown else
                             f"--rows is empty; {ROWS_HELP}")
    for name in ("max_steps", "seeds"):
        if getattr(args, name) < 1:
            raise TransduceError(f"--{name.replace('_', '-')} {getattr(args, name)}: must be at "
                                 "least 1")
    meta = load_meta(args.data_dir)
    out = check_output_dir(args.out, "ablation", [args.data_dir])
    common = (
        [
            str(args.data_dir),
            "--preset",
            args.preset,
            "--precision",
            args.precision,
            "--threads",
            str(args.threads),
        ]
        + (["--config", args.config] if args.config else [])
        + (["--max-tokens", str(args.max_tokens)] if args.max_tokens else [])
        + (["--quiet"] if args.quiet else [])
    )
    for item in args.set:
        common += ["--set", item]
    parser = build_parser()
    probe = parser.parse_args(
        ["train", *common, "--out", str(out / "base-s1"), "--max-steps", str(args.max_steps)]
    )
    base, recipe, _, _ = resolve_configs(probe, meta)
    # every row trains with the base's schedule: an automatic schedule would differ with d_model
    for key in sorted(SCHEDULE_KEYS):
        common += ["--set", f"{key}={getattr(recipe, key)}"]
    if "positions" in groups and args.train_max_len < 1:
        raise TransduceError("--rows positions needs --train-max-len L: the length (in tokens) to "
                             "train up to")
    rows = ablate.table3_rows(base, groups, args.train_max_len)
    if not rows:
        raise TransduceError(f"--rows {args.rows}: no row differs from the base model")
    seeds = list(range(1, args.seeds + 1))
    print(f"{len(rows)} rows x {len(seeds)} seed(s), {args.max_steps} updates each, base: "
          f"{args.preset} (N {base.encoder_layers}, d_model {base.d_model}, d_ff {base.d_ff}, h "
          f"{base.n_heads}, d_k {base.d_k})",
          file=sys.stderr)
    if args.dry_run:
        import torch

        from ..model import Transformer

        for row in rows:
            with torch.device("meta"):
                params = Transformer(base.with_overrides(row.model)).num_parameters()["total"]
            print(f"{row.name:12s} {params:>12,}  {row.model or ''} {row.train or ''}")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    write_marker(out, "ablation")

    def train(argv: list[str]) -> None:
        parsed = parser.parse_args(["train", *argv])
        try:
            parsed.run(parsed)
        except ValueError as error:  # a configuration the row makes impossible
            raise TransduceError(str(error)) from None

    try:
        results = ablate.run_ablation(out, base, recipe, common, rows, seeds, args.max_steps, train,
                                      log=lambda m: print(m, file=sys.stderr))
    except ablate.AblationStopped as stopped:
        print(stopped, file=sys.stderr)
        return 130  # as a shell reports a command that Ctrl-C ended
    lines = ablate.summarize(results)
    note = (f"Each row: `transduce train` for {args.max_steps} updates on {args.data_dir} with the "
            f"base's recipe ({describe_schedule(recipe, base)}, as the base's), seeds "
            f"{', '.join(map(str, seeds))}; dev PPL of the unsmoothed NLL and greedy dev BLEU at "
            "the last update (mean over seeds, range in brackets). The paper's rows: Table 3 as "
            "published (newstest2013, its base N 6, d_model 512, h 8 trained 100K steps on "
            "WMT14), the row that changes the same thing.")
    write_text(out / "table3.md", ablate.markdown(lines, note), what="the table")
    write_text(
        out / "table3.json",
        json.dumps({"rows": lines, "runs": results}, indent=2) + "\n",
        what="the table",
    )
    picture = ablate.plot(lines, out / "table3.png")
    print(ablate.markdown(lines, note))
    print(f"wrote {out / 'table3.md'}, "
          f"{out / 'table3.json'}" + (f", {picture}" if picture else ""), file=sys.stderr)
    if "positions" in groups:
        _positions(args, out, rows, seeds)
    return 0


def _positions(args, out, rows, seeds) -> None:
    """Evaluate the positions study's runs by source length and write OUT/positions.md, .json,
    .png."""
    from .. import extrapolation
    from ..files import write_text

    table = {}
    for row in (r for r in rows if r.group == "positions"):
        per_seed = [
            extrapolation.evaluate_by_length(
                out / f"{row.name}-s{seed}", args.data_dir, args.train_max_len
            )
            for seed in seeds
            if (out / f"{row.name}-s{seed}" / "checkpoints").is_dir()
        ]
        if not per_seed:
            continue
        table[row.model["positional"]] = [
            {
                "lengths": b["lengths"],
                "sentences": b["sentences"],
                **{
                    k: (
                        round(sum(s[i][k] for s in per_seed) / len(per_seed), 2)
                        if b[k] is not None
                        else None
                    )
                    for k in ("ppl", "bleu")
                },
            }
            for i, b in enumerate(per_seed[0])
        ]
    if not table:
        return
    note = (f"Trained on the pairs of at most {args.train_max_len} tokens on both sides "
            f"({args.max_steps} updates, seeds {', '.join(map(str, seeds))}); validation sentences "
            "grouped by source length. A learned table has rows for every position up to "
            f"max_positions, but those past {args.train_max_len + 1} were never trained: they keep "
            "their random initialization.")
    write_text(
        out / "positions.md",
        extrapolation.positions_markdown(table, args.train_max_len, note),
        what="the table",
    )
    write_text(out / "positions.json", json.dumps(table, indent=2) + "\n", what="the table")
    extrapolation.positions_plot(table, args.train_max_len, out / "positions.png")
    print(extrapolation.positions_markdown(table, args.train_max_len, note))
