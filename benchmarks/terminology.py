"""Terminology constraints (``translate --constraints``) on a test built from Multi30k: each
sentence's term is a noun of its reference (the first capitalized word past the first, of 4 letters
or more), which the translation must hold. BLEU and term accuracy (the term appears as a word of
the output), overall and on the terms unconstrained search leaves out, of unconstrained beam
search and of constrained search at each bonus (``decoding.terminology.BONUS``).

    python benchmarks/terminology.py --run RUN --src SRC --ref REF [--bonus 0 2 4 8] [--beam 4]
        [--sentences 1000]

Prints a markdown table and writes benchmarks/results/terminology.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, save  # noqa: E402

from transduce import load  # noqa: E402
from transduce.data.corpus import read_lines  # noqa: E402
from transduce.decoding import terminology  # noqa: E402
from transduce.evaluate import score  # noqa: E402

PUNCTUATION = ".,;:!?\"'()"


def term_of(reference: str) -> str:
    """The reference's first capitalized word past the first, of 4 letters or more, or ''."""
    for word in reference.split()[1:]:
        word = word.strip(PUNCTUATION)
        if len(word) >= 4 and word.isalpha() and word[0].isupper():
            return word
    return ""


def has(output: str, term: str) -> bool:
    return term in [w.strip(PUNCTUATION) for w in output.split()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--ref", required=True)
    p.add_argument("--bonus", type=float, nargs="+", default=[0.0, 2.0, 4.0, 8.0])
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--sentences", type=int, default=1000)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    translator = load(args.run, device="cpu", compile="off")
    sources = list(read_lines(args.src))[: args.sentences]
    references = list(read_lines(args.ref))[: args.sentences]
    terms = [term_of(ref) for ref in references]
    constraints = [[t] if t else [] for t in terms]
    with_term = sum(map(bool, terms))
    rows, default, missed = [], terminology.BONUS, None
    systems = [("unconstrained", None)] + [(f"constrained, bonus {b:g}", b) for b in args.bonus]
    for name, bonus in systems:
        start = time.perf_counter()
        if bonus is None:
            outputs = translator.translate(sources, beam=args.beam)
        else:
            terminology.BONUS = bonus
            outputs = translator.translate(sources, beam=args.beam, constraints=constraints)
        seconds = time.perf_counter() - start
        found = [has(out, term) for out, term in zip(outputs, terms)]
        if missed is None:  # the terms unconstrained search leaves out
            missed = [i for i, term in enumerate(terms) if term and not found[i]]
        rows.append({"search": name, "bonus": bonus, "bleu": score(outputs, references)["bleu"],
                     "term_accuracy": sum(found) / with_term,
                     "missed_accuracy": sum(found[i] for i in missed) / max(1, len(missed)),
                     "seconds": seconds})
    terminology.BONUS = default
    print(f"{args.run}: {len(sources)} sentences of {args.src}, {with_term} with a term; beam "
          f"{args.beam}\n")
    print(f"| search | sacreBLEU | term accuracy | on the {len(missed)} terms unconstrained "
          "search misses | seconds |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['search']} | {row['bleu']:.2f} | {100 * row['term_accuracy']:.1f}% | "
              f"{100 * row['missed_accuracy']:.1f}% | {row['seconds']:.0f} |")
    save("terminology", {"machine": machine(), "run": args.run, "src": args.src,
                         "terms": with_term, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
