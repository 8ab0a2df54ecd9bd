"""``transduce plot``: training curves of a run as a PNG."""

from __future__ import annotations

from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser("plot", help="plot a run's loss, validation BLEU and learning rate")
    p.add_argument("run_dir", help="a run directory (reads its metrics.jsonl)")
    p.add_argument("--out", help="the PNG to write (default: RUN_DIR/curves.png)")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..visualize import plot_training

    out = args.out or str(Path(args.run_dir) / "curves.png")
    print(f"wrote {plot_training(args.run_dir, out)}")
    return 0
