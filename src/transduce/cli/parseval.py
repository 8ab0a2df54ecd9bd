"""``transduce parseval``: labeled bracketing precision, recall and F1 of parser output (EVALB's
rules with COLLINS.prm; see ``transduce.parseval``)."""

from __future__ import annotations

import json

from .common import text_files


def add_parser(sub) -> None:
    p = sub.add_parser("parseval", help="score constituency trees against gold trees (labeled "
                                        "bracketing F1, as EVALB with COLLINS.prm)",
                       description="Both files hold trees in Penn bracketing (one or several "
                                   "lines a tree; plain or .gz), the n-th test tree scored "
                                   "against the n-th gold tree. Punctuation, empty elements and "
                                   "the root are not counted; ADVP and PRT are one label; a test "
                                   "tree whose words differ from its gold tree's is an error.")
    p.add_argument("gold", help="the gold trees (e.g. a treebank split)")
    p.add_argument("test", help="the trees to score (e.g. the output of `transduce parse`)")
    p.add_argument("--sentences", action="store_true",
                   help="print EVALB's table of every sentence before the summary")
    p.add_argument("--json", action="store_true", help="print one JSON object (the totals)")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..parseval import parseval, read_tree_file

    files = text_files({"gold": args.gold, "test": args.test})
    report = parseval(
        read_tree_file(files["gold"]), read_tree_file(files["test"]), args.gold, args.test
    )
    if args.json:
        print(json.dumps({"all": report.all.as_dict(), "len<=40": report.short.as_dict()}))
        return 0
    lines = report.table() if args.sentences else report.summary()
    print("\n".join(lines))
    return 0
