"""Errors meant for the person at the keyboard: the CLI prints them without a traceback."""

import os


class TransduceError(Exception):
    """A problem the user can fix; the message says which file, which line, and what to do."""


class DataError(TransduceError):
    """Bad or missing input data."""


class TrainingError(TransduceError):
    """Training cannot go on (the message says why and what to do)."""


def listed(value, what: str, call: str) -> list:
    """``value`` (lines, files) as a list; one string or path where a list of them is expected is
    refused (iterating it would take it one character at a time)."""
    if isinstance(value, (str, bytes, os.PathLike)):
        shown = repr(value if not isinstance(value, os.PathLike) else str(value))
        raise TransduceError(f"{call} takes a list of {what}, not one "
                             f"{'path' if isinstance(value, os.PathLike) else 'string'}: "
                             f"pass [{shown[:60]}]")
    return list(value)
