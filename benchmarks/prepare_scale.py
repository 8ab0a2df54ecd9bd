"""Peak memory and speed of ``transduce prepare`` on a generated corpus of N pairs (default
2,000,000).

    python benchmarks/prepare_scale.py [--pairs 2000000] [--quick]

Generates random sentences (a 5,000-word vocabulary, 5-30 words a sentence), runs ``transduce
prepare`` in a child process and reports lines/s and the child's peak resident memory. The goal:
memory that does not grow with the corpus (under 2 GiB at 2M pairs).
"""

from __future__ import annotations

import argparse
import gzip
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, save, table  # noqa: E402


def generate(folder: Path, pairs: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
        for _ in range(5000)
    ]
    with gzip.open(folder / "train.en.gz", "wt", compresslevel=1) as en, \
            gzip.open(folder / "train.de.gz", "wt", compresslevel=1) as de:
        for _ in range(pairs):
            n = rng.randint(5, 30)
            en.write(" ".join(rng.choices(words, k=n)) + "\n")
            de.write(" ".join(rng.choices(words, k=max(1, n + rng.randint(-3, 3)))) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=2_000_000)
    parser.add_argument("--quick", action="store_true", help="200,000 pairs")
    parser.add_argument("--vocab-sample", type=int, default=1_000_000)
    args = parser.parse_args()
    pairs = 200_000 if args.quick else args.pairs
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        start = time.time()
        generate(folder, pairs)
        print(f"generated {pairs:,} pairs in {time.time() - start:.0f} s", flush=True)
        start = time.time()
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "transduce",
                "prepare",
                "--train-prefix",
                str(folder / "train"),
                "--src",
                "en",
                "--tgt",
                "de",
                "--out",
                str(folder / "data"),
                "--vocab-size",
                "8000",
                "--vocab-sample",
                str(args.vocab_sample),
            ],
            capture_output=True,
            text=True,
        )
        seconds = time.time() - start
        if result.returncode:
            raise SystemExit(result.stderr)
        peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    row = {"pairs": f"{pairs:,}", "seconds": f"{seconds:.0f}", "lines/s": f"{pairs / seconds:,.0f}",
           "peak RSS (MiB)": f"{peak_mib:,.0f}", "vocab sample": f"{args.vocab_sample:,}"}
    print(table([row], list(row)))
    save("prepare_scale", {"machine": machine(), **row})


if __name__ == "__main__":
    main()
