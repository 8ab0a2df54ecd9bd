"""Trees that need no model, over each gold tree's words, for the parsing table's baselines:
``right`` branches right (every constituent a word and the rest of the sentence), ``flat`` puts
every word under one constituent. Each constituent takes the label most common at its place in the
training treebank: the root's most common label for the top, the most common label below the
root for the others.

    python3 recipes/parsing/baselines.py TRAIN.trees.gz GOLD.trees.gz OUT_PREFIX

writes OUT_PREFIX.right and OUT_PREFIX.flat, one tree a line, for ``transduce parseval``.
"""

from __future__ import annotations

import sys
from collections import Counter

from transduce.data.trees import PLACEHOLDER, Tree, clean, read_trees, walk
from transduce.parseval import read_tree_file


def common_labels(path: str) -> tuple[str, str]:
    tops, inner = Counter(), Counter()
    for tree in read_trees(path):
        top = tree.children[0] if not tree.label else tree
        tops[top.label] += 1
        inner.update(node.label for kind, node in walk(top)
                     if kind == "open" and node is not top and not node.preterminal)
    return tops.most_common(1)[0][0], inner.most_common(1)[0][0]


def right_branching(words: list[str], top: str, inner: str) -> Tree:
    node = Tree(inner, [Tree(PLACEHOLDER, [words[-1]])])
    for word in reversed(words[:-1]):
        node = Tree(inner, [Tree(PLACEHOLDER, [word]), node])
    node.label = top
    return node


def main(train: str, gold: str, prefix: str) -> None:
    top, inner = common_labels(train)
    sentences = [clean(tree).words() for _, tree in read_tree_file(gold)]
    with (
        open(f"{prefix}.right", "w", encoding="utf-8") as right,
        open(f"{prefix}.flat", "w", encoding="utf-8") as flat,
    ):
        for words in sentences:
            right.write(str(Tree("", [right_branching(words, top, inner)])) + "\n")
            flat.write(str(Tree("", [Tree(top, [Tree(PLACEHOLDER, [w]) for w in words])])) + "\n")
    print(f"{len(sentences)} trees each: {prefix}.right and {prefix}.flat (top {top}, inside "
          f"{inner})")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
