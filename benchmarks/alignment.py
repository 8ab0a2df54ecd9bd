"""How well the cross-attention's word alignments (``translate --alignments``) link copied words:
numbers and words of 4 letters or more (names, loanwords) that appear once in the source and
once, spelled the same, in the translation must be linked to each other. No reference alignment
of Multi30k is at hand offline, so this is the measurable part: the precision of those links, for
every decoder layer (heads averaged) and the default rule, on the model's own translations.

    python benchmarks/alignment.py --run RUN --src FILE [--beam 4] [--sentences 1000]

Prints a markdown table and writes benchmarks/results/alignment.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, save  # noqa: E402

from transduce import load  # noqa: E402
from transduce.config import DecodeConfig  # noqa: E402
from transduce.data.corpus import read_lines  # noqa: E402
from transduce.decoding.alignment import align_ids, default_layer  # noqa: E402

PUNCTUATION = ".,;:!?\"'()"


def copied(source: str, translation: str) -> list[tuple[int, int]]:
    """The (source word, target word) pairs of words copied from the source: numbers, and words
    of 4 letters or more (names, loanwords), that appear exactly once on each side, spelled the
    same but for case (punctuation around them ignored)."""
    src = [w.strip(PUNCTUATION).lower() for w in source.split()]
    tgt = [w.strip(PUNCTUATION).lower() for w in translation.split()]
    pairs = []
    for i, word in enumerate(src):
        if src.count(word) != 1 or tgt.count(word) != 1:
            continue
        if any(c.isdigit() for c in word) or len(word) >= 4:
            pairs.append((i, tgt.index(word)))
    return pairs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True)
    p.add_argument("--src", required=True, help="source sentences, one a line")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--sentences", type=int, default=1000)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    translator = load(args.run, device="cpu", compile="off")
    model = translator.model
    lines = [line for line in read_lines(args.src) if line.strip()][: args.sentences]
    found = translator.search_lines(lines, DecodeConfig(beam=args.beam))
    sources = [ids for ids, _ in found]
    targets = [hyps[0].tokens for _, hyps in found]
    outputs = [translator.tokenizer.decode_tgt(t) for t in targets]
    gold = [copied(line, out) for line, out in zip(lines, outputs)]
    total = sum(map(len, gold))
    rows, default = [], default_layer(model.config.decoder_layers)
    for layer in range(model.config.decoder_layers):
        links = align_ids(model, translator.tokenizer, sources, targets, layer=layer)
        right = sum(pair in set(mine) for pairs, mine in zip(gold, links) for pair in pairs)
        rows.append({"layer": layer, "default": layer == default, "right": right,
                     "precision": right / total if total else 0.0})
    print(f"{args.run}: {len(lines)} sentences of {args.src}, beam {args.beam}; {total} copied "
          f"words (numbers, names, loanwords: once on each side)\n")
    print("| decoder layer (heads averaged) | copied words linked right | precision |")
    print("|---|---|---|")
    for row in rows:
        mark = " (the default)" if row["default"] else ""
        print(f"| {row['layer']}{mark} | {row['right']} of {total} | "
              f"{100 * row['precision']:.1f}% |")
    save("alignment", {"machine": machine(), "run": args.run, "src": args.src,
                       "copied": total, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
