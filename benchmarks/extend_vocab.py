"""Vocabulary extension on the fine-tuning recipe's new domain (the Multi30k pairs that mention a
dog, ``recipes/finetune/run.sh``): does adding pieces learned on the domain help fine-tuning?

    python benchmarks/extend_vocab.py [--work runs/finetune] [--steps 300] [--pieces 0 200 800]
                                      [--seeds 1 2]

Needs the recipe's first two steps done (``WORK/general``, ``WORK/raw``). For each N of
``--pieces`` (0: the general model's tokenizer as it is), prepares the dog pairs with
``prepare --tokenizer WORK/general --extend-vocab N`` and reports, on the dog test pairs, the
share of unknown pieces and the pieces per sentence of each side; then fine-tunes the general
model on them (``--recipe finetune``, ``--steps`` updates, validation every 50 on the dog
validation pairs, ``best/`` chosen there) once per seed and reports sacreBLEU (beam 4) of
``best/`` on the dog test pairs and on test_2016_flickr. Prints a markdown table; writes
benchmarks/results/extend_vocab.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import MULTI30K, bleu, machine, save, table, transduce  # noqa: E402

from transduce.data.corpus import read_lines  # noqa: E402
from transduce.data.tokenizer import Tokenizer  # noqa: E402


def coverage(data: Path, test: str) -> dict[str, str]:
    """Unknown pieces and pieces per sentence of the test pairs under the dataset's tokenizer."""
    meta = json.loads((data / "meta.json").read_text())
    tokenizer = Tokenizer.from_roles({role: data / name for role, name in meta["spm"].items()},
                                     unk_id=meta["special_ids"]["unk_id"])
    out = {}
    for side, lang, encode in (("source", "en", tokenizer.encode_src),
                               ("target", "de", tokenizer.encode_tgt)):
        rows = encode(list(read_lines(f"{test}.{lang}")))
        pieces = sum(map(len, rows))
        unknown = sum(row.count(tokenizer.unk_id) for row in rows)
        out[f"{side} unknown"] = f"{unknown / pieces:.2%}"
        out[f"{side} pieces/sentence"] = f"{pieces / len(rows):.2f}"
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", default="runs/finetune")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--pieces", type=int, nargs="+", default=[0, 200, 800])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    args = p.parse_args()
    work, raw = Path(args.work), Path(args.work) / "raw"
    for need in (work / "general", raw / "dogs.test.en"):
        if not need.exists():
            sys.exit(f"extend_vocab.py: {need} is missing: run recipes/finetune/run.sh first (its "
                     "step 1 makes it)")
    rows = []
    for n in args.pieces:
        data = work / "extend" / f"data-{n}"
        transduce("prepare", "--tokenizer", str(work / "general"), "--train-prefix",
                  str(raw / "dogs.train"), "--valid-prefix", str(raw / "dogs.valid"), "--src", "en",
                  "--tgt", "de", "--out", str(data), *(["--extend-vocab", str(n)] if n else []))
        meta = json.loads((data / "meta.json").read_text())
        dog, general = [], []
        for seed in args.seeds:
            out = work / "extend" / f"tuned-{n}-seed-{seed}"
            transduce("train", str(data), "--out", str(out), "--init-from", str(work / "general"),
                      "--recipe", "finetune", "--max-steps", str(args.steps), "--seed", str(seed),
                      "--set", "valid_every=50", "--set", "patience=0", "--quiet",
                      *(["--resume"] if (out / "config.json").is_file() else []))
            dog.append(bleu(out, str(raw / "dogs.test")))
            general.append(bleu(out, str(MULTI30K / "test_2016_flickr"), ".gz"))
        rows.append({
            "new pieces": f"{n} ({meta['vocab_size']['src']:,} ids)",
            **coverage(data, str(raw / "dogs.test")),
            "dog test BLEU": " / ".join(f"{b:.2f}" for b in dog)
            + f" (mean {statistics.mean(dog):.2f})",
            "test_2016_flickr BLEU": " / ".join(f"{b:.2f}" for b in general)
            + f" (mean {statistics.mean(general):.2f})",
        })
        print(rows[-1], file=sys.stderr, flush=True)
    print(table(rows, list(rows[0])))
    print(f"\n(seeds {', '.join(map(str, args.seeds))}; {args.steps} updates; {machine()})")
    save("extend_vocab", {"rows": rows, "steps": args.steps, "seeds": args.seeds,
                          "machine": machine()})


if __name__ == "__main__":
    main()
