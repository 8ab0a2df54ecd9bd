"""``transduce translate``: text in, translations out, one per line, in input order, streamed.

Input is read in windows: the lines available so far (up to ``--window``) are translated as one
token-budget job and written, in input order, as soon as they are done. From a pipe, output
appears while input still arrives; from a terminal, each line is translated when you press Enter.
``--output FILE`` streams into a temporary file renamed into place at the end, so a killed run
leaves no half-written FILE (and an earlier FILE intact).
"""

from __future__ import annotations

import queue
import sys
import threading
from contextlib import nullcontext
from typing import Iterator

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

UTF8_ADVICE = "translate reads UTF-8: convert the text first (e.g. with iconv)"


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
    p.add_argument("--window", type=number(int, 1, 10**7), default=1000,
                   help="translate at most this many lines at a time (sorted by length within the "
                        "window)")
    add_decode_options(p)
    p.set_defaults(run=run)


def _stdin_lines() -> Iterator[str]:
    from ..data.corpus import decode_lines

    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream without bytes (an embedding program's): encode it back
        import io

        stream = io.BytesIO(sys.stdin.read().encode("utf-8"))
    return decode_lines(stream, "stdin", advice=UTF8_ADVICE)


def windows(lines: Iterator[str], size: int) -> Iterator[list[str]]:
    """Group ``lines`` into lists of at most ``size``: each holds what has arrived so far.

    A reader thread feeds a bounded queue, so memory stays bounded and a slow producer (a pipe
    that stays open, a person typing) gets each answer without waiting for a full window.
    """
    box: queue.Queue = queue.Queue(maxsize=4 * size)
    end = object()

    def read() -> None:
        try:
            for line in lines:
                box.put(line)
        except BaseException as error:  # handed to the main thread, raised there
            box.put(error)
        box.put(end)

    threading.Thread(target=read, daemon=True).start()
    while True:
        item = box.get()
        window = []
        while True:
            if item is end:
                if window:
                    yield window
                return
            if isinstance(item, BaseException):
                raise item
            window.append(item)
            if len(window) >= size:
                break
            try:
                item = box.get_nowait()
            except queue.Empty:
                break
        yield window


def run(args) -> int:
    from ..translator import Translator
    from ..data.corpus import read_lines
    from ..files import check_output_file, output_file

    decode = decode_config(args)
    if args.window < 1:
        raise TransduceError(f"--window {args.window}: must be at least 1")
    if args.input is not None:
        # (input.gz when only that exists)
        args.input = str(text_files({"--input": args.input})["--input"])
    if args.output:
        check_output_file(
            args.output, [p for p in (args.input, *model_inputs(args.model)) if p], "--output"
        )
    set_threads(args.threads)
    translator = Translator.load(
        args.model, device=args.device, precision=args.precision, compile=args.compile
    )
    announce(args.model)
    if args.task_prefix is not None:
        translator.task_prefix = args.task_prefix
    interactive = args.input is None and sys.stdin.isatty()
    if interactive:
        print("reading sentences from the terminal, one a line (Ctrl-D ends)", file=sys.stderr)
    lines = read_lines(args.input, advice=UTF8_ADVICE) if args.input is not None else _stdin_lines()
    inputs = [p for p in (args.input, translator.folder) if p]
    target = output_file(args.output, inputs) if args.output else nullcontext(sys.stdout)
    done = 0
    with target as out:
        for window in windows(lines, 1 if interactive else args.window):
            prefixes = [args.prefix] * len(window) if args.prefix else None
            if decode.nbest > 1:
                results = translator.translate_nbest(
                    window, decode, first_line=done + 1, prefixes=prefixes
                )
                text = "".join(f"{done + i}\t{score:.4f}\t{hyp}\n" for i, hyps in enumerate(results)
                               for hyp, score in hyps)
            else:
                results = translator.translate(
                    window, decode, first_line=done + 1, prefixes=prefixes
                )
                text = "".join(r + "\n" for r in results)
            out.write(text)
            out.flush()
            done += len(window)
    if args.output:
        print(f"wrote {done:,} translations to {args.output}", file=sys.stderr)
    return 0
