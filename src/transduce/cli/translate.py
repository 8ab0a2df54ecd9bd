"""``transduce translate``: text in, translations out, one per line, in input order, streamed.

Input is read in windows: the lines available so far (up to ``--window``) are translated as one
token-budget job and written, in input order, as soon as they are done. From a pipe, output
appears while input still arrives; from a terminal, each line is translated when you press Enter.
``--output FILE`` streams into a temporary file renamed into place at the end, so a killed run
leaves no half-written FILE (and an earlier FILE intact).
"""

from __future__ import annotations

from ..errors import TransduceError
from .common import (
    add_decode_options,
    add_draft_options,
    announce,
    decode_config,
    model_inputs,
    number,
    set_threads,
    say_draft,
    text_files,
    draft_search,
)
from .lines import LineOutput, check_output, input_lines, windows


def add_parser(sub) -> None:
    p = sub.add_parser("translate", help="translate text with a trained model")
    p.add_argument("model", nargs="+", help="a run directory or checkpoint folder (a run: "
                                            "averaged/ while up to date, else best/, else the "
                                            "newest checkpoint); several: an ensemble, their "
                                            "probabilities averaged at every step")
    p.add_argument("--input", help="a text file, one sentence a line, plain or .gz (default: "
                                   "stdin)")
    p.add_argument("--output", help="write here (default: stdout); streamed into a temporary, "
                                    "renamed at the end")
    p.add_argument("--prefix", help="force every translation to start with this text")
    p.add_argument("--task-prefix", metavar="TEXT",
                   help="put TEXT before every source sentence (default: the task prefix the "
                        "model was trained with, if any; \"\" for none)")
    p.add_argument("--constraints", metavar="FILE",
                   help="terminology: per line of --input, the target phrases its translation must "
                        "hold, separated by tabs (an empty line: none); docs/inference.md")
    p.add_argument("--window", type=number(int, 1, 10**7), default=1000,
                   help="translate at most this many lines at a time (sorted by length within the "
                        "window)")
    g = p.add_argument_group("word alignments")
    g.add_argument("--alignments", action="store_true",
                   help="after each translation, a tab and its word alignment in Pharaoh's format "
                        "(source-target word indices from 0: 0-0 1-2 ...), read from the "
                        "cross-attention (docs/inference.md)")
    g.add_argument("--alignment-layer", type=number(int, 0, 10**4), metavar="N",
                   help="the decoder layer whose cross-attention aligns, from 0 (default: the "
                        "last)")
    g.add_argument("--alignment-head", type=number(int, 0, 10**4), metavar="H",
                   help="one head of that layer (default: the mean of its heads)")
    add_draft_options(p)
    add_decode_options(p, task="translation")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..translator import Translator

    decode = draft_search(args, decode_config(args))
    if args.window < 1:
        raise TransduceError(f"--window {args.window}: must be at least 1")
    _check_alignments(args, decode)
    constraints = _read_constraints(args)
    if args.input is not None:
        # (input.gz when only that exists)
        args.input = str(text_files({"--input": args.input})["--input"])
    check_output(args.output, [args.input, *model_inputs(args.model)])
    set_threads(args.threads)
    translator = Translator.load(
        args.model, device=args.device, precision=args.precision, compile=args.compile
    )
    announce(args.model)
    if args.draft is not None:
        translator.use_draft(args.draft, args.draft_tokens)
    if args.task_prefix is not None:
        translator.task_prefix = args.task_prefix
    if constraints is not None:  # every line's phrases checked against its room, before any work
        from ..data.corpus import read_lines
        from ..decoding.terminology import check_constraints

        check_constraints(translator, list(read_lines(args.input)), constraints, decode)
    if args.alignments:
        from ..decoding.alignment import check_rule

        try:
            check_rule(translator.model.config, args.alignment_layer, args.alignment_head)
        except ValueError as error:
            raise TransduceError(f"--alignments: {error}") from None
    lines, typed = input_lines(args.input)
    with LineOutput(args.output, [args.input, translator.folder], "translations") as out:
        for window in windows(lines, 1 if typed else args.window):
            prefixes = [args.prefix] * len(window) if args.prefix else None
            first = out.count + 1
            terms = None if constraints is None else constraints[first - 1:first - 1 + len(window)]
            if args.alignments:
                from ..decoding.alignment import align_lines

                out.write((f"{text}\t{pairs}" for text, pairs in align_lines(
                    translator, window, decode, args.alignment_layer, args.alignment_head,
                    prefixes, first, terms)), inputs=len(window))
            elif decode.nbest > 1:
                results = translator.translate_nbest(
                    window, decode, first_line=first, prefixes=prefixes, constraints=terms
                )
                out.write((f"{first - 1 + i}\t{score:.4f}\t{hyp}" for i, hyps in enumerate(results)
                           for hyp, score in hyps), inputs=len(window))
            else:
                out.write(translator.translate(window, decode, first_line=first,
                                               prefixes=prefixes, constraints=terms))
    say_draft(translator)
    return 0


def _check_alignments(args, decode) -> None:
    """What ``--alignments`` cannot serve, refused before any model loads."""
    if not args.alignments:
        for flag in ("alignment_layer", "alignment_head"):
            if getattr(args, flag) is not None:
                raise TransduceError(f"--{flag.replace('_', '-')} chooses what --alignments reads: "
                                     "add --alignments")
        return
    if decode.nbest > 1:
        raise TransduceError("--alignments aligns the best translation: leave out --nbest")
    if len(args.model) > 1:
        raise TransduceError("--alignments reads one model's attention, not an ensemble's")


def _read_constraints(args) -> list[list[str]] | None:
    """``--constraints``: each line's phrases, as many lines as ``--input`` has (checked before
    any model loads)."""
    if args.constraints is None:
        return None
    from ..data.corpus import read_lines

    if args.input is None:
        raise TransduceError("--constraints pairs its lines with --input's: give the sentences "
                             "as --input FILE (not stdin)")
    if args.draft is not None:
        raise TransduceError("--constraints needs beam search's choices; --draft searches "
                             "greedily with the model's own choice: leave out one of them")
    path = str(text_files({"--constraints": args.constraints})["--constraints"])
    constraints = [line.split("\t") if line.strip() else [] for line in read_lines(path)]
    inputs = sum(1 for _ in read_lines(args.input))
    if len(constraints) != inputs:
        raise TransduceError(f"--constraints {args.constraints} has {len(constraints)} line(s), "
                             f"--input {args.input} {inputs}: one line of phrases per sentence "
                             "(an empty line for none)")
    return constraints
