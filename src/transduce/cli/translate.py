"""``transduce translate``: text in, translations out, one per line, in input order."""

from __future__ import annotations

import sys
from .common import add_decode_options, atomic_write_text, decode_options, read_text_lines, set_threads, split_lines


def add_parser(sub) -> None:
    p = sub.add_parser("translate", help="translate text with a trained model")
    p.add_argument("model", help="a run directory or checkpoint folder")
    p.add_argument("--input", help="a text file, one sentence a line (default: stdin)")
    p.add_argument("--output", help="write here (default: stdout); written only when complete")
    p.add_argument("--prefix", help="force every translation to start with this text")
    p.add_argument("--strict", action="store_true", help="refuse lines longer than the model's maximum")
    add_decode_options(p)
    p.set_defaults(run=run)


def read_input(path: str | None) -> list[str]:
    if path is None:
        return [] if sys.stdin.isatty() else split_lines(sys.stdin.read())
    return read_text_lines(path, "--input")


def run(args) -> int:
    from .. import load

    set_threads(args.threads)
    translator = load(args.model, device=args.device, precision=args.precision)
    lines = read_input(args.input)
    prefixes = [args.prefix] * len(lines) if args.prefix else None
    results = translator.translate(lines, beam=1 if args.sampling else args.beam, nbest=args.nbest,
                                   progress=args.input is not None, prefixes=prefixes, strict=args.strict,
                                   **decode_options(args))
    if args.nbest > 1:
        out = "".join(f"{i}\t{score:.4f}\t{text}\n" for i, hyps in enumerate(results) for text, score in hyps)
    else:
        out = "".join(r + "\n" for r in results)
    if args.output:
        atomic_write_text(args.output, out)
    else:
        sys.stdout.write(out)
        sys.stdout.flush()
    return 0
