"""Reading parallel text: finding the files, decoding them line by line, checking them."""

from __future__ import annotations

import gzip
import hashlib
import io
from pathlib import Path
from typing import Iterator

from ..errors import DataError


def find_file(prefix: str | Path, lang: str) -> Path:
    """``PREFIX.LANG`` or ``PREFIX.LANG.gz``, whichever exists."""
    plain = Path(f"{prefix}.{lang}")
    for path in (plain, Path(f"{plain}.gz")):
        if path.is_file():
            return path
    raise DataError(f"missing file: neither {plain} nor {plain}.gz exists; check the prefix and --src/--tgt")


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def read_lines(path: Path, encoding_errors: str = "strict") -> Iterator[str]:
    """The lines of a text file (gzip or plain), without their line endings.

    Raises:
        DataError: a line is not valid UTF-8 (names the file and line) or a gzip file is damaged.
    """
    try:
        with _open_binary(path) as handle:
            for number, raw in enumerate(io.BufferedReader(handle, 1 << 20), start=1):
                try:
                    yield raw.decode("utf-8", errors=encoding_errors).rstrip("\r\n")
                except UnicodeDecodeError as error:
                    raise DataError(f"{path}, line {number}: invalid UTF-8 ({error.reason} at byte {error.start}); "
                                    "fix the file, or pass --encoding-errors replace to replace bad bytes") from None
    except (OSError, EOFError, gzip.BadGzipFile) as error:
        raise DataError(f"{path}: cannot read it ({error}); is the file complete and, if .gz, a valid gzip?") from None


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
