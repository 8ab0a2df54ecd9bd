"""``transduce average``: checkpoint averaging (paper: the last 5 for base, 20 for big)."""

from __future__ import annotations

from pathlib import Path

from ..errors import TransduceError
from ..files import check_output_dir
from .common import number


def add_parser(sub) -> None:
    p = sub.add_parser("average", help="average the weights of a run's last checkpoints")
    p.add_argument("run_dir", help="a run directory (its checkpoints/ are averaged)")
    p.add_argument("--last", type=number(int, 1, 1_000_000), default=5, help="how many of the "
                                                                             "latest checkpoints "
                                                                             "(paper: 5 base, 20 "
                                                                             "big)")
    p.add_argument("--up-to-step", type=number(int, 0), help="only the checkpoints at or before "
                                                             "this step (to average at a "
                                                  "budget's mark of a run that went on)")
    p.add_argument("--out", help="the averaged checkpoint folder (default: RUN_DIR/averaged)")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..averaging import average_checkpoints
    from ..checkpoint import list_checkpoints

    if args.last < 1:
        raise TransduceError(f"--last {args.last}: average at least 1 checkpoint")
    found = list_checkpoints(args.run_dir)
    if args.up_to_step is not None:
        found = [f for f in found if int(f.name.split("_")[-1]) <= args.up_to_step]
    if not found:
        raise TransduceError(f"{args.run_dir} has no checkpoints to average" + (
            f" at or before step {args.up_to_step}" if args.up_to_step is not None else ""))
    out = Path(args.out) if args.out else Path(args.run_dir) / "averaged"
    if len(found) == 1 and args.last > 1:
        # the "average" would be a copy of the last step, which commands would then prefer to best/
        raise TransduceError(
            f"{args.run_dir} has only one checkpoint ({found[0].name}); its average would be a "
            "copy of it, which commands would use instead of best/. Train on until there are more "
            "(checkpoints come every save_minutes=10 by default; --set save_every=N saves every N "
            f"updates), or pass --last 1 to copy it to {out} anyway")
    if len(found) < args.last:
        print(f"note: only {len(found)} checkpoints exist; averaging all of them ({args.last} were "
              "asked for)")
    chosen = found[-args.last :]
    check_output_dir(out, "checkpoint", chosen)  # before reading any weights
    average_checkpoints(chosen, out)
    print(f"averaged {', '.join(p.name for p in chosen)} into {out}")
    return 0
