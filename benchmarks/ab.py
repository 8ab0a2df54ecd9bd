"""Two versions of transduce side by side: the same ``peers.py`` inference worker run from an older
source tree and from this one, in alternating processes (old, new, old, new, ...), so that the
machine's drift hits both alike. Reports each setting's median over the rounds for both and their
ratio, and the spread of each side (the noise a ratio must exceed to mean anything).

    git worktree add /tmp/transduce-old COMMIT
    python benchmarks/ab.py --old /tmp/transduce-old [--shapes small base] [--rounds 3]

Settings: greedy and beam 4, batch 1 and 32, the eager fp32 step and int8 (``peers.py``'s
``transduce`` and ``transduce_int8`` systems), on ``peers.py``'s random-init models of each shape.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import machine, save, table  # noqa: E402


def worker(src: Path, args: list[str]) -> dict:
    """One ``peers.py`` inference worker with ``src`` first on the import path."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    result = subprocess.run(
        [sys.executable, str(HERE / "peers.py"), "worker", *args],
        capture_output=True,
        text=True,
        timeout=3600,
        env=env,
    )
    if result.returncode != 0:
        raise RuntimeError(f"worker {' '.join(args)} ({src}) failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--old", required=True, help="a checkout of the older version (its src/ is used)"
    )
    parser.add_argument("--shapes", nargs="+", default=["small", "base"])
    parser.add_argument("--rounds", type=int, default=3, help="old/new pairs per setting")
    parser.add_argument("--sentences", type=int, default=100)
    parser.add_argument("--systems", nargs="+", default=["transduce", "transduce_int8"])
    opts = parser.parse_args()
    from peers import make_models

    sources = {"old": Path(opts.old).resolve() / "src", "new": HERE.parent / "src"}
    rows, raw = [], {"machine": machine(), "old": str(opts.old)}
    started = time.time()
    for shape in opts.shapes:
        models = make_models(HERE / "results" / "models", shape)
        for mode, batch in (("greedy", 1), ("greedy", 32), ("beam4", 1), ("beam4", 32)):
            for system in opts.systems:
                args = [
                    "inference",
                    system,
                    str(models["transduce"]),
                    mode,
                    str(batch),
                    "--trials",
                    "1",
                    "--sentences",
                    str(opts.sentences),
                ]
                rates = {"old": [], "new": []}
                for _ in range(opts.rounds):
                    for side in ("old", "new"):
                        rates[side].append(worker(sources[side], args)["rate_median"])
                raw[f"{shape}/{mode}/{batch}/{system}"] = rates
                old, new = (statistics.median(rates[side]) for side in ("old", "new"))
                spread = {
                    side: (max(r) - min(r)) / statistics.median(r) for side, r in rates.items()
                }
                rows.append(
                    {
                        "shape": shape,
                        "search": mode,
                        "batch": batch,
                        "system": system,
                        "old sentences/s": f"{old:.1f}",
                        "new sentences/s": f"{new:.1f}",
                        "new / old": f"{new / old:.2f}x",
                        "spread old, new": f"{spread['old']:.0%}, {spread['new']:.0%}",
                    }
                )
    print(
        table(
            rows,
            [
                "shape",
                "search",
                "batch",
                "system",
                "old sentences/s",
                "new sentences/s",
                "new / old",
                "spread old, new",
            ],
        )
    )
    print(
        f"\n({time.time() - started:.0f} s; {machine()}; spread: (max - min) / median over the "
        "rounds)"
    )
    save("ab", {**raw, "rows": rows})


if __name__ == "__main__":
    main()
