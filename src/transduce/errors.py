"""Errors meant for the person at the keyboard: the CLI prints them without a traceback."""


class TransduceError(Exception):
    """A problem the user can fix; the message says which file, which line, and what to do."""


class DataError(TransduceError):
    """Bad or missing input data."""


class TrainingError(TransduceError):
    """Training cannot go on (the message says why and what to do)."""
