"""Outputs that must not depend on how a sentence is searched, on a trained model and real
sentences.

    python benchmarks/output_checks.py --run runs/multi30k-small [--sentences 256] [--source FILE]

On Multi30k's test_2016_flickr English side (``../shared/data``; ``--source`` for other text),
each sentence is searched alone (beam 4, and greedy) and then:
- in batches of ``--batch`` (``translate``'s search, the running cache: sentences leave as they
end);
- in a running search that they join a few at a time at random steps (the server's continuous
batching);
- by an ensemble of the model with itself, alone and in batches (the same distribution, mixed);
- at int8 and at bf16 (the CPU's fast step), in batches and in a running search joined at random
  steps, against the same precision alone (int8 is bit for bit; the CPU's bf16 is not, and is
  reported as it is).
Reported per check: sentences with the same tokens, and the largest score difference among them.
Exits 1 if a check other than bf16's differs (tokens, or a score by more than 1e-4). Writes
``benchmarks/results/output_checks.json`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import MULTI30K, joined_at_random, machine, save, table  # noqa: E402


def main() -> None:
    import torch

    from transduce import load
    from transduce.config import DecodeConfig
    from transduce.data.corpus import read_lines
    from transduce.decoding import Ensemble, translate_ids

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a trained run (e.g. runs/multi30k-small)")
    parser.add_argument("--source", help="a text file of source sentences, one a line")
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument(
        "--batch", type=int, default=128, help="sentences per batch of the batch checks"
    )
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    path = Path(args.source) if args.source else MULTI30K / "test_2016_flickr.en.gz"
    if not path.is_file():
        sys.exit(f"output_checks.py: {path} is missing (--source FILE reads other sentences)")
    translator = load(args.run, device="cpu")
    model = translator.model
    sources = translator.encode([line.strip() for line in read_lines(path)][: args.sentences])
    n = len(sources)
    twice = Ensemble([model, model])
    rows, failed = [], False
    for name, decode in (
        ("beam 4", DecodeConfig(beam=4, max_sentences=args.batch, max_tokens=10**6)),
        ("greedy", DecodeConfig(beam=1, max_sentences=args.batch, max_tokens=10**6)),
    ):
        alone = [translate_ids(model, [s], decode)[0] for s in sources]

        def compare(check: str, found: list, exact: bool = True, reference=None) -> None:
            nonlocal failed
            alone_ = alone if reference is None else reference
            same = [
                a for a, b in zip(alone_, found) if [h.tokens for h in a] == [h.tokens for h in b]
            ]
            gap = max(
                (
                    abs(x.score - y.score)
                    for a, b in zip(alone_, found)
                    if a in same
                    for x, y in zip(a, b)
                ),
                default=0.0,
            )
            ok = len(same) == n and gap <= 1e-4
            failed |= exact and not ok
            rows.append(
                {
                    "search": name,
                    "check": check,
                    "same_tokens": f"{len(same)}/{n}",
                    "max_score_gap": f"{gap:.1e}",
                    "verdict": ("equal" if ok else "DIFFERS") if exact else "reported",
                }
            )
            print(f"  {rows[-1]}", file=sys.stderr, flush=True)

        compare(f"batches of {args.batch}", translate_ids(model, sources, decode))
        compare("running search, joined at random steps",
                joined_at_random(model, sources, decode))
        compare(
            "ensemble of the model with itself, alone",
            [translate_ids(twice, [s], decode)[0] for s in sources],
        )
        compare(
            f"ensemble of the model with itself, batches of {args.batch}",
            translate_ids(twice, sources, decode),
        )
        for precision in ("int8", "bf16"):
            own = [translate_ids(model, [s], decode, precision=precision)[0] for s in sources]
            exact = precision == "int8"
            compare(f"{precision}: batches of {args.batch} against {precision} alone",
                    translate_ids(model, sources, decode, precision=precision), exact, own)
            compare(f"{precision}: running search, joined at random steps",
                    joined_at_random(model, sources, decode, precision), exact, own)
    print(table(rows, ["search", "check", "same_tokens", "max_score_gap", "verdict"]))
    payload = {
        "machine": machine(),
        "run": args.run,
        "source": str(path),
        "sentences": n,
        "rows": rows,
    }
    print(f"wrote {save('output_checks', payload)}", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
