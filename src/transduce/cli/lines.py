"""One line in, one line out: how ``translate``, ``parse``, ``transcribe`` and ``classify`` read
their input and write their output.

Input is text (``--input FILE``, plain or .gz, else stdin) read in windows of the lines that have
arrived so far, so that output appears while a pipe still writes and a person typing gets each
answer at Enter. Output goes to stdout, or with ``--output FILE`` into a temporary sibling renamed
into place when the command ends (``files.output_file``): a killed command leaves no half-written
FILE and an earlier FILE intact. Lines are written in input order, each batch flushed as it is
done; a command answers an empty line with an empty line.
"""

from __future__ import annotations

import queue
import sys
import threading
from contextlib import nullcontext
from typing import Iterable, Iterator, Optional, Sequence

UTF8_ADVICE = "transduce reads UTF-8: convert the text first (e.g. with iconv)"


def stdin_lines() -> Iterator[str]:
    """stdin's lines, split as every file's are (``corpus.decode_lines``)."""
    from ..data.corpus import decode_lines

    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream without bytes (an embedding program's): encode it back
        import io

        stream = io.BytesIO(sys.stdin.read().encode("utf-8"))
    return decode_lines(stream, "stdin", advice=UTF8_ADVICE)


def input_lines(path: Optional[str]) -> tuple[Iterator[str], bool]:
    """The lines of ``path`` (None: stdin) and whether a person types them (a terminal: each line
    is answered when Enter is pressed, and a line says how to end)."""
    from ..data.corpus import read_lines

    if path is not None:
        return read_lines(path, advice=UTF8_ADVICE), False
    typed = sys.stdin.isatty()
    if typed:
        print("reading sentences from the terminal, one a line (Ctrl-D ends)", file=sys.stderr)
    return stdin_lines(), typed


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


class LineOutput:
    """Where a command's lines go: stdout, or ``path`` written atomically (``inputs``: the files
    the command reads, which ``path`` may not be). ``write`` takes a batch of lines, in order, and
    flushes it; at the end, a line on stderr says how many ``noun`` went to ``path``."""

    def __init__(self, path: Optional[str], inputs: Sequence = (), noun: str = "lines") -> None:
        from ..files import output_file

        self.path, self.noun, self.count = path, noun, 0
        self._target = (output_file(path, [p for p in inputs if p]) if path
                        else nullcontext(sys.stdout))

    def __enter__(self) -> "LineOutput":
        self._out = self._target.__enter__()
        return self

    def write(self, lines: Iterable[str], inputs: Optional[int] = None) -> None:
        """Write ``lines`` and flush; ``inputs``: the inputs they answer, when not one each (an
        n-best list)."""
        lines = list(lines)
        self._out.write("".join(line + "\n" for line in lines))
        self._out.flush()
        self.count += len(lines) if inputs is None else inputs

    def __exit__(self, *exc) -> Optional[bool]:
        result = self._target.__exit__(*exc)
        if self.path and exc[0] is None:
            print(f"wrote {self.count:,} {self.noun} to {self.path}", file=sys.stderr)
        return result


def check_output(path: Optional[str], inputs: Sequence) -> None:
    """Refuse an ``--output`` that would overwrite an input or what transduce did not write, before
    any model is loaded."""
    if path:
        from ..files import check_output_file

        check_output_file(path, [p for p in inputs if p], "--output")
