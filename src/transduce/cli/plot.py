"""``transduce plot``: training curves of one run, or of several over each other, as a PNG."""

from __future__ import annotations

from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser("plot", help="plot a run's loss, validation BLEU and learning rate "
                                    "(several runs: compared)")
    p.add_argument("run_dirs", nargs="+", metavar="run_dir",
                   help="run directories (each's metrics.jsonl); several are drawn over each other")
    p.add_argument("--out", help="the PNG to write (default for one run: RUN_DIR/curves.png; "
                                 "needed for several)")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..errors import TransduceError
    from ..visualize import plot_training

    runs = list(dict.fromkeys(args.run_dirs))
    if len(runs) > 1 and not args.out:
        raise TransduceError(f"{len(runs)} runs: say where their picture goes with --out FILE.png")
    out = args.out or str(Path(runs[0]) / "curves.png")
    print(f"wrote {plot_training(runs, out)}")
    return 0
