"""Reading parallel text: finding the files, decoding them line by line, checking them."""

from __future__ import annotations

import gzip
import hashlib
import io
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, Optional

from ..errors import DataError


def text_file(path: str | Path) -> Optional[Path]:
    """``path`` if it is a file, else ``path.gz`` if that is (text as users keep it), else None."""
    path = Path(path)
    for candidate in (path, Path(f"{path}.gz")):
        if candidate.is_file():
            return candidate
    return None


def find_files(named: Iterable[tuple[str, str | Path]], advice: str = "") -> list[Path]:
    """Each text file of ``(what, path)`` (``what``: the flag that named it, or ""), plain or
    ``.gz``,
    in order; a message that names every missing one (not only the first)."""
    found, missing = [], []
    for what, path in named:
        label = f"{what} {path}".strip()
        file = text_file(path)
        if file is None and Path(path).exists():
            raise DataError(f"{label} is not a file")
        if file is None:
            missing.append(label + ("" if str(path).endswith(".gz") else " (nor .gz)"))
        found.append(file)
    if missing:
        raise DataError(f"missing file{'s' if len(missing) > 1 else ''}: {'; '.join(missing)}"
                        + (f"; {advice}" if advice else ""))
    return found


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


BOM = "\ufeff"


ENCODING_ADVICE = "fix the file, or pass --encoding-errors replace to replace bad bytes"


# a sentence, a paragraph: far less; a line of more is not text for transduce
MAX_LINE_BYTES = 1 << 20


def decode_lines(handle: BinaryIO, label: str | Path, encoding_errors: str = "strict",
                 advice: str = ENCODING_ADVICE) -> Iterator[str]:
    """The lines of a binary stream, the project's one way to split text into lines.

    Lines end at ``\n`` only: a Windows ``\r\n`` ending loses its ``\r``, but every other
    control or separator character (a bare ``\r``, ``\x0b``, ``\x0c``, ``\x1c``-``\x1e``,
    ``\x85``, ``\u2028``, ``\u2029``) stays inside its line, where ``str.splitlines()`` and
    Python's universal newlines would split it and misalign parallel text. A UTF-8 byte-order
    mark at the start is dropped.

    A line is read in pieces of at most ``MAX_LINE_BYTES``: a stream without a line end
    (``/dev/zero``,
    a binary file) is a message, not memory growing without bound.

    Raises:
        DataError: a line is not valid UTF-8, or longer than ``MAX_LINE_BYTES`` (names the file or
            stream and the line).
    """
    number = 0
    while True:
        raw = handle.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        number += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            raise DataError(f"{label}, line {number}: longer than {MAX_LINE_BYTES:,} bytes without "
                            "a line end; is this text, one sentence a line?")
        try:
            line = raw.decode("utf-8", errors=encoding_errors)
        except UnicodeDecodeError as error:
            raise DataError(f"{label}, line {number}: invalid UTF-8 ({error.reason} at byte "
                            f"{error.start}); {advice}") from None
        # "\r\n" endings; a "\r" at the end is invisible anyway
        line = line.rstrip("\n").rstrip("\r")
        if number == 1 and line.startswith(BOM):
            line = line[1:]
        yield line


def read_lines(
    path: str | Path, encoding_errors: str = "strict", advice: str = ENCODING_ADVICE
) -> Iterator[str]:
    """The lines of a text file (gzip or plain), split as ``decode_lines`` says.

    Raises:
        DataError: the file is missing, a line is not valid UTF-8 (names the file and line), or a
            gzip file is damaged.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file" if not path.exists() else f"{path} is not a file")
    try:
        with _open_binary(path) as handle:
            yield from decode_lines(
                io.BufferedReader(handle, 1 << 20), path, encoding_errors, advice
            )
    except (OSError, EOFError, gzip.BadGzipFile) as error:
        raise DataError(
            f"{path}: cannot read it ({error}); is the file complete and, if .gz, a valid gzip?"
        ) from None


def write_lines(handle, lines: Iterable[str]) -> None:
    """Write ``lines`` one per line (``\n``), the inverse of ``decode_lines``."""
    handle.write("".join(line + "\n" for line in lines))


def read_pairs(src: Path, tgt: Path, encoding_errors: str = "strict") -> Iterator[tuple[str, str]]:
    """Aligned (source, target) lines; the two files must have the same number of lines."""
    src_lines, tgt_lines = read_lines(src, encoding_errors), read_lines(tgt, encoding_errors)
    count = 0
    for s in src_lines:
        t = next(tgt_lines, None)
        if t is None:
            total = count + 1 + sum(1 for _ in src_lines)
            raise _count_error(src, total, tgt, count)
        count += 1
        yield s, t
    rest = sum(1 for _ in tgt_lines)
    if rest:
        raise _count_error(src, count, tgt, count + rest)


def _count_error(src: Path, n_src: int, tgt: Path, n_tgt: int) -> DataError:
    return DataError(f"line counts differ: {src} has {n_src} lines but {tgt} has {n_tgt}; "
                     "parallel files must be aligned line by line")


def fingerprint(paths: list[Path], options: dict) -> str:
    """A hash of the inputs' bytes and the options that shape the prepared data."""
    digest = hashlib.sha256(repr(sorted(options.items())).encode())
    for path in paths:
        digest.update(str(path.name).encode())
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()


def previously_prepared(out: Path, fp: str, force: bool, missing: Callable[[dict], list[str]],
                        say: Callable[[str], None]) -> Optional[dict]:
    """The metadata of the prepared folder ``out`` when it was made from the same inputs and
    options (the fingerprint ``fp``) and holds all it should (``missing(meta)``: the files it
    lacks); None when it must be prepared (again), saying why; never with ``force``."""
    from ..errors import TransduceError
    from ..reading import read_json

    if force or not (out / "meta.json").is_file():
        return None
    try:
        old = read_json(out / "meta.json")
    except TransduceError:
        old = {}
    if old.get("fingerprint") != fp:
        say(f"{out}: inputs or options changed; preparing again")
        return None
    lacking = missing(old)
    if lacking:
        say(f"{out}: {lacking[0]} is missing; preparing again")
        return None
    say(f"{out}: already prepared from these inputs; reusing it (pass --force to redo)")
    return old


def unusable(what: str, problems: list[str]) -> DataError:
    """One error for every input that cannot be used: ``what`` (e.g. "3 of 60 images cannot be
    used"), then the first ten problems, one a line, each naming its file or line."""
    more = "\n  ..." if len(problems) > 10 else ""
    return DataError(f"{what}:\n  " + "\n  ".join(problems[:10]) + more)

