"""The silver trees of semi.sh.

    python3 recipes/parsing/silver.py words TEXT N     # N sentences of TEXT, tokenized, one a line
    python3 recipes/parsing/silver.py keep SCORED SHARE  # the SHARE of `parse --scores` output with
                                                         # the highest scores, trees only

``words`` splits punctuation off words as the treebank does (``cells, and`` -> ``cells , and``;
``mouse's`` -> ``mouse 's``, ``isn't`` -> ``is n't``), keeps sentences of 3 to 40 words and
drops repeats.
"""

from __future__ import annotations

import re
import sys

from transduce.data.corpus import read_lines

TOKEN = re.compile(r"\w+(?=n't\b)|n't\b|'s\b|\w+(?:[-.]\w+)*|[^\w\s]")


def words(text: str, n: int) -> None:
    seen = set()
    for line in read_lines(text):
        tokens = TOKEN.findall(line)
        sentence = " ".join(tokens)
        if 3 <= len(tokens) <= 40 and sentence not in seen:
            seen.add(sentence)
            print(sentence)
            if len(seen) == n:
                return


def keep(scored: str, share: float) -> None:
    rows = [line.split("\t", 1) for line in read_lines(scored) if line]
    rows.sort(key=lambda row: -float(row[0]))
    for _, tree in rows[: int(len(rows) * share)]:
        print(tree)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("words", "keep"):
        sys.exit(__doc__)
    (words if sys.argv[1] == "words" else keep)(
        sys.argv[2], float(sys.argv[3]) if sys.argv[1] == "keep" else int(sys.argv[3])
    )
