"""``transduce parse``: tokenized sentences in, constituency trees out, one per line, in input
order, streamed as ``translate`` streams (``--output`` written atomically)."""

from __future__ import annotations

from ..errors import TransduceError
from .common import (
    add_decode_options,
    announce,
    decode_config,
    model_inputs,
    number,
    set_threads,
    text_files,
)
from .lines import LineOutput, check_output, input_lines, windows


def add_parser(sub) -> None:
    p = sub.add_parser("parse", help="parse tokenized sentences into constituency trees with a "
                                     "model trained on a treebank (prepare --trees)",
                       description="One sentence a line, its words split by spaces (tokenized as "
                                   "the treebank is); one tree a line out, in Penn bracketing, "
                                   "each word under the placeholder tag XX (under its "
                                   "predicted tag, for a parser trained on prepare --trees "
                                   "--tags). The search is "
                                   "constrained: every output is a tree over exactly the line's "
                                   "words. An empty line gives an empty line.")
    p.add_argument("model", help="a run directory or checkpoint folder of a parser")
    p.add_argument("--input", help="a text file, one sentence a line, plain or .gz (default: "
                                   "stdin)")
    p.add_argument("--output", help="write here (default: stdout); streamed into a temporary, "
                                    "renamed at the end")
    p.add_argument("--window", type=number(int, 1, 10**7), default=1000,
                   help="parse at most this many lines at a time (sorted by length within the "
                        "window)")
    p.add_argument("--unconstrained", action="store_true",
                   help="search without the constraint and repair each output into a tree (to "
                        "measure what the constraint is worth)")
    p.add_argument("--scores", action="store_true",
                   help="write each tree after its score and a tab (the length-normalized "
                        "log-probability: the parser's confidence)")
    add_decode_options(p, task="parsing")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..parser import Parser

    decode = decode_config(args)
    if args.input is not None:
        args.input = str(text_files({"--input": args.input})["--input"])
    check_output(args.output, [args.input, *model_inputs([args.model])])
    set_threads(args.threads)
    announce([args.model])
    parser = Parser.load(
        args.model, device=args.device, precision=args.precision, compile=args.compile
    )
    lines, typed = input_lines(args.input)
    source = args.input or "stdin"
    with LineOutput(args.output, [args.input, parser.translator.folder], "trees") as out:
        for window in windows(lines, 1 if typed else args.window):
            try:
                trees = parser.parse_scored(window, decode, constrained=not args.unconstrained,
                                            first_line=out.count + 1)
            except TransduceError as error:
                raise TransduceError(f"{source}: {error}") from None
            out.write(f"{score:.4f}\t{tree}" if args.scores and tree else tree
                      for tree, score in trees)
    return 0
